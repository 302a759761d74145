"""What the example scripts share: their common arguments, reading them (flags, or one JSON file of the same keys),
logging and seeding as transformers' example scripts do, and the end of a run (save, evaluate before/after, model
card, push, reload check, loading lines), so that each script holds only what is its paper's own."""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
from dataclasses import dataclass, field

import transformers
from transformers import HfArgumentParser, set_seed

from ..models.configuration_contrastive import CONTRASTIVE_LOSSES, POOLER_TYPES, PROJECTION_TYPES, ContrastiveConfig

__all__ = [
    "EncoderArguments",
    "ContrastiveModelArguments",
    "MatryoshkaArguments",
    "PromptArguments",
    "CorpusArguments",
    "parse_number_list",
    "parse_arguments",
    "setup_logging",
    "load_tokenizer",
    "training_data_name",
    "load_sentences",
    "load_sts_dev",
    "save_trained_model",
    "log_before_after",
    "publish",
    "finish_sentence_encoder_run",
]

logger = logging.getLogger(__name__)


@dataclass
class EncoderArguments:
    """Where the model starts, as run_mlm.py names it."""

    model_name_or_path: str | None = field(
        default=None,
        metadata={
            "help": "A pretrained encoder (Hub id or folder) or a contrastive_hf checkpoint to continue from. "
            "Leave unset to train from scratch with --config_name."
        },
    )
    config_name: str | None = field(
        default=None, metadata={"help": "Encoder config (Hub id, folder or config.json) for training from scratch."}
    )
    tokenizer_name: str | None = field(
        default=None, metadata={"help": "Tokenizer, when it differs from --model_name_or_path."}
    )
    cache_dir: str | None = field(default=None, metadata={"help": "Where Hub downloads are cached."})


def _config_default(name: str) -> str:
    return f"default: the checkpoint's, else ContrastiveConfig's {getattr(ContrastiveConfig, name)!r}"


@dataclass
class MatryoshkaArguments:
    """Matryoshka training and default truncation (config-backed: the model config's ``matryoshka_dims``,
    ``matryoshka_weights`` and ``truncate_dim``), for every script that trains an embedding."""

    matryoshka_dims: str | None = field(
        default=None,
        metadata={
            "help": "Matryoshka representation learning: the contrastive loss on the first m dimensions for each m, "
            "summed, e.g. 384,256,128,64 (list the full size to keep training it); the end-of-run evaluation (STS-B, "
            "retrieval) is then scored at each size. Needs the projection kept at inference or none."
        },
    )
    matryoshka_weights: str | None = field(
        default=None, metadata={"help": "One weight per --matryoshka_dims size, e.g. 1,1,1,1 (default: 1 each)."}
    )
    truncate_dim: int | None = field(
        default=None,
        metadata={
            "help": "Truncate the saved model's embeddings to this size by default (encode and sentence-transformers' "
            "truncate_dim, in config_sentence_transformers.json); default: no truncation."
        },
    )

    def matryoshka_overrides(self) -> dict:
        """The model config fields these flags set, the sizes and weights as lists."""
        overrides = {"truncate_dim": self.truncate_dim} if self.truncate_dim is not None else {}
        for name, kind in (("matryoshka_dims", int), ("matryoshka_weights", float)):
            if getattr(self, name) is not None:
                overrides[name] = parse_number_list(getattr(self, name), kind, f"--{name}")
        return overrides


@dataclass
class ContrastiveModelArguments(MatryoshkaArguments):
    """`ContrastiveConfig` fields a script may set. Unset (None) keeps the value of the checkpoint continued from, or
    the config's default (a recipe's script may set its paper's defaults instead): the config is the one source of
    truth for these values."""

    pooler_type: str | None = field(
        default=None, metadata={"help": f"{', '.join(POOLER_TYPES)} ({_config_default('pooler_type')})."}
    )
    projection_type: str | None = field(
        default=None, metadata={"help": f"{', '.join(PROJECTION_TYPES)} ({_config_default('projection_type')})."}
    )
    projection_dim: int | None = field(default=None, metadata={"help": "Projection output size (default: hidden)."})
    projection_at_inference: bool | None = field(
        default=None,
        metadata={"help": f"Keep the projection in the embeddings ({_config_default('projection_at_inference')})."},
    )
    temperature: float | None = field(
        default=None, metadata={"help": f"tau of the contrastive loss ({_config_default('temperature')})."}
    )
    contrastive_loss: str | None = field(
        default=None,
        metadata={
            "help": f"{' or '.join(CONTRASTIVE_LOSSES)}; info_nce is needed for hard negatives and --prebatch_size "
            f"({_config_default('contrastive_loss')})."
        },
    )
    hard_negative_weight: float | None = field(
        default=None,
        metadata={"help": f"Added to each anchor's hard-negative logit ({_config_default('hard_negative_weight')})."},
    )
    mlm_weight: float | None = field(
        default=None, metadata={"help": f"Weight of L_MLM, 0 turns MLM off ({_config_default('mlm_weight')})."}
    )
    cl_weight: float | None = field(
        default=None, metadata={"help": f"Weight of L_CL ({_config_default('cl_weight')})."}
    )
    sub_batch_size: str | None = field(
        default=None,
        metadata={
            "help": "How views are encoded: packed (one sequence of real tokens), sorted (length-sorted groups), "
            "N (sorted groups of N views), 0 (one padded pass) or auto (packed where the encoder allows, else "
            f"sorted on CPU, padded on a GPU) ({_config_default('sub_batch_size')})."
        },
    )

    def config_overrides(self) -> dict:
        """The fields that were given, as `ContrastiveConfig` keyword arguments."""
        names = [item.name for item in dataclasses.fields(ContrastiveModelArguments)]  # also in a subclass
        overrides = {name: getattr(self, name) for name in names if getattr(self, name) is not None}
        return {**overrides, **MatryoshkaArguments.matryoshka_overrides(self)}


@dataclass
class PromptArguments:
    """Training-time prompts (E5, BGE) of the scripts that train on pairs: config-backed (the model config's
    ``prompts``, ``include_prompt`` and ``default_prompt_name``), applied by the collators in training and by
    ``encode`` at inference."""

    query_prompt: str | None = field(
        default=None,
        metadata={
            "help": "A prompt prepended to the anchors (queries) in training and saved as the model's 'query' prompt "
            "(E5: 'query: '), which encode(prompt_name='query') applies; see --document_prompt."
        },
    )
    document_prompt: str | None = field(
        default=None,
        metadata={
            "help": "A prompt prepended to the positives and hard negatives (passages) in training, saved as the "
            "'document' prompt (E5: 'passage: ')."
        },
    )
    include_prompt: bool | None = field(
        default=None,
        metadata={
            "help": "Pool the prompt's tokens with the sentence's; false leaves them out of the pooling, in training "
            "as at inference (default: the checkpoint's, else true)."
        },
    )
    default_prompt_name: str | None = field(
        default=None,
        metadata={"help": "The prompt encode (and the STS evaluation) applies when none is named, e.g. query."},
    )

    def prompt_overrides(self) -> dict:
        """The model config fields these flags set: ``prompts`` from ``--query_prompt`` and ``--document_prompt``
        (they replace a continued checkpoint's), ``include_prompt`` and ``default_prompt_name``."""
        overrides = {}
        prompts = {role: getattr(self, f"{role}_prompt") for role in ("query", "document")}
        if any(text is not None for text in prompts.values()):
            overrides["prompts"] = {role: text for role, text in prompts.items() if text is not None}
        for name in ("include_prompt", "default_prompt_name"):
            if getattr(self, name) is not None:
                overrides[name] = getattr(self, name)
        return overrides


def parse_number_list(value, kind: type = int, flag: str = "the value") -> list:
    """``"384,256,128"`` (a flag) or ``[384, 256, 128]`` (a JSON settings file) as a list of ``kind``."""
    parts = value.split(",") if isinstance(value, str) else list(value)
    try:
        numbers = [kind(str(part).strip()) for part in parts if str(part).strip()]
    except ValueError as error:
        raise ValueError(f"{flag} takes comma-separated numbers such as 384,256,128, got {value!r}.") from error
    if not numbers:
        raise ValueError(f"{flag} takes comma-separated numbers such as 384,256,128, got {value!r}.")
    return numbers


@dataclass
class CorpusArguments:
    """A training corpus of text (files, a Hub dataset, or a stream) and the STS-B dev set scored around training."""

    train_file: str | None = field(
        default=None,
        metadata={"help": "A local corpus: .txt (one sentence or document per line, or .txt.gz), .csv/.tsv, .json."},
    )
    dataset_name: str | None = field(default=None, metadata={"help": "A Hub dataset to train on instead."})
    dataset_config_name: str | None = field(default=None, metadata={"help": "Its configuration name."})
    text_column: str | None = field(default=None, metadata={"help": "The text column (default: 'text' or the first)."})
    max_seq_length: int = field(default=32, metadata={"help": "Maximum tokens per example, special tokens included."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Use only the first N examples."})
    preprocessing_num_workers: int | None = field(default=None, metadata={"help": "Processes for tokenization."})
    streaming: bool = field(
        default=False,
        metadata={
            "help": "Read the corpus on the fly, endlessly (needs --max_steps); each process reads its own shards."
        },
    )
    stsb_dev_file: str | None = field(
        default=None,
        metadata={
            "help": "STS Benchmark sts-dev.csv: scored before and after training, and every --eval_steps with "
            "--eval_strategy steps (--metric_for_best_model eval_stsb_spearman --load_best_model_at_end keeps the "
            "best checkpoint, as SimCSE does)."
        },
    )


def training_data_name(data_args: CorpusArguments) -> str:
    """How a model card names the training data: the Hub dataset, else the file's name (never its local path); for
    several datasets (``--train_files``), each name with its file's name, and the schedule."""
    if getattr(data_args, "train_files", None):
        from ..data.mixture import parse_named_files

        files = parse_named_files(data_args.train_files).items()
        named = ", ".join(f"{name} ({os.path.basename(path)})" for name, path in files)
        return f"{named}; {getattr(data_args, 'dataset_schedule', 'proportional')} schedule"
    if data_args.dataset_name:
        return data_args.dataset_name
    return os.path.basename(data_args.train_file) if data_args.train_file else "not recorded"


def parse_arguments(parser: HfArgumentParser, argv: list[str] | None = None) -> tuple:
    """The parser's dataclasses from ``argv`` (default: the command line): flags, or a single ``.json`` file."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) == 1 and argv[0].endswith(".json"):
        return parser.parse_json_file(json_file=os.path.abspath(argv[0]))
    return parser.parse_args_into_dataclasses(args=argv)


def setup_logging(training_args, logger: logging.Logger, summary: bool = False) -> None:
    """Log to stdout at the process's level (the main process logs, the others warn), for the script's ``logger``,
    contrastive_hf and transformers; then seed everything with ``training_args.seed``. ``summary``: the script's own
    logger reports at INFO on the main process whatever the level, for its summary lines."""
    logging.basicConfig(
        format="%(asctime)s - %(levelname)s - %(name)s - %(message)s",
        datefmt="%m/%d/%Y %H:%M:%S",
        handlers=[logging.StreamHandler(sys.stdout)],
    )
    log_level = training_args.get_process_log_level()
    logger.setLevel(logging.INFO if summary and training_args.should_log else log_level)
    logging.getLogger("contrastive_hf").setLevel(log_level)
    transformers.utils.logging.set_verbosity(log_level)
    set_seed(training_args.seed)


def load_tokenizer(encoder_args: EncoderArguments):
    """The tokenizer of ``--tokenizer_name``, else of ``--model_name_or_path``."""
    from transformers import AutoTokenizer

    name = encoder_args.tokenizer_name or encoder_args.model_name_or_path
    if name is None:
        raise ValueError("Give --tokenizer_name (or --model_name_or_path, whose tokenizer is then used).")
    return AutoTokenizer.from_pretrained(name, cache_dir=encoder_args.cache_dir)


def load_sentences(data_args: CorpusArguments, tokenizer, training_args, cache_dir: str | None = None, **tokenize):
    """The training corpus of ``data_args``, tokenized (`tokenize_corpus`, with the ``tokenize`` options such as
    ``line_by_line``) and cut to ``--max_train_samples``; with ``--streaming``, an endless stream of which each
    process reads its own shards (`prepare_streaming`)."""
    from ..data.corpus import first_examples, load_corpus, prepare_streaming, tokenize_corpus

    with training_args.main_process_first(desc="corpus tokenization"):
        corpus = load_corpus(
            data_args.train_file,
            data_args.dataset_name,
            data_args.dataset_config_name,
            cache_dir=cache_dir,
            streaming=data_args.streaming,
            passes=None if data_args.streaming else 1,
        )
        dataset = tokenize_corpus(
            corpus,
            tokenizer,
            max_seq_length=data_args.max_seq_length,
            text_column=data_args.text_column,
            num_proc=data_args.preprocessing_num_workers,
            **tokenize,
        )
    if data_args.streaming:
        return prepare_streaming(dataset, training_args, data_args.max_train_samples, data_args.train_file)
    return first_examples(dataset, data_args.max_train_samples)


def load_sts_dev(data_args: CorpusArguments, training_args, model, tokenizer):
    """``(stsb, before)``: STS-B dev from ``--stsb_dev_file`` (None without it) and ``model``'s scores on it before
    training. Scored on every process: under DeepSpeed ZeRO-3 a forward pass needs every process's shards."""
    from ..evaluation import evaluate_sts, read_stsbenchmark

    if not data_args.stsb_dev_file:
        if training_args.eval_strategy != "no":
            raise ValueError("--eval_strategy scores STS-B dev during training: give --stsb_dev_file (sts-dev.csv).")
        return None, None
    stsb = read_stsbenchmark(data_args.stsb_dev_file)
    before = evaluate_sts(model, stsb, tokenizer=tokenizer)
    if training_args.should_log:
        print(f"STS-B dev Spearman before training: {before['spearman']:.2f}")
    return stsb, before


# ----------------------------------------------------------------------------------------------------
# The end of a run
# ----------------------------------------------------------------------------------------------------


def save_trained_model(trainer, train_result, **sample_counts: int | None) -> None:
    """Save the model (without pushing: `publish` pushes once the card is written, so a failed push cannot lose the
    run), then log and save the train metrics (with ``sample_counts`` that are known, e.g. ``train_samples``) and the
    trainer state."""
    trainer.save_model(_internal_call=True)
    metrics = {**train_result.metrics, **{name: count for name, count in sample_counts.items() if count is not None}}
    trainer.log_metrics("train", metrics)
    trainer.save_metrics("train", metrics)
    trainer.save_state()


def log_before_after(trainer, after: dict[str, float], before: dict[str, float] | None = None) -> dict:
    """Log and save evaluation metrics measured after training (``eval_<name>``) and, when given, before it
    (``eval_<name>_before``), and print each figure's change on the main process. Returns what was saved."""
    saved = {f"eval_{name}": value for name, value in after.items()}
    if before:
        saved.update({f"eval_{name}_before": value for name, value in before.items()})
    trainer.log_metrics("eval", {name[len("eval_") :]: value for name, value in saved.items()})
    trainer.save_metrics("eval", saved)
    if before and trainer.is_world_process_zero():
        changes = ", ".join(f"{name} {before[name]:.2f} -> {after[name]:.2f}" for name in after if name in before)
        print(f"Before and after training: {changes}.")  # the run's summary lines are printed, not logged
    return saved


def publish(trainer, card_info=None) -> None:
    """Write the model card, then push (``--push_to_hub``) with it. A failed push leaves the local checkpoint
    complete and says so, then exits with status 1."""
    if card_info is not None:
        trainer.model_card_info = card_info
    trainer.create_model_card()
    if not trainer.args.push_to_hub:
        return
    try:
        trainer.push_to_hub(commit_message="End of training")
    except Exception as error:  # the local checkpoint is complete: say so rather than lose the run
        logger.error(
            "Pushing to the Hub failed (%s: %s). The checkpoint in %s is complete and unchanged; push it later with "
            "`hf upload <repo id> %s` or trainer.push_to_hub().",
            type(error).__name__,
            error,
            trainer.args.output_dir,
            trainer.args.output_dir,
        )
        sys.exit(1)


def matryoshka_sts(model, stsb, tokenizer) -> dict[int, dict]:
    """STS-B of the first m dimensions for each Matryoshka size m the model was trained with (its config's
    ``matryoshka_dims``); {} without them."""
    from ..evaluation import evaluate_sts_per_dimension

    dims = getattr(getattr(model, "config", None), "matryoshka_dims", None)
    return evaluate_sts_per_dimension(model, stsb, dims, tokenizer=tokenizer) if dims else {}


def finish_sentence_encoder_run(
    trainer,
    train_result,
    tokenizer,
    card_info=None,
    stsb=None,
    sts_before: dict[str, float] | None = None,
    **sample_counts: int | None,
) -> None:
    """The end of a sentence-encoder run (CLEAR, SimCSE, DeCLUTR, SG-BERT): save; score STS-B dev (``stsb``, an
    `STSData`) after training beside ``sts_before``; write the card and push; merge a LoRA adapter into a full
    checkpoint beside ``output_dir``; check that the saved checkpoint reloads with `AutoModel` and gives the trained
    embeddings; print how to load it.

    Runs on every process: under DeepSpeed ZeRO-3 every forward pass needs all processes' parameter shards; the
    files are written and the lines printed by the main process only.
    """
    from ..evaluation import evaluate_sts
    from ..hub.adapters import merge_and_save
    from .loading import loading_instructions, verify_reload, whole_parameters

    save_trained_model(trainer, train_result, **sample_counts)
    model = trainer.model
    sentences = ["A man is playing a guitar.", "A cat sleeps on the sofa.", "Stocks fell sharply on Monday."]
    if stsb is not None:
        scores = evaluate_sts(model, stsb, tokenizer=tokenizer)
        after = {"stsb_spearman": scores["spearman"], "stsb_pearson": scores["pearson"]}
        before = None
        if sts_before is not None:
            before = {"stsb_spearman": sts_before["spearman"], "stsb_pearson": sts_before["pearson"]}
        per_dimension = matryoshka_sts(model, stsb, tokenizer)
        after.update({f"stsb_spearman_dim{dim}": result["spearman"] for dim, result in per_dimension.items()})
        log_before_after(trainer, after, before)
        if card_info is not None:
            card_info.eval_results = {"stsb_dev": {"spearman": scores["spearman"]}}
            card_info.eval_results.update(
                {f"stsb_dev_dim{dim}": {"spearman": result["spearman"]} for dim, result in per_dimension.items()}
            )
        sentences = stsb.sentences1[:32]
    trained = model.contrastive.encode(sentences, tokenizer=tokenizer)  # to check the saved checkpoint against
    publish(trainer, card_info)

    loadable_dir = trainer.args.output_dir
    if getattr(model, "peft_config", None):  # the adapter stays in output_dir; a merged checkpoint goes beside it
        loadable_dir = trainer.args.output_dir.rstrip("/") + "-merged"
        with whole_parameters(model):
            if trainer.is_world_process_zero():
                merge_and_save(model, loadable_dir, tokenizer)
        logger.info("LoRA adapter saved in %s; merged checkpoint in %s.", trainer.args.output_dir, loadable_dir)
    if not trainer.is_world_process_zero():
        return
    verify_reload(loadable_dir, tokenizer, sentences, trained)
    print(loading_instructions(loadable_dir))
