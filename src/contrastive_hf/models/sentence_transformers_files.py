"""The files that let ``SentenceTransformer(path)`` load a contrastive_hf checkpoint, without remote code and with the
same embeddings, and that Text Embeddings Inference reads to serve it.

sentence-transformers reads ``modules.json`` (a pipeline of modules): module 0 is the encoder (a ``Transformer``
module at ``path: ""``, the checkpoint's root, which holds the encoder in its own architecture), then a ``Pooling``
module and optional ``Dense`` modules. Each pooler writes its own Pooling config from its registration
(`poolers.PoolerSpec.sentence_transformers_pooling`, from its ``sentence_transformers_mode``):

- ``cls_before_pooler``, ``mean``, ``max``: Pooling in that mode;
- ``cls``: Pooling on the [CLS] token, then a Dense layer holding BERT's pooler weights with tanh (a pooler that
  ``uses_encoder_pooler_layer``);
- a projection kept at inference (``projection_at_inference=True``): one Dense layer per projection layer;
- embeddings L2-normalised (``normalize_embeddings=True``): a ``Normalize`` module last.

`sentence_transformers_folders` reads such a folder back (ours or any sentence-transformers model's).

``config_sentence_transformers.json`` records the similarity function (``cosine``, or ``dot`` for DPR's inner
product: what sentence-transformers and MTEB compare embeddings with) and the prompts.

A dual encoder with two towers is a sentence-transformers ``Router``: ``encode_query`` runs the query tower
(``query_*`` folders), ``encode_document`` the passage tower (``document_*``).

The module class names written are sentence-transformers' long-standing ``sentence_transformers.models.*`` paths:
sentence-transformers 6 loads them without a warning (it maps them to its new modules), older releases know only
them, and Text Embeddings Inference finds Dense layers by them. The Pooling configuration keeps its boolean keys for
the same reason.

``avg_first_last`` and ``avg_top2`` pool two layers' hidden states, which no sentence-transformers module does (no
mode is registered for them). For them, for any pooler registered without a mode, and for projection activations it
has no class for, the modules are written all the same, naming what is missing (the Pooling config's ``pooling_mode``
is the pooler's name), so that sentence-transformers refuses the folder with that name instead of loading it as a
mean-pooling model. Use ``ContrastiveModel.from_pretrained`` for those checkpoints.

This module imports only the standard library and torch (and transformers for a version number), and its siblings.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from typing import NamedTuple

import torch

from .checkpoint_writes import replace_on_success, save_safetensors
from .poolers import PoolerSpec, get_pooler

__all__ = [
    "MODULE_FILES",
    "TORCH_ACTIVATIONS",
    "IDENTITY",
    "DenseLayer",
    "SentenceTransformersStack",
    "sentence_transformers_unsupported_reason",
    "write_json",
    "write_sentence_transformers_files",
]

# Activations sentence-transformers can rebuild from a class name (its Dense config stores one), by their names in
# transformers' ACT2FN (a projection's ``projection_activation``).
TORCH_ACTIVATIONS = {
    "relu": "torch.nn.modules.activation.ReLU",
    "tanh": "torch.nn.modules.activation.Tanh",
    "gelu": "torch.nn.modules.activation.GELU",
    "silu": "torch.nn.modules.activation.SiLU",
    "sigmoid": "torch.nn.modules.activation.Sigmoid",
}
IDENTITY = "torch.nn.modules.linear.Identity"
# Where an activation without a torch class is named, so that sentence-transformers fails to import it, naming it.
_UNAVAILABLE = "torch.nn.modules.activation"
MODULE_FILES = ("modules.json", "sentence_bert_config.json", "config_sentence_transformers.json", "router_config.json")
_ROUTES = ("query", "document")


class DenseLayer(NamedTuple):
    """One Dense module: the linear layer it holds, named as in the saving model's state dict (the Dense file is
    written from that state dict's ``<name>.weight`` and ``<name>.bias``, as the encoder and heads are, never from the
    live module, which DeepSpeed ZeRO-3 leaves as an empty shard), and the activation after it (None: identity)."""

    name: str
    activation: str | None = None


@dataclass
class SentenceTransformersStack:
    """One encoder's path to an embedding, as sentence-transformers modules.

    Attributes:
        pooler_type: the model's pooler (a registered one, `poolers.py`).
        hidden_size: the encoder's hidden size (the Pooling module's input).
        max_seq_length: the longest input the encoder takes.
        dense: each Dense module after pooling (`DenseLayer`), in order; the encoder's own pooler layer (BERT's dense +
            tanh) first for ``cls``.
        include_prompt: whether the prompt's tokens are pooled (sentence-transformers' ``include_prompt``).
        normalize: whether the embedding is L2-normalised last (a ``Normalize`` module).
    """

    pooler_type: str
    hidden_size: int
    max_seq_length: int = 512
    dense: list[DenseLayer] = field(default_factory=list)
    include_prompt: bool = True
    normalize: bool = False

    @property
    def pooler(self) -> PoolerSpec:
        return get_pooler(self.pooler_type)

    def unsupported_reason(self) -> str | None:
        refusal = self.pooler.sentence_transformers_refusal()
        if refusal is not None:
            return refusal
        for _, activation in self.dense:
            if activation is not None and activation not in TORCH_ACTIVATIONS:
                return f"the activation {activation!r} has no torch.nn class"
        return None


def sentence_transformers_unsupported_reason(model) -> str | None:
    """Why ``model``'s embedding cannot be expressed as sentence-transformers modules, or None when it can."""
    stacks = model.sentence_transformers_stacks()
    return next((reason for reason in (stack.unsupported_reason() for stack in stacks.values()) if reason), None)


def write_sentence_transformers_files(
    save_directory: str | os.PathLike,
    stacks: dict[str, SentenceTransformersStack],
    state_dict: dict[str, torch.Tensor],
    similarity: str = "cosine",
    prompts: dict[str, str] | None = None,
    default_prompt_name: str | None = None,
    tower_folders: dict[str, str] | None = None,
    truncate_dim: int | None = None,
) -> bool:
    """Write modules.json and the module folders of a checkpoint whose encoder(s) are saved already.

    Args:
        save_directory: the checkpoint folder.
        stacks: ``{"": stack}`` for one encoder saved at the root; ``{"query": ..., "document": ...}`` for two towers
            (a `Router`), whose encoders are saved in ``tower_folders[route]`` (sub-folders of the checkpoint); {}
            for a model that is not a sentence encoder (nothing is written).
        state_dict: the saving model's whole weights, the very dict its encoder(s) and heads are written from (under
            DeepSpeed ZeRO-3, the consolidated copy); the Dense modules' weights are read from it.
        similarity: ``cosine`` or ``dot``, sentence-transformers' ``similarity_fn_name``.
        prompts, default_prompt_name: sentence-transformers' prompts (e.g. ``{"query": "query: "}``).
        truncate_dim: the size sentence-transformers truncates embeddings to by default; written only when set.

    Returns whether the modules express the embedding; when they cannot (see `SentenceTransformersStack`), they are
    written naming what is missing, so that sentence-transformers refuses the folder rather than load another model.
    """
    # what an earlier save wrote (with another pooler, head or towers): removed once this save is written, so that a
    # save that fails halfway leaves the earlier files, each of them whole (`checkpoint_writes`)
    earlier = [name for name in MODULE_FILES if os.path.exists(os.path.join(save_directory, name))]
    earlier += [
        entry
        for entry in os.listdir(save_directory)
        if entry.split("_")[-1] in ("Pooling", "Dense", "Normalize")
        and os.path.isdir(os.path.join(save_directory, entry))
    ]
    if not stacks:
        _remove(save_directory, earlier)
        return False
    _write_config(save_directory, similarity, prompts, default_prompt_name, truncate_dim)
    # An embedding sentence-transformers cannot compute (a pooler averaging two layers, an activation without a torch
    # class) is written all the same, naming what it would need, so that sentence-transformers refuses the folder
    # with that name ("Invalid pooling mode: 'avg_first_last'") instead of loading it without modules.json as a
    # mean-pooling model, which would give other embeddings without a word.
    expressed = not any(stack.unsupported_reason() for stack in stacks.values())
    if list(stacks) == [""]:
        modules = _write_stack(save_directory, "", stacks[""], state_dict, start=1)
        transformer = [_module(0, "Transformer", "")]
        write_json(os.path.join(save_directory, "modules.json"), transformer + modules)
        written = {"config_sentence_transformers.json", "modules.json", "sentence_bert_config.json"}
        _remove(save_directory, [name for name in earlier if name not in written | _folders(modules)])
        return expressed
    types, structure, folders_written = {}, {}, set()
    for route, stack in stacks.items():
        tower = tower_folders[route]
        modules = _write_stack(save_directory, route, stack, state_dict, start=1)
        folders = [tower] + [entry["path"] for entry in modules]
        _write_json_module_config(os.path.join(save_directory, tower), stack)
        structure[route] = folders
        types.update({folder: _module_type(folder.rsplit("_", 1)[-1]) for folder in folders})
        folders_written |= _folders(modules)
    write_json(
        os.path.join(save_directory, "router_config.json"),
        {
            "types": types,
            "structure": structure,
            "parameters": {"default_route": "document", "allow_empty_key": True, "route_mappings": {}},
        },
    )
    write_json(os.path.join(save_directory, "modules.json"), [_module(0, "Router", "")])
    written = {"config_sentence_transformers.json", "router_config.json", "modules.json"}
    _remove(save_directory, [name for name in earlier if name not in written | folders_written])
    return expressed


def _folders(modules: list[dict]) -> set[str]:
    """The module folders a stack's save wrote (a Normalize module has none)."""
    return {entry["path"] for entry in modules if not entry["type"].endswith("Normalize")}


def _remove(save_directory: str, names: list[str]) -> None:
    for name in names:
        path = os.path.join(save_directory, name)
        if os.path.isdir(path):
            shutil.rmtree(path)
        else:
            os.remove(path)


def _write_stack(
    save_directory: str, route: str, stack: SentenceTransformersStack, state_dict: dict[str, torch.Tensor], start: int
) -> list[dict]:
    """The Pooling and Dense module folders of one stack; ``route`` prefixes their folder names (Router)."""
    prefix = f"{route}_" if route else ""
    if not route:
        _write_json_module_config(save_directory, stack)
    # the pooler writes its own module's config, as sentence-transformers' Pooling does (`poolers.PoolerSpec`)
    pooling = stack.pooler.sentence_transformers_pooling(stack.hidden_size, stack.include_prompt)
    folder = f"{prefix}{start}_Pooling"
    write_json(os.path.join(save_directory, folder, "config.json"), pooling)
    modules = [_module(start, "Pooling", folder)]
    for index, (name, activation) in enumerate(stack.dense, start=start + 1):
        folder = f"{prefix}{index}_Dense"
        modules.append(_module(index, "Dense", folder))
        tensors = {"linear.weight": state_dict[f"{name}.weight"]}  # (out_features, in_features)
        if f"{name}.bias" in state_dict:
            tensors["linear.bias"] = state_dict[f"{name}.bias"]
        out_features, in_features = tensors["linear.weight"].shape
        write_json(
            os.path.join(save_directory, folder, "config.json"),
            {
                "in_features": in_features,
                "out_features": out_features,
                "bias": "linear.bias" in tensors,
                "activation_function": TORCH_ACTIVATIONS.get(activation, f"{_UNAVAILABLE}.{activation}")
                if activation
                else IDENTITY,
            },
        )
        tensors = {key: tensor.detach().float().cpu().contiguous() for key, tensor in tensors.items()}
        save_safetensors(tensors, os.path.join(save_directory, folder, "model.safetensors"))
    if stack.normalize:  # a module without configuration or weights: its folder is not written (nor read)
        index = start + 1 + len(stack.dense)
        modules.append(_module(index, "Normalize", f"{prefix}{index}_Normalize"))
    return modules


def _write_json_module_config(folder: str, stack: SentenceTransformersStack) -> None:
    write_json(
        os.path.join(folder, "sentence_bert_config.json"),
        {"max_seq_length": stack.max_seq_length, "do_lower_case": False},
    )


def _write_config(
    save_directory: str,
    similarity: str,
    prompts: dict | None,
    default_prompt_name: str | None,
    truncate_dim: int | None = None,
):
    versions = {}
    for package, key in (("sentence-transformers", "sentence_transformers"), ("transformers", "transformers")):
        try:
            versions[key] = version(package)
        except PackageNotFoundError:
            pass
    versions["pytorch"] = torch.__version__
    config = {
        "__version__": versions,
        "model_type": "SentenceTransformer",
        "prompts": dict(prompts or {}),
        "default_prompt_name": default_prompt_name,
        "similarity_fn_name": similarity,
    }
    if truncate_dim is not None:
        config["truncate_dim"] = truncate_dim
    write_json(os.path.join(save_directory, "config_sentence_transformers.json"), config)


def _module_type(kind: str) -> str:
    return f"sentence_transformers.models.{kind}"


def _module(index: int, kind: str, path: str) -> dict:
    return {"idx": index, "name": str(index), "path": path, "type": _module_type(kind)}


def write_json(path: str | os.PathLike, content) -> None:
    """Write ``content`` as indented JSON with sorted keys (every JSON file of a checkpoint), creating the folder; the
    file at ``path`` is replaced only once the new one is written whole (`checkpoint_writes.replace_on_success`)."""
    os.makedirs(os.path.dirname(os.fspath(path)) or ".", exist_ok=True)

    def write(temporary: str) -> None:
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump(content, handle, indent=2, sort_keys=True)
            handle.write("\n")

    replace_on_success(path, write)
