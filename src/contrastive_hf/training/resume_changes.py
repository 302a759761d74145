"""What a resumed run changes from the run that saved its checkpoint, said before training starts.

* another data layout (`refuse_changed_data_layout`): the Trainer counts where a run is in steps, so another number
  of processes, batch size, gradient accumulation, streaming or not (or, streaming, dataloader workers) would skip or
  repeat examples; such a resume is refused before training, naming the old and new values. Each checkpoint records
  its layout (`DataLayout`, a stateful callback of the Trainer's ``trainer_state.json``).
* other settings (`changed_settings`): a model or loss setting (temperature, pooler, loss weights...) or a seed that
  differs from the checkpoint's is warned about, with the old and the new value.

A checkpoint's ``training_args.bin`` is read without importing or running anything its pickle names. Whether the
checkpoint is whole, and which one a run resumes, is `checkpoints`.
"""

from __future__ import annotations

import glob
import json
import logging
import os
import pickle
import types

from transformers import TrainerCallback
from transformers.trainer import TRAINER_STATE_NAME, TRAINING_ARGS_NAME
from transformers.trainer_callback import ExportableState
from transformers.utils import CONFIG_NAME

from ..models.checkpoint_files import EmbeddingCheckpointMixin, read_json

__all__ = [
    "DataLayout",
    "DataLayoutChangedError",
    "changed_data_layout",
    "refuse_changed_data_layout",
    "RESUME_ARGUMENTS",
    "changed_settings",
    "warn_of_changed_settings",
]

logger = logging.getLogger(__name__)


class DataLayoutChangedError(ValueError):
    """A run would resume from a checkpoint with another data layout (`refuse_changed_data_layout`)."""


class DataLayout(TrainerCallback, ExportableState):
    """How a run cuts its training data into steps: processes, per-device batch size, gradient accumulation, whether
    it streams, and (streaming: each worker reads its own part of the stream) dataloader workers. As an
    `ExportableState` callback of the Trainer, it is written into every checkpoint's ``trainer_state.json``
    (``stateful_callbacks``), which `refuse_changed_data_layout` reads on resume."""

    def __init__(self, **layout):
        self.layout = layout

    @classmethod
    def of(cls, args, train_dataset) -> DataLayout:
        """The layout of a run with training arguments ``args`` on ``train_dataset``."""
        import torch

        return cls(
            world_size=args.world_size,
            per_device_train_batch_size=args.per_device_train_batch_size,
            gradient_accumulation_steps=args.gradient_accumulation_steps,
            streaming=isinstance(train_dataset, torch.utils.data.IterableDataset),
            dataloader_num_workers=args.dataloader_num_workers,
        )

    def state(self) -> dict:
        return {"args": dict(self.layout), "attributes": {}}

    def on_train_begin(self, args, state, control, **kwargs):
        # a state resumed from a checkpoint written without this record has no entry, which the Trainer's save needs
        state.stateful_callbacks.setdefault(type(self).__name__, self.state())


# The data layout, each value as the flag that sets it, and what to give for an old value.
_LAYOUT_FLAGS = {
    "world_size": ("processes (world size)", "accelerate launch --num_processes {old}"),
    "per_device_train_batch_size": ("--per_device_train_batch_size", "--per_device_train_batch_size {old}"),
    "gradient_accumulation_steps": ("--gradient_accumulation_steps", "--gradient_accumulation_steps {old}"),
    "streaming": ("--streaming", "--streaming {old}"),
    "dataloader_num_workers": (
        "--dataloader_num_workers (each worker reads its own part of the stream)",
        "--dataloader_num_workers {old}",
    ),
}


def changed_data_layout(checkpoint: str, layout: dict) -> list[tuple[str, object, object]]:
    """``(name, old, new)`` for each value of the `DataLayout` ``layout`` that differs from the one ``checkpoint``
    was trained with: its record in ``trainer_state.json``, or for a checkpoint written before the record, its
    ``training_args.bin`` and the number of its ``rng_state`` files (one per process). Dataloader workers count only
    between two streamed runs; a value the checkpoint does not tell is not compared."""
    state = read_json(checkpoint, TRAINER_STATE_NAME) or {}
    saved = (state.get("stateful_callbacks") or {}).get(DataLayout.__name__)
    if isinstance(saved, list):
        saved = saved[-1] if saved else None
    if isinstance(saved, dict):
        saved = saved.get("args", {})
    else:  # an older checkpoint: what its other files tell
        arguments = _read_training_arguments(os.path.join(checkpoint, TRAINING_ARGS_NAME))
        saved = {name: arguments[name] for name in _LAYOUT_FLAGS if name in arguments}
        rng_files = glob.glob(os.path.join(glob.escape(checkpoint), "rng_state*.pth"))
        if rng_files:
            saved["world_size"] = sum(os.path.basename(path) != "rng_state.pth" for path in rng_files) or 1
    streamed = saved.get("streaming", layout.get("streaming")) and layout.get("streaming")
    changes = []
    for name in _LAYOUT_FLAGS:
        if name not in saved or name not in layout:
            continue
        old, new = saved[name], layout[name]
        if name == "dataloader_num_workers":  # no worker and one are one reader per process
            if not streamed or max(1, old or 0) == max(1, new or 0):
                continue
        if old != new:
            changes.append((name, old, new))
    return changes


def refuse_changed_data_layout(checkpoint: str | None, layout: dict) -> None:
    """Raise `DataLayoutChangedError` before a resume from ``checkpoint`` with another data layout than it was trained
    with (`changed_data_layout`), naming the old and new values and what to do.

    The Trainer resumes at the checkpoint's step and skips that many batches of the new layout into the epoch (or the
    stream), and counts epochs in steps of the new layout: with another number of processes, batch size or gradient
    accumulation, the examples skipped are not those trained (some never train, others twice), and a stream read by
    another number of readers is cut into other parts. Placing the resume exactly would mean counting examples
    instead of steps throughout the Trainer's loop, its schedule and its epoch count: refusing is what is honest."""
    if not checkpoint or not os.path.isdir(checkpoint):
        return
    changes = changed_data_layout(checkpoint, layout)
    if not changes:
        return
    state = read_json(checkpoint, TRAINER_STATE_NAME) or {}
    step = state.get("global_step")
    changed = ", ".join(f"{_LAYOUT_FLAGS[name][0]} {old!r} -> {new!r}" for name, old, new in changes)
    restore = ", ".join(_LAYOUT_FLAGS[name][1].format(old=str(old).lower()) for name, old, _ in changes)
    at = f"at step {step}" if step is not None else "in steps"
    raise DataLayoutChangedError(
        f"Cannot resume from {checkpoint} with another data layout than it was trained with: {changed}. The "
        f"checkpoint counts where training is {at} of its own batches; resumed with other batches, some examples "
        f"of the epoch (or stream) would never be trained on and others twice. Resume with its settings ({restore}), "
        f"or start a new run from its weights (--model_name_or_path {checkpoint}, without --resume_from_checkpoint)."
    )


# What a resumed run may change without changing what is learned: how views are encoded (packed, sorted, padded),
# and what a saved configuration records about the saving code (keys starting with _ are transformers' own too).
_HOW_NOT_WHAT = (
    "sub_batch_size",
    "sub_batch_tokens",
    "architectures",
    "contrastive_hf_version",
    "transformers_version",
    "dtype",
    "torch_dtype",
)
# The training arguments that change what is learned (the data order and draws, the negatives, a multitask run's
# schedule and PCGrad), beside the model's settings; a changed batch size or number of processes is refused
# (`refuse_changed_data_layout`).
RESUME_ARGUMENTS = (
    "seed",
    "data_seed",
    "prebatch_size",
    "gather_negatives_across_devices",
    "task_schedule",  # a multitask run's
    "pcgrad",
)


def changed_settings(checkpoint: str, model, args) -> list[str]:
    """What differs between the run resuming from ``checkpoint`` and the run that saved it, as ``"name old -> new"``:
    ``model``'s settings against the checkpoint's configuration file (``contrastive_config.json`` or
    ``dual_encoder_config.json``: temperature, pooler, projection, loss weights, prompts...; ``config.json`` for
    another transformers model, e.g. a multitask model's task weights), and `RESUME_ARGUMENTS` of ``args`` against
    its ``training_args.bin``."""
    if isinstance(model, EmbeddingCheckpointMixin):
        saved, current = read_json(checkpoint, model.checkpoint_config_name), model.checkpoint_config()
    elif hasattr(getattr(model, "config", None), "to_dict"):
        saved, current = read_json(checkpoint, CONFIG_NAME), model.config.to_dict()
    else:
        saved, current = None, {}
    saved = _flat(saved or {})
    current = _flat(json.loads(json.dumps(current, default=str)))  # as the file holds it: lists, not tuples
    pairs = [(name, saved[name], value) for name, value in current.items() if name in saved]
    saved_args = _read_training_arguments(os.path.join(checkpoint, TRAINING_ARGS_NAME))
    pairs += [
        (name, saved_args[name], getattr(args, name))
        for name in RESUME_ARGUMENTS
        if name in saved_args and hasattr(args, name)
    ]
    return [
        f"{name} {old!r} -> {new!r}"
        for name, old, new in pairs
        if old != new and not any(part.startswith("_") or part in _HOW_NOT_WHAT for part in name.split("."))
    ]


def warn_of_changed_settings(checkpoint: str | None, model, args) -> None:
    """Warn (on the main process) naming each `changed_settings` of a run resuming from ``checkpoint``."""
    changes = changed_settings(checkpoint, model, args) if checkpoint and os.path.isdir(checkpoint) else []
    if changes and args.should_log:
        logger.warning(
            "Resuming from %s with settings other than the ones it was trained with: %s. The run goes on with the "
            "new values; give the old ones for an exact resume.",
            checkpoint,
            ", ".join(changes),
        )


def _flat(settings: dict, prefix: str = "") -> dict:
    """Nested settings as ``{"a.b": value}``; a list of named dicts (a multitask model's tasks) by their names."""
    flat = {}
    for key, value in settings.items():
        if isinstance(value, list) and value and all(isinstance(item, dict) and "name" in item for item in value):
            value = {item["name"]: item for item in value}
        if isinstance(value, dict) and value:
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


class _Opaque:
    """Whatever a pickle names, never imported or run: the arguments it is built with and its state."""

    def __init__(self, *args, **kwargs):
        self.args = args

    def __setstate__(self, state):
        self.state = state


class _ShallowUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        return _Opaque


def _read_training_arguments(path: str) -> dict:
    """The fields of the `TrainingArguments` pickled in ``path`` ({} without the file), read without importing or
    running anything the pickle names: a checkpoint's pickle is not trusted code."""
    if not os.path.isfile(path):
        return {}
    shallow = types.SimpleNamespace(Unpickler=_ShallowUnpickler, load=pickle.load, __name__="shallow_pickle")
    try:
        import torch

        pickled = torch.load(path, map_location="cpu", weights_only=False, pickle_module=shallow)
    except Exception as error:  # a damaged file: the comparison is a courtesy, the resume goes on
        logger.warning("Could not read %s to compare the run's settings (%s).", path, error)
        return {}
    state = getattr(pickled, "state", None)
    return state if isinstance(state, dict) else {}
