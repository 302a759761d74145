"""The poolers: how an encoder's token states become one vector per sentence, each registered once.

A pooler is one `register_pooler` call: its name (``pooler_type``), its function, and everything else the library
says about it: its sentence-transformers ``Pooling`` mode (the checkpoint's ``1_Pooling/config.json``; None where
no Pooling mode computes it), whether Text Embeddings Inference serves it, whether it reads every layer's states or
the encoder's own pooler layer, and the sentence the model card prints. `ContrastiveConfig` validates against this
registry, `modeling_contrastive.SentencePooler` pools with it, the sentence-transformers export and the model card
read it, and the scripts' ``--pooler_type`` help lists it when asked.

A pooler of one's own::

    def pool_mean_max(inputs: PoolingInputs) -> torch.Tensor:
        return (inputs.mean(inputs.last_hidden) + inputs.maximum(inputs.last_hidden)) / 2  # (B, h)

    register_pooler("mean_max", pool_mean_max, "the average of the token states' mean and maximum")

then ``ContrastiveConfig(pooler_type="mean_max")`` and ``--pooler_type mean_max``; a checkpoint saved with it loads
where the registering module was imported first. This module imports torch only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from .registry import Registry

__all__ = [
    "PoolingInputs",
    "PoolerSpec",
    "POOLERS",
    "register_pooler",
    "unregister_pooler",
    "get_pooler",
    "pooler_names",
    "pooler_for_sentence_transformers_mode",
    "uses_encoder_pooler_layer",
]


@dataclass
class PoolingInputs:
    """What a pooler reads, the same for a padded batch and a packed one (`packing.PackedSequences`).

    Attributes:
        encoder_outputs: the encoder's output (``last_hidden_state``; ``hidden_states`` when the pooler's spec says
            ``needs_hidden_states``; ``pooler_output``).
        tokens: a layer's states as the reductions take them: ``(B, L, h)`` padded, ``(T, h)`` packed.
        first: each sentence's first pooled token ``(.., h) -> (B, h)``.
        mean: the mean over each sentence's pooled tokens ``-> (B, h)``.
        maximum: the maximum over them ``-> (B, h)``.
        encoder_pooler: the encoder's pooler layer (BERT's dense + tanh over its input's first position), or None.
    """

    encoder_outputs: Any
    tokens: Callable[[torch.Tensor], torch.Tensor]
    first: Callable[[torch.Tensor], torch.Tensor]
    mean: Callable[[torch.Tensor], torch.Tensor]
    maximum: Callable[[torch.Tensor], torch.Tensor]
    encoder_pooler: torch.nn.Module | None = None

    @property
    def last_hidden(self) -> torch.Tensor:
        return self.tokens(self.encoder_outputs.last_hidden_state)

    def layer(self, index: int) -> torch.Tensor:
        """The states of layer ``index`` of ``hidden_states`` (0: the embeddings' output, -1: the last layer)."""
        return self.tokens(self.encoder_outputs.hidden_states[index])


@dataclass(frozen=True)
class PoolerSpec:
    """Everything about one pooler.

    Attributes:
        name: its ``pooler_type``.
        pool: ``PoolingInputs -> (B, h)``.
        description: what it computes, in words (the model card's and ``--help``'s text).
        sentence_transformers_mode: the sentence-transformers ``Pooling`` mode computing the same vector
            (``cls_token``, ``mean_tokens``, ``max_tokens``, ``mean_sqrt_len_tokens``, ``weightedmean_tokens``,
            ``lasttoken``); None: no module does, and no ``modules.json`` is written.
        served_by_text_embeddings_inference: whether Text Embeddings Inference computes it (it pools with cls or
            mean only).
        needs_hidden_states: it reads layers other than the last (the encoder runs with ``output_hidden_states``).
        uses_encoder_pooler_layer: it applies the encoder's own pooler layer (kept trainable, and exported as a Dense
            module with tanh after the Pooling module).
    """

    name: str
    pool: Callable[[PoolingInputs], torch.Tensor]
    description: str
    sentence_transformers_mode: str | None = None
    served_by_text_embeddings_inference: bool = False
    needs_hidden_states: bool = False
    uses_encoder_pooler_layer: bool = False


POOLERS: Registry[PoolerSpec] = Registry("pooler_type", "contrastive_hf.models.poolers.register_pooler")


def register_pooler(
    name: str,
    pool: Callable[[PoolingInputs], torch.Tensor],
    description: str,
    *,
    sentence_transformers_mode: str | None = None,
    served_by_text_embeddings_inference: bool = False,
    needs_hidden_states: bool = False,
    uses_encoder_pooler_layer: bool = False,
    replace: bool = False,
) -> PoolerSpec:
    """Offer a pooler to every part of the library (see `PoolerSpec` for the arguments); returns its spec."""
    spec = PoolerSpec(
        name,
        pool,
        description,
        sentence_transformers_mode,
        served_by_text_embeddings_inference,
        needs_hidden_states,
        uses_encoder_pooler_layer,
    )
    return POOLERS.add(name, spec, replace=replace)


def unregister_pooler(name: str) -> PoolerSpec:
    return POOLERS.remove(name)


def get_pooler(name: str) -> PoolerSpec:
    """The spec of ``pooler_type`` ``name``; a `ValueError` naming the registered poolers where there is none."""
    return POOLERS.get(name)


def pooler_names() -> tuple[str, ...]:
    return POOLERS.names()


def uses_encoder_pooler_layer(config) -> bool:
    """Whether a model config's pooler applies the encoder's own pooler layer (which is then kept trainable)."""
    return get_pooler(config.pooler_type).uses_encoder_pooler_layer


def pooler_for_sentence_transformers_mode(mode: str) -> str | None:
    """The ``pooler_type`` that computes what a sentence-transformers ``Pooling`` module in ``mode`` alone does
    (``cls_token`` -> ``cls_before_pooler``: ``cls`` adds the encoder's pooler layer, a Dense module of its own);
    None when no registered pooler does."""
    return next(
        (
            spec.name
            for spec in POOLERS
            if spec.sentence_transformers_mode == mode and not spec.uses_encoder_pooler_layer
        ),
        None,
    )


def _cls(inputs: PoolingInputs) -> torch.Tensor:
    if inputs.encoder_pooler is None:
        return inputs.encoder_outputs.pooler_output
    return inputs.encoder_pooler(inputs.first(inputs.last_hidden).unsqueeze(1))  # BertPooler reads position 0


def _average_of_layers(first_index: int, second_index: int) -> Callable[[PoolingInputs], torch.Tensor]:
    def pool(inputs: PoolingInputs) -> torch.Tensor:
        return inputs.mean((inputs.layer(first_index) + inputs.layer(second_index)) / 2)

    return pool


register_pooler(
    "cls",
    _cls,
    "the encoder's pooler layer (BERT's dense + tanh) over the [CLS] token, as BERT's next-sentence head reads it",
    sentence_transformers_mode="cls_token",
    served_by_text_embeddings_inference=True,
    uses_encoder_pooler_layer=True,
)
register_pooler(
    "cls_before_pooler",
    lambda inputs: inputs.first(inputs.last_hidden),
    "the last layer's [CLS] state",
    sentence_transformers_mode="cls_token",
    served_by_text_embeddings_inference=True,
)
register_pooler(
    "mean",
    lambda inputs: inputs.mean(inputs.last_hidden),
    "the mean of the last layer's token states",
    sentence_transformers_mode="mean_tokens",
    served_by_text_embeddings_inference=True,
)
register_pooler(
    "max",
    lambda inputs: inputs.maximum(inputs.last_hidden),
    "the maximum of the last layer's token states, per dimension",
    sentence_transformers_mode="max_tokens",
)
# SimCSE's averages of two layers' token means; hidden_states[0] is the embeddings' output, so layer 1 is the first
# transformer layer. No sentence-transformers module averages two layers.
register_pooler(
    "avg_first_last",
    _average_of_layers(1, -1),
    "the token mean of the average of the first and last transformer layers (SimCSE)",
    needs_hidden_states=True,
)
register_pooler(
    "avg_top2",
    _average_of_layers(-1, -2),
    "the token mean of the average of the last two layers (SimCSE)",
    needs_hidden_states=True,
)
