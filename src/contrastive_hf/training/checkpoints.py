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
* rotating (`rotate_checkpoints`): ``save_total_limit`` deletes incomplete checkpoints first, and never the one just
  saved or the best one.

What a resume changes from the run that saved the checkpoint (another data layout, refused; other settings, warned
about) is `resume_changes`.
"""

from __future__ import annotations

import errno
import glob
import json
import logging
import os
import shutil
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from transformers.trainer import (
    OPTIMIZER_NAME,
    OPTIMIZER_NAME_BIN,
    SCHEDULER_NAME,
    TRAINER_STATE_NAME,
)
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, sort_checkpoints
from transformers.utils import (
    ADAPTER_SAFE_WEIGHTS_NAME,
    ADAPTER_WEIGHTS_NAME,
    SAFE_WEIGHTS_INDEX_NAME,
    SAFE_WEIGHTS_NAME,
    WEIGHTS_INDEX_NAME,
    WEIGHTS_NAME,
)

from ..models.checkpoint_diagnostics import damaged_files
from ..models.checkpoint_names import MODEL_JSON_FILES

__all__ = [
    "recorded_best_checkpoint",
    "INCOMPLETE_MARKER",
    "CheckpointLayout",
    "CheckpointSaveError",
    "IncompleteCheckpointError",
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


def recorded_best_checkpoint(checkpoint: str | None) -> str | None:
    """The best checkpoint the ``trainer_state.json`` of ``checkpoint`` records, as a folder that exists: the path it
    records, or (saved without local paths, `training_args.SecretFreeOutputs`) the folder of that name beside
    ``checkpoint``; None when there is none, or it is gone."""
    if checkpoint is None:
        return None
    path = os.path.join(checkpoint, "trainer_state.json")
    try:
        with open(path, encoding="utf-8") as handle:
            recorded = json.load(handle).get("best_model_checkpoint")
    except (OSError, ValueError):
        return None
    if not recorded:
        return None
    for candidate in (
        recorded,
        os.path.join(os.path.dirname(os.path.normpath(checkpoint)), os.path.basename(recorded)),
    ):
        if os.path.isdir(candidate):
            return candidate
    return None
