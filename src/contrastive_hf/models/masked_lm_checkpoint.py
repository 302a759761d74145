"""An encoder and its language-model head saved as transformers' model of the encoder's architecture with that head:
the masked-LM model of an encoder (``BertForMaskedLM``, ``RobertaForMaskedLM``, ``DistilBertForMaskedLM``...), the
causal-LM model of a decoder (``Qwen2ForCausalLM``, ``LlamaForCausalLM``...: the head that masked next-token
prediction trains, `heads.NextTokenHead`). ``AutoModelForMaskedLM.from_pretrained`` and the fill-mask pipeline (or
``AutoModelForCausalLM.from_pretrained``) then predict with the trained head, while ``AutoModel`` and
sentence-transformers take the encoder from the same ``model.safetensors`` (transformers strips the base model's
prefix, ``bert.`` or ``model.``, as it does for ``bert-base-uncased`` or a decoder from the Hub).

The layout is read from transformers itself: the class of the encoder's configuration, built on the meta device
(nothing allocated or initialised), names its base model's prefix, its head's dense layer, LayerNorm, output weights
and bias (a decoder's head is its output projection alone), and which of them are tied (an output matrix tied to the
input embeddings is not saved, as transformers does not save it). An architecture without such a class, or whose head
is not of our head's form with its shapes, has no layout (`masked_lm_layout` gives None), and the head stays beside
the encoder (`checkpoint_files`).

This module imports torch and transformers only.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

__all__ = ["HEAD_PARTS", "MaskedLMLayout", "is_decoder", "masked_lm_layout", "masked_lm_head_left_unused"]

# The parts of a BERT-style MLM head, as `masked_lm_layout` takes ours: dense -> activation -> LayerNorm -> decoder
# (its weight absent when tied to the input embeddings) + bias. A decoder's head has the decoder part only.
HEAD_PARTS = ("dense.weight", "dense.bias", "norm.weight", "norm.bias", "decoder.weight", "bias")


def is_decoder(encoder_config) -> bool:
    """Whether an encoder configuration is a decoder LLM's (Llama, Qwen2, GPT-2...): transformers has a causal-LM model
    of its architecture and no masked-LM one (BERT and RoBERTa have both, and are encoders)."""
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    model_type = encoder_config.model_type
    return model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and model_type not in MODEL_FOR_MASKED_LM_MAPPING_NAMES


@dataclass(frozen=True)
class MaskedLMLayout:
    """Where an encoder and an MLM head lie in the checkpoint of the encoder's masked-LM architecture (a decoder's
    causal-LM architecture, for its next-token head).

    Attributes:
        architecture: the transformers class the checkpoint is, as its ``config.json`` names it (``BertForMaskedLM``).
        base_prefix: the encoder's weights' prefix there (``"bert."``).
        head_names: ``{name of a head weight in the saving model: its name in the checkpoint}``, e.g.
            ``{"mlm_head.dense.weight": "cls.predictions.transform.dense.weight", ...}``.
    """

    architecture: str
    base_prefix: str
    head_names: dict[str, str]

    def to_checkpoint(self, encoder_state: dict[str, torch.Tensor], heads: dict[str, torch.Tensor]) -> dict:
        """The checkpoint's weights: the encoder's under the base model's prefix, and the head's, taken out of
        ``heads`` (the weights saved beside the encoder), under the masked-LM model's names."""
        state = {self.base_prefix + name: tensor for name, tensor in encoder_state.items()}
        for ours, theirs in self.head_names.items():
            state[theirs] = heads.pop(ours)
        return state

    def from_checkpoint(self, state: dict[str, torch.Tensor]) -> tuple[dict, dict]:
        """Weights read from such a checkpoint (whole, or one shard) as ``(encoder's under its own names, head's
        under the saving model's names)``. A checkpoint of the encoder alone (the earlier layout, where the head is
        saved beside it) is all encoder."""
        ours = {theirs: name for name, theirs in self.head_names.items()}
        encoder, head = {}, {}
        for name, tensor in state.items():
            if name in ours:
                head[ours[name]] = tensor
            else:
                encoder[name.removeprefix(self.base_prefix)] = tensor
        return encoder, head


def _masked_lm_class(encoder_config) -> type | None:
    """transformers' class of ``encoder_config``'s architecture with our head's kind of head: its masked-LM class, or
    a decoder's causal-LM class (`is_decoder`); None without one (or for remote code)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING, MODEL_FOR_MASKED_LM_MAPPING

    mapping = MODEL_FOR_CAUSAL_LM_MAPPING if is_decoder(encoder_config) else MODEL_FOR_MASKED_LM_MAPPING
    try:
        return mapping[type(encoder_config)]
    except KeyError:
        return None


def _masked_lm_model(encoder_config) -> nn.Module | None:
    """transformers' masked-LM (a decoder's causal-LM) model of ``encoder_config``'s architecture, on the meta device;
    None when the architecture has none. Built by its class, not `AutoModelForMaskedLM.from_config`, which would build
    it sharded inside DeepSpeed ZeRO-3's ``zero.Init`` during a ZeRO-3 run."""
    model_class = _masked_lm_class(encoder_config)
    if model_class is None:
        return None
    with torch.device("meta"):
        return model_class(copy.deepcopy(encoder_config))


def _head_weights(model: nn.Module) -> tuple[dict[str, str], set[str]]:
    """The saved weights of a masked-LM model's head by part (`HEAD_PARTS`), and the names of every saved head
    weight; ``({}, names)`` when the head is not of the dense -> LayerNorm -> decoder form (or, for a causal-LM model,
    the output projection alone)."""
    prefix = model.base_model_prefix + "."
    tied = getattr(model, "all_tied_weights_keys", None) or {}
    saved = {name for name in model.state_dict() if not name.startswith(prefix) and name not in tied}
    modules = {module: name for name, module in model.named_modules() if name and not name.startswith(prefix)}
    output = model.get_output_embeddings()
    linears = [name for module, name in modules.items() if isinstance(module, nn.Linear) and module is not output]
    norms = [name for module, name in modules.items() if isinstance(module, nn.LayerNorm)]
    if output not in modules:
        return {}, saved
    decoder = modules[output]
    if not linears and not norms:  # a decoder's language-model head: the output projection alone
        parts = {"decoder.weight": f"{decoder}.weight"}
        return {part: name for part, name in parts.items() if name not in tied}, saved
    if len(linears) != 1 or len(norms) != 1:
        return {}, saved
    parts = {
        "dense.weight": f"{linears[0]}.weight",
        "dense.bias": f"{linears[0]}.bias",
        "norm.weight": f"{norms[0]}.weight",
        "norm.bias": f"{norms[0]}.bias",
        "decoder.weight": f"{decoder}.weight",
        "bias": tied.get(f"{decoder}.bias", f"{decoder}.bias"),  # BERT's decoder bias is its head's `bias`
    }
    return {part: name for part, name in parts.items() if name not in tied}, saved


def masked_lm_layout(
    encoder_config, encoder_names: set[str], head: dict[str, tuple[str, torch.Size]]
) -> MaskedLMLayout | None:
    """The `MaskedLMLayout` of an encoder (``encoder_names``: its state dict's names) and an MLM head (``head``:
    ``{part: (name in the saving model, shape)}`` for the parts of `HEAD_PARTS` it has, ``decoder.weight`` only when
    untied); None when the encoder's architecture has no masked-LM model whose weights are exactly these (every
    base-model weight among the encoder's, every head weight one of ours, of the same shape)."""
    model = _masked_lm_model(encoder_config)
    if model is None:
        return None
    parts, saved = _head_weights(model)
    shapes = model.state_dict()
    prefix = model.base_model_prefix + "."
    base = {name.removeprefix(prefix) for name in shapes if name.startswith(prefix)}
    if set(parts) != set(head) or set(parts.values()) != saved or not base <= set(encoder_names):
        return None
    if any(tuple(shapes[parts[part]].shape) != tuple(shape) for part, (_, shape) in head.items()):
        return None
    return MaskedLMLayout(type(model).__name__, prefix, {name: parts[part] for part, (name, _) in head.items()})


@contextmanager
def masked_lm_head_left_unused(encoder_config) -> Iterator[None]:
    """While transformers loads the encoder alone (``AutoModel``, sentence-transformers) from a checkpoint that its
    ``config.json`` says is the architecture's masked-LM model (``encoder_config.architectures``): the head's
    weights are weights the encoder is expected to leave unused, as transformers' head models list theirs
    (``_keys_to_ignore_on_load_unexpected``), instead of a load report of "unexpected" weights. Anything else it
    would report still is. The base model class's list is extended for the time of the load, and restored."""
    from transformers.models.auto.modeling_auto import MODEL_MAPPING

    masked_lm_class = _masked_lm_class(encoder_config)
    saved_as = getattr(encoder_config, "architectures", None) or []
    base_class = MODEL_MAPPING.get(type(encoder_config), None) if masked_lm_class is not None else None
    if base_class is None or saved_as != [masked_lm_class.__name__]:
        yield
        return
    _, saved = _head_weights(_masked_lm_model(encoder_config))
    name = "_keys_to_ignore_on_load_unexpected"
    own = base_class.__dict__.get(name, _ABSENT)
    setattr(base_class, name, {*(getattr(base_class, name, None) or ()), *(f"^{re.escape(key)}$" for key in saved)})
    try:
        yield
    finally:
        if own is _ABSENT:
            delattr(base_class, name)
        else:
            setattr(base_class, name, own)


_ABSENT = object()
