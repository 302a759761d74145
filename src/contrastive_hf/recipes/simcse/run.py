"""SimCSE's script (``examples/run_simcse.py``, ``python -m contrastive_hf.recipes simcse``): its arguments, SimCSE's
defaults for the chosen ``--mode`` and its model configuration, and `build`: the log line of the resolved settings,
the tokenizer, the model with SimCSE's head, the sentences (unsup), the NLI pairs (sup) or several named datasets
(``--train_files``), the collator and the STS-B dev set."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from transformers import HfArgumentParser

from ...commands import arguments as shared_arguments
from ...commands.arguments import (
    AdapterArguments,
    ContrastiveModelArguments,
    CorpusArguments,
    EncoderArguments,
    PromptArguments,
)
from ...commands.errors import UsageError, as_usage_error
from ...commands.loaders import load_sentences, load_tokenizer
from ...commands.loading import load_pretraining_model, with_lora_adapter
from ...commands.zero3 import built_whole
from ...data.collators import PairCollator
from ...data.mixture import parse_named_files
from ...data.reading import first_examples, load_corpus
from ...models.modeling_contrastive_pretraining import ContrastiveForPreTraining
from ...training.trainer import ContrastiveTrainer
from ...training.training_args import ContrastiveTrainingArguments
from .. import SentenceEncoderRun, sentence_encoder_run
from .data import build_collator, build_mixture, describe_views, prepare_pairs

__all__ = [
    "MODES",
    "SIMCSE_HEAD",
    "MODE_DEFAULTS",
    "argument_defaults",
    "mode_defaults",
    "model_config",
    "ModelArguments",
    "DataArguments",
    "ARGUMENTS",
    "parse_arguments",
    "describe_hyperparameters",
    "load_pairs",
    "build",
]

logger = logging.getLogger(__name__)

MODES = ("unsup", "sup")
# The model configuration of both modes: InfoNCE at tau 0.05 on the [CLS] hidden state under SimCSE's MLP. SimCSE's
# encoder has no pooler layer, hence "cls_before_pooler" (the raw [CLS] state) under the MLP.
SIMCSE_HEAD = {"projection_layers": 1, "projection_activation": "tanh", "projection_output_activation": True}
_MODEL = {
    "pooler_type": "cls_before_pooler",
    "projection_type": "mlp",
    "temperature": 0.05,
    "contrastive_loss": "info_nce",
    "hard_negative_weight": 0.0,
}
# Each mode's hyper-parameters for BERT-base, as run_simcse.py's arguments (`argument_defaults`), except "batch_size",
# the global batch: each process gets batch_size / WORLD_SIZE (--per_device_train_batch_size); max length 32 in both.
MODE_DEFAULTS = {
    "unsup": {
        **_MODEL,
        "batch_size": 64,
        "learning_rate": 3e-5,
        "num_train_epochs": 1,
        "max_seq_length": 32,
        "projection_at_inference": False,
        "mlm_weight": 0.1,  # SimCSE's auxiliary MLM (--do_mlm), off unless asked for
    },
    # 512 on 4 GPUs x 128 in SimCSE; the MLP stays in the embeddings (no --mlp_only_train for supervised SimCSE)
    "sup": {
        **_MODEL,
        "batch_size": 512,
        "learning_rate": 5e-5,
        "num_train_epochs": 3,
        "max_seq_length": 32,
        "projection_at_inference": True,
        "mlm_weight": 0.1,
    },
}


def argument_defaults(given: Mapping[str, Any]) -> dict:
    """run_simcse.py's defaults for the settings ``given`` on its command line or in its settings file: the table of
    their ``mode`` (`mode_defaults`), for `commands.arguments.parse_arguments`."""
    return mode_defaults(given.get("mode"))


def mode_defaults(mode: str | None, world_size: int | None = None) -> dict:
    """SimCSE's defaults for ``mode`` as argument values: model configuration, ``per_device_train_batch_size`` (the
    global batch over ``world_size`` processes; default: ``WORLD_SIZE`` as `accelerate launch` sets it), learning
    rate, epochs, max length. {} for a missing or unknown mode (an argument parser then reports it)."""
    if mode not in MODE_DEFAULTS:
        return {}
    defaults = dict(MODE_DEFAULTS[mode])
    world_size = world_size or int(os.environ.get("WORLD_SIZE", "1"))
    defaults["per_device_train_batch_size"] = max(1, defaults.pop("batch_size") // world_size)
    return defaults


def model_config(mode: str, do_mlm: bool = False, **overrides) -> dict:
    """`ContrastiveConfig` keyword arguments of SimCSE's model for ``mode`` (``overrides`` win): the MLP head, InfoNCE,
    and with ``do_mlm`` its auxiliary MLM term."""
    if mode not in MODES:
        raise ValueError(f"Unknown SimCSE mode {mode!r}: choose one of {', '.join(MODES)}.")
    config = {name: MODE_DEFAULTS[mode][name] for name in (*_MODEL, "projection_at_inference", "mlm_weight")}
    config.update(SIMCSE_HEAD, cl_weight=1.0, **overrides)
    if not do_mlm:
        config["mlm_weight"] = 0.0
    return config


# The script's defaults: the table of the --mode given (a function of the settings given).
DEFAULTS = argument_defaults
TRAINER_CLASS = ContrastiveTrainer

# The settings the log lists, each beside its SimCSE default.
LOGGED_SETTINGS = (
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "learning_rate",
    "num_train_epochs",
    "max_steps",
    "max_seq_length",
    "temperature",
    "pooler_type",
    "projection_type",
    "projection_at_inference",
    "hard_negative_weight",
    "do_mlm",
    "mlm_weight",
    "prebatch_size",
)


@dataclass
class ModelArguments(EncoderArguments, ContrastiveModelArguments, PromptArguments):
    do_mlm: bool = field(default=False, metadata={"help": "Add SimCSE's auxiliary MLM objective (--mlm_weight)."})


@dataclass
class DataArguments(CorpusArguments):
    mode: str | None = field(
        default=None,
        metadata={
            "help": "unsup: dropout views of each sentence of a text corpus (SimCSE defaults: batch 64, lr 3e-5, "
            "1 epoch); sup: NLI pairs with contradiction hard negatives (batch 512, lr 5e-5, 3 epochs).",
            "choices": list(MODES),
            "required": True,
        },
    )
    pair_columns: str | None = field(
        default=None,
        metadata={
            "help": "sup: anchor,positive[,hard_negative_1,...,hard_negative_k] column names, k >= 0 hard negatives "
            "per anchor (default: sent0,sent1,hard_neg, anchor,positive,hard_negative or query,positive, "
            "whichever the data has, with negative_1..negative_k as `contrastive-hf mine` writes them)."
        },
    )
    mlm_probability: float = field(default=0.15, metadata={"help": "Fraction of tokens masked with --do_mlm."})
    mask_token: str | None = field(
        default=None,
        metadata={
            "help": "With --do_mlm, the token masked tokens become, one of the tokenizer's (default: its mask token). "
            "Decoder tokenizers have none: LLM2Vec masks with '_'; a decoder's MLM is masked next-token prediction."
        },
    )
    train_files: str | None = field(
        default=None,
        metadata={
            "help": "Several named datasets in one run instead of --train_file, e.g. nli=nli.csv,wiki=wiki.txt: "
            "each batch is drawn from one of them (in-batch negatives stay within a dataset) and each one's loss is "
            "logged as cl_loss_<name>. A text file gives dropout views of its sentences, a csv/json file pairs or "
            "triplets with its own columns."
        },
    )
    dataset_schedule: str = field(
        default="proportional",
        metadata={
            "help": "With --train_files: proportional (batches of every dataset in a random order, each dataset's "
            "share of the steps its share of the examples) or round_robin (one batch of each in turn).",
            "choices": ["proportional", "round_robin"],
        },
    )


ARGUMENTS = (ModelArguments, DataArguments, AdapterArguments, ContrastiveTrainingArguments)


def parse_arguments(
    argv: list[str] | None = None,
) -> tuple[ModelArguments, DataArguments, AdapterArguments, ContrastiveTrainingArguments]:
    """Flags, or a JSON file and flags, with SimCSE's defaults for the chosen ``--mode`` under whatever is given."""
    return shared_arguments.parse_arguments(HfArgumentParser(ARGUMENTS), argv, defaults=argument_defaults)


def describe_hyperparameters(mode: str, *argument_groups) -> str:
    """One line with the resolved SimCSE settings, and those that differ from SimCSE's defaults for ``mode``."""
    values = {
        name: getattr(group, name) for group in argument_groups for name in LOGGED_SETTINGS if hasattr(group, name)
    }
    defaults = {
        item.name: item.default
        for group in (ModelArguments, DataArguments, ContrastiveTrainingArguments)
        for item in fields(group)
    }
    defaults.update(mode_defaults(mode))
    changed = [f"{name} ({defaults[name]} -> {value})" for name, value in values.items() if value != defaults[name]]
    settings = ", ".join(f"{name}={value}" for name, value in values.items())
    return f"SimCSE --mode {mode}: {settings}. Differing from SimCSE's defaults: {', '.join(changed) or 'none'}."


def load_pairs(data_args, collator: PairCollator, cache_dir):
    """sup: the pairs/triplets as text (the collator tokenizes each batch), incomplete rows dropped and counted."""
    corpus = load_corpus(
        data_args.train_file, data_args.dataset_name, data_args.dataset_config_name, cache_dir=cache_dir
    )
    with as_usage_error("Name the anchor, positive and any hard negative columns with --pair_columns."):
        pairs = prepare_pairs(corpus, collator, data_args.preprocessing_num_workers)
    negatives = len(collator.columns) - 2
    kinds = {0: "(anchor, positive) pairs", 1: "(anchor, positive, hard negative) triplets"}.get(
        negatives, f"(anchor, positive, {negatives} hard negatives) rows"
    )
    logger.info("Training on %d %s from columns %s.", len(pairs), kinds, ", ".join(collator.columns))
    return pairs


def build(arguments: tuple) -> SentenceEncoderRun:
    """The tokenizer, the model (SimCSE's head for the mode, a LoRA adapter when asked), the training data and its
    collator, the STS-B dev set and what the card says of the run, of ``arguments`` (`parse_arguments`)."""
    model_args, data_args, adapter_args, training_args = arguments
    logger.info(describe_hyperparameters(data_args.mode, model_args, data_args, training_args))
    if data_args.train_files and (data_args.train_file or data_args.dataset_name):
        raise UsageError("Give --train_files (several datasets) or --train_file / --dataset_name, not both.")
    tokenizer = load_tokenizer(model_args)
    overrides = {**ContrastiveModelArguments.config_overrides(model_args), **model_args.prompt_overrides()}
    with built_whole(training_args):  # whole in each process, also under DeepSpeed ZeRO-3
        model: ContrastiveForPreTraining = load_pretraining_model(
            model_args.model_name_or_path,
            model_args.config_name,
            tokenizer,
            model_args.cache_dir,
            model_args.loading(adapter_args, training_args),
            **model_config(data_args.mode, do_mlm=model_args.do_mlm, **overrides),
        )
    model = with_lora_adapter(model, adapter_args)

    collator_options = dict(
        do_mlm=model_args.do_mlm,
        mlm_probability=data_args.mlm_probability,
        mask_token=data_args.mask_token,
        masked_next_token=model.predicts_next_token,
        seed=training_args.seed,
        prompts=overrides.get("prompts") if data_args.mode == "unsup" else model.config.prompts,
        include_prompt=model.config.include_prompt,
    )
    if data_args.train_files:
        with training_args.main_process_first(desc="training data"), as_usage_error():
            train_dataset, collator = build_mixture(
                parse_named_files(data_args.train_files),
                tokenizer,
                schedule=data_args.dataset_schedule,
                max_length=data_args.max_seq_length,
                max_train_samples=data_args.max_train_samples,
                num_proc=data_args.preprocessing_num_workers,
                cache_dir=model_args.cache_dir,
                **collator_options,
            )
        for name, size in zip(train_dataset.names, train_dataset.sizes, strict=True):
            logger.info(
                "Dataset %r: %d examples, %s.", name, size, collator.collator_of(name).card_description()["views"]
            )
        views = collator.card_description()["views"]  # the mixture's collator describes each dataset's views
    else:
        pair_columns = [name.strip() for name in data_args.pair_columns.split(",")] if data_args.pair_columns else None
        with as_usage_error():  # settings it refuses, e.g. a prompt that fills --max_seq_length
            collator = build_collator(
                data_args.mode,
                tokenizer,
                max_length=data_args.max_seq_length,
                pair_columns=pair_columns,
                **collator_options,
            )
        if data_args.mode == "unsup":
            train_dataset = load_sentences(data_args, tokenizer, training_args, model_args.cache_dir)
        else:
            with training_args.main_process_first(desc="training data"):
                train_dataset = first_examples(
                    load_pairs(data_args, collator, model_args.cache_dir), data_args.max_train_samples
                )
        views = describe_views(data_args.mode, getattr(collator, "columns", None))

    card = dict(
        hyperparameters={
            "mode": data_args.mode,
            **({"pre-batch queue": training_args.prebatch_size} if training_args.prebatch_size else {}),
        },
        method="SimCSE" if data_args.mode == "unsup" else "Supervised SimCSE",  # also with SimCSE's auxiliary MLM
        augmentation=views,
    )
    return sentence_encoder_run(
        model, tokenizer, train_dataset, collator, data_args, training_args, card=card,
        train_counts={"train_samples": len(train_dataset)},
    )  # fmt: skip
