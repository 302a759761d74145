"""What a model path (a folder or a Hub repository) holds, read from its files without building a model: its model
type (`checkpoint_model_type`), how a model family loads it (`what_the_path_holds`, the one place that decides
it), and the files of this layout it carries (`locate`, `read_json`, `read_heads`).

This module imports only the standard library, torch, safetensors, transformers and this folder, as every module of
`models/` does (see its `__init__`).
"""

from __future__ import annotations

import json
import os

import torch
from safetensors import safe_open
from safetensors.torch import load_file
from transformers.utils import CONFIG_NAME, SAFE_WEIGHTS_INDEX_NAME, SAFE_WEIGHTS_NAME

from .checkpoint_names import CONTRASTIVE_CONFIG_NAME, DUAL_ENCODER_CONFIG_NAME, HEADS_WEIGHTS_NAME

__all__ = [
    "checkpoint_model_type",
    "what_the_path_holds",
    "locate",
    "read_json",
    "read_heads",
    "read_named_weights",
    "weight_files",
]


def checkpoint_model_type(name_or_path: str | os.PathLike, **download) -> str | None:
    """What a checkpoint holds, as a model type: ``contrastive`` or ``dual_encoder`` for contrastive_hf's own (this
    layout, or 0.1's config.json of that type), else its config.json's ``model_type`` (``bert``,
    ``contrastive_multitask``...); None without a config.json. Reads files only: no Auto class is needed."""
    if read_json(name_or_path, CONTRASTIVE_CONFIG_NAME, **download) is not None:
        return "contrastive"
    if read_json(name_or_path, DUAL_ENCODER_CONFIG_NAME, **download) is not None:
        return "dual_encoder"
    config = read_json(name_or_path, "config.json", **download)
    return None if config is None else config.get("model_type")


def locate(name_or_path: str | os.PathLike, filename: str, **download) -> str | None:
    """The local path of ``filename`` in a folder or a Hub repository (downloaded and cached), None when absent."""
    subfolder = download.get("subfolder") or ""
    if os.path.isdir(name_or_path):
        path = os.path.join(name_or_path, subfolder, filename)
        return path if os.path.isfile(path) else None
    from transformers.utils import cached_file

    return cached_file(
        str(name_or_path),
        filename,
        _raise_exceptions_for_missing_entries=False,
        _raise_exceptions_for_connection_errors=False,
        **download,
    )


def read_json(name_or_path: str | os.PathLike, filename: str, **download) -> dict | None:
    """The JSON content of ``filename`` in a checkpoint (folder or Hub id), or None when the file is absent."""
    path = locate(name_or_path, filename, **download)
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError) as error:
        raise OSError(f"{path} is not readable JSON ({error}); the checkpoint is damaged: save it again.") from error


def what_the_path_holds(
    name_or_path: str | os.PathLike, config_name: str = CONTRASTIVE_CONFIG_NAME, **download
) -> tuple[str, dict | None]:
    """What a model path (a folder or a Hub id) holds for a model family whose configuration file is ``config_name``,
    and so how the family loads it: the one place that decides it (every family's `from_pretrained`, and through it
    the scripts' `commands.loading.load_pretraining_model`).

    - ``("saved", configuration)``: a checkpoint of that family in this layout (its configuration file, read);
    - ``("sentence_transformers", None)``: a sentence-transformers model (a ``modules.json``, and no ``config.json``
      of our own model type at the root), which the family's ``from_encoder_pretrained`` loads as the model its
      modules compute (`sentence_transformers_folders`): all-MiniLM-L6-v2, a Router's two towers, and another
      family's checkpoint in this layout;
    - ``("encoder", None)``: a pretrained encoder to wrap with new heads: the root ``config.json`` is of an
      architecture contrastive_hf did not register (``bert``, ``roberta``, remote code), as a plain checkpoint's is;
    - ``("transformers", None)``: anything else, for transformers' own loader: contrastive_hf 0.1's layout (a
      ``config.json`` of our own model type), or no ``config.json`` at all (its error says what is missing).
    """
    saved = read_json(name_or_path, config_name, **download)
    if saved is not None:
        return "saved", saved
    root = read_json(name_or_path, CONFIG_NAME, **download)
    plain = root is not None and _is_plain_architecture(root.get("model_type"))
    if (root is None or plain) and locate(name_or_path, "modules.json", **download) is not None:
        return "sentence_transformers", None
    if plain:
        return "encoder", None
    return "transformers", None


def _is_plain_architecture(model_type: str | None) -> bool:
    """Whether ``model_type`` is an architecture contrastive_hf did not register (an encoder to wrap)."""
    if model_type is None:
        return False
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    try:
        config_class = CONFIG_MAPPING[model_type]
    except KeyError:  # an architecture with remote code
        return True
    return not config_class.__module__.startswith(__name__.split(".")[0] + ".")


def read_heads(name_or_path: str | os.PathLike, **download) -> dict[str, torch.Tensor]:
    """The weights outside the encoder (`HEADS_WEIGHTS_NAME`), or {} when the checkpoint has none."""
    path = locate(name_or_path, HEADS_WEIGHTS_NAME, **download)
    if path is None:
        return {}
    try:
        return load_file(path, device="cpu")
    except Exception as error:  # safetensors raises its own error types for truncated or corrupt files
        raise OSError(
            f"{path} cannot be read ({type(error).__name__}: {error}); it is truncated or corrupt: save the "
            "checkpoint again, or copy it again from where it was saved."
        ) from error


def weight_files(folder: str | os.PathLike) -> list[str]:
    """The weight files of a local checkpoint folder: its ``model.safetensors``, or the shards its
    ``model.safetensors.index.json`` names; [] when it has neither."""
    single = os.path.join(folder, SAFE_WEIGHTS_NAME)
    if os.path.isfile(single):
        return [single]
    index = read_json(folder, SAFE_WEIGHTS_INDEX_NAME)
    shards = dict.fromkeys((index or {}).get("weight_map", {}).values())
    return [os.path.join(folder, shard) for shard in shards]


def read_named_weights(name_or_path: str | os.PathLike, names, **download) -> dict[str, torch.Tensor]:
    """The weights among ``names`` that a checkpoint's ``model.safetensors`` (or its shards) holds, read alone
    (a head saved with the encoder: `masked_lm_checkpoint`), from a folder or a Hub repository; {} when it holds
    none of them."""
    single = locate(name_or_path, SAFE_WEIGHTS_NAME, **download)
    if single is not None:
        files = {single: list(names)}
    else:
        weight_map = (read_json(name_or_path, SAFE_WEIGHTS_INDEX_NAME, **download) or {}).get("weight_map", {})
        files = {}
        for name in names:
            if name in weight_map:
                files.setdefault(weight_map[name], []).append(name)
        files = {locate(name_or_path, shard, **download): wanted for shard, wanted in files.items()}
    weights = {}
    for path, wanted in files.items():
        if path is None:
            continue
        try:
            with safe_open(path, framework="pt", device="cpu") as handle:
                present = set(handle.keys())
                weights.update({name: handle.get_tensor(name) for name in wanted if name in present})
        except Exception as error:  # safetensors raises its own error types for truncated or corrupt files
            raise OSError(
                f"{path} cannot be read ({type(error).__name__}: {error}); it is truncated or corrupt: save the "
                "checkpoint again, or copy it again from where it was saved."
            ) from error
    return weights
