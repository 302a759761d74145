"""The options of ``contrastive-hf evaluate`` that set GLUE's fine-tuning: one flag for each field of
`evaluation.glue.GlueArguments` that a user tunes (the dataclass holds the protocol's values, RoBERTa's recipe, and
their help; this module names them on the command line and reads them back)."""

from __future__ import annotations

import argparse

from ..evaluation.glue import GlueArguments

__all__ = ["GLUE_FLAGS", "add_glue_options", "glue_arguments"]

# field of GlueArguments -> its flag; the other fields follow evaluate's own options (glue_arguments) or stay fixed
GLUE_FLAGS = {
    "head": "--glue-head",
    "learning_rates": "--learning-rates",
    "train_batch_sizes": "--train-batch-sizes",
    "seeds": "--seeds",
    "num_train_epochs": "--num-train-epochs",
    "warmup_ratio": "--warmup-ratio",
    "weight_decay": "--weight-decay",
    "adam_beta1": "--adam-beta1",
    "adam_beta2": "--adam-beta2",
    "adam_epsilon": "--adam-epsilon",
    "max_grad_norm": "--max-grad-norm",
    "max_train_samples": "--max-train-samples",
    "max_eval_samples": "--max-eval-samples",
    "hub_dataset": "--glue-dataset",
}
# other spellings users know: run_glue.py's
ALIASES = {"max_train_samples": ("--max_train_samples",)}


def _options() -> list:
    """The fields of `GlueArguments` that have a flag, in the dataclass's order."""
    from dataclasses import fields

    return [option for option in fields(GlueArguments) if option.name in GLUE_FLAGS]


def add_glue_options(parser: argparse.ArgumentParser) -> None:
    """A group of ``parser``'s options, one per `GLUE_FLAGS` field (their defaults stay in the dataclass: an option
    not given is None, and `glue_arguments` leaves the field at its default)."""
    group = parser.add_argument_group(
        "GLUE fine-tuning (--tasks glue)",
        "Each GLUE task fine-tunes the model with the transformers Trainer for each learning rate x batch size x seed "
        "and reports the median over seeds of the best configuration (RoBERTa's protocol). --max-length, "
        "--batch-size (dev scoring), --pooler-type and --device (cpu: no GPU) apply too.",
    )
    defaults = GlueArguments()
    for option in _options():
        default = getattr(defaults, option.name)
        shown = (
            " ".join(f"{value:g}" if isinstance(value, float) else str(value) for value in default)
            if isinstance(default, tuple)
            else default
        )
        settings = {"default": None, "help": f"{option.metadata['help']} Default: {shown}."}
        if isinstance(default, tuple):
            settings.update(nargs="+", type=type(default[0]), metavar=option.name.upper()[:-1])
        elif "choices" in option.metadata:
            settings["choices"] = option.metadata["choices"]
        else:
            settings["type"] = option.metadata.get("type") or type(default)
        group.add_argument(GLUE_FLAGS[option.name], *ALIASES.get(option.name, ()), dest=option.name, **settings)


def glue_arguments(args: argparse.Namespace) -> GlueArguments:
    """`GlueArguments` from the options given (the others keep the dataclass's defaults, RoBERTa's recipe), and
    evaluate's own ``--pooler-type``, ``--max-length``, ``--batch-size`` (dev scoring) and ``--device``."""
    given = {name: getattr(args, name) for name in GLUE_FLAGS if getattr(args, name) is not None}
    device = args.device or ""
    return GlueArguments(
        **given,
        pooler_type=args.pooler_type,
        max_length=args.max_length,
        eval_batch_size=args.batch_size,
        use_cpu=device.startswith("cpu"),
    )
