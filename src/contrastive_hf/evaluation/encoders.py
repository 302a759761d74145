"""One interface for every model we score: our checkpoints, plain transformers encoders and sentence-transformers.

A `SentenceEncoder` maps sentences to a float32 array ``(n, d)`` in the input order. Every implementation encodes each
distinct sentence once (STS data repeat sentences across pairs and tasks). `ModelEncoder`, the path for our models and
plain transformers checkpoints, tokenizes everything once, sorts by token count so that each batch holds sentences of
nearly equal length (little padding is computed), runs under ``no_grad`` in eval mode, and in the precision `encode`
chooses (`models.precision.encoding_precision`: bf16 autocast on a CUDA device that supports it and on a CPU with
bf16 matrix instructions, float32 elsewhere) unless told. `SentenceTransformerEncoder` calls the model's own
``encode``, so a sentence-transformers baseline is scored with its own pooling and normalisation.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence

import numpy as np
import torch

from .._files import written_as_local_path
from ..models.checkpoint_names import CONTRASTIVE_CONFIG_NAME, DUAL_ENCODER_CONFIG_NAME, merged_folder
from ..models.positions import check_max_length

__all__ = [
    "BACKENDS",
    "SentenceEncoder",
    "ModelEncoder",
    "SentenceTransformerEncoder",
    "CallableEncoder",
    "CachedEncoder",
    "as_encoder",
    "load_encoder",
    "check_model_source",
    "detect_backend",
]

BACKENDS = ("auto", "contrastive", "transformers", "sentence-transformers")
# The option of `contrastive-hf evaluate` and `mine` that sets `load_encoder`'s ``max_length``: its refusal names it.
MAX_LENGTH_FLAG = "--max-length"


class SentenceEncoder:
    """Base class: ``encode(sentences)`` -> float32 ``(len(sentences), d)``; subclasses implement `_encode_unique`."""

    name: str = "encoder"

    def describe(self) -> dict:
        """What the results JSON records about how sentences were encoded."""
        return {"backend": type(self).__name__}

    def encode(self, sentences: Sequence[str], batch_size: int = 64, show_progress: bool = False) -> np.ndarray:
        """Embeddings of ``sentences`` in their order; each distinct sentence is encoded once."""
        positions: dict[str, int] = {}
        inverse = np.fromiter((positions.setdefault(s, len(positions)) for s in sentences), dtype=np.int64)
        unique = list(positions)
        if not unique:
            return np.zeros((0, 0), dtype=np.float32)
        embeddings = self._encode_unique(unique, batch_size=batch_size, show_progress=show_progress)
        embeddings = np.asarray(embeddings, dtype=np.float32)
        if embeddings.ndim != 2 or embeddings.shape[0] != len(unique):
            raise ValueError(
                f"{self.name} returned embeddings of shape {embeddings.shape} for {len(unique)} sentences; expected "
                "one vector per sentence."
            )
        return embeddings[inverse]

    def _encode_unique(self, sentences: list[str], batch_size: int, show_progress: bool) -> np.ndarray:
        raise NotImplementedError


class ModelEncoder(SentenceEncoder):
    """A contrastive_hf model (`ContrastiveModel`, or `ContrastiveForPreTraining` through its encoder part) and its
    tokenizer.

    The sentence embedding is what the model's forward returns in eval mode: the pooled vector, projected only when
    ``config.projection_at_inference`` is set.

    Args:
        model: the model; it stays on its device.
        tokenizer: its tokenizer.
        max_length: truncation length in tokens; None (default) truncates only at what the model can take (as
            SimCSE's evaluation does).
        use_bf16: True or False forces bf16 autocast or float32; None (default): `encode`'s choice for the device
            (`models.precision.encoding_precision`).
        name: how results name the model.
    """

    def __init__(
        self, model, tokenizer, max_length: int | None = None, use_bf16: bool | None = None, name: str | None = None
    ):
        model = getattr(model, "contrastive", model)
        if tokenizer is None:
            raise ValueError(
                "Encoding needs the model's tokenizer: pass tokenizer=AutoTokenizer.from_pretrained(...) "
                "(the Trainer's processing_class) or load the model with contrastive_hf.evaluation.load_encoder."
            )
        if tokenizer.pad_token_id is None:
            raise ValueError(
                f"The tokenizer of {name or 'the model'} has no padding token; set tokenizer.pad_token first."
            )
        self.model = model
        self.tokenizer = tokenizer
        self.max_length = max_length or model._max_length(tokenizer)
        self.use_bf16 = use_bf16
        self.name = name or getattr(model.config, "_name_or_path", "") or type(model).__name__

    def describe(self) -> dict:
        config = self.model.config
        return {
            "backend": "contrastive_hf",
            "pooler_type": config.pooler_type,
            "projection": config.projection_type if config.projection_at_inference else "none at inference",
            "max_length": self.max_length,
        }

    def _encode_unique(self, sentences: list[str], batch_size: int, show_progress: bool) -> np.ndarray:
        return self.model.encode(
            sentences,
            batch_size=batch_size,
            show_progress_bar=show_progress,
            tokenizer=self.tokenizer,
            max_length=self.max_length,
            bf16=self.use_bf16,
        )


class SentenceTransformerEncoder(SentenceEncoder):
    """A `SentenceTransformer`, encoding with its own ``encode`` (its modules: pooling, normalisation, ...)."""

    def __init__(self, model, name: str | None = None):
        self.model = model
        self.name = name or "sentence-transformers model"

    def describe(self) -> dict:
        return {
            "backend": "sentence-transformers",
            "modules": [type(module).__name__ for module in self.model],
            "max_length": self.model.max_seq_length,
        }

    def _encode_unique(self, sentences: list[str], batch_size: int, show_progress: bool) -> np.ndarray:
        return self.model.encode(
            sentences, batch_size=batch_size, show_progress_bar=show_progress, convert_to_numpy=True
        )


class CallableEncoder(SentenceEncoder):
    """Any object with ``encode(list_of_sentences)`` returning a tensor or an array, e.g. a user's own model."""

    def __init__(self, model, name: str | None = None):
        self.model = model
        self.name = name or type(model).__name__

    def _encode_unique(self, sentences: list[str], batch_size: int, show_progress: bool) -> np.ndarray:
        embeddings = self.model.encode(sentences)
        if torch.is_tensor(embeddings):
            embeddings = embeddings.detach().float().cpu().numpy()
        return np.asarray(embeddings, dtype=np.float32)


class CachedEncoder(SentenceEncoder):
    """Remembers every embedding it computed, so that tasks sharing sentences (STS-B is drawn from STS12-16; the
    alignment figures reuse STS-B) encode each sentence once per evaluation run."""

    def __init__(self, encoder: SentenceEncoder):
        self.encoder = encoder
        self.name = encoder.name
        self.cache: dict[str, np.ndarray] = {}

    def describe(self) -> dict:
        return self.encoder.describe()

    def _encode_unique(self, sentences: list[str], batch_size: int, show_progress: bool) -> np.ndarray:
        missing = [s for s in sentences if s not in self.cache]
        if missing:
            computed = self.encoder.encode(missing, batch_size=batch_size, show_progress=show_progress)
            self.cache.update(zip(missing, computed, strict=True))
        return np.stack([self.cache[s] for s in sentences])


def as_encoder(model, tokenizer=None, max_length: int | None = None) -> SentenceEncoder:
    """Wrap what a user holds as a `SentenceEncoder`: a `SentenceEncoder` (returned as is), a contrastive_hf model
    (with ``tokenizer``, or the one set as ``model.tokenizer``), a `SentenceTransformer`, or any object with an
    ``encode(sentences)`` method."""
    if isinstance(model, SentenceEncoder):
        return model
    if type(model).__module__.startswith("sentence_transformers"):
        return SentenceTransformerEncoder(model)
    inner = getattr(model, "contrastive", model)
    if isinstance(inner, torch.nn.Module) and hasattr(inner, "pooler") and hasattr(inner, "embed"):
        tokenizer = tokenizer or getattr(inner, "tokenizer", None)
        if tokenizer is None and getattr(inner.config, "_name_or_path", ""):
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(inner.config._name_or_path)
        return ModelEncoder(inner, tokenizer, max_length=max_length)
    if callable(getattr(model, "encode", None)):
        return CallableEncoder(model)
    raise TypeError(
        f"Cannot encode sentences with a {type(model).__name__}: pass a contrastive_hf model with its tokenizer, a "
        "SentenceTransformer, a SentenceEncoder, or an object with an encode(sentences) method."
    )


def detect_backend(name_or_path: str) -> str:
    """``contrastive`` for our checkpoints, ``sentence-transformers`` for a folder with modules.json, else
    ``transformers``."""
    from ..models.checkpoint_contents import checkpoint_model_type

    if os.path.isdir(name_or_path) or os.environ.get("HF_HUB_OFFLINE") != "1":
        if checkpoint_model_type(name_or_path) == "contrastive":
            return "contrastive"
    if os.path.isfile(os.path.join(name_or_path, "modules.json")):
        return "sentence-transformers"
    return "transformers"


# The files of which a checkpoint folder holds at least one at its root (a sentence-transformers Router has no
# config.json there, only modules.json).
CHECKPOINT_ROOT_FILES = ("config.json", "modules.json", CONTRASTIVE_CONFIG_NAME, DUAL_ENCODER_CONFIG_NAME)


def check_model_source(name_or_path: str) -> None:
    """A one-line `FileNotFoundError` for a model that cannot load: a folder holding a peft adapter (pointing at the
    merged model saved beside it) or no checkpoint (naming the ``checkpoint-*`` folders of a training run's output
    directory), a file, a local path that does not exist, or a Hub id that is not in the Hub cache while the Hub is
    off (``HF_HUB_OFFLINE``)."""
    from huggingface_hub import constants, try_to_load_from_cache
    from transformers.utils import ADAPTER_CONFIG_NAME

    if os.path.isfile(os.path.join(name_or_path, ADAPTER_CONFIG_NAME)):
        merged = merged_folder(name_or_path)
        where = (
            f"evaluate {merged}, the merged model saved beside it,"
            if os.path.isdir(merged)
            else f"evaluate the merged model a --lora_r run saves beside it ({merged}, not there),"
        )
        raise FileNotFoundError(
            f"{name_or_path} is a LoRA adapter ({ADAPTER_CONFIG_NAME}), not a whole model: {where} or load the "
            "adapter with peft onto its base model (its README.md shows how) and save the merged model."
        )
    if os.path.isdir(name_or_path):
        if any(os.path.isfile(os.path.join(name_or_path, name)) for name in CHECKPOINT_ROOT_FILES):
            return
        runs = sorted(glob.glob(os.path.join(name_or_path, "checkpoint-*")), key=lambda path: (len(path), path))
        if runs:
            raise FileNotFoundError(
                f"{name_or_path} holds no model of its own, only training checkpoints: give one of them, e.g. "
                f"{runs[-1]}."
            )
        raise FileNotFoundError(
            f"{name_or_path} holds no checkpoint (no model was saved in this folder): give the folder a model was "
            "saved to (save_pretrained, a training run's output_dir) or a Hub id."
        )
    if os.path.exists(name_or_path):
        raise FileNotFoundError(f"{name_or_path} is a file: give the folder of the checkpoint, or a Hub id.")
    if written_as_local_path(name_or_path):
        raise FileNotFoundError(f"{name_or_path}: no such folder (relative to {os.getcwd()}).")
    if constants.is_offline_mode():
        try:
            cached = any(
                isinstance(try_to_load_from_cache(name_or_path, name), str) for name in ("config.json", "modules.json")
            )
        except ValueError:  # not a valid Hub id either
            cached = False
        if not cached:
            raise FileNotFoundError(
                f"{name_or_path} is neither a local folder nor in the Hub cache, and HF_HUB_OFFLINE keeps the Hub "
                "off: give the folder of a checkpoint, or download the model first (without HF_HUB_OFFLINE)."
            )


def load_encoder(
    name_or_path: str | os.PathLike,
    backend: str = "auto",
    pooler_type: str = "mean",
    max_length: int | None = None,
    device: str | None = None,
    bf16: bool | None = None,
) -> SentenceEncoder:
    """A `SentenceEncoder` for a checkpoint folder or Hub id.

    Args:
        name_or_path: the checkpoint.
        backend: ``contrastive`` (a contrastive_hf checkpoint, through `AutoModel`), ``transformers`` (any encoder,
            wrapped with ``pooler_type`` and no projection), ``sentence-transformers`` (`SentenceTransformer`'s
            own encode), or ``auto``: contrastive_hf checkpoints first, then folders with modules.json, then
            transformers.
        pooler_type: the pooling for ``transformers``: cls, cls_before_pooler, mean, max, avg_first_last, avg_top2.
        max_length: truncation in tokens (default: what the model takes); more than the encoder's position
            embeddings take is refused (`models.positions.check_max_length`).
        device: ``cpu``, ``cuda``, ... (default: CUDA when available).
        bf16: True or False forces bf16 autocast or float32 for our models and transformers encoders; None
            (default): `encode`'s choice for the device (`models.precision.encoding_precision`). A
            sentence-transformers model computes as it does itself (float32).
    """
    if backend not in BACKENDS:
        raise ValueError(f"Unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}.")
    name_or_path = os.fspath(name_or_path)  # a pathlib.Path as a string
    check_model_source(name_or_path)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if backend == "auto":
        backend = detect_backend(name_or_path)
    if backend == "sentence-transformers":
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(name_or_path, device=device)
        check_max_length(model, max_length, flag=MAX_LENGTH_FLAG)
        if max_length is not None:
            model.max_seq_length = max_length
        return SentenceTransformerEncoder(model, name=name_or_path)

    from transformers import AutoTokenizer

    from ..models.checkpoint_contents import checkpoint_model_type
    from ..models.modeling_contrastive import ContrastiveModel

    # either loader names a weights file cut short (`naming_damaged_files`)
    if backend == "contrastive":
        if checkpoint_model_type(name_or_path) != "contrastive":
            raise ValueError(f"{name_or_path} is not a contrastive_hf checkpoint; use backend='transformers'.")
        model = ContrastiveModel.from_pretrained(name_or_path)
    else:
        # the encoder alone, whatever a sentence-transformers folder adds (a warning names what it replaces)
        model = ContrastiveModel.from_encoder_pretrained(
            name_or_path, pooler_type=pooler_type, projection_type="none", normalize_embeddings=False
        )
    check_max_length(model, max_length, flag=MAX_LENGTH_FLAG)
    tokenizer = AutoTokenizer.from_pretrained(name_or_path)
    return ModelEncoder(model.to(device).eval(), tokenizer, max_length=max_length, use_bf16=bf16, name=name_or_path)
