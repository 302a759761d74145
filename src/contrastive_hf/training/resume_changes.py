"""What a resumed run changes from the run that saved its checkpoint, said before training starts.

* other rows (`refuse_changed_data_layout`): the Trainer counts where a run is in steps and resumes by skipping that
  many batches of the data it is given, so another number of processes, batch size, gradient accumulation,
  streaming or not (or, streaming, dataloader workers), other training rows (a grown corpus, another
  ``--max_train_samples``), another seed (another order), or other views (``--augmentations``, ``--max_seq_length``)
  would skip or repeat examples, or train the rest of the epoch on other views than the saved run. Such a resume is
  refused before training, naming the old and new values and the flags to give back; with
  ``resume_with_changed_data`` it goes on, and the log says how many rows the epoch skips or repeats. Each
  checkpoint records its layout (`DataLayout`, a stateful callback of the Trainer's ``trainer_state.json``); one
  written before a value was recorded is compared on what it recorded.
* other settings (`changed_settings`): a model or loss setting (temperature, pooler, loss weights...) that differs
  from the checkpoint's is warned about, with the old and the new value.

A checkpoint's ``training_args.bin`` is read without importing or running anything its pickle names. Whether the
checkpoint is whole, and which one a run resumes, is `checkpoints`.
"""

from __future__ import annotations

import glob
import hashlib
import json
import logging
import math
import os
import pickle
import types

from transformers import TrainerCallback
from transformers.trainer import TRAINER_STATE_NAME, TRAINING_ARGS_NAME
from transformers.trainer_callback import ExportableState
from transformers.utils import CONFIG_NAME

from ..models.checkpoint_contents import read_json
from ..models.checkpoint_files import EmbeddingCheckpointMixin

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
    """What decides which rows each step of a run trains on, and how they are seen: processes, per-device batch
    size, gradient accumulation, whether it streams, and (streaming: each worker reads its own part of the stream)
    dataloader workers; the seeds (the order of the rows); a map-style training set's number of rows and a digest of
    16 of them spread over the set (its content, cheaply); the views the collator makes of them (``views``: what
    its card calls them, e.g. the augmentations; ``view_settings``: their hyper-parameters) and its
    ``max_length``. As an `ExportableState` callback of the
    Trainer, it is written into every checkpoint's ``trainer_state.json`` (``stateful_callbacks``), which
    `refuse_changed_data_layout` reads on resume."""

    def __init__(self, **layout):
        self.layout = layout

    @classmethod
    def of(cls, args, train_dataset, collator=None) -> DataLayout:
        """The layout of a run with training arguments ``args`` on ``train_dataset``, batched by ``collator``."""
        import torch

        streaming = isinstance(train_dataset, torch.utils.data.IterableDataset)
        layout = {
            "world_size": args.world_size,
            "per_device_train_batch_size": args.per_device_train_batch_size,
            "gradient_accumulation_steps": args.gradient_accumulation_steps,
            "streaming": streaming,
            "dataloader_num_workers": args.dataloader_num_workers,
            "seed": args.seed,
            "data_seed": args.data_seed,
        }
        if not streaming and train_dataset is not None and hasattr(train_dataset, "__len__"):
            layout["rows"] = len(train_dataset)
            digest = _rows_digest(train_dataset)
            if digest is not None:
                layout["rows_digest"] = digest
        describe = getattr(collator, "card_description", None)
        described = describe() if callable(describe) else {}
        if isinstance(described.get("views"), str):
            layout["views"] = described["views"]
        if described.get("view_settings"):
            layout["view_settings"] = dict(described["view_settings"])
        max_length = getattr(collator, "max_length", None)
        if isinstance(max_length, int):
            layout["max_length"] = max_length
        return cls(**layout)

    def state(self) -> dict:
        return {"args": dict(self.layout), "attributes": {}}

    def on_train_begin(self, args, state, control, **kwargs):
        # a state resumed from a checkpoint written without this record has no entry, which the Trainer's save needs
        state.stateful_callbacks.setdefault(type(self).__name__, self.state())


def _rows_digest(dataset, count: int = 16) -> str | None:
    """A digest of ``count`` rows of ``dataset`` spread evenly over it (the first and the last among them): rows
    changed, appended or cut change it, at the cost of reading ``count`` rows. None when its rows cannot be read by
    index."""
    size = len(dataset)
    if size == 0:
        return None
    digest = hashlib.sha256(str(size).encode())
    try:
        for index in sorted({round(i * (size - 1) / max(count - 1, 1)) for i in range(count)}):
            digest.update(json.dumps(dataset[index], sort_keys=True, default=_plain).encode())
    except Exception:  # rows not read by index, or not JSON-like: the row count still counts
        return None
    return digest.hexdigest()[:16]


def _plain(value):
    tolist = getattr(value, "tolist", None)
    return tolist() if callable(tolist) else str(value)


# The data layout, each value as what sets it, and what to give back for an old value.
_LAYOUT_FLAGS = {
    "world_size": ("processes (world size)", "accelerate launch --num_processes {old}"),
    "per_device_train_batch_size": ("--per_device_train_batch_size", "--per_device_train_batch_size {old}"),
    "gradient_accumulation_steps": ("--gradient_accumulation_steps", "--gradient_accumulation_steps {old}"),
    "streaming": ("--streaming", "--streaming {old}"),
    "dataloader_num_workers": (
        "--dataloader_num_workers (each worker reads its own part of the stream)",
        "--dataloader_num_workers {old}",
    ),
    "seed": ("--seed", "--seed {old}"),
    "data_seed": ("--data_seed", "--data_seed {old}"),
    "rows": ("training rows", "the same training data ({old} rows: the same files and --max_train_samples)"),
    "rows_digest": ("the training rows' content", "the same rows"),
    "views": ("views (--augmentations)", "its views ({old})"),
    "view_settings": ("the views' settings", "its views' settings ({old})"),
    "max_length": ("--max_seq_length", "--max_seq_length {old}"),
}
# What changes which rows a step trains on; the other values change only how they are seen.
_ORDER = {"world_size", "per_device_train_batch_size", "gradient_accumulation_steps", "streaming",
          "dataloader_num_workers", "seed", "data_seed", "rows", "rows_digest"}  # fmt: skip


def changed_data_layout(checkpoint: str, layout: dict) -> list[tuple[str, object, object]]:
    """``(name, old, new)`` for each value of the `DataLayout` ``layout`` that differs from the one ``checkpoint``
    was trained with (`_saved_layout`). Dataloader workers count only between two streamed runs; a value the
    checkpoint does not tell is not compared."""
    return _changes(_saved_layout(checkpoint), layout)


def _changes(saved: dict, layout: dict) -> list[tuple[str, object, object]]:
    """`changed_data_layout` between the values a checkpoint tells (``saved``) and ``layout``."""
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
    changed = {name for name, _, _ in changes}
    # other rows have another digest, other views other settings: one change, said once
    dropped = {detail for main, detail in (("rows", "rows_digest"), ("views", "view_settings")) if main in changed}
    return [change for change in changes if change[0] not in dropped]


def _said(name: str, old, new) -> str:
    """One change, in words: ``--seed 0 -> 7``; for the views' settings, each setting that changed."""
    if name == "rows_digest":
        return "other training rows (the same number, other content)"
    if isinstance(old, dict) and isinstance(new, dict):
        return ", ".join(
            f"--{flag} {old.get(flag)!r} -> {new.get(flag)!r}"
            for flag in dict.fromkeys([*old, *new])
            if old.get(flag) != new.get(flag)
        )
    return f"{_LAYOUT_FLAGS[name][0]} {old!r} -> {new!r}"


def _as_flags(old) -> str:
    """A saved value as a command line gives it back: ``true`` for True, ``--span_ratio 0.1 ...`` for settings."""
    if isinstance(old, bool):
        return str(old).lower()
    if isinstance(old, dict):
        return " ".join(f"--{flag} {value}" for flag, value in old.items())
    return old


def _saved_layout(checkpoint: str) -> dict:
    """The `DataLayout` values ``checkpoint`` tells: its record in ``trainer_state.json``; a value the record lacks
    (written before it was recorded), from its ``training_args.bin``; without a record, the number of processes
    from its ``rng_state`` files (one per process)."""
    state = read_json(checkpoint, TRAINER_STATE_NAME) or {}
    recorded = (state.get("stateful_callbacks") or {}).get(DataLayout.__name__)
    if isinstance(recorded, list):
        recorded = recorded[-1] if recorded else None
    arguments = _read_training_arguments(os.path.join(checkpoint, TRAINING_ARGS_NAME))
    saved = {name: arguments[name] for name in _LAYOUT_FLAGS if name in arguments}
    if isinstance(recorded, dict):
        saved.update(recorded.get("args", {}))
    else:
        rng_files = glob.glob(os.path.join(glob.escape(checkpoint), "rng_state*.pth"))
        if rng_files:
            saved["world_size"] = sum(os.path.basename(path) != "rng_state.pth" for path in rng_files) or 1
    return saved


def refuse_changed_data_layout(
    checkpoint: str | None, layout: DataLayout, *, resume_anyway: bool = False, log: bool = True
) -> None:
    """Raise `DataLayoutChangedError` before a resume from ``checkpoint`` onto other rows or views than it was
    trained with (`changed_data_layout`), naming the old and new values and the flags to give back. With
    ``resume_anyway`` (``--resume_with_changed_data``), warn instead (when ``log``), saying how many rows the epoch
    skips or repeats, and record the change in ``layout`` (``changed_at_resume``, which the model card lists).

    The Trainer resumes at the checkpoint's step and skips that many batches of the new data into the epoch (or the
    stream), and counts epochs in steps of the new layout: with other rows, another order or another batch size, the
    rows skipped are not those trained (some never train, others twice), and a stream read by another number of
    readers is cut into other parts. Placing the resume exactly would mean counting examples instead of steps
    throughout the Trainer's loop, its schedule and its epoch count: refusing is what is honest."""
    if not checkpoint or not os.path.isdir(checkpoint):
        return
    saved = _saved_layout(checkpoint)
    layout.layout["changed_at_resume"] = list(saved.get("changed_at_resume", []))  # the earlier resumes'
    changes = _changes(saved, layout.layout)
    if not changes:
        return
    state = read_json(checkpoint, TRAINER_STATE_NAME) or {}
    step = state.get("global_step")
    changed = ", ".join(_said(name, old, new) for name, old, new in changes)
    restore = ", ".join(_LAYOUT_FLAGS[name][1].format(old=_as_flags(old)) for name, old, _ in changes)
    at = f"at step {step}" if step is not None else "in steps"
    if resume_anyway:
        layout.layout["changed_at_resume"].append(f"at step {step}: {changed}")
        if log:
            logger.warning(
                "Resuming from %s with other data than it was trained with (--resume_with_changed_data): %s. %s",
                checkpoint,
                changed,
                _what_the_epoch_skips(state, saved, layout.layout, changes),
            )
        return
    raise DataLayoutChangedError(
        f"Cannot resume from {checkpoint} with other data than it was trained with: {changed}. The checkpoint counts "
        f"where training is {at} of its own batches; resumed on other batches, some examples of the epoch (or "
        f"stream) would never be trained on and others twice, or seen with other views. Resume with its settings "
        f"({restore}), or start a new run from its weights (--model_name_or_path {checkpoint}, without "
        "--resume_from_checkpoint), or resume anyway with --resume_with_changed_data true (the log says what the "
        "epoch skips or repeats)."
    )


def _what_the_epoch_skips(state: dict, saved: dict, layout: dict, changes) -> str:
    """What a resume onto changed data does to the epoch it resumes in: the rows the saved run had trained in it,
    the rows this run skips, and how many of its rows go untrained or train twice (expected, for random orders)."""
    if not {name for name, _, _ in changes} & _ORDER:
        return (
            "The rows and their order are the same: none is skipped or repeated; the rest of the epoch is seen as "
            "the new settings make it."
        )
    step = state.get("global_step") or 0
    new_rows = layout.get("rows")
    if new_rows is None or saved.get("rows") is None:
        return (
            f"The run skips {step} step(s) of batches of the new data (or stream) into its epoch: the rows skipped "
            "are not those the saved run trained, so some go untrained and others train twice."
        )
    trained, epoch = _rows_into_epoch(step, saved, saved["rows"])
    skipped, _ = _rows_into_epoch(step, layout, new_rows)
    untrained = skipped * (1 - min(trained, new_rows) / new_rows)
    twice = min(trained, new_rows) * (1 - skipped / new_rows)
    return (
        f"At step {step} the saved run had trained {trained} of the {saved['rows']} rows of its epoch {epoch + 1}; "
        f"this run skips the first {skipped} of its {new_rows} rows in its own order and trains the rest. In another "
        f"order, up to {skipped} rows go untrained this epoch and up to {min(trained, new_rows - skipped)} train "
        f"twice (about {untrained:.0f} and {twice:.0f} for random orders)."
    )


def _rows_into_epoch(step: int, layout: dict, rows: int) -> tuple[int, int]:
    """How many rows a run of ``layout`` on ``rows`` rows has taken into its current epoch at optimizer step
    ``step`` (as the Trainer counts: whole batches per process, then optimizer steps), and that epoch's index."""
    per_step = layout.get("per_device_train_batch_size", 1) * layout.get("world_size", 1)
    accumulation = layout.get("gradient_accumulation_steps", 1)
    steps_per_epoch = max(math.ceil(rows / per_step) // accumulation, 1)
    return min(rows, (step % steps_per_epoch) * per_step * accumulation), step // steps_per_epoch


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
# The training arguments that change what is learned (the negatives, a multitask run's schedule and PCGrad), beside
# the model's settings; another seed, batch size or number of processes is refused (`refuse_changed_data_layout`).
RESUME_ARGUMENTS = (
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
