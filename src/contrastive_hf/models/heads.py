"""The parts a contrastive model adds around its encoder: the projection head, the MLM heads, the encoder itself built
whole (with its pooler layer), and the initialisation of what is new. The pooling module is `poolers.SentencePooler`.

This module imports torch, transformers and its siblings only.
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoModel
from transformers import initialization as init
from transformers.activations import ACT2FN

from .checkpoint_files import encoder_building_device
from .configuration_contrastive import ContrastiveConfig
from .masked_lm_checkpoint import masked_lm_head_left_unused

__all__ = ["ProjectionHead", "MaskedLMHead", "NextTokenHead", "build_encoder", "init_weights"]


class ProjectionHead(nn.Module):
    """The projection g(.) between the pooled vector and the contrastive loss (SimCLR; SimCSE's MLP)."""

    def __init__(self, config: ContrastiveConfig):
        super().__init__()
        hidden_size = config.encoder.hidden_size
        output_size = config.projection_dim or hidden_size
        if config.projection_type == "none":
            sizes = []
        elif config.projection_type == "linear":
            sizes = [hidden_size, output_size]
        else:
            inner = config.projection_hidden_size or hidden_size
            sizes = [hidden_size] + [inner] * (config.projection_layers - 1) + [output_size]
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:], strict=True))
        self.activation = ACT2FN[config.projection_activation] if config.projection_type == "mlp" else None
        self.output_activation = config.projection_type == "mlp" and config.projection_output_activation

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        for index, layer in enumerate(self.layers):
            pooled = layer(pooled)
            is_last = index == len(self.layers) - 1
            if self.activation is not None and (not is_last or self.output_activation):
                pooled = self.activation(pooled)
        return pooled


class MaskedLMHead(nn.Module):
    """BERT-style MLM head: dense -> activation -> LayerNorm -> vocabulary projection (+ bias).

    The vocabulary projection reuses the encoder's input embedding matrix when the encoder ties them
    (``tie_word_embeddings``, true for BERT, RoBERTa, DistilBERT...), so no weight is stored twice.
    """

    def __init__(self, encoder_config, embedding_size: int, tied: bool):
        super().__init__()
        activation = getattr(encoder_config, "hidden_act", None) or getattr(encoder_config, "activation", "gelu")
        self.dense = nn.Linear(encoder_config.hidden_size, embedding_size)
        self.activation = ACT2FN[activation]
        self.layer_norm = nn.LayerNorm(embedding_size, eps=getattr(encoder_config, "layer_norm_eps", 1e-12))
        self.bias = nn.Parameter(torch.zeros(encoder_config.vocab_size))
        self.decoder_weight = None if tied else nn.Parameter(torch.empty(encoder_config.vocab_size, embedding_size))

    def forward(self, hidden: torch.Tensor, input_embeddings: torch.Tensor) -> torch.Tensor:
        hidden = self.layer_norm(self.activation(self.dense(hidden)))
        weight = input_embeddings if self.decoder_weight is None else self.decoder_weight
        return F.linear(hidden, weight, self.bias)  # (..., vocab)


class NextTokenHead(nn.Module):
    """A decoder's language-model head, as its causal-LM model has it (``lm_head``: the final states -> vocabulary,
    no bias; Gemma 2's soft-capping of the scores kept), for masked next-token prediction (LLM2Vec's MNTP: the state
    before a masked token predicts it). The projection reuses the input embedding matrix when the decoder ties them
    (``tie_word_embeddings``: Qwen2-0.5B, Gemma, GPT-2), as `MaskedLMHead` does.
    """

    def __init__(self, encoder_config, embedding_size: int, tied: bool):
        super().__init__()
        self.decoder_weight = None if tied else nn.Parameter(torch.empty(encoder_config.vocab_size, embedding_size))
        self.softcap = getattr(encoder_config, "final_logit_softcapping", None)

    def forward(self, hidden: torch.Tensor, input_embeddings: torch.Tensor) -> torch.Tensor:
        weight = input_embeddings if self.decoder_weight is None else self.decoder_weight
        logits = F.linear(hidden, weight)  # (..., vocab)
        if self.softcap:
            logits = torch.tanh(logits / self.softcap) * self.softcap
        return logits


def build_encoder(encoder_config, with_pooler: bool, pretrained: str | os.PathLike | None = None, **load_kwargs):
    """An AutoModel encoder from a config (or a pretrained path), whole: with its pooler layer (BERT's dense + tanh
    over [CLS]) when its architecture has one. From a checkpoint of the architecture's masked-LM model
    (``bert-base-uncased``'s kind, or ours with a trained MLM head), the head is left out without a load report: the
    model that has one loads it itself.

    When the pooler layer is not used (any ``pooler_type`` but ``cls``) it is frozen: DistributedDataParallel
    rejects trainable parameters that get no gradient, and a frozen layer keeps its pretrained weights, so the saved
    encoder is the architecture's whole checkpoint (it loads in `AutoModel` or sentence-transformers without a
    "missing" or "unexpected" pooler report).
    """
    if pretrained is not None:
        with masked_lm_head_left_unused(encoder_config):  # the MLM head of a *ForMaskedLM checkpoint is not its part
            encoder = AutoModel.from_pretrained(pretrained, config=encoder_config, **load_kwargs)
    else:
        with encoder_building_device():  # the meta device when a pretrained encoder replaces it (`assemble`)
            encoder = AutoModel.from_config(encoder_config)
    pooler = getattr(encoder, "pooler", None)
    if with_pooler and not isinstance(getattr(pooler, "dense", None), nn.Linear):
        # `SentencePooler` applies the layer to the first pooled token (after a left-out prompt), and the saved
        # sentence-transformers Dense module holds its dense weights: both need BERT's form, dense + tanh over the
        # first position of its input (ALBERT's bare Linear is applied inside AlbertModel's forward).
        what = "does not have" if pooler is None else f"has in another form ({type(pooler).__name__})"
        raise ValueError(
            f"pooler_type='cls' uses the encoder's pooler layer as BERT's (dense + tanh over the first token), which "
            f"{type(encoder).__name__} {what}; use pooler_type='cls_before_pooler' (the [CLS] hidden state) or "
            "'mean' instead ('last_token' for a decoder)."
        )
    if pooler is not None and not with_pooler:
        pooler.requires_grad_(False)
    return encoder


def init_weights(module: nn.Module, std: float) -> None:
    """transformers' initialisation of the layers our models add: normal(0, std) linear weights, zero biases,
    unit LayerNorms, and an MLM head's zero bias (and untied decoder weights).

    Through `transformers.initialization`, which skips tensors loaded from a checkpoint (transformers < 5.13 ran
    `_init_weights` after loading a model of a user package, and in-place ``normal_()`` overwrote the loaded heads)."""
    if isinstance(module, nn.Linear):
        init.normal_(module.weight, mean=0.0, std=std)
        if module.bias is not None:
            init.zeros_(module.bias)
    elif isinstance(module, nn.LayerNorm):
        init.ones_(module.weight)
        init.zeros_(module.bias)
    elif isinstance(module, MaskedLMHead | NextTokenHead):
        if isinstance(module, MaskedLMHead):
            init.zeros_(module.bias)
        if module.decoder_weight is not None:
            init.normal_(module.decoder_weight, mean=0.0, std=std)
