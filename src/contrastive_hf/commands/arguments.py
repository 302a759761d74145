"""The example scripts' arguments: the dataclasses they share (where the model starts, the `ContrastiveConfig` fields,
Matryoshka sizes, prompts, the corpus) and reading them, from flags or one JSON file of the same keys, with a
recipe's paper defaults under what is given and one clear line for each mistake (`parse_arguments`)."""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import os
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from transformers import HfArgumentParser, TrainingArguments

from .._files import written_as_local_path
from ..data.augmentations import augmentation_help, augmentation_hyperparameters
from ..models.configuration_contrastive import PROJECTION_TYPES, ContrastiveConfig
from ..models.objectives import get_loss, loss_names
from ..models.poolers import get_pooler, pooler_names
from .errors import UsageError
from .logs import announce_first_deepspeed_build

__all__ = [
    "REGISTRY_OPTIONS",
    "pooler_help",
    "loss_help",
    "BASE_DTYPES",
    "LoadingArguments",
    "EncoderArguments",
    "ContrastiveModelArguments",
    "MatryoshkaArguments",
    "PromptArguments",
    "CorpusArguments",
    "AdapterArguments",
    "augmentation_arguments",
    "parse_number_list",
    "parse_arguments",
    "read_json_settings",
    "check_paths",
    "check_output_dir",
    "training_data_name",
]


# The dtypes the frozen base weights of a LoRA run may load in (`AdapterArguments.lora_base_dtype`).
BASE_DTYPES = ("float32", "bfloat16", "float16")


@dataclass(kw_only=True)  # keyword-only: a script's model arguments may add required fields after it
class LoadingArguments:
    """How the pretrained weights load: the attention implementation (every script's model arguments have it)."""

    attn_implementation: str | None = field(
        default=None,
        metadata={
            "help": "The attention implementation the encoder(s) load with, as transformers names it: sdpa, eager, "
            "flash_attention_2 (needs the flash-attn package and a GPU), ... (default: transformers' choice, sdpa "
            "where the family has it). Kept for the run; a saved checkpoint loads with the loader's choice."
        },
    )

    def loading(self, adapter_args: AdapterArguments, training_args: TrainingArguments) -> dict:
        """`from_pretrained`'s keyword arguments for the model a script trains: float32 master weights, whatever
        dtype the checkpoint was saved in (a bf16 run computes under autocast and the optimiser steps in float32),
        except the frozen base of a LoRA run in ``--lora_base_dtype``; and ``--attn_implementation``."""
        loading = {"dtype": adapter_args.base_dtype(training_args)}
        if self.attn_implementation:
            loading["attn_implementation"] = self.attn_implementation
        return loading


@dataclass
class EncoderArguments(LoadingArguments):
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


def pooler_help() -> str:
    """``--pooler_type``'s help: every registered pooler (`models/poolers.py`) with its description."""
    poolers = "; ".join(f"{name}: {get_pooler(name).description}" for name in pooler_names())
    return f"{poolers} ({_config_default('pooler_type')}).".replace("%", "%%")  # argparse formats help with %


def loss_help() -> str:
    """``--contrastive_loss``'s help: every registered in-batch loss (`models/objectives.py`) with its description."""
    losses = "; ".join(f"{name}: {get_loss(name).description}" for name in loss_names())
    takers = " or ".join(name for name in loss_names() if get_loss(name).takes_extra_negatives)
    text = f"{losses}. Hard negatives and --prebatch_size need {takers} ({_config_default('contrastive_loss')})."
    return text.replace("%", "%%")  # argparse formats help with %


# The options whose values are the names of a registry, by their flag's name: their help is written when the
# arguments are parsed (`parse_arguments`), and their values are checked then (the dataclasses' __post_init__), so
# an entry registered after these dataclasses were defined (by a user's module, a test) is listed and accepted.
# argparse ``choices`` would be frozen when the parser is built. ``--augmentations`` is run_clear.py's option.
REGISTRY_OPTIONS: dict[str, Callable[[], str]] = {
    "pooler_type": pooler_help,
    "contrastive_loss": loss_help,
    "augmentations": augmentation_help,
}


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

    pooler_type: str | None = field(default=None, metadata={"help": pooler_help()})  # rewritten when parsing
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
    contrastive_loss: str | None = field(default=None, metadata={"help": loss_help()})  # rewritten when parsing
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
    bidirectional_attention: bool | None = field(
        default=None,
        metadata={
            "help": "A decoder encoder (Llama, Mistral, Qwen2/3, Gemma 1-3, Phi-3, GPT-2) attends both ways, as "
            "LLM2Vec and NV-Embed train them; saved in the encoder's config.json (is_causal), which AutoModel and "
            "sentence-transformers read (default: the checkpoint's, else causal)."
        },
    )
    encoder_dropout: float | None = field(
        default=None,
        metadata={
            "help": "Every dropout probability of the encoder's config (BERT's hidden and attention dropout; a "
            "decoder's attention_dropout, 0 as released: LLM2Vec's SimCSE uses 0.3), the noise between SimCSE's two "
            "views; saved in the encoder's config.json (default: the checkpoint's)."
        },
    )
    sub_batch_size: str | None = field(
        default=None,
        metadata={
            "help": "How views are encoded: packed (one sequence of real tokens), sorted (length-sorted groups), "
            "N (sorted groups of N views), 0 (one padded pass) or auto (packed where the encoder allows, else "
            f"sorted on CPU, padded on a GPU) ({_config_default('sub_batch_size')})."
        },
    )

    def __post_init__(self):
        # against the registries as they are now (REGISTRY_OPTIONS): one usage line naming the registered names
        for name, lookup in (("pooler_type", get_pooler), ("contrastive_loss", get_loss)):
            if getattr(self, name) is not None:
                try:
                    lookup(getattr(self, name))
                except ValueError as error:
                    raise UsageError(str(error)) from None

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


def augmentation_arguments() -> type:
    """A dataclass of one field per hyper-parameter of the augmentations registered now
    (`data.augmentations.augmentation_hyperparameters`: its flag, type, default and help), for a script whose views
    are augmentations; the parsed instance's ``vars()`` is a collator's ``view_settings``. `parse_arguments` makes
    it again when an augmentation was registered since, so that a script's flags are those registered when it
    reads them."""
    hyperparameters = augmentation_hyperparameters()
    fields = [
        (item.flag, type(item.default), field(default=item.default, metadata={"help": item.help}))
        for item in hyperparameters.values()
    ]
    arguments = dataclasses.make_dataclass(
        "AugmentationArguments", fields, namespace={"augmentation_flags": tuple(hyperparameters)}
    )
    arguments.__module__ = __name__
    return arguments


def _with_registered_augmentations(parser: HfArgumentParser) -> HfArgumentParser:
    """``parser``, or one whose `augmentation_arguments` are those of the augmentations registered now."""
    kinds = list(parser.dataclass_types)
    current = tuple(augmentation_hyperparameters())
    stale = [index for index, kind in enumerate(kinds) if getattr(kind, "augmentation_flags", current) != current]
    if not stale:
        return parser
    for index in stale:
        kinds[index] = augmentation_arguments()
    return HfArgumentParser(kinds)


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


@dataclass
class AdapterArguments:
    """A LoRA adapter (peft) on the encoder(s) instead of training every weight, for every training script: the
    adapter is saved in ``output_dir`` (it loads with peft onto the base model it records) and merged into a whole
    checkpoint in ``<output_dir>-merged``."""

    lora_r: int = field(
        default=0,
        metadata={
            "help": "Train a LoRA adapter of this rank (at most the smallest dimension of the layers it adapts) on "
            "the pretrained encoder(s) of --model_name_or_path, whose own weights stay frozen (0: train every "
            "weight). The adapter goes to output_dir, the merged model to <output_dir>-merged."
        },
    )
    lora_alpha: int | None = field(default=None, metadata={"help": "LoRA alpha, > 0 (default: 2 * lora_r)."})
    lora_dropout: float = field(default=0.0, metadata={"help": "Dropout on the LoRA path, in [0, 1)."})
    lora_target_modules: str | None = field(
        default=None,
        metadata={
            "help": "Comma-separated module names to adapt (default: peft's for the encoder, e.g. query,value)."
        },
    )
    lora_modules_to_save: str | None = field(
        default=None,
        metadata={
            "help": "Comma-separated modules trained in full and saved beside the adapter, e.g. projection (a "
            "projection kept at inference always is)."
        },
    )
    lora_base_dtype: str = field(
        default="float32",
        metadata={
            "help": "The dtype the frozen base weights load in under --lora_r: bfloat16 (or float16) halves their "
            "memory, as LLM embedders are tuned, and needs --bf16 (--fp16); the adapter and every trained weight stay "
            "float32 masters. The merged model is saved in this dtype.",
            "choices": BASE_DTYPES,
        },
    )

    def base_dtype(self, training_args: TrainingArguments):
        """The dtype the model's weights load in: ``--lora_base_dtype`` under ``--lora_r``, else float32 (every
        weight is trained); a half-precision base without the matching mixed precision, or without an adapter, is
        refused."""
        import torch

        if self.lora_base_dtype == "float32":
            return torch.float32
        if not self.lora_r:
            raise UsageError(
                f"--lora_base_dtype {self.lora_base_dtype} keeps the frozen base weights of a LoRA run in half "
                "precision: give --lora_r too (a full fine-tune keeps float32 master weights; use --bf16 for "
                "mixed precision)."
            )
        precision = {"bfloat16": "bf16", "float16": "fp16"}[self.lora_base_dtype]
        if not getattr(training_args, precision):
            raise UsageError(
                f"--lora_base_dtype {self.lora_base_dtype} computes the frozen base in {self.lora_base_dtype}: give "
                f"--{precision} true, so that the float32 adapter and heads compute in it too."
            )
        return getattr(torch, self.lora_base_dtype)

    def lora_options(self) -> dict | None:
        """`hub.adapters.lora_config`'s keyword arguments, or None without --lora_r."""
        if not self.lora_r:
            return None
        if self.lora_r < 0:
            raise UsageError(f"--lora_r must be a rank >= 1 (or 0 for no adapter), got {self.lora_r}.")

        def names(value: str | None) -> list[str] | None:
            return [name.strip() for name in value.split(",") if name.strip()] if value else None

        return {
            "r": self.lora_r,
            "alpha": self.lora_alpha,
            "dropout": self.lora_dropout,
            "target_modules": names(self.lora_target_modules),
            "modules_to_save": names(self.lora_modules_to_save),
        }


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


Defaults = Mapping[str, Any] | Callable[[Mapping[str, Any]], Mapping[str, Any]]


def parse_arguments(
    parser: HfArgumentParser, argv: list[str] | None = None, defaults: Defaults | None = None
) -> tuple:
    """The parser's dataclasses from ``argv`` (default: the command line): flags, or a ``.json`` file of the same
    keys, optionally followed by flags that override it (``run_clear.py settings.json --seed 1``).

    ``defaults`` (a recipe's ``DEFAULTS``: its paper settings, `contrastive_hf.recipes`) replace the dataclasses'
    defaults under what is given, and ``--help`` shows them. Where they depend on what is given (SimCSE's follow its
    ``--mode``), ``defaults`` is a function of the settings given, ``{name: value}`` of the flags and the settings
    file, returning them.

    A mistake ends the script as argparse does, with a short usage line, what was wrong and exit status 2: an unknown
    flag or key (with the closest known names: "did you mean --augmentations?"), a JSON file that is missing or not
    an object of settings, a setting it lacks or gives outside its choices, a local file or folder that does not
    exist (the fields a dataclass lists in its ``local_paths``, and those of its ``hub_ids_or_paths`` that can only be
    local paths).
    """
    argv = sys.argv[1:] if argv is None else argv
    parser = _with_registered_augmentations(parser)
    for action in parser._actions:
        if action.dest in REGISTRY_OPTIONS:  # what is registered now, also after the dataclasses were defined
            action.help = REGISTRY_OPTIONS[action.dest]()
    announce_first_deepspeed_build(argv)  # it happens while the training arguments are built, below
    # argparse prints the usage with each error: one line, not the hundred flags of TrainingArguments
    parser.usage = "%(prog)s --flag value ... | %(prog)s SETTINGS.json [--flag value ...]  (--help lists the flags)"
    json_file = argv[0] if argv and argv[0].endswith(".json") else None
    flags = argv[1:] if json_file else argv
    known = {item.name for kind in parser.dataclass_types for item in dataclasses.fields(kind) if item.init}
    try:
        given = read_json_settings(json_file) if json_file else {}
        unknown = [key for key in given if key not in known]
        if unknown:
            raise UsageError(
                f"{json_file}: unknown key(s) {_with_suggestions(unknown, known, repr)}; the keys are the flags' "
                "names without --."
            )
        if callable(defaults):
            defaults = defaults({**given, **_given_flags(parser, flags)})
        not_arguments = sorted(set(defaults or {}) - known)
        if not_arguments:  # a recipe's mistake, not the user's: a traceback
            raise ValueError(f"Defaults for {not_arguments}, which are not arguments of this script.")
        settings = {**(defaults or {}), **given}
        if json_file:
            _check_settings_file(parser, json_file, given, settings if not flags else None)
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
        for group in parsed:
            if isinstance(group, TrainingArguments):
                check_output_dir(group.output_dir)
    except UsageError as error:
        parser.error(str(error))
    return tuple(parsed)


def _given_flags(parser: HfArgumentParser, flags: list[str]) -> dict[str, Any]:
    """What ``flags`` set, read as the parser reads them (types, choices), without any default: what a recipe's
    defaults may follow from. Flags it does not know are left for the full parse to report; so is ``--help``."""
    if any(flag in ("-h", "--help") for flag in flags):
        return {}
    saved = [(action, action.default, action.required) for action in parser._actions]
    try:
        for action, _, _ in saved:
            action.default, action.required = argparse.SUPPRESS, False  # absent flags stay absent
        given, _ = parser.parse_known_args(flags)
    finally:
        for action, default, required in saved:
            action.default, action.required = default, required
    return vars(given)


def _check_settings_file(
    parser: HfArgumentParser, json_file: str, given: Mapping[str, Any], settings: Mapping[str, Any] | None
) -> None:
    """A `UsageError` for a setting of ``json_file`` outside its choices and, where the file is all there is (no flag
    follows it: argparse checks flags only), for a required setting that the ``settings`` (the file's and the
    recipe's defaults) lack."""
    for action in parser._actions:
        choices = ", ".join(map(str, action.choices or ()))
        if action.dest in given and action.choices is not None and given[action.dest] not in action.choices:
            raise UsageError(f'{json_file}: "{action.dest}" must be one of {choices}, got {given[action.dest]!r}.')
        if settings is not None and action.required and action.dest not in settings:
            among = f": one of {choices}" if choices else ""
            raise UsageError(f'{json_file} must set "{action.dest}" (--{action.dest}){among}.')


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


def check_output_dir(output_dir: str) -> None:
    """A `UsageError` naming ``--output_dir`` when the run could not write there, found before anything is loaded or
    trained: a file, a path under a file, or a folder (or the nearest existing folder above it) where no file can be
    created (a read-only file system, no permission). Nothing is left behind."""
    existing = os.path.abspath(output_dir)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        where = "is a file" if existing == os.path.abspath(output_dir) else f"lies under {existing}, a file"
        raise UsageError(f"--output_dir {output_dir} {where}, not a folder: give a folder for the run's files.")
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as error:
        raise UsageError(
            f"--output_dir {output_dir}: cannot write in {existing} ({error.strerror}): give a folder where the run "
            "can write its checkpoints and model."
        ) from None


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
