"""DPR's script (``examples/run_dpr.py``, ``python -m contrastive_hf.recipes dpr``): its arguments, and `build`, which
loads the tokenizer, builds or loads the dual encoder, reads and tokenizes the (question, passage[, hard negatives])
pairs, holds some out for the retrieval evaluation and makes the collator; the run scores retrieval before and after
training."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from transformers import AutoConfig, AutoTokenizer

from ...commands.arguments import (
    AdapterArguments,
    LoadingArguments,
    MatryoshkaArguments,
    PromptArguments,
    loss_help,
)
from ...commands.errors import UsageError, as_usage_error
from ...commands.loaders import corpus_progress_bars, evaluates_during_training
from ...commands.loading import with_lora_adapter
from ...commands.reload_check import loading_instructions
from ...commands.run_end import log_before_after, publish, save_merged_model, save_trained_model
from ...commands.zero3 import built_whole
from ...data.columns import resolve_query_passage_columns
from ...data.reading import drop_incomplete_rows, load_corpus
from ...evaluation.retrieval import RetrievalData, build_retrieval_data, evaluate_retrieval, retrieval_eval_metrics
from ...models.configuration_dual_encoder import DualEncoderConfig
from ...models.modeling_dual_encoder import DualEncoderModel
from ...models.objectives import get_loss
from ...training.trainer import ContrastiveTrainer
from ...training.training_args import ContrastiveTrainingArguments
from .. import RecipeRun
from .data import QueryPassageCollator, tokenize_query_passage_pairs

__all__ = [
    "DEFAULTS",
    "ModelArguments",
    "DataArguments",
    "ARGUMENTS",
    "DualEncoderRun",
    "build",
    "build_model",
    "parse_k_values",
]

logger = logging.getLogger(__name__)

# DPR's settings are its parts' own defaults (`DualEncoderConfig`: the [CLS] state, inner products; the collator's
# 64 / 256 tokens), which the script's flags take: nothing to set.
DEFAULTS: dict = {}
TRAINER_CLASS = ContrastiveTrainer


@dataclass
class ModelArguments(LoadingArguments, PromptArguments, MatryoshkaArguments):
    hub_ids_or_paths: ClassVar[tuple[str, ...]] = (
        "model_name_or_path",
        "passage_model_name_or_path",
        "config_name",
        "tokenizer_name",
    )

    model_name_or_path: str | None = field(
        default=None,
        metadata={
            "help": "A pretrained encoder both towers start from (DPR starts from BERT), or a dual encoder checkpoint "
            "to continue training; unset to train from --config_name."
        },
    )
    passage_model_name_or_path: str | None = field(
        default=None, metadata={"help": "A different pretrained encoder for the passage tower."}
    )
    config_name: str | None = field(default=None, metadata={"help": "Encoder config for training from scratch."})
    tokenizer_name: str | None = field(default=None, metadata={"help": "Tokenizer, if not the model's."})
    cache_dir: str | None = field(default=None, metadata={"help": "Where Hub downloads are cached."})
    share_encoders: bool = field(
        default=False, metadata={"help": "One encoder for questions and passages (DPR trains two)."}
    )
    pooler_type: str = field(
        default="cls_before_pooler",
        metadata={"help": "cls_before_pooler (DPR: the [CLS] state), mean (for sentence-transformers models), ..."},
    )
    similarity: str | None = field(
        default=None, metadata={"help": "dot (DPR, the default for a new model) or cosine."}
    )
    temperature: float | None = field(
        default=None, metadata={"help": "Scores are divided by it; default 1.0 for dot, 0.05 for cosine."}
    )
    contrastive_loss: str | None = field(default=None, metadata={"help": loss_help()})  # rewritten when parsing
    projection_dim: int | None = field(
        default=None, metadata={"help": "A linear layer to this size on each tower's vector (none when unset)."}
    )


@dataclass
class DataArguments:
    local_paths: ClassVar[tuple[str, ...]] = ("train_file",)

    train_file: str | None = field(default=None, metadata={"help": "A .csv or .json(l) file of pairs or triples."})
    dataset_name: str | None = field(default=None, metadata={"help": "A Hub dataset of pairs or triples."})
    dataset_config_name: str | None = field(default=None, metadata={"help": "Its configuration name."})
    dataset_split: str = field(default="train", metadata={"help": "The split to train on (and hold pairs out of)."})
    query_column: str | None = field(
        default=None, metadata={"help": "The question column (default: query, question, anchor or sent0)."}
    )
    positive_column: str | None = field(
        default=None,
        metadata={"help": "The positive passage column (default: positive, positive_passage, passage, answer, sent1)"},
    )
    hard_negative_column: str | None = field(
        default=None,
        metadata={
            "help": "The hard negative column, or several comma-separated (k negatives per question; default: "
            "hard_negative, negative_passage, negative or hard_neg, else negative_1..negative_k as "
            "`contrastive-hf mine` writes them). A column may also hold a list of negatives per row."
        },
    )
    no_hard_negatives: bool = field(default=False, metadata={"help": "Ignore any hard negative column."})
    max_query_length: int = field(
        default=QueryPassageCollator.max_query_length, metadata={"help": "Most tokens per question."}
    )
    max_passage_length: int = field(
        default=QueryPassageCollator.max_passage_length, metadata={"help": "Most tokens per passage (DPR: 256)."}
    )
    max_train_samples: int | None = field(default=None, metadata={"help": "Train on at most this many pairs."})
    eval_size: int = field(
        default=1000,
        metadata={
            "help": "Pairs held out (after a seeded shuffle) for the retrieval evaluation: their questions are "
            "searched among all their passages, after training, and during it with --eval_strategy or "
            "--eval_on_start (logged as eval_held_out_recall@k and eval_held_out_mrr: --metric_for_best_model "
            "held_out_mrr). 0: no evaluation."
        },
    )
    eval_file: str | None = field(
        default=None,
        metadata={
            "help": "A .csv or .json(l) file of (question, positive[, hard negatives]) pairs to score retrieval on, "
            "instead of holding out --eval_size pairs of the training data (which is then all trained on): the same "
            "evaluation for runs on different training files, e.g. with and without mined negatives. Its columns are "
            "the training file's where it has them, else detected as for the training file."
        },
    )
    eval_hard_negatives: bool = field(
        default=True, metadata={"help": "Add the held-out pairs' hard negatives to the searched collection."}
    )
    retrieval_k: str = field(default="1,5,20,100", metadata={"help": "The k of recall@k, comma-separated."})
    evaluate_before_training: bool = field(
        default=False, metadata={"help": "Also score retrieval before training (eval_before_* metrics)."}
    )
    preprocessing_num_workers: int | None = field(default=None, metadata={"help": "Processes for tokenization."})


def build_model(model_args: ModelArguments, tokenizer, loading: dict) -> DualEncoderModel:
    """The dual encoder to train: a saved one, towers from pretrained encoders, or new from an encoder config;
    ``loading``: `from_pretrained`'s loading arguments (`LoadingArguments.loading`)."""
    if model_args.contrastive_loss is not None:
        with as_usage_error():  # the registered names, in one usage line
            get_loss(model_args.contrastive_loss)
    loss_overrides = {
        name: value
        for name, value in (
            ("similarity", model_args.similarity),
            ("temperature", model_args.temperature),
            ("contrastive_loss", model_args.contrastive_loss),
        )
        if value is not None
    }
    loss_overrides.update(model_args.matryoshka_overrides(), **model_args.prompt_overrides())
    if model_args.model_name_or_path:
        source = AutoConfig.from_pretrained(model_args.model_name_or_path, cache_dir=model_args.cache_dir)
        if source.model_type == DualEncoderConfig.model_type:
            logger.info("Continuing to train the dual encoder %s.", model_args.model_name_or_path)
            return DualEncoderModel.from_pretrained(model_args.model_name_or_path, **loading, **loss_overrides)
        return DualEncoderModel.from_encoder_pretrained(
            model_args.model_name_or_path,
            model_args.passage_model_name_or_path,
            **loading,
            share_encoders=model_args.share_encoders,
            pooler_type=model_args.pooler_type,
            projection_dim=model_args.projection_dim,
            **loss_overrides,
        )
    if not model_args.config_name:
        raise UsageError("Give --model_name_or_path (a pretrained encoder) or --config_name (to train from scratch).")
    if model_args.passage_model_name_or_path:
        raise UsageError("--passage_model_name_or_path needs --model_name_or_path for the query tower.")
    encoder_config = AutoConfig.from_pretrained(model_args.config_name, cache_dir=model_args.cache_dir)
    encoder_config.vocab_size = len(tokenizer)
    encoder_config.pad_token_id = tokenizer.pad_token_id
    if loading.get("attn_implementation"):
        encoder_config._attn_implementation = loading["attn_implementation"]
    config = DualEncoderConfig(
        query_encoder=encoder_config,
        share_encoders=model_args.share_encoders,
        pooler_type=model_args.pooler_type,
        projection_dim=model_args.projection_dim,
        **loss_overrides,
    )
    logger.info("Training a %s dual encoder from scratch.", encoder_config.model_type)
    return DualEncoderModel(config)


def parse_k_values(text: str) -> list[int]:
    try:
        values = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError as error:
        raise UsageError(f"--retrieval_k must be comma-separated integers, got {text!r}.") from error
    if not values or values[0] < 1:
        raise UsageError(f"--retrieval_k needs positive integers, got {text!r}.")
    return values


def data_columns(*args, **kwargs) -> tuple[str, ...]:
    """`resolve_query_passage_columns`, with its errors (a flag naming a column the data lacks, no column found) as
    usage errors: one line naming the columns there are, no traceback."""
    with as_usage_error():
        return resolve_query_passage_columns(*args, **kwargs)


ARGUMENTS = (ModelArguments, DataArguments, AdapterArguments, ContrastiveTrainingArguments)


@dataclass
class DualEncoderRun(RecipeRun):
    """`RecipeRun` with the pairs trained on and the retrieval evaluation: ``score(model)`` gives its figures (None
    without held-out pairs)."""

    train_pairs: int = 0
    retrieval: RetrievalData | None = None
    score: Callable[[Any], dict[str, float]] | None = None
    score_before_training: bool = True
    before: dict[str, float] | None = None

    def before_training(self, trainer) -> None:
        # Scored on every process (each computes the same figures; the main one writes and prints them): under
        # DeepSpeed ZeRO-3 a forward pass needs every process's shards. On the device training will use.
        if self.score is not None and self.score_before_training:
            self.model.to(trainer.args.device)
            self.before = self.score(trainer.model)

    def finish(self, trainer, train_result) -> None:
        save_trained_model(trainer, train_result, train_pairs=len(self.train_dataset))
        if self.score is not None:
            log_before_after(trainer, self.score(trainer.model), self.before)
        publish(trainer)
        loadable_dir = save_merged_model(trainer, self.tokenizer)  # with --lora_r: the adapter merged, beside it
        if trainer.is_world_process_zero():
            print(loading_instructions(loadable_dir, dual_encoder=True))


def build(arguments: tuple) -> DualEncoderRun:
    """The tokenizer, the dual encoder (with its LoRA adapter when asked), the tokenized training pairs, the
    collator and the held-out retrieval evaluation of ``arguments`` (parsed `ARGUMENTS`)."""
    model_args, data_args, adapter_args, training_args = arguments
    k_values = parse_k_values(data_args.retrieval_k)
    if data_args.eval_size < 0:
        raise UsageError(f"--eval_size must be >= 0, got {data_args.eval_size}.")

    tokenizer_name = model_args.tokenizer_name or model_args.model_name_or_path
    if tokenizer_name is None:
        raise UsageError("Give --tokenizer_name (or --model_name_or_path, whose tokenizer is then used).")
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_name, cache_dir=model_args.cache_dir)
    # whole in each process, also under DeepSpeed ZeRO-3; a setting the config refuses (e.g. --truncate_dim above the
    # embedding size) is a usage error
    with built_whole(training_args), as_usage_error():
        model = build_model(model_args, tokenizer, model_args.loading(adapter_args, training_args))
    if adapter_args.lora_r and model_args.passage_model_name_or_path:
        raise UsageError(
            "--lora_r with --passage_model_name_or_path: an adapter folder names one base model, from which peft "
            "rebuilds both towers, so an adapter on two different encoders would load onto the wrong passage tower. "
            "Train without --lora_r, or start both towers from --model_name_or_path."
        )
    model = with_lora_adapter(model, adapter_args)

    loading = training_args.main_process_first(desc="loading and tokenizing the pairs")
    with loading, corpus_progress_bars(data_args.train_file):
        train_pairs, held_out, eval_columns, train_dataset, train_columns = _load_pairs(
            data_args, model_args.cache_dir, tokenizer, model.config.prompts, training_args.seed
        )

    run = DualEncoderRun(
        model,
        tokenizer,
        train_dataset,
        None,
        train_pairs=len(train_pairs),
        score_before_training=data_args.evaluate_before_training,
    )
    if data_args.eval_size or data_args.eval_file:
        run.retrieval = _retrieval_data(held_out, eval_columns, data_args)

        settings = dict(
            k_values=k_values,
            query_max_length=data_args.max_query_length,
            passage_max_length=data_args.max_passage_length,
            truncate_dims=model.config.matryoshka_dims or (),
        )

        def score(trained) -> dict[str, float]:
            batch_size = training_args.per_device_eval_batch_size
            return evaluate_retrieval(trained, run.retrieval, tokenizer, batch_size=batch_size, **settings)

        run.score = score
        if evaluates_during_training(training_args):  # --eval_strategy, --eval_on_start: the same figures
            run.eval_dataset = {run.retrieval.name: HeldOutRetrieval(run.retrieval, settings)}
    elif evaluates_during_training(training_args):
        raise UsageError(
            "--eval_strategy and --eval_on_start score retrieval on held-out pairs during training: give --eval_size "
            "(pairs held out of --train_file) or --eval_file."
        )

    with as_usage_error():  # settings it refuses, e.g. a prompt that fills --max_query_length
        run.data_collator = QueryPassageCollator(
            tokenizer,
            columns=train_columns,
            max_query_length=data_args.max_query_length,
            max_passage_length=data_args.max_passage_length,
            prompts=model.config.prompts,
            include_prompt=model.config.include_prompt,
        )
    return run


@dataclass
class HeldOutRetrieval:
    """The held-out retrieval evaluation as the Trainer's eval set (`evaluation.training.TrainingEvalSet`): scored
    with the run's ``settings`` of `evaluate_retrieval` (k values, lengths, Matryoshka sizes), the figures it prints
    after training, logged as ``eval_held_out_recall@k`` and ``eval_held_out_mrr``."""

    data: RetrievalData
    settings: dict[str, Any]
    primary_metric: ClassVar[str] = RetrievalData.primary_metric
    primary_metric_description: ClassVar[str] = f"{RetrievalData.primary_metric_description} among the held-out pairs"

    def training_metrics(self, model, tokenizer, batch_size: int = 64, prefix: str = "eval") -> dict[str, float]:
        return retrieval_eval_metrics(model, self.data, tokenizer, batch_size, prefix, **self.settings)


def _load_pairs(data_args: DataArguments, cache_dir, tokenizer, prompts, seed: int):
    """The training pairs, the held-out ones and their columns, and the training dataset (tokenized, or as text
    with its columns when prompts are prepended: the collator tokenizes each batch)."""
    pairs = load_corpus(
        data_args.train_file,
        data_args.dataset_name,
        data_args.dataset_config_name,
        split=data_args.dataset_split,
        cache_dir=cache_dir,
    )
    columns = data_columns(
        pairs.column_names,
        data_args.query_column,
        data_args.positive_column,
        data_args.hard_negative_column,
        use_hard_negatives=not data_args.no_hard_negatives,
    )
    logger.info(
        "Questions from %r, positive passages from %r, hard negatives from %s.",
        columns[0],
        columns[1],
        ", ".join(map(repr, columns[2:])) or "no column",
    )
    pairs = drop_incomplete_rows(pairs, columns, data_args.preprocessing_num_workers)
    pairs = pairs.shuffle(seed=seed)
    if data_args.eval_file:
        held_out = load_corpus(data_args.eval_file)
        # --query_column / --positive_column name the training file's columns; the evaluation file's are taken from
        # them where it has them and detected otherwise (a mined file's query, positive beside sent0, sent1)
        eval_columns = data_columns(
            held_out.column_names,
            *(name if name in held_out.column_names else None for name in (columns[0], columns[1])),
            use_hard_negatives=data_args.eval_hard_negatives,
        )
        logger.info("Evaluation file: questions from %r, positive passages from %r.", *eval_columns[:2])
        held_out, train_pairs = drop_incomplete_rows(held_out, eval_columns), pairs
    else:
        if data_args.eval_size >= len(pairs):
            raise UsageError(
                f"--eval_size {data_args.eval_size} leaves nothing to train on: the data has {len(pairs)} pairs."
            )
        eval_columns = columns
        held_out = pairs.select(range(data_args.eval_size))
        train_pairs = pairs.select(range(data_args.eval_size, len(pairs)))
    if data_args.max_train_samples is not None:
        train_pairs = train_pairs.select(range(min(data_args.max_train_samples, len(train_pairs))))
    if prompts:  # prompts are prepended to texts: the collator tokenizes each batch
        return train_pairs, held_out, eval_columns, train_pairs.select_columns(list(columns)), columns
    train_dataset = tokenize_query_passage_pairs(
        train_pairs,
        tokenizer,
        columns,
        max_query_length=data_args.max_query_length,
        max_passage_length=data_args.max_passage_length,
        num_proc=data_args.preprocessing_num_workers,
    )
    return train_pairs, held_out, eval_columns, train_dataset, None  # None: the tokenized columns


def _retrieval_data(held_out, eval_columns, data_args: DataArguments) -> RetrievalData:
    """The held-out questions searched among their passages (and their hard negatives, with --eval_hard_negatives)."""
    query_column, positive_column, *negative_columns = eval_columns
    distractors = []
    for column in negative_columns if data_args.eval_hard_negatives else ():
        for value in held_out[column]:
            distractors.extend(value if isinstance(value, list) else [value])
    retrieval = build_retrieval_data(held_out[query_column], held_out[positive_column], distractors, name="held_out")
    logger.info(
        "Retrieval evaluation: %d held-out questions against %d passages%s.",
        len(retrieval.queries),
        len(retrieval.passages),
        f" from {data_args.eval_file}" if data_args.eval_file else "",
    )
    return retrieval
