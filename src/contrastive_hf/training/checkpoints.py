"""Checkpoints that are whole, or say loudly that they are not.

transformers' Trainer writes a checkpoint file by file straight into ``checkpoint-N`` (the model, then the optimizer,
scheduler and RNG states, then ``trainer_state.json``; under DeepSpeed a ``global_stepN/`` folder from every
process), and `ContrastiveTrainer` adds its own files (the pre-batch queue). A process killed while saving, or a full
disk, leaves a folder that looks like a checkpoint and cannot be resumed. Here:

* saving (`saving_checkpoint`): `INCOMPLETE_MARKER` is written into the folder before anything else and deleted once
  every process has written its part, so a save that did not finish leaves it behind; a full disk is reported as
  such, with the path and what to do.
* checking (`CheckpointLayout.problems`): a checkpoint is complete when it has no marker, holds every file a resume
  reads, and none of them is cut short (safetensors headers, torch zip archives, JSON).
* resuming (`resolve_resume_checkpoint`): ``resume_from_checkpoint=True`` takes the newest complete checkpoint and
  warns about each newer incomplete one it skips; a folder given by name must be complete, or the error lists what
  is wrong with it.
* resuming with other settings (`changed_settings`): a model or loss setting (temperature, pooler, loss weights...)
  or a seed that differs from the checkpoint's is warned about, with the old and the new value.
* resuming with another data layout (`refuse_changed_data_layout`): the Trainer counts where a run is in steps, so
  another number of processes, batch size, gradient accumulation, streaming or not (or, streaming, dataloader
  workers) would skip or repeat examples; such a resume is refused before training, naming the old and new values.
  Each checkpoint records its layout (`DataLayout`, a stateful callback of the Trainer's ``trainer_state.json``).
* rotating (`rotate_checkpoints`): ``save_total_limit`` deletes incomplete checkpoints first, and never the one just
  saved or the best one.
"""

from __future__ import annotations

import errno
import glob
import json
import logging
import os
import pickle
import shutil
import types
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from transformers import TrainerCallback
from transformers.trainer import (
    OPTIMIZER_NAME,
    OPTIMIZER_NAME_BIN,
    SCHEDULER_NAME,
    TRAINER_STATE_NAME,
    TRAINING_ARGS_NAME,
)
from transformers.trainer_callback import ExportableState
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, sort_checkpoints
from transformers.utils import (
    ADAPTER_SAFE_WEIGHTS_NAME,
    ADAPTER_WEIGHTS_NAME,
    CONFIG_NAME,
    SAFE_WEIGHTS_INDEX_NAME,
    SAFE_WEIGHTS_NAME,
    WEIGHTS_INDEX_NAME,
    WEIGHTS_NAME,
)

# damaged_files and naming_damaged_files live with the checkpoint's file layout (loading a model names damaged files
# too); still importable from here, where they were first.
from ..models.checkpoint_files import (
    MODEL_JSON_FILES,
    EmbeddingCheckpointMixin,
    damaged_files,
    naming_damaged_files,
    read_json,
)

__all__ = [
    "INCOMPLETE_MARKER",
    "CheckpointLayout",
    "CheckpointSaveError",
    "IncompleteCheckpointError",
    "DataLayout",
    "DataLayoutChangedError",
    "changed_data_layout",
    "refuse_changed_data_layout",
    "changed_settings",
    "warn_of_changed_settings",
    "damaged_files",
    "naming_damaged_files",
    "resolve_resume_checkpoint",
    "rotate_checkpoints",
    "saving_checkpoint",
]

logger = logging.getLogger(__name__)

INCOMPLETE_MARKER = "incomplete_checkpoint.txt"
_MARKER_TEXT = (
    "contrastive_hf writes this file before the checkpoint's other files and deletes it once all of them are\n"
    "written. If it is still here, the save was interrupted (the process was killed, or the disk filled up): this\n"
    "checkpoint is incomplete and cannot be resumed from. Delete the folder, or resume from an earlier checkpoint.\n"
)
_WEIGHT_FILES = (SAFE_WEIGHTS_NAME, SAFE_WEIGHTS_INDEX_NAME, WEIGHTS_NAME, WEIGHTS_INDEX_NAME)
_ADAPTER_FILES = (ADAPTER_SAFE_WEIGHTS_NAME, ADAPTER_WEIGHTS_NAME)
_JSON_READ_ON_RESUME = (TRAINER_STATE_NAME, *MODEL_JSON_FILES)
_DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
# torch.save's zip writer reports a failed write as a RuntimeError without an errno ("unexpected pos 4206208 vs
# 4206096", "file write failed"); with less than this left on the disk afterwards, the disk was full.
_TORCH_WRITE_FAILURES = ("unexpected pos", "file write failed")
_NEARLY_FULL_BYTES = 100 * 2**20


class IncompleteCheckpointError(ValueError):
    """A checkpoint to resume from is incomplete: files missing or cut short, or its save did not finish."""


class CheckpointSaveError(OSError):
    """Saving a checkpoint failed because the disk is full (``errno`` is ENOSPC)."""


class DataLayoutChangedError(ValueError):
    """A run would resume from a checkpoint with another data layout (`refuse_changed_data_layout`)."""


@dataclass(frozen=True)
class CheckpointLayout:
    """What a checkpoint of a run holds, to resume it: the Trainer's files (the model's weights, or DeepSpeed's
    ``global_step*/`` folder; the optimizer and scheduler states; an RNG state; ``trainer_state.json``) and the
    trainer's own ``extra_files`` (e.g. the pre-batch queue)."""

    deepspeed: bool = False
    extra_files: tuple[str, ...] = ()
    # where the model's weights lie: the folder itself, or one sub-folder per encoder (a dual encoder's towers)
    weight_folders: tuple[str, ...] = ("",)

    def missing(self, folder: str) -> list[str]:
        """The files (or alternatives) a resume reads that ``folder`` lacks."""
        missing = [] if _exists(folder, TRAINER_STATE_NAME) else [TRAINER_STATE_NAME]
        if self.deepspeed:
            if not glob.glob(os.path.join(glob.escape(folder), "global_step*", "")):
                missing.append("global_step*/ (DeepSpeed's model and optimizer states)")
        else:
            for weight_folder in self.weight_folders:
                missing += _missing_weights(folder, weight_folder)
            if not any(_exists(folder, name) for name in (OPTIMIZER_NAME, OPTIMIZER_NAME_BIN)):
                if not _optimizer_folder(folder):
                    missing.append(OPTIMIZER_NAME)
            if not _exists(folder, SCHEDULER_NAME):
                missing.append(SCHEDULER_NAME)
        if not glob.glob(os.path.join(glob.escape(folder), "rng_state*.pth")):
            missing.append("rng_state.pth (or rng_state_<process>.pth)")
        missing += [name for name in self.extra_files if not _exists(folder, name)]
        return missing

    def problems(self, folder: str) -> list[str]:
        """Why ``folder`` cannot be resumed from, one line each; empty when it is complete."""
        if not os.path.isdir(folder):
            return ["no such folder"]
        problems = []
        if os.path.exists(os.path.join(folder, INCOMPLETE_MARKER)):
            problems.append(
                f"its save did not finish ({INCOMPLETE_MARKER} is still there: the process was killed, or failed, "
                "while saving)"
            )
        problems += [f"missing {name}" for name in self.missing(folder)]
        problems += damaged_files(folder, _JSON_READ_ON_RESUME)
        return problems


def _exists(folder: str, name: str) -> bool:
    return os.path.isfile(os.path.join(folder, name))


def _optimizer_folder(folder: str) -> bool:
    """FSDP saves the optimizer as a folder (``optimizer_0``), as transformers' own loading looks for it."""
    names = os.listdir(folder)
    return any(name.startswith("optimizer") and os.path.isdir(os.path.join(folder, name)) for name in names)


def _missing_weights(checkpoint: str, weight_folder: str) -> list[str]:
    """The model's weights in ``weight_folder`` of a checkpoint: a single file, the shards an index names, a peft
    adapter, or an FSDP model; what is missing, named from the checkpoint's root."""
    folder = os.path.join(checkpoint, weight_folder)
    names = os.listdir(folder) if os.path.isdir(folder) else []
    for index_name in (SAFE_WEIGHTS_INDEX_NAME, WEIGHTS_INDEX_NAME):
        if index_name in names:
            try:
                with open(os.path.join(folder, index_name), encoding="utf-8") as handle:
                    shards = sorted(set(json.load(handle)["weight_map"].values()))
            except (ValueError, KeyError, AttributeError):
                return []  # reported by damaged_files
            return [os.path.join(weight_folder, shard) for shard in shards if shard not in names]
    if any(name in names for name in (*_WEIGHT_FILES, *_ADAPTER_FILES)):
        return []
    if any(name.startswith("pytorch_model_fsdp") for name in names):
        return []
    return [
        f"the model's weights ({os.path.join(weight_folder, SAFE_WEIGHTS_NAME)}, or an index and its shards, or "
        f"{os.path.join(weight_folder, WEIGHTS_NAME)})"
    ]


def checkpoint_folders(output_dir: str) -> list[str]:
    """The ``checkpoint-N`` folders of ``output_dir``, by step, oldest first."""
    return sort_checkpoints(output_dir, PREFIX_CHECKPOINT_DIR) if os.path.isdir(output_dir) else []


def latest_complete_checkpoint(output_dir: str, layout: CheckpointLayout) -> tuple[str | None, list[str]]:
    """The newest complete checkpoint of ``output_dir`` (None if none is), and the newer incomplete ones, each with
    what is wrong with it."""
    skipped = []
    for folder in reversed(checkpoint_folders(output_dir)):
        problems = layout.problems(folder)
        if not problems:
            return folder, skipped
        skipped.append(f"{folder} ({'; '.join(problems)})")
    return None, skipped


def resolve_resume_checkpoint(
    resume_from_checkpoint: str | bool | None, output_dir: str, layout: CheckpointLayout
) -> str | None:
    """The checkpoint folder to resume from, checked complete.

    ``True`` (or the strings ``"true"`` and ``"latest"``, as a script's ``--resume_from_checkpoint`` gives them,
    when no such folder exists) is the newest complete checkpoint of ``output_dir``: each newer incomplete one is
    skipped with a warning naming it and the one used. A folder is checked and an `IncompleteCheckpointError` lists
    what is missing or cut short. None and False: no resume.
    """
    if resume_from_checkpoint is None or resume_from_checkpoint is False:
        return None
    wants_latest = resume_from_checkpoint is True or (
        str(resume_from_checkpoint).lower() in ("true", "latest") and not os.path.isdir(resume_from_checkpoint)
    )
    if wants_latest:
        latest, skipped = latest_complete_checkpoint(output_dir, layout)
        if latest is None and not layout.deepspeed:
            for newest in checkpoint_folders(output_dir)[-1:]:
                _refuse_deepspeed_checkpoint(newest)
        if latest is None:
            found = f" Incomplete: {'; '.join(skipped)}." if skipped else ""
            raise IncompleteCheckpointError(
                f"resume_from_checkpoint=True found no complete checkpoint in {output_dir}.{found} Train without "
                "resume_from_checkpoint, or give the checkpoint folder to resume from."
            )
        for folder in skipped:
            logger.warning("Skipping the incomplete checkpoint %s; resuming from %s.", folder, latest)
        return latest
    folder = os.fspath(resume_from_checkpoint)
    problems = layout.problems(folder)
    if not problems:
        return folder
    if not layout.deepspeed:
        _refuse_deepspeed_checkpoint(folder)
    parent = os.path.dirname(os.path.normpath(folder))
    latest, _ = latest_complete_checkpoint(parent, layout)
    instead = (
        f"Resume from {latest}, the latest complete checkpoint there (or resume_from_checkpoint=True)."
        if latest is not None
        else f"{parent} holds no complete checkpoint: train without resume_from_checkpoint."
    )
    if f"missing {OPTIMIZER_NAME}" in problems and not os.path.exists(os.path.join(folder, INCOMPLETE_MARKER)):
        instead += (
            " A checkpoint saved with --save_only_model holds no optimizer state and cannot be resumed: start a run "
            "from its weights with --model_name_or_path instead."
        )
    raise IncompleteCheckpointError(
        f"Cannot resume from {folder}: the checkpoint is incomplete: {'; '.join(problems)}. {instead}"
    )


def _refuse_deepspeed_checkpoint(folder: str) -> None:
    """A checkpoint a DeepSpeed run wrote, resumed without DeepSpeed, is whole but in DeepSpeed's format (its
    optimizer state in ``global_stepN/``, no ``optimizer.pt``): an error saying so, rather than "incomplete"."""
    states = sorted(glob.glob(os.path.join(glob.escape(folder), "global_step*", "")))
    if not states:
        return
    state = os.path.basename(os.path.dirname(states[-1]))
    raise IncompleteCheckpointError(
        f"Cannot resume from {folder} without DeepSpeed: it was written by a DeepSpeed run, which keeps the optimizer "
        f"state in {state}/ (DeepSpeed's format), not in {OPTIMIZER_NAME}. Resume it under DeepSpeed with the config "
        "it was trained with (e.g. accelerate launch --config_file ds_configs/accelerate_zero3.yaml ...), or start a "
        f"new run from its weights with --model_name_or_path {folder}."
    )


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


@contextmanager
def saving_checkpoint(
    folder: str, layout: CheckpointLayout, *, is_saver: bool, wait_for_everyone: Callable[[], None]
) -> Iterator[None]:
    """Around writing the checkpoint ``folder`` (by every process; ``is_saver`` for the one, or one per node, that
    writes the shared files): the marker is written first and deleted once every process is done, so a save that
    does not finish leaves it. A full disk raises `CheckpointSaveError` (with the path and what to do); any other
    failure gets a note naming the incomplete checkpoint and the latest complete one."""
    try:
        if is_saver:
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, INCOMPLETE_MARKER), "w", encoding="utf-8") as handle:
                handle.write(_MARKER_TEXT)
        wait_for_everyone()  # no process writes into the folder before the marker is there
        yield
        wait_for_everyone()  # nor is the marker deleted before every process has written its part
    except Exception as error:
        run_dir = os.path.dirname(os.path.normpath(folder))
        latest, _ = latest_complete_checkpoint(run_dir, layout)
        kept = (
            f"{latest} is the latest complete checkpoint (resume_from_checkpoint=True resumes from it)"
            if latest is not None
            else "there is no complete checkpoint yet"
        )
        if _disk_full(error, run_dir):
            raise CheckpointSaveError(
                errno.ENOSPC,
                f"Saving the checkpoint {folder} failed: the disk is full ({_free_space(run_dir)} left on the disk "
                f"holding {run_dir}). {folder} is incomplete (delete it to free its space); {kept}. Free some space, "
                "save elsewhere (--output_dir on a larger disk), or keep fewer checkpoints (--save_total_limit).",
            ) from error
        error.add_note(f"The checkpoint {folder} is incomplete; {kept}.")
        raise
    if is_saver:
        try:
            os.remove(os.path.join(folder, INCOMPLETE_MARKER))
        except FileNotFoundError:  # several savers sharing one filesystem (save_on_each_node)
            pass


def _error_chain(error: BaseException) -> Iterable[BaseException]:
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


def _disk_full(error: BaseException, folder: str) -> bool:
    for cause in _error_chain(error):
        if isinstance(cause, OSError) and cause.errno in _DISK_FULL_ERRNOS:
            return True
        if isinstance(cause, RuntimeError) and any(text in str(cause) for text in _TORCH_WRITE_FAILURES):
            return _free_bytes(folder) < _NEARLY_FULL_BYTES
    return False


def _free_bytes(folder: str) -> int:
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return 0


def _free_space(folder: str) -> str:
    free = _free_bytes(folder)
    return f"{free / 2**20:.1f} MiB" if free < 2**30 else f"{free / 2**30:.1f} GiB"


def rotate_checkpoints(
    output_dir: str, save_total_limit: int | None, keep: Sequence[str | None], layout: CheckpointLayout
) -> None:
    """Delete checkpoints of ``output_dir`` beyond ``save_total_limit``: incomplete ones first, then the oldest (in
    transformers' order), never those in ``keep`` (the checkpoint just saved and the best one)."""
    if save_total_limit is None or save_total_limit <= 0:
        return
    folders = sort_checkpoints(output_dir, PREFIX_CHECKPOINT_DIR, use_mtime=True)
    if len(folders) <= save_total_limit:
        return
    kept = {os.path.normpath(path) for path in keep if path}
    incomplete = [folder for folder in folders if layout.problems(folder)]
    remaining = len(folders)
    for folder in incomplete + [folder for folder in folders if folder not in incomplete]:
        if remaining <= max(save_total_limit, len(kept)):
            break
        if os.path.normpath(folder) in kept:
            continue
        logger.info("Deleting the checkpoint %s (save_total_limit=%d).", folder, save_total_limit)
        shutil.rmtree(folder, ignore_errors=True)
        remaining -= 1
