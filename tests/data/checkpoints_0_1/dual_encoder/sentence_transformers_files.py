"""The files that let ``SentenceTransformer(path)`` load a contrastive_hf checkpoint with the same embeddings.

sentence-transformers reads ``modules.json`` (a pipeline of modules), runs the checkpoint's AutoModel for token
embeddings (module 0, ``path: ""``), then a Pooling module and optional Dense modules. Our poolers map onto it as:

- ``cls_before_pooler``, ``mean``, ``max``: Pooling in that mode;
- ``cls``: Pooling on the [CLS] token, then a Dense layer holding BERT's pooler weights with tanh;
- a projection kept at inference (``projection_at_inference=True``): one Dense layer per projection layer.

``avg_first_last`` and ``avg_top2`` pool two layers' hidden states, which no sentence-transformers module does. For
them (and for projection activations it has no class for) no ``modules.json`` is written: sentence-transformers then
falls back to mean pooling of the last layer and says so in a warning. Use ``AutoModel`` for those checkpoints.

This module imports only the standard library, torch and safetensors: it travels with the modeling code.
"""

from __future__ import annotations

import json
import os

import torch
from safetensors.torch import save_file

# Activations sentence-transformers can rebuild from a class name (its Dense config stores one).
_TORCH_ACTIVATIONS = {
    "relu": "torch.nn.modules.activation.ReLU",
    "tanh": "torch.nn.modules.activation.Tanh",
    "gelu": "torch.nn.modules.activation.GELU",
    "silu": "torch.nn.modules.activation.SiLU",
    "sigmoid": "torch.nn.modules.activation.Sigmoid",
}
_IDENTITY = "torch.nn.modules.linear.Identity"
_POOLING_MODES = {"cls": "cls_token", "cls_before_pooler": "cls_token", "mean": "mean_tokens", "max": "max_tokens"}
MODULE_FILES = ("modules.json", "sentence_bert_config.json", "config_sentence_transformers.json")


def sentence_transformers_unsupported_reason(model) -> str | None:
    """Why ``model``'s embedding cannot be expressed as sentence-transformers modules, or None when it can."""
    config = model.config
    if config.pooler_type not in _POOLING_MODES:
        return f"pooler_type={config.pooler_type!r} averages two layers, which no sentence-transformers module does"
    if config.projection_at_inference and config.projection_type == "mlp":
        if config.projection_activation not in _TORCH_ACTIVATIONS:
            return f"projection_activation={config.projection_activation!r} has no torch.nn class"
    return None


def _dense_stages(model) -> list[tuple[torch.nn.Linear, str]]:
    """(linear layer, activation class name) for every Dense module after pooling, in order."""
    config = model.config
    stages = []
    if config.pooler_type == "cls":
        stages.append((model.encoder.pooler.dense, _TORCH_ACTIVATIONS["tanh"]))
    if config.projection_at_inference and config.projection_type != "none":
        layers = list(model.projection.layers)
        for index, layer in enumerate(layers):
            is_last = index == len(layers) - 1
            activated = config.projection_type == "mlp" and (not is_last or config.projection_output_activation)
            stages.append((layer, _TORCH_ACTIVATIONS[config.projection_activation] if activated else _IDENTITY))
    return stages


def write_sentence_transformers_files(model, save_directory: str | os.PathLike, max_seq_length: int = 512) -> bool:
    """Write modules.json and the module folders for ``model`` (a ContrastiveModel or a model holding one as
    ``.contrastive``). Returns False, writing nothing, when the embedding cannot be expressed (see module doc)."""
    model = getattr(model, "contrastive", model)
    for name in MODULE_FILES:  # never leave stale files from an earlier save with another pooler
        path = os.path.join(save_directory, name)
        if os.path.exists(path):
            os.remove(path)
    if sentence_transformers_unsupported_reason(model) is not None:
        return False
    hidden_size = model.config.encoder.hidden_size
    encoder_limit = getattr(model.config.encoder, "max_position_embeddings", max_seq_length)
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}]
    _write_json(
        os.path.join(save_directory, "sentence_bert_config.json"),
        {"max_seq_length": min(max_seq_length, encoder_limit), "do_lower_case": False},
    )
    pooling = {
        "word_embedding_dimension": hidden_size,
        "pooling_mode_cls_token": False,
        "pooling_mode_mean_tokens": False,
        "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False,
    }
    pooling[f"pooling_mode_{_POOLING_MODES[model.config.pooler_type]}"] = True
    modules.append(_module(1, "Pooling", "1_Pooling"))
    _write_json(os.path.join(save_directory, "1_Pooling", "config.json"), pooling)
    for index, (layer, activation) in enumerate(_dense_stages(model), start=2):
        folder = f"{index}_Dense"
        modules.append(_module(index, "Dense", folder))
        _write_json(
            os.path.join(save_directory, folder, "config.json"),
            {
                "in_features": layer.in_features,
                "out_features": layer.out_features,
                "bias": layer.bias is not None,
                "activation_function": activation,
            },
        )
        tensors = {"linear.weight": layer.weight.detach().float().cpu().contiguous()}
        if layer.bias is not None:
            tensors["linear.bias"] = layer.bias.detach().float().cpu().contiguous()
        save_file(tensors, os.path.join(save_directory, folder, "model.safetensors"))
    _write_json(os.path.join(save_directory, "modules.json"), modules)
    return True


def _module(index: int, kind: str, path: str) -> dict:
    return {"idx": index, "name": str(index), "path": path, "type": f"sentence_transformers.models.{kind}"}


def _write_json(path: str, content) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(content, handle, indent=2)
        handle.write("\n")
