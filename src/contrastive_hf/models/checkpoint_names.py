"""The names of a checkpoint's files (the layout `checkpoint_files` writes) and of transformers' loading arguments:
one place that states each, for the modules that save, load and check checkpoints.

This module imports only transformers.
"""

from __future__ import annotations

import os

from transformers.utils import CONFIG_NAME

__all__ = [
    "CONTRASTIVE_CONFIG_NAME",
    "DUAL_ENCODER_CONFIG_NAME",
    "HEADS_WEIGHTS_NAME",
    "TOKENIZER_CONFIG_NAME",
    "MERGED_SUFFIX",
    "MODEL_JSON_FILES",
    "DOWNLOAD_KWARGS",
    "LOADING_KWARGS",
    "download_kwargs",
    "in_subfolder",
    "merged_folder",
]

CONTRASTIVE_CONFIG_NAME = "contrastive_config.json"
DUAL_ENCODER_CONFIG_NAME = "dual_encoder_config.json"
HEADS_WEIGHTS_NAME = "contrastive_heads.safetensors"
TOKENIZER_CONFIG_NAME = "tokenizer_config.json"
# The JSON files loading a model reads (weight indexes, ``*.index.json``, besides): `damaged_files` checks they parse.
MODEL_JSON_FILES = (CONFIG_NAME, CONTRASTIVE_CONFIG_NAME, DUAL_ENCODER_CONFIG_NAME)
# Where a run that trained an adapter (in output_dir) saves the merged model: beside it, as <output_dir>-merged.
MERGED_SUFFIX = "-merged"

# transformers' arguments that say where and how files are fetched (its `utils.hub.DownloadKwargs`)...
DOWNLOAD_KWARGS = ("cache_dir", "force_download", "proxies", "local_files_only", "token", "revision", "subfolder")
# ... and every argument of `from_pretrained` that is about loading rather than a model option.
LOADING_KWARGS = (
    *DOWNLOAD_KWARGS,
    "dtype",
    "torch_dtype",
    "attn_implementation",
    "trust_remote_code",
    "device_map",
    "low_cpu_mem_usage",
    "use_safetensors",
)


def download_kwargs(kwargs: dict) -> dict:
    """The download arguments among ``kwargs``, as a new dict (``kwargs`` keeps them)."""
    return {name: kwargs[name] for name in DOWNLOAD_KWARGS if kwargs.get(name) is not None}


def in_subfolder(download: dict, folder: str) -> dict:
    """Download arguments ``download`` for the files of ``folder``, a folder inside the model path (and inside the
    ``subfolder`` they name, if any); ``folder`` ``""``: the model path itself."""
    subfolder = os.path.join(download.get("subfolder") or "", folder)
    return {
        **{name: value for name, value in download.items() if name != "subfolder"},
        **({"subfolder": subfolder} if subfolder else {}),
    }


def merged_folder(adapter_folder: str | os.PathLike) -> str:
    """The folder of the merged model of the adapter saved in ``adapter_folder``: ``<adapter_folder>-merged``."""
    return os.fspath(adapter_folder).rstrip("/" + os.sep) + MERGED_SUFFIX
