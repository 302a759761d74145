"""What a sentence-transformers folder computes, read from its files, so that a model family loads it as the same
model: the inverse of `sentence_transformers_files`, for our checkpoints and any other sentence-transformers model
(all-MiniLM-L6-v2, E5, ...).

``SentenceTransformer(path)`` reads ``modules.json``, a pipeline of modules, each configured by the files of its
folder. `read_sentence_transformers_folder` reads the pipelines it can express, one per route:

- ``Transformer`` (the encoder, in its own architecture, at the folder's root or in a sub-folder): its
  ``sentence_bert_config.json`` (``max_seq_length``, ``do_lower_case``; sentence-transformers 6's task and output
  settings), or else its tokenizer's ``model_max_length``;
- ``Pooling``: its mode, in either spelling (``pooling_mode_mean_tokens: true``, or ``pooling_mode: "mean"``), is
  the registered pooler of that ``sentence_transformers_mode`` (`poolers.py`), and its ``include_prompt``. A
  ``cls_token`` Pooling followed by a Dense layer with tanh holding the encoder's own pooler weights is the ``cls``
  pooler (BERT's pooler layer over [CLS]), as `sentence_transformers_files` writes it;
- ``Dense`` modules (a linear layer and an activation each, `DenseModule`), which the model family maps onto its
  projection;
- ``Normalize``, last;
- a ``Router`` with a ``query`` and a ``document`` route, each such a pipeline (a two-tower dual encoder);

and ``config_sentence_transformers.json``: prompts, ``default_prompt_name``, ``similarity_fn_name`` and
``truncate_dim``. Whatever has no equivalent is recorded as a refusal naming the module (or file), the folder and
what to do (`FolderSettings`): a module class we do not know, a pooling mode no registered pooler computes
(``weightedmean``...), an activation with no class, lower-casing the tokenizer does not do. A setting the user gives
replaces the folder's, with one warning naming what the folder said (`FolderSettings.merged`), and lifts the refusal
of that setting.

This module imports only the standard library, torch, safetensors and its siblings.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import load_file

from .checkpoint_contents import locate, read_json
from .losses import SIMILARITIES
from .poolers import POOLERS, get_pooler, pooler_for_sentence_transformers_mode
from .sentence_transformers_files import IDENTITY, TORCH_ACTIVATIONS

__all__ = [
    "DenseModule",
    "SentenceTransformersRoute",
    "SentenceTransformersFolder",
    "FolderSettings",
    "UnsupportedSentenceTransformersModel",
    "read_sentence_transformers_folder",
]

logger = logging.getLogger(__name__)

# sentence-transformers 6 spells a Pooling mode by a short name; its earlier boolean keys (``pooling_mode_<mode>``)
# and the registry's ``sentence_transformers_mode`` use the long one.
_POOLING_MODE_NAMES = {
    "cls": "cls_token",
    "max": "max_tokens",
    "mean": "mean_tokens",
    "mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "weightedmean": "weightedmean_tokens",
    "lasttoken": "lasttoken",
}
_ACTIVATION_NAMES = {path: name for name, path in TORCH_ACTIVATIONS.items()}
_KNOWN_MODULES = ("Transformer", "Pooling", "Dense", "Normalize", "Router")
_ROUTES = ("query", "document")
# sentence-transformers' Transformer settings that change what it computes, at their neutral values
_NEUTRAL_TRANSFORMER_SETTINGS = {
    "transformer_task": "feature-extraction",
    "module_output_name": "token_embeddings",
    "processing_kwargs": {},
    "query_length": None,
    "document_length": None,
    "query_expansion": None,
}


class UnsupportedSentenceTransformersModel(ValueError):
    """A sentence-transformers folder computes something no model of contrastive_hf computes the same way."""


@dataclass(frozen=True)
class DenseModule:
    """One ``Dense`` module: a linear layer ``(in_features -> out_features)`` and its activation, by its name in
    transformers' ACT2FN (None: identity), in ``folder`` of the model path."""

    folder: str
    in_features: int
    out_features: int
    bias: bool
    activation: str | None


@dataclass
class SentenceTransformersRoute:
    """One pipeline from text to embedding (the folder's only one, or a Router's route).

    Attributes:
        encoder_folder: the Transformer module's folder in the model path (``""``: its root).
        pooler_type: the registered pooler computing its Pooling module (and the encoder's pooler layer after it, for
            ``cls``); None where none does (`refusals` says why).
        include_prompt: the Pooling module's ``include_prompt``.
        dense: the Dense modules after the pooling, in order.
        normalize: whether a Normalize module ends it.
        max_seq_length: the longest input it reads, when the folder says.
        modules: ``{setting: module folder}``, where each setting was read.
        refusals: ``{setting: why}``, for what has no equivalent: ``pooler_type``, ``dense`` (which a setting of the
            family may replace), ``""`` (which none can).
    """

    encoder_folder: str
    pooler_type: str | None = None
    include_prompt: bool = True
    dense: list[DenseModule] = field(default_factory=list)
    normalize: bool = False
    max_seq_length: int | None = None
    modules: dict[str, str] = field(default_factory=dict)
    refusals: dict[str, str] = field(default_factory=dict)


@dataclass
class SentenceTransformersFolder:
    """What a sentence-transformers folder computes: its routes (``{"": route}``, or a Router's ``{"query": ...,
    "document": ...}``), the settings of ``config_sentence_transformers.json``, and what has no equivalent whichever
    route runs (``refusals``, keyed ``""``)."""

    name_or_path: str
    routes: dict[str, SentenceTransformersRoute]
    prompts: dict[str, str] | None = None
    default_prompt_name: str | None = None
    similarity: str | None = None
    truncate_dim: int | None = None
    refusals: dict[str, str] = field(default_factory=dict)
    download: dict = field(default_factory=dict, repr=False)

    @property
    def is_router(self) -> bool:
        return list(self.routes) != [""]

    def refusal(self, what: str, fix: str) -> UnsupportedSentenceTransformersModel:
        return UnsupportedSentenceTransformersModel(
            f"{self.name_or_path} is a sentence-transformers model: {what}. {fix}"
        )

    def inconsistent(self, what: str) -> UnsupportedSentenceTransformersModel:
        return self.refusal(what, "The folder is inconsistent: check that sentence-transformers loads it.")

    def dense_weights(self, module: DenseModule) -> dict[str, torch.Tensor]:
        """``{"weight": (out, in), "bias": (out,)}`` of a Dense module (a zero bias where it has none)."""
        weights = _read_weights(self.name_or_path, module.folder, self.download)
        if weights is None or "linear.weight" not in weights:
            raise OSError(
                f"{self.name_or_path}: the Dense module {module.folder!r} has no weights (model.safetensors or "
                "pytorch_model.bin with linear.weight); the folder is incomplete: copy it again."
            )
        weight = weights["linear.weight"].float()
        bias = weights["linear.bias"].float() if module.bias else torch.zeros(weight.shape[0])
        return {"weight": weight, "bias": bias}


@dataclass
class FolderSettings:
    """A model family's configuration values for a sentence-transformers folder, where each was read, and what has no
    equivalent; `merged` applies the settings the user gives.

    Attributes:
        folder: the folder read.
        values: ``{config field: the folder's value}``.
        sources: ``{config field: the module or file that says it}``.
        refusals: ``{config field: why the folder's value has no equivalent}``, lifted by giving that field (or one
            of its group); a refusal keyed ``""`` is lifted by none.
        groups: fields that go together (the projection's): a refusal of one is lifted by giving any, and the
            folder's weights for them (its Dense layers) are loaded only where every one keeps the folder's value.
    """

    folder: SentenceTransformersFolder
    values: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    refusals: dict[str, str] = field(default_factory=dict)
    groups: tuple[tuple[str, ...], ...] = ()

    def set(self, name: str, value: Any, source: str) -> None:
        self.values[name] = value
        self.sources[name] = source

    def set_model_settings(self) -> None:
        """The settings of ``config_sentence_transformers.json`` (every family's config has them): prompts,
        ``default_prompt_name``, ``truncate_dim`` where set, and the similarity (cosine, its default, or dot)."""
        folder, source = self.folder, "config_sentence_transformers.json"
        settings = {"prompts": folder.prompts, "default_prompt_name": folder.default_prompt_name}
        for name, value in {**settings, "truncate_dim": folder.truncate_dim}.items():
            if value is not None:
                self.set(name, value, source)
        similarity = folder.similarity or "cosine"  # sentence-transformers' default
        if similarity in SIMILARITIES:
            self.set("similarity", similarity, source)
        else:
            self.refusals["similarity"] = f"{source} compares embeddings by {similarity!r}"

    def group_of(self, name: str) -> tuple[str, ...]:
        return next((group for group in self.groups if name in group), (name,))

    def kept(self, overrides: dict, name: str) -> bool:
        """Whether what the folder says of ``name`` and of its group stands, given the user's ``overrides``."""
        group = self.group_of(name)
        if any(other in self.refusals for other in group):
            return False
        return all(overrides.get(other, value) == value for other, value in self.values.items() if other in group)

    def merged(self, overrides: dict) -> dict[str, Any]:
        """The configuration values: the folder's, with the ``overrides`` the user gives replacing them. Warns once,
        naming what the folder said, where the given settings embed otherwise; raises the first refusal that no
        setting given lifts."""
        for name, why in self.refusals.items():
            if not name or not any(other in overrides for other in self.group_of(name)):
                lift = f", or give {name}=... to replace what it says (other embeddings)" if name else ""
                raise self.folder.refusal(why, f"Load it with sentence_transformers.SentenceTransformer{lift}.")
        replaced = []
        for group in dict.fromkeys(self.group_of(name) for name in [*self.values, *self.refusals]):
            given = [f"{name}={overrides[name]!r}" for name in group if name in overrides]
            if not given or self.kept(overrides, group[0]):
                continue
            folder_says = [f"{name}={self.values[name]!r}" for name in group if name in self.values]
            folder_says += [self.refusals[name] for name in group if name in self.refusals]
            sources = ", ".join(dict.fromkeys(self.sources[name] for name in group if name in self.sources))
            replaced.append(f"{', '.join(given)} instead of {', '.join(folder_says)} ({sources or 'the folder'})")
        if replaced:
            logger.warning(
                "%s is a sentence-transformers model; the settings given replace what it says, so this model embeds "
                "otherwise than the folder does: %s.",
                self.folder.name_or_path,
                "; ".join(replaced),
            )
        return {**self.values, **overrides}


def read_sentence_transformers_folder(
    name_or_path: str | os.PathLike, **download
) -> SentenceTransformersFolder | None:
    """What the sentence-transformers folder (or Hub repository) ``name_or_path`` computes, or None where it has no
    ``modules.json``. Reads files only; what has no equivalent is recorded in the routes' and the folder's
    ``refusals``, for the model family to raise (`FolderSettings.merged`)."""
    modules = read_json(name_or_path, "modules.json", **download)
    if modules is None:
        return None
    path = str(name_or_path)
    config = read_json(name_or_path, "config_sentence_transformers.json", **download) or {}
    folder = SentenceTransformersFolder(
        path,
        routes={},
        prompts=config.get("prompts") or None,
        default_prompt_name=config.get("default_prompt_name"),
        similarity=config.get("similarity_fn_name"),
        truncate_dim=config.get("truncate_dim"),
        download=dict(download),
    )
    kind = config.get("model_type", "SentenceTransformer")
    if kind != "SentenceTransformer":
        folder.refusals[""] = f"config_sentence_transformers.json says model_type {kind!r} (not a sentence encoder)"
    pipeline = [(entry.get("path", ""), entry.get("type", "")) for entry in sorted(modules, key=_index)]
    if pipeline and _kind(pipeline[0][1]) == "Router":
        _read_router(folder, pipeline)
    else:
        folder.routes[""] = _read_route(folder, pipeline, "modules.json")
    return folder


def _index(entry: dict) -> int:
    return int(entry.get("idx", 0))


def _kind(module_type: str) -> str | None:
    """The sentence-transformers module class a ``modules.json`` type names (``Pooling``...), None for another
    package's class (custom code)."""
    if not module_type.startswith("sentence_transformers."):
        return None
    return module_type.rsplit(".", 1)[-1]


def _read_router(folder: SentenceTransformersFolder, pipeline: list[tuple[str, str]]) -> None:
    router_path = pipeline[0][0]
    if len(pipeline) > 1:
        after = ", ".join(repr(path) for path, _ in pipeline[1:])
        folder.refusals[""] = f"modules {after} follow its Router, which no model of contrastive_hf does"
    config = _json(folder, router_path, "router_config.json") or {}
    structure, types = config.get("structure") or {}, config.get("types") or {}
    default_route = (config.get("parameters") or {}).get("default_route")
    if sorted(structure) != sorted(_ROUTES):
        folder.refusals[""] = f"its Router has the routes {sorted(structure)} (a dual encoder has {list(_ROUTES)})"
        return
    if default_route not in (None, "document"):  # our encode() without a task runs the document tower
        folder.refusals[""] = f"its Router's default route is {default_route!r} (a dual encoder's is 'document')"
    for route in _ROUTES:
        pipeline = [(_join(router_path, name), types.get(name, "")) for name in structure[route]]
        folder.routes[route] = _read_route(folder, pipeline, f"router_config.json's {route!r} route")


def _join(*parts: str) -> str:
    return "/".join(part for part in parts if part)


def _read_route(
    folder: SentenceTransformersFolder, pipeline: list[tuple[str, str]], where: str
) -> SentenceTransformersRoute:
    """One pipeline of ``(module folder, module type)``: Transformer, Pooling, Dense..., Normalize."""
    kinds = [_kind(module_type) for _, module_type in pipeline]
    route = SentenceTransformersRoute(encoder_folder=pipeline[0][0] if pipeline else "")
    for (module_folder, module_type), kind in zip(pipeline, kinds, strict=True):
        if kind not in _KNOWN_MODULES:
            route.refusals[""] = f"module {module_folder!r} is a {module_type} (custom code, or unknown to us)"
            return route
    order = "".join({"Transformer": "T", "Pooling": "P", "Dense": "D", "Normalize": "N"}.get(k, "?") for k in kinds)
    if not re.fullmatch(r"TPD*N?", order):
        shape = " -> ".join(f"{kind} ({path or 'the root'})" for (path, _), kind in zip(pipeline, kinds, strict=True))
        route.refusals[""] = (
            f"{where} runs {shape}, where a model of contrastive_hf runs Transformer -> Pooling -> Dense... -> "
            "Normalize"
        )
        return route
    _read_transformer(folder, route)
    pooling_folder = pipeline[1][0]
    dense_folders = [path for (path, _), kind in zip(pipeline, kinds, strict=True) if kind == "Dense"]
    route.dense = [_read_dense(folder, path, route) for path in dense_folders]
    _read_pooling(folder, route, pooling_folder)
    if kinds[-1] == "Normalize":
        route.normalize = True
        route.modules["normalize"] = pipeline[-1][0]
    return route


def _json(folder: SentenceTransformersFolder, module_folder: str, filename: str) -> dict | None:
    return read_json(folder.name_or_path, _join(module_folder, filename), **folder.download)


def _read_transformer(folder: SentenceTransformersFolder, route: SentenceTransformersRoute) -> None:
    where = route.encoder_folder or "the root"
    route.modules["encoder"] = route.encoder_folder
    settings = _json(folder, route.encoder_folder, "sentence_bert_config.json") or {}
    for name, neutral in _NEUTRAL_TRANSFORMER_SETTINGS.items():
        if settings.get(name) not in (neutral, None):
            route.refusals[""] = f"Transformer module ({where}) sets {name}={settings[name]!r}"
    text = (settings.get("modality_config") or {}).get("text", {})
    if text.get("method", "forward") != "forward" or text.get("method_output_name", "last_hidden_state") not in (
        "last_hidden_state",
        None,
    ):
        route.refusals[""] = f"Transformer module ({where}) embeds text by {text} (not the encoder's last states)"
    tokenizer_config = _json(folder, route.encoder_folder, "tokenizer_config.json") or {}
    if settings.get("do_lower_case") and not tokenizer_config.get("do_lower_case"):
        route.refusals[""] = (
            f"Transformer module ({where}) lower-cases texts (do_lower_case), which its tokenizer does not do"
        )
    limit = settings.get("max_seq_length")
    route.modules["max_seq_length"] = _join(route.encoder_folder, "sentence_bert_config.json")
    if limit is None:  # sentence-transformers 6 keeps it as the tokenizer's, capped at the position embeddings
        limit = tokenizer_config.get("model_max_length")
        limit = limit if isinstance(limit, int) and limit < 1_000_000 else None
        positions = (_json(folder, route.encoder_folder, "config.json") or {}).get("max_position_embeddings")
        if limit is not None and isinstance(positions, int) and positions > 0:
            limit = min(limit, positions)
        route.modules["max_seq_length"] = _join(route.encoder_folder, "tokenizer_config.json")
    route.max_seq_length = limit


def _pooling_modes(config: dict) -> list[str]:
    """The Pooling modes of a Pooling config, in the registry's (long) names, as sentence-transformers reads them:
    ``pooling_mode`` when present, else the boolean keys (none set: mean)."""
    if "pooling_mode" in config:
        modes = config["pooling_mode"]
        modes = [modes] if isinstance(modes, str) else list(modes)
        return [_POOLING_MODE_NAMES.get(mode, mode) for mode in modes]
    long_names = dict.fromkeys(_POOLING_MODE_NAMES.values())
    modes = [mode for mode in long_names if config.get(f"pooling_mode_{mode}")]
    return modes or ["mean_tokens"]


def _read_pooling(folder: SentenceTransformersFolder, route: SentenceTransformersRoute, pooling_folder: str) -> None:
    config = _json(folder, pooling_folder, "config.json") or {}
    route.include_prompt = bool(config.get("include_prompt", True))
    route.modules["pooler_type"] = route.modules["include_prompt"] = pooling_folder
    modes = _pooling_modes(config)
    if len(modes) != 1:
        route.refusals["pooler_type"] = (
            f"Pooling module {pooling_folder!r} concatenates {len(modes)} poolings ({', '.join(modes)})"
        )
        return
    mode = modes[0]
    plain = pooler_for_sentence_transformers_mode(mode)
    if plain is None and mode in POOLERS.names() and get_pooler(mode).sentence_transformers_mode is None:
        plain = mode  # a pooler no Pooling mode computes, written by its name as our own files write it
    with_layer = [
        spec.name for spec in POOLERS if spec.sentence_transformers_mode == mode and spec.uses_encoder_pooler_layer
    ]
    if with_layer and route.dense and _holds_the_encoder_pooler_layer(folder, route, route.dense[0]):
        route.pooler_type = with_layer[0]
        route.modules["pooler_type"] += f" and {route.dense[0].folder}"
        route.dense = route.dense[1:]
    elif plain is not None:
        route.pooler_type = plain
    else:
        route.refusals["pooler_type"] = (
            f"Pooling module {pooling_folder!r} pools by {mode!r}, which no registered pooler computes "
            "(contrastive_hf.models.poolers.register_pooler registers one with its sentence_transformers_mode)"
        )


def _read_dense(folder: SentenceTransformersFolder, dense_folder: str, route: SentenceTransformersRoute):
    config = _json(folder, dense_folder, "config.json") or {}
    activation_class = config.get("activation_function") or IDENTITY
    activation = None if activation_class == IDENTITY else _ACTIVATION_NAMES.get(activation_class)
    if activation is None and activation_class != IDENTITY:
        route.refusals["dense"] = f"Dense module {dense_folder!r} applies {activation_class}, which has no equivalent"
    if config.get("use_residual"):
        route.refusals["dense"] = f"Dense module {dense_folder!r} adds its input back (use_residual)"
    for name in ("module_input_name", "module_output_name"):
        if config.get(name, "sentence_embedding") != "sentence_embedding":
            route.refusals["dense"] = f"Dense module {dense_folder!r} reads or writes {config[name]!r}"
    return DenseModule(
        dense_folder,
        int(config.get("in_features", 0)),
        int(config.get("out_features", 0)),
        bool(config.get("bias", True)),
        activation,
    )


def _holds_the_encoder_pooler_layer(
    folder: SentenceTransformersFolder, route: SentenceTransformersRoute, dense: DenseModule
) -> bool:
    """Whether a Dense module is the encoder's own pooler layer (BERT's dense + tanh): what our files write for the
    ``cls`` pooler, and what sentence-transformers writes for a BERT pooled by its pooler output."""
    if dense.activation != "tanh" or dense.in_features != dense.out_features:
        return False
    encoder = _read_weights(folder.name_or_path, route.encoder_folder, folder.download, "pooler.dense.")
    mine = _read_weights(folder.name_or_path, dense.folder, folder.download)
    if not encoder or not mine or "linear.weight" not in mine:
        return False
    same_weight = torch.equal(
        encoder.get("pooler.dense.weight", torch.empty(0)).float(), mine["linear.weight"].float()
    )
    bias = mine.get("linear.bias")
    same_bias = bias is not None and torch.equal(
        encoder.get("pooler.dense.bias", torch.empty(0)).float(), bias.float()
    )
    return same_weight and same_bias


def _read_weights(name_or_path: str, module_folder: str, download: dict, prefix: str = "") -> dict | None:
    """The tensors (those named ``prefix...`` when given) of a module folder's weights: ``model.safetensors`` (or the
    shards its index names), else ``pytorch_model.bin``; None when it has none."""
    path = locate(name_or_path, _join(module_folder, "model.safetensors"), **download)
    if path is not None:
        if not prefix:
            return load_file(path, device="cpu")
        with safe_open(path, framework="pt", device="cpu") as weights:
            return {name: weights.get_tensor(name) for name in weights.keys() if name.startswith(prefix)}
    index = read_json(name_or_path, _join(module_folder, "model.safetensors.index.json"), **download)
    if index is not None:
        shards = {shard for name, shard in index.get("weight_map", {}).items() if name.startswith(prefix)}
        tensors = {}
        for shard in shards:
            shard_path = locate(name_or_path, _join(module_folder, shard), **download)
            if shard_path is not None:
                with safe_open(shard_path, framework="pt", device="cpu") as weights:
                    tensors.update({n: weights.get_tensor(n) for n in weights.keys() if n.startswith(prefix)})
        return tensors
    path = locate(name_or_path, _join(module_folder, "pytorch_model.bin"), **download)
    if path is None:
        return None
    state = torch.load(path, map_location="cpu", weights_only=True)
    return {name: tensor for name, tensor in state.items() if name.startswith(prefix)}
