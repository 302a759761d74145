"""The poolers: how an encoder's token states become one vector per sentence, each registered once.

A pooler is one `register_pooler` call: its name (``pooler_type``), its function, and everything else the library
says about it: its sentence-transformers ``Pooling`` mode (the checkpoint's ``1_Pooling/config.json``; None where
no Pooling mode computes it), whether Text Embeddings Inference serves it, whether it reads every layer's states or
the encoder's own pooler layer, and the sentence the model card prints. `ContrastiveConfig` validates against this
registry, `SentencePooler` (the model's pooling module, below) pools with it, the sentence-transformers export writes
the ``Pooling`` module's config the spec gives (`PoolerSpec.sentence_transformers_pooling`), the model card reads it,
and the scripts' ``--pooler_type`` help lists it when asked.

A pooler of one's own::

    def pool_mean_max(inputs: PoolingInputs) -> torch.Tensor:
        return (inputs.mean(inputs.last_hidden) + inputs.maximum(inputs.last_hidden)) / 2  # (B, h)

    register_pooler("mean_max", pool_mean_max, "the average of the token states' mean and maximum")

then ``ContrastiveConfig(pooler_type="mean_max")`` and ``--pooler_type mean_max``; a checkpoint saved with it loads
where the registering module was imported first. This module imports torch and its siblings `registry.py` and
`packing.py` only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from .packing import PackedSequences
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
    "SentencePooler",
    "first_pooled_tokens",
    "last_tokens",
    "masked_mean",
    "masked_max",
]


@dataclass
class PoolingInputs:
    """What a pooler reads, the same for a padded batch and a packed one (`packing.PackedSequences`).

    Attributes:
        encoder_outputs: the encoder's output (``last_hidden_state``; ``hidden_states`` when the pooler's spec says
            ``needs_hidden_states``; ``pooler_output``).
        tokens: a layer's states as the reductions take them: ``(B, L, h)`` padded, ``(T, h)`` packed.
        first: each sentence's first pooled token ``(.., h) -> (B, h)``.
        last: each sentence's last token (the last that its mask keeps, after right padding or with left padding).
        mean: the mean over each sentence's pooled tokens ``-> (B, h)``.
        maximum: the maximum over them ``-> (B, h)``.
        encoder_pooler: the encoder's pooler layer (BERT's dense + tanh over its input's first position), or None.
    """

    encoder_outputs: Any
    tokens: Callable[[torch.Tensor], torch.Tensor]
    first: Callable[[torch.Tensor], torch.Tensor]
    last: Callable[[torch.Tensor], torch.Tensor]
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
        reads_end_of_sequence: it pools the last token, which should be the end-of-sequence token a decoder
            embedder is trained on: `ContrastiveTrainer` makes its tokenizer append one where it does not
            (`end_of_sequence.append_eos_token`).
    """

    name: str
    pool: Callable[[PoolingInputs], torch.Tensor]
    description: str
    sentence_transformers_mode: str | None = None
    served_by_text_embeddings_inference: bool = False
    needs_hidden_states: bool = False
    uses_encoder_pooler_layer: bool = False
    reads_end_of_sequence: bool = False

    def sentence_transformers_refusal(self) -> str | None:
        """Why no sentence-transformers module computes this pooler, or None when its ``Pooling`` mode does."""
        if self.sentence_transformers_mode is None:
            return (
                f"pooler_type={self.name!r} ({self.description}) is computed by no sentence-transformers Pooling mode"
            )
        return None

    def sentence_transformers_pooling(self, hidden_size: int, include_prompt: bool = True) -> dict:
        """The config of the sentence-transformers ``Pooling`` module computing this pooler (its
        ``1_Pooling/config.json``). Without a mode it names this pooler as its ``pooling_mode``, which
        sentence-transformers refuses with that name ("Invalid pooling mode") rather than pool otherwise."""
        pooling = {
            "word_embedding_dimension": hidden_size,
            "pooling_mode_cls_token": False,
            "pooling_mode_mean_tokens": False,
            "pooling_mode_max_tokens": False,
            "pooling_mode_mean_sqrt_len_tokens": False,
            "include_prompt": include_prompt,
        }
        if self.sentence_transformers_mode is None:
            pooling["pooling_mode"] = self.name
        else:
            pooling[f"pooling_mode_{self.sentence_transformers_mode}"] = True
        return pooling


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
    reads_end_of_sequence: bool = False,
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
        reads_end_of_sequence,
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


class SentencePooler(torch.nn.Module):
    """Turns an encoder's token representations into one vector per sentence, as the registered pooler named
    ``pooler_type`` computes it (SimCSE's pooler types below, and any registered since).

    The attention mask it is given says which tokens are pooled: ``mean`` and ``max`` reduce over them, and ``cls`` /
    ``cls_before_pooler`` read the first of them, as sentence-transformers' ``Pooling`` does: the [CLS] token (after
    the padding of a left-padded row), or with a prompt left out of the pooling (``include_prompt=False``,
    `prompts.mask_prompt_tokens`) the sentence's first token after the prompt, the token sentence-transformers pools
    from the same checkpoint.
    """

    def __init__(self, pooler_type: str):
        super().__init__()
        self.pooler_type = pooler_type  # its spec (a ValueError naming the registered ones) is looked up when pooling
        self.needs_hidden_states = get_pooler(pooler_type).needs_hidden_states  # read by the encoding paths

    @torch.compiler.disable  # a packed batch's pooling reads its host data: run as written under torch.compile
    def forward(
        self,
        encoder_outputs: Any,
        attention_mask: torch.Tensor | PackedSequences,
        encoder_pooler: torch.nn.Module | None = None,
    ) -> torch.Tensor:
        """``(B, h)`` sentence vectors from a padded batch's ``(B, L, h)`` token states and ``(B, L)`` mask of the
        pooled tokens, or from a packed batch's ``(1, T, h)`` states and its `PackedSequences` (the sentence
        boundaries). ``encoder_pooler``: the encoder's pooler layer (BERT's dense + tanh over its input's first
        position), which ``cls`` applies to the first pooled token; without it ``cls`` returns the encoder's own
        ``pooler_output``."""
        if isinstance(attention_mask, PackedSequences):
            packed = attention_mask
            inputs = PoolingInputs(
                encoder_outputs,
                tokens=lambda states: states[0],  # (1, T, h) -> (T, h)
                first=packed.first_tokens,
                last=packed.last_tokens,
                mean=packed.segment_mean,
                maximum=packed.segment_max,
                encoder_pooler=encoder_pooler,
            )
        else:
            inputs = PoolingInputs(
                encoder_outputs,
                tokens=lambda states: states,  # (B, L, h)
                first=lambda states: first_pooled_tokens(states, attention_mask),
                last=lambda states: last_tokens(states, attention_mask),
                mean=lambda states: masked_mean(states, attention_mask),
                maximum=lambda states: masked_max(states, attention_mask),
                encoder_pooler=encoder_pooler,
            )
        return get_pooler(self.pooler_type).pool(inputs)


def first_pooled_tokens(token_states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """The state of each sentence's first token that ``attention_mask`` keeps: ``(B, L, h), (B, L) -> (B, h)`` (the
    first position of a row that keeps none)."""
    first = attention_mask.to(torch.int).argmax(dim=1)  # (B,) argmax returns the first of equal maxima
    return token_states[torch.arange(token_states.shape[0], device=token_states.device), first]


def last_tokens(token_states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """The state of each sentence's last token that ``attention_mask`` keeps, wherever the padding is:
    ``(B, L, h), (B, L) -> (B, h)`` (the last position of a row that keeps none)."""
    width = attention_mask.shape[1]
    from_the_end = attention_mask.to(torch.int).flip(dims=(1,)).argmax(dim=1)  # (B,) 0 for a right-aligned row
    last = width - 1 - from_the_end
    return token_states[torch.arange(token_states.shape[0], device=token_states.device), last]


def masked_mean(token_states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Mean over the tokens that ``attention_mask`` keeps: ``(B, L, h), (B, L) -> (B, h)``."""
    mask = attention_mask.unsqueeze(-1).to(token_states.dtype)  # (B, L, 1)
    return (token_states * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)


def masked_max(token_states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Max over the tokens that ``attention_mask`` keeps: ``(B, L, h), (B, L) -> (B, h)``."""
    padding = ~attention_mask.bool().unsqueeze(-1)  # (B, L, 1)
    return token_states.masked_fill(padding, torch.finfo(token_states.dtype).min).max(dim=1).values


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
    "last_token",
    lambda inputs: inputs.last(inputs.last_hidden),
    "the last layer's state of each sentence's last token, the only one a causal decoder lets see the whole sentence "
    "(decoder embedders: SGPT, E5-Mistral, Qwen3-Embedding)",
    sentence_transformers_mode="lasttoken",
    reads_end_of_sequence=True,
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
