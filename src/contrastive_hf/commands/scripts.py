"""What the example scripts share: their common arguments, reading them (flags, or one JSON file of the same keys),
logging and seeding as transformers' example scripts do, and the end of a run (save, evaluate before/after, model
card, push, reload check, loading lines), so that each script holds only what is its paper's own."""

from __future__ import annotations

import dataclasses
import difflib
import json
import logging
import os
import sys
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import ClassVar

import transformers
from transformers import HfArgumentParser, set_seed

from .._files import written_as_local_path
from ..models.configuration_contrastive import CONTRASTIVE_LOSSES, POOLER_TYPES, PROJECTION_TYPES, ContrastiveConfig

__all__ = [
    "UsageError",
    "as_usage_error",
    "run_script",
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
    "corpus_progress_bars",
    "load_sts_dev",
    "save_trained_model",
    "log_before_after",
    "format_before_after",
    "record_before_after",
    "publish",
    "finish_sentence_encoder_run",
]

logger = logging.getLogger(__name__)


class UsageError(ValueError):
    """A mistake in how a script was called (a flag, a file it names), which the user fixes in the command:
    `run_script` prints it as one line, without a traceback."""


@contextmanager
def as_usage_error(hint: str = ""):
    """Within this block, a `ValueError` of library code (e.g. a column flag naming a column the data lacks) is a
    `UsageError`: one line, with ``hint`` after the library's message, no traceback."""
    try:
        yield
    except UsageError:
        raise
    except ValueError as error:
        raise UsageError(f"{error} {hint}".rstrip()) from error


def run_script(main: Callable[[], object]) -> None:
    """Run an example script's ``main``. A `UsageError`, a missing file or a corpus without text (`EmptyCorpusError`)
    ends the run with one line on stderr, ``<script>: error: <what was wrong>``, and exit status 2 (argparse's for a
    bad command line); any other error keeps its traceback, which is what a bug needs."""
    from ..data.corpus import EmptyCorpusError

    try:
        main()
    except (UsageError, FileNotFoundError, EmptyCorpusError) as error:
        print(f"{os.path.basename(sys.argv[0])}: error: {error}", file=sys.stderr)
        sys.exit(2)


@dataclass
class EncoderArguments:
    """Where the model starts, as run_mlm.py names it."""

    hub_ids_or_paths: ClassVar[tuple[str, ...]] = ("model_name_or_path", "config_name", "tokenizer_name")

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

    local_paths: ClassVar[tuple[str, ...]] = ("train_file", "stsb_dev_file")

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


def parse_arguments(parser: HfArgumentParser, argv: list[str] | None = None, defaults: dict | None = None) -> tuple:
    """The parser's dataclasses from ``argv`` (default: the command line): flags, or a ``.json`` file of the same
    keys, optionally followed by flags that override it (``run_clear.py settings.json --seed 1``). ``defaults``
    replace the dataclasses' defaults under what is given (a recipe's paper settings).

    A mistake ends the script as argparse does, with a short usage line, what was wrong and exit status 2: an unknown
    flag or key (with the closest known names: "did you mean --augmentations?"), a JSON file that is missing or not
    an object of settings, a local file or folder that does not exist (the fields a dataclass lists in its
    ``local_paths``, and those of its ``hub_ids_or_paths`` that can only be local paths).
    """
    argv = sys.argv[1:] if argv is None else argv
    # argparse prints the usage with each error: one line, not the hundred flags of TrainingArguments
    parser.usage = "%(prog)s --flag value ... | %(prog)s SETTINGS.json [--flag value ...]  (--help lists the flags)"
    json_file = argv[0] if argv and argv[0].endswith(".json") else None
    flags = argv[1:] if json_file else argv
    try:
        settings = dict(defaults or {})
        if json_file:
            settings.update(read_json_settings(json_file))
            known = {item.name for kind in parser.dataclass_types for item in dataclasses.fields(kind) if item.init}
            unknown = [key for key in settings if key not in known]
            if unknown:
                raise UsageError(
                    f"{json_file}: unknown key(s) {_with_suggestions(unknown, known, repr)}; the keys are the "
                    "flags' names without --."
                )
        if json_file and not flags:
            parsed = parser.parse_dict(settings)
        else:
            parser.set_defaults(**settings)  # argparse applies a default only where the flag is absent
            for action in parser._actions:
                if action.dest in settings:
                    action.required = False  # given by the settings
            *parsed, remaining = parser.parse_args_into_dataclasses(args=flags, return_remaining_strings=True)
            if remaining:
                raise UsageError(_unrecognized_message(parser, remaining))
        check_paths(parsed)
    except UsageError as error:
        parser.error(str(error))
    return tuple(parsed)


def read_json_settings(path: str) -> dict:
    """The settings object of a JSON file given instead of flags; a `UsageError` names what is wrong with it."""
    try:
        with open(path, encoding="utf-8") as handle:
            settings = json.load(handle)
    except FileNotFoundError:
        raise UsageError(f"settings file not found: {path}") from None
    except json.JSONDecodeError as error:
        raise UsageError(f"{path} is not valid JSON: {error}") from None
    if not isinstance(settings, dict):
        raise UsageError(f'{path} must hold one JSON object of settings ({{"flag_name": value, ...}}).')
    return settings


def check_paths(arguments) -> None:
    """A `UsageError` for the first argument naming a local file or folder that does not exist: the fields each
    dataclass lists in ``local_paths``, and those of its ``hub_ids_or_paths`` written as local paths (absolute,
    starting with . or ~, or with more slashes than a Hub id's one)."""
    for group in arguments:
        names = [(name, True) for name in getattr(group, "local_paths", ())]
        names += [(name, False) for name in getattr(group, "hub_ids_or_paths", ())]
        for name, always_local in names:
            value = getattr(group, name, None)
            if not isinstance(value, str) or not value or os.path.exists(os.path.expanduser(value)):
                continue
            if always_local or written_as_local_path(value):
                raise UsageError(f"--{name} {value}: no such file or folder (relative to {os.getcwd()}).")


def _with_suggestions(names: list[str], known, show: Callable[[str], str] = str) -> str:
    """``names`` listed, each with the closest of ``known`` where one is close: "--augmentaion (did you mean
    --augmentations?)"."""
    described = []
    for name in names:
        close = difflib.get_close_matches(name, list(known), n=1)
        described.append(f"{show(name)} (did you mean {show(close[0])}?)" if close else show(name))
    return ", ".join(described)


def _unrecognized_message(parser: HfArgumentParser, remaining: list[str]) -> str:
    flags = [item.split("=", 1)[0] for item in remaining if item.startswith("-")]
    if not flags:  # words where flags were expected, e.g. a settings file after flags
        return (
            f"unexpected argument(s) {' '.join(remaining)}: give --flag value pairs, after a .json file of settings "
            "if there is one."
        )
    # the underscore spelling of each flag (HfArgumentParser also accepts --learning-rate for --learning_rate)
    known = [option for option in parser._option_string_actions if option.startswith("--") and "-" not in option[2:]]
    return f"unrecognized argument(s) {_with_suggestions(flags, known)}."


def setup_logging(training_args, logger: logging.Logger, summary: bool = False) -> None:
    """Log to stdout at the process's level (the main process logs, the others warn), for the script's ``logger``,
    contrastive_hf and transformers; then seed everything with ``training_args.seed``. ``summary``: the script's own
    logger reports at INFO on the main process whatever the level, for its summary lines.

    Above INFO (the default) the log is kept to what matters: transformers' progress bars (loading weights, writing
    shards: they flash by) are off, Hub downloads keep theirs, and DeepSpeed's notice that it found no GPU, printed
    wherever DeepSpeed is installed because accelerate imports it, is hidden unless ``--deepspeed`` is given.
    ``--log_level info`` shows everything.
    """
    from ..data.corpus import data_counts_logger

    logging.basicConfig(
        format="%(asctime)s - %(levelname)s - %(name)s - %(message)s",
        datefmt="%m/%d/%Y %H:%M:%S",
        handlers=[logging.StreamHandler(sys.stdout)],
    )
    log_level = training_args.get_process_log_level()
    logger.setLevel(logging.INFO if summary and training_args.should_log else log_level)
    logging.getLogger("contrastive_hf").setLevel(log_level)
    data_counts_logger.setLevel(min(log_level, logging.INFO))  # what each epoch or stream pass held, always shown
    transformers.utils.logging.set_verbosity(log_level)
    if log_level > logging.INFO:
        _hide_transformers_progress_bars()
    if not training_args.deepspeed:
        logging.getLogger("DeepSpeed").addFilter(_without_deepspeed_cpu_notice)
    set_seed(training_args.seed)


def _hide_transformers_progress_bars() -> None:
    from huggingface_hub.utils import are_progress_bars_disabled, enable_progress_bars

    downloads_shown = not are_progress_bars_disabled()
    transformers.utils.logging.disable_progress_bar()  # also turns off huggingface_hub's
    if downloads_shown:
        enable_progress_bars()


def _without_deepspeed_cpu_notice(record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith("Setting accelerator to CPU")


def load_tokenizer(encoder_args: EncoderArguments):
    """The tokenizer of ``--tokenizer_name``, else of ``--model_name_or_path``."""
    from transformers import AutoTokenizer

    name = encoder_args.tokenizer_name or encoder_args.model_name_or_path
    if name is None:
        raise UsageError("Give --tokenizer_name (or --model_name_or_path, whose tokenizer is then used).")
    return AutoTokenizer.from_pretrained(name, cache_dir=encoder_args.cache_dir)


def load_sentences(data_args: CorpusArguments, tokenizer, training_args, cache_dir: str | None = None, **tokenize):
    """The training corpus of ``data_args``, tokenized (`tokenize_corpus`, with the ``tokenize`` options such as
    ``line_by_line``) and cut to ``--max_train_samples`` (a line-by-line corpus before tokenizing, so that the lines
    left out are never tokenized); with ``--streaming``, an endless stream of which each process reads its own shards
    (`prepare_streaming`)."""
    from ..data.corpus import first_examples, load_corpus, prepare_streaming, rows_holding_lines, tokenize_corpus

    count = data_args.max_train_samples
    with training_args.main_process_first(desc="corpus tokenization"), corpus_progress_bars(data_args.train_file):
        corpus = load_corpus(
            data_args.train_file,
            data_args.dataset_name,
            data_args.dataset_config_name,
            cache_dir=cache_dir,
            streaming=data_args.streaming,
        )
        if count is not None and count > 0 and tokenize.get("line_by_line", True) and not data_args.streaming:
            corpus = rows_holding_lines(corpus, count, data_args.text_column)  # a line gives one example or more
        dataset = tokenize_corpus(
            corpus,
            tokenizer,
            max_seq_length=data_args.max_seq_length,
            text_column=data_args.text_column,
            num_proc=data_args.preprocessing_num_workers,
            **tokenize,
        )
    if data_args.streaming:
        return prepare_streaming(dataset, training_args, count, data_args.train_file)
    return first_examples(dataset, count)


SMALL_CORPUS_BYTES = 10_000_000  # read and tokenized in seconds: no progress bars for it above --log_level info


@contextmanager
def corpus_progress_bars(path: str | None):
    """datasets' progress bars while the corpus file ``path`` is read and tokenized: off for a small file (they
    flash by) unless the log level is INFO or lower; a Hub dataset (None) or a large file keeps them."""
    import datasets

    small = path is not None and os.path.isfile(path) and os.path.getsize(path) < SMALL_CORPUS_BYTES
    quiet = small and logging.getLogger("contrastive_hf").getEffectiveLevel() > logging.INFO
    if not quiet or datasets.are_progress_bars_disabled():
        yield
        return
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        datasets.enable_progress_bars()


def load_sts_dev(data_args: CorpusArguments, training_args, model, tokenizer):
    """``(stsb, before)``: STS-B dev from ``--stsb_dev_file`` (None without it) and ``model``'s figures on it before
    training (`sts_eval_metrics`: ``stsb_spearman``, ``stsb_pearson``, ``stsb_alignment``, ``stsb_uniformity``).
    Scored on every process: under DeepSpeed ZeRO-3 a forward pass needs every process's shards."""
    from ..evaluation import read_stsbenchmark, sts_eval_metrics

    if not data_args.stsb_dev_file:
        if training_args.eval_strategy != "no":
            raise UsageError("--eval_strategy scores STS-B dev during training: give --stsb_dev_file (sts-dev.csv).")
        return None, None
    with as_usage_error():  # a file that is not STS-B's (its line named), or not UTF-8
        stsb = read_stsbenchmark(data_args.stsb_dev_file)
    before = sts_eval_metrics(model, stsb, tokenizer, prefix=STSB)
    if training_args.should_log:
        print(f"STS-B dev Spearman before training: {before[f'{STSB}_spearman']:.2f}")
    return stsb, before


STSB = "stsb"  # the eval set's name in metric names (eval_stsb_spearman), as ContrastiveTrainer logs it


# ----------------------------------------------------------------------------------------------------
# The end of a run
# ----------------------------------------------------------------------------------------------------


def save_trained_model(trainer, train_result, **sample_counts: int | None) -> None:
    """Save the model (without pushing: `publish` pushes once the card is written, so a failed push cannot lose the
    run), then save the train metrics (with ``sample_counts`` that are known, e.g. ``train_samples``; printed at
    ``--log_level info``) and the trainer state."""
    trainer.save_model(_internal_call=True)
    metrics = {**train_result.metrics, **{name: count for name, count in sample_counts.items() if count is not None}}
    if logger.isEnabledFor(logging.INFO):
        trainer.log_metrics("train", metrics)
    trainer.save_metrics("train", metrics)
    trainer.save_state()


def log_before_after(trainer, after: dict[str, float], before: dict[str, float] | None = None) -> dict:
    """Save evaluation metrics measured after training (``eval_<name>``) and, when given, before it
    (``eval_<name>_before``), and print them on the main process, each beside its change. Returns what was saved."""
    saved = {f"eval_{name}": value for name, value in after.items()}
    if before:
        saved.update({f"eval_{name}_before": value for name, value in before.items()})
    trainer.save_metrics("eval", saved)
    if trainer.is_world_process_zero():
        print(format_before_after(after, before))  # the run's summary lines are printed, not logged
    return saved


def format_before_after(after: dict[str, float], before: dict[str, float] | None = None) -> str:
    """The figures after training, one per line, each with its value before training and the change when known.
    Counts (integers, e.g. a retrieval evaluation's ``queries`` and ``passages``) name what was scored, in the
    heading, once."""
    counts = {name: value for name, value in after.items() if isinstance(value, int) and not isinstance(value, bool)}
    figures = {name: value for name, value in after.items() if name not in counts}
    width = max(map(len, figures), default=0)
    lines = []
    for name, value in figures.items():
        old = before.get(name) if before else None
        decimals = 2 if max(abs(value), abs(old or 0)) >= 10 else 4  # Spearman x 100: 2; alignment, uniformity: 4
        line = f"  {name:<{width}}  "
        if old is None:
            lines.append(line + f"{value:.{decimals}f}")
        else:
            lines.append(line + f"{old:.{decimals}f} -> {value:.{decimals}f}  ({value - old:+.{decimals}f})")
    heading = "Before and after training" if before else "After training"
    if counts:
        heading += f" ({', '.join(f'{value} {name}' for name, value in counts.items())})"
    return heading + ":\n" + "\n".join(lines)


def record_before_after(trainer, after: dict[str, float], before: dict[str, float] | None = None) -> None:
    """Add evaluations made outside the training loop to the run's ``log_history`` (and ``trainer_state.json``), as
    the Trainer logs its own: ``before`` at step 0 (what ``--eval_on_start`` records) and ``after`` at the last
    step, named ``eval_<name>``, so that `contrastive-hf plot` draws the run from where it started. A step that
    already holds these evaluations (``--eval_strategy steps``) is left as it is."""
    state = trainer.state
    first = f"eval_{next(iter(after))}"

    def logged_at(step: int) -> bool:
        return any(entry.get("step") == step and first in entry for entry in state.log_history)

    def entry(figures: dict[str, float], epoch: float, step: int) -> dict:
        return {**{f"eval_{name}": value for name, value in figures.items()}, "epoch": epoch, "step": step}

    if before is not None and not logged_at(0):
        state.log_history.insert(0, entry(before, 0.0, 0))
    if not logged_at(state.global_step):
        state.log_history.append(entry(after, state.epoch, state.global_step))
    trainer.save_state()  # on the main process only


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
    from ..evaluation import sts_eval_metrics
    from ..hub.adapters import merge_and_save
    from .loading import loading_instructions, verify_reload, whole_parameters

    save_trained_model(trainer, train_result, **sample_counts)
    model = trainer.model
    sentences = ["A man is playing a guitar.", "A cat sleeps on the sofa.", "Stocks fell sharply on Monday."]
    if stsb is not None:
        after = sts_eval_metrics(model, stsb, tokenizer, prefix=STSB)
        per_dimension = matryoshka_sts(model, stsb, tokenizer)
        after.update({f"{STSB}_spearman_dim{dim}": result["spearman"] for dim, result in per_dimension.items()})
        record_before_after(trainer, after, sts_before)
        log_before_after(trainer, after, sts_before)
        if card_info is not None:
            card_info.eval_results = {"stsb_dev": {"spearman": after[f"{STSB}_spearman"]}}
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
