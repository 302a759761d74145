"""What goes wrong with a checkpoint's weights, named so that a user can act: a save whose weights are not whole
(DeepSpeed ZeRO-3 shards, a partial state dict: `check_whole_weights`), a file cut short or unreadable that makes
loading fail (`damaged_files`, `naming_damaged_files`), and weights that hold NaN or infinite values
(`refuse_non_finite`). `checkpoint_files.EmbeddingCheckpointMixin` saves and loads through these checks.

This module imports only the standard library, torch, safetensors, transformers and this folder, as every module of
`models/` does (see its `__init__`).
"""

from __future__ import annotations

import glob
import json
import os
import zipfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
from safetensors import SafetensorError, safe_open

from .checkpoint_names import MODEL_JSON_FILES

__all__ = [
    "PartialWeightsError",
    "DamagedCheckpointError",
    "check_whole_weights",
    "damaged_files",
    "naming_damaged_files",
    "refuse_non_finite",
]


class PartialWeightsError(RuntimeError):
    """A save would write weights that are not whole: DeepSpeed ZeRO-3 shards (empty in each process) or a state dict
    that lacks some of the model's weights. Not a ValueError: transformers' ``Trainer.save_model`` takes a ValueError
    from a DeepSpeed save for "ZeRO-3 cannot gather" and saves again without weights, which would hide this one."""


def check_whole_weights(model: torch.nn.Module, state_dict: dict[str, torch.Tensor], save_directory: str) -> None:
    """Raise `PartialWeightsError`, naming the weights, unless ``state_dict`` holds every weight ``model`` saves, each
    at its full shape. Under DeepSpeed ZeRO-3 a parameter's full shape is its ``ds_shape``: the tensor itself is an
    empty shard outside ``deepspeed.zero.GatheredParameters``, and so is its copy in ``model.state_dict()``."""
    full_shapes = {
        name: tuple(getattr(tensor, "ds_shape", tensor.shape))
        for named in (model.named_parameters(remove_duplicate=False), model.named_buffers(remove_duplicate=False))
        for name, tensor in named
    }
    saved_names = list(model.state_dict())  # the names a save writes (persistent buffers included); no collective
    missing = [name for name in saved_names if name not in state_dict]
    partial = []
    for name, tensor in state_dict.items():
        shape, expected = tuple(tensor.shape), full_shapes.get(name)
        if expected is not None and shape != expected:
            partial.append(f"{name} of shape {shape} instead of {expected}")
        elif expected is None and tensor.numel() == 0:  # not the model's: no full shape to compare, but never empty
            partial.append(f"{name} of shape {shape}")
    if not missing and not partial:
        return
    problems = []
    if partial:
        problems.append(f"{len(partial)} partitioned or empty ({_first_few(partial)})")
    if missing and len(missing) == len(saved_names):
        problems.append(
            f"none of the model's {len(saved_names)} weights given (an empty state dict: what transformers' Trainer "
            'saves under DeepSpeed ZeRO-3 when "stage3_gather_16bit_weights_on_model_save" is false)'
        )
    elif missing:
        problems.append(f"{len(missing)} missing from the state dict ({_first_few(missing)})")
    raise PartialWeightsError(
        f"Not saving {save_directory}: the weights to write are not whole: {'; '.join(problems)}. A checkpoint "
        "written from them would not load, so nothing was written (a checkpoint already there is unchanged). Under "
        "DeepSpeed ZeRO-3 each process holds only a shard of every parameter: save with Trainer.save_model and "
        '"stage3_gather_16bit_weights_on_model_save": true in the DeepSpeed config (it gathers the weights and '
        "passes them as state_dict), give save_pretrained the consolidated weights (state_dict="
        "accelerator.get_state_dict(model), or DeepSpeed's zero_to_fp32 from a checkpoint), or save inside "
        "deepspeed.zero.GatheredParameters(model.parameters())."
    )


def _first_few(names: list[str], count: int = 5) -> str:
    shown = ", ".join(names[:count])
    return shown if len(names) <= count else f"{shown} and {len(names) - count} more"


def damaged_files(folder: str, json_files: Sequence[str] = MODEL_JSON_FILES) -> list[str]:
    """The files of a checkpoint folder that are cut short or unreadable, one line each naming the file: safetensors
    files whose header does not cover the file, torch zip archives without their central directory, the JSON files
    named in ``json_files`` and weight indexes that do not parse, and empty files of these kinds."""
    damaged = []
    for path in sorted(glob.glob(os.path.join(glob.escape(folder), "**", "*"), recursive=True)):
        name = os.path.relpath(path, folder)
        reason = _damage(path, json_files) if os.path.isfile(path) else None
        if reason is not None:
            damaged.append(f"{name} is truncated or corrupt ({reason})")
    return damaged


def _damage(path: str, json_files: Sequence[str]) -> str | None:
    suffix = os.path.splitext(path)[1]
    checked_json = os.path.basename(path) in json_files or path.endswith(".index.json")
    if suffix not in (".safetensors", ".pt", ".pth", ".bin") and not checked_json:
        return None
    if os.path.getsize(path) == 0:
        return "0 bytes"
    try:
        if suffix == ".safetensors":
            with safe_open(path, framework="pt"):
                pass
        elif suffix == ".json":
            with open(path, encoding="utf-8") as handle:
                json.load(handle)
        else:
            with open(path, "rb") as handle:
                is_zip = handle.read(4) == b"PK\x03\x04"
            if is_zip:  # torch.save's format; older pickles are not zip archives and are not checked
                with zipfile.ZipFile(path):
                    pass
    except (SafetensorError, ValueError, zipfile.BadZipFile) as error:
        return f"{type(error).__name__}: {error}"
    return None


class DamagedCheckpointError(ValueError):
    """Loading a model failed on a file cut short or unreadable, which the message names (`naming_damaged_files`)."""


@contextmanager
def naming_damaged_files(name_or_path: str | os.PathLike) -> Iterator[None]:
    """Around loading a model from ``name_or_path``: when loading fails and a file of that folder is cut short or
    unreadable (a half-written ``model.safetensors``), raise a `DamagedCheckpointError` naming the file instead of
    the loader's error, which names none. Every `from_pretrained` of this layout loads within it."""
    name_or_path = os.fspath(name_or_path)
    try:
        yield
    except DamagedCheckpointError:  # named already, by a loader within the loader
        raise
    except Exception as error:
        damaged = damaged_files(name_or_path) if os.path.isdir(name_or_path) else []
        if not damaged:
            raise
        raise DamagedCheckpointError(
            f"Cannot load the model in {name_or_path}: {'; '.join(damaged)}. The file was not written completely "
            "(a save that was killed, or ran out of disk space): save or copy the model again, or load an earlier "
            "checkpoint."
        ) from error


def refuse_non_finite(tensors: dict[str, torch.Tensor], source: str, fix: str = "load an earlier checkpoint") -> None:
    """A `ValueError` naming the tensors that hold NaN or infinite values and their ``source`` (the weights file):
    such a model gives NaN embeddings and a NaN loss from the first step, which training cannot recover from."""
    bad = [
        name
        for name, tensor in tensors.items()
        if tensor.is_floating_point() and tensor.numel() and not bool(torch.isfinite(tensor).all())
    ]
    if bad:
        named = ", ".join(bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
        raise ValueError(
            f"{source} holds NaN or infinite values in {len(bad)} tensor(s): {named}. It was saved from a run whose "
            f"loss diverged, or it is damaged: {fix}."
        )
