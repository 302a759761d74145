"""Writing a checkpoint's files whole or not at all.

A save that fails halfway (a full disk, a quota, a folder that became read-only) must leave what the folder held:
safetensors releases have not all written through a temporary file (the writer of the lower bound, 0.4.3, opens the
file itself), and the error a failed write gives, ``SafetensorError: Error while serializing: I/O error: No space left
on device (os error 28)``, names no file. So every weights file of a checkpoint (the encoder's ``model.safetensors``
or its shards, ``contrastive_heads.safetensors``, the sentence-transformers ``N_Dense/model.safetensors``) and every
JSON file is written beside its place, under a hidden temporary name in the same folder, and renamed over it once
complete (`replace_on_success`). A failed write removes the temporary file, leaves whatever was at the place, and
raises `CheckpointWriteError`: an `OSError` naming the file and the cause, whose ``errno`` (ENOSPC for a full disk)
`training/checkpoints.py` reads to say that the disk is full.

This module imports only the standard library, safetensors and transformers, as every module of `models/` imports
only torch, numpy, safetensors, transformers and this folder.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from safetensors import SafetensorError
from safetensors.torch import save_file

__all__ = ["CheckpointWriteError", "replace_on_success", "save_safetensors", "transformers_saves_replacing"]

_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
_OS_ERROR_NUMBER = re.compile(r"os error (\d+)")  # how safetensors' Rust writer reports an I/O error's errno


class CheckpointWriteError(OSError):
    """A file of a checkpoint could not be written; what was at its place is unchanged. The message names the file;
    ``errno`` is the cause's (ENOSPC: the disk is full), when it had one."""


def replace_on_success(path: str | os.PathLike, write: Callable[[str], None]) -> None:
    """Call ``write(temporary)`` to write the file ``path`` under a temporary name beside it, then rename it to
    ``path``. An I/O failure (an `OSError`, or safetensors' error for one) raises `CheckpointWriteError` naming
    ``path`` and leaves what was there; any other error is raised as it is (a bug, with its traceback)."""
    path = os.fspath(path)
    folder, name = os.path.split(path)
    temporary = os.path.join(folder, f".{name}.tmp-{os.getpid()}")
    try:
        write(temporary)
        os.replace(temporary, path)
    except (OSError, SafetensorError) as error:
        failure = _write_error(path, error)
        if failure is None:
            raise
        raise failure from error
    finally:
        try:
            os.remove(temporary)
        except OSError:  # renamed into place, or never created
            pass


def save_safetensors(tensors: dict, path: str | os.PathLike, metadata: dict[str, str] | None = None) -> None:
    """safetensors' ``save_file``, replacing ``path`` only once the file is written whole (`replace_on_success`)."""
    replace_on_success(path, lambda temporary: save_file(tensors, temporary, metadata=metadata))


@contextmanager
def transformers_saves_replacing() -> Iterator[None]:
    """While a transformers model's ``save_pretrained`` runs in this block, each weights file (or shard) it writes
    replaces the file at its place only once whole (`save_safetensors`): transformers writes them with safetensors'
    ``save_file`` under the name ``safe_save_file`` of its ``modeling_utils``. Not for saves in several threads at
    once."""
    from transformers import modeling_utils

    original = getattr(modeling_utils, "safe_save_file", None)
    if original is None:  # another transformers: its own writer (tests/models/test_checkpoint_writes.py says so)
        yield
        return
    modeling_utils.safe_save_file = save_safetensors
    try:
        yield
    finally:
        modeling_utils.safe_save_file = original


def _write_error(path: str, error: BaseException) -> CheckpointWriteError | None:
    """The `CheckpointWriteError` of a failed write of ``path``; None for a safetensors error that is not an I/O
    failure (a tensor it cannot write: a bug, not the disk)."""
    if isinstance(error, OSError):
        number, cause = error.errno, error.strerror or str(error)
    else:
        found = _OS_ERROR_NUMBER.search(str(error))
        if found is None and "I/O error" not in str(error):
            return None
        number, cause = (int(found.group(1)) if found else None), str(error)
    name = os.path.basename(path)
    kept = (
        f"The {name} that was there is left as it was."
        if os.path.exists(path)
        else f"No {name} was left there (nor half of one)."
    )
    if number in _DISK_FULL:
        message = (
            f"Could not write {path}: the disk is full ({cause}). {kept} Free some space or save to another disk."
        )
    else:
        message = f"Could not write {path}: {cause}. {kept}"
    failure = CheckpointWriteError(message)
    failure.errno = number  # set alone: with a filename, OSError's text would be "[Errno 28] None: '...'"
    return failure
