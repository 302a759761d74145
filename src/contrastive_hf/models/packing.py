"""Padding-free ("packed") encoding: every sentence of a batch in one sequence of its real tokens.

A batch of N right-padded sentences ``(N, L)`` becomes one sequence ``(1, T)`` of its T real tokens, and the encoder
(transformers' own modules and weights) runs once on it, so no layer computes padding. Three things keep the
sentences apart:

* positions restart at every sentence: the position ids the model computes for the padded batch (``arange`` for BERT,
  DistilBERT, ELECTRA and ModernBERT; ``padding_idx + 1 + arange`` for RoBERTa, XLM-R and CamemBERT), taken at the
  real tokens and passed as ``position_ids``;
* attention stays inside every sentence: the encoder's attention implementation is set to `PACKED_ATTENTION`, a
  function registered with transformers' ``AttentionInterface`` that reads the batch's `PackedSequences` (a keyword
  argument of ``encoder(...)``, which transformers hands down to every attention call) and attends sentence by
  sentence with one of `ATTENTION_KERNELS`. Called without it (an ordinary padded batch) it is transformers' ``sdpa``,
  so the same encoder serves padded and packed calls;
* pooling reads the sentence boundaries (`PackedSequences.first_tokens`, `segment_mean`, `segment_max`).

Only encoders whose attention and positions work this way are packed (`packing_unsupported_reason`): the model types
of `PACKABLE_MODEL_TYPES`, each checked against the padded pass in tests/models/test_packing.py. Like the rest of
``models/``, this file imports torch, transformers and its siblings only.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

from .host_data import host_array, row_lengths, to_device
from .masked_lm_checkpoint import is_decoder

__all__ = [
    "PACKED_ATTENTION",
    "ATTENTION_KERNELS",
    "PACKABLE_MODEL_TYPES",
    "PACKABLE_DECODER_MODEL_TYPES",
    "attends_causally",
    "PackedSequences",
    "pack_sequences",
    "padded_position_ids",
    "packing_unsupported_reason",
    "enable_packed_attention",
    "packed_encoder_forward",
    "can_pack",
    "length_sorted_groups",
    "choose_attention_kernel",
]

# The name under which the packed attention function is registered with transformers (the encoder's
# `_attn_implementation` while it encodes packed batches; never saved: transformers leaves it out of config.json).
PACKED_ATTENTION = "contrastive_hf_packed"

# grouped: the sentences sorted by length and attended in padded groups of about `group_tokens` token slots (any
#   device, attention dropout, any dtype; the default but for `varlen`'s case);
# varlen: torch's variable-length flash attention, `torch.nn.attention.varlen.varlen_attn` (torch >= 2.10, CUDA,
#   fp16/bf16, no attention dropout);
# reference: one scaled-dot-product attention over the whole packed sequence under a block-diagonal mask: T x T
#   scores, obviously right and slow; for tests.
ATTENTION_KERNELS = ("grouped", "varlen", "reference")

# Encoders whose embeddings take per-token `position_ids` and whose attention goes through transformers'
# AttentionInterface with the model's keyword arguments, each tested against its padded pass. Others (MPNet and
# DeBERTa compute relative positions inside their own attention) take the padded or length-sorted path.
PACKABLE_MODEL_TYPES = ("bert", "roberta", "xlm-roberta", "camembert", "distilbert", "electra", "modernbert")
# Decoders packed on request (``sub_batch_size="packed"``), causal inside each sentence unless made bidirectional,
# each tested against its padded pass; ``"auto"`` does not pack them yet: the gain on a GPU is not measured. Gemma 2
# is not here: it soft-caps its attention scores, which the packed kernels do not.
PACKABLE_DECODER_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3", "phi3", "gemma", "gemma3_text", "gpt2")

# Token slots (sentences x the group's longest) of one attention group of the `grouped` kernel. On CPU the fastest
# measured size (docs/benchmarks.md); on a GPU large groups keep the kernels busy (not measured yet).
GROUP_TOKENS = {"cpu": 512, "cuda": 16384}


@dataclass(eq=False)
class PackedSequences:
    """N right-padded sentences as one sequence of their T real tokens, and what attention and pooling need.

    Built by `pack_sequences`; passed to the encoder as the ``packed_sequences`` keyword, which transformers hands to
    the attention function of every layer (`packed_attention_forward`).
    """

    input_ids: torch.Tensor  # (1, T)
    position_ids: torch.Tensor  # (1, T): the padded batch's position ids at the real tokens
    token_type_ids: torch.Tensor | None  # (1, T)
    lengths: list[int]  # N sentence lengths, on the host (kernels and groups need them there)
    cu_seqlens: torch.Tensor  # (N + 1,) int32: sentence n is tokens cu_seqlens[n] : cu_seqlens[n + 1]
    sequence_index: torch.Tensor  # (T,) the sentence of each token
    flat_index: torch.Tensor  # (T,) each token's row in the padded batch flattened to (N * L)
    kernel: str | None = None  # one of ATTENTION_KERNELS; None: `choose_attention_kernel` at each call
    group_tokens: int | None = None  # the `grouped` kernel's group size; None: GROUP_TOKENS of the device
    # (N,) leading tokens of each sentence that pooling leaves out (a prompt, `without_leading_tokens`), on the host;
    # None: none
    pooling_offsets: np.ndarray | None = None
    _groups: AttentionGroups | None = field(default=None, repr=False)

    @property
    def device(self) -> torch.device:
        return self.input_ids.device

    @property
    def host_starts(self) -> np.ndarray:
        """``(N,)`` each sentence's first token in the packed sequence, on the host."""
        return np.cumsum(self.lengths) - np.asarray(self.lengths, dtype=np.int64)

    @property
    def num_sequences(self) -> int:
        return len(self.lengths)

    @property
    def num_tokens(self) -> int:
        return self.input_ids.shape[1]

    @property
    def max_length(self) -> int:
        return max(self.lengths)

    def without_leading_tokens(self, counts) -> PackedSequences:
        """The same packed batch, pooled without each sentence's first ``counts[n]`` tokens (``(N,)``, host values or
        a tensor; the [CLS] token and a prompt that ``include_prompt=False`` leaves out, as
        `prompts.mask_prompt_tokens` leaves them out of a padded batch): `first_tokens`, `segment_mean` and
        `segment_max` then read the remaining tokens. Every sentence must keep at least one (`can_pack` with the
        counts says beforehand)."""
        counts = host_array(counts).reshape(-1)
        if counts.shape[0] != self.num_sequences:
            raise ValueError(f"{counts.shape[0]} leading-token counts for {self.num_sequences} packed sentences.")
        return dataclasses.replace(self, pooling_offsets=counts)

    def first_tokens(self, token_states: torch.Tensor) -> torch.Tensor:
        """Each sentence's first pooled token ([CLS], or the first after a left-out prompt): ``(T, h) -> (N, h)``."""
        first = self.host_starts if self.pooling_offsets is None else self.host_starts + self.pooling_offsets
        return token_states.index_select(0, to_device(first, token_states.device))

    def last_tokens(self, token_states: torch.Tensor) -> torch.Tensor:
        """Each sentence's last token ([SEP], or a decoder's last token): ``(T, h) -> (N, h)``."""
        last = np.cumsum(self.lengths) - 1
        return token_states.index_select(0, to_device(last, token_states.device))

    def segment_mean(self, token_states: torch.Tensor) -> torch.Tensor:
        """Mean over each sentence's pooled tokens: ``(T, h) -> (N, h)``, in ``token_states``' dtype.

        Summed and divided in float32 (float64 states in float64): ``index_add`` accumulates in the dtype of its
        output, and bf16 sums of hundreds of tokens lose about 2% (CUDA adds them atomically, in another order each
        run), and a bf16 count is not exact above 256. The padded pooler's ``sum`` accumulates in float32 already.
        """
        states, sentence, _, counts = self._pooled_tokens(token_states)
        dtype = torch.promote_types(token_states.dtype, torch.float32)  # float32, or float64 for float64 states
        sums = token_states.new_zeros(self.num_sequences, token_states.shape[-1], dtype=dtype)
        sums = sums.index_add(0, sentence, states.to(dtype))
        return (sums / to_device(counts, token_states.device, dtype).unsqueeze(1)).to(token_states.dtype)

    def segment_max(self, token_states: torch.Tensor) -> torch.Tensor:
        """Max over each sentence's pooled tokens: ``(T, h) -> (N, h)``.

        The tokens are scattered into an ``(N, longest, h)`` buffer filled with the dtype's minimum and reduced
        with ``max``, as the padded pooler reduces its masked batch, so that ties send the gradient to the same token.
        """
        states, _, rows, counts = self._pooled_tokens(token_states, width=True)
        width = int(counts.max())
        buffer = token_states.new_full(
            (self.num_sequences * width, token_states.shape[-1]), torch.finfo(states.dtype).min
        )
        buffer = buffer.index_copy(0, rows, states)
        return buffer.view(self.num_sequences, width, -1).max(dim=1).values

    def _pooled_tokens(self, token_states: torch.Tensor, width: bool = False):
        """``(states, sentence, place, counts)``: the ``(P, h)`` states of the pooled tokens, each one's sentence
        ``(P,)`` and, with ``width``, its row in an ``(N * longest)`` buffer of the pooled tokens (``(P,)``; else
        None), all on the device, and how many tokens each sentence pools (``(N,)``, host). Built on the host from the
        lengths: nothing is read back from the device."""
        lengths = np.asarray(self.lengths, dtype=np.int64)
        offsets = np.zeros_like(lengths) if self.pooling_offsets is None else self.pooling_offsets
        counts = lengths - offsets
        device = token_states.device
        if self.pooling_offsets is None and not width:
            return token_states, self.sequence_index, None, counts
        sentence = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)  # (T,)
        within = _ragged_arange(lengths) - offsets[sentence]  # (T,) place among the sentence's pooled tokens
        kept = np.flatnonzero(within >= 0)  # (P,)
        states = token_states if len(kept) == len(within) else token_states.index_select(0, to_device(kept, device))
        rows = sentence[kept] * int(counts.max(initial=1)) + within[kept] if width else None
        place = None if rows is None else to_device(rows, device)
        return states, to_device(sentence[kept], device), place, counts

    def attention_groups(self, device: torch.device) -> AttentionGroups:
        """The `grouped` kernel's groups, built once per batch (on the host, from the lengths) and shared by every
        layer."""
        if self._groups is None:
            budget = self.group_tokens or GROUP_TOKENS.get(device.type, GROUP_TOKENS["cuda"])
            self._groups = attention_groups(self.lengths, budget, device)
        return self._groups

    def attend(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        scaling: float | None,
        dropout: float,
        sliding_window: int | None = None,
        causal: bool = False,
    ) -> torch.Tensor:
        """Attention inside every sentence: ``(1, H, T, D)`` query, key and value -> ``(1, T, H, D)``.

        ``sliding_window`` (ModernBERT's local layers, as transformers passes it to attention functions): a token
        attends to tokens at most ``sliding_window - 1`` positions away, within its sentence. ``causal`` (a decoder's
        attention, `attends_causally`): a token attends to itself and the tokens before it, within its sentence.
        """
        if query.shape[0] != 1:
            raise ValueError(f"Packed attention takes one packed sequence (batch 1), got a batch of {query.shape[0]}.")
        kernel = self.kernel or choose_attention_kernel(query.device, query.dtype, dropout)
        if kernel == "varlen":
            problem = varlen_problem(query, dropout, scaling, sliding_window, self.max_length)
            if problem is None:
                return varlen_attention(query, key, value, self, scaling, sliding_window, causal)
            if self.kernel == "varlen":
                raise ValueError(f"The varlen attention kernel cannot run here: {problem}.")
            kernel = "grouped"
        if kernel == "grouped":
            groups = self.attention_groups(query.device)
            return grouped_attention(query, key, value, groups, scaling, dropout, sliding_window, causal)
        if kernel == "reference":
            return reference_attention(query, key, value, self, scaling, dropout, sliding_window, causal)
        raise ValueError(f"Unknown attention kernel {kernel!r}: choose one of {', '.join(ATTENTION_KERNELS)}.")


def pack_sequences(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    token_type_ids: torch.Tensor | None = None,
    position_ids: torch.Tensor | None = None,
    kernel: str | None = None,
    group_tokens: int | None = None,
    lengths=None,
) -> PackedSequences:
    """Pack ``(N, L)`` right-padded inputs into one ``(1, T)`` sequence of their real tokens.

    ``position_ids``: the ``(N, L)`` position ids of the padded batch (`padded_position_ids`; default ``arange(L)``
    in every row), taken at the real tokens so that every model keeps its own numbering. ``lengths``: each row's real
    tokens on the host (``(N,)``, `host_data`: the collators give them), from which every index is built there and
    copied without blocking; without them they are read back from the mask, which is then checked (``ValueError``
    for inputs that are not right-padded or hold an empty row; `can_pack` says beforehand).
    """
    if kernel is not None and kernel not in ATTENTION_KERNELS:
        raise ValueError(f"Unknown attention kernel {kernel!r}: choose one of {', '.join(ATTENTION_KERNELS)}.")
    num_sequences, width = input_ids.shape
    if lengths is None and not can_pack(attention_mask):
        raise ValueError(
            "Packing needs right-padded inputs (real tokens first, then padding) with at least one token per row."
        )
    lengths = row_lengths(attention_mask, lengths)  # (N,) host
    device = input_ids.device
    cu_seqlens = np.zeros(num_sequences + 1, dtype=np.int64)
    cu_seqlens[1:] = np.cumsum(lengths)
    sentence = np.repeat(np.arange(num_sequences, dtype=np.int64), lengths)  # (T,)
    flat_index = to_device(sentence * width + _ragged_arange(lengths), device)  # (T,) sentence after sentence
    if position_ids is None:
        position_ids = torch.arange(width, device=device).expand(num_sequences, width)
    take = lambda tensor: tensor.reshape(-1).index_select(0, flat_index).unsqueeze(0)  # (N, L) -> (1, T)
    return PackedSequences(
        input_ids=take(input_ids),
        position_ids=take(position_ids),
        token_type_ids=None if token_type_ids is None else take(token_type_ids),
        lengths=lengths.tolist(),
        cu_seqlens=to_device(cu_seqlens, device, torch.int32),
        sequence_index=to_device(sentence, device),
        flat_index=flat_index,
        kernel=kernel,
        group_tokens=group_tokens,
    )


def _ragged_arange(lengths: np.ndarray) -> np.ndarray:
    """``concatenate([arange(n) for n in lengths])``."""
    lengths = np.asarray(lengths, dtype=np.int64)
    return np.arange(int(lengths.sum()), dtype=np.int64) - np.repeat(np.cumsum(lengths) - lengths, lengths)


def can_pack(attention_mask: torch.Tensor) -> bool:
    """Whether an ``(N, L)`` mask is right-padded with at least one real token in every row."""
    mask = attention_mask.bool()
    lengths = mask.sum(dim=1)
    right_padded = torch.equal(mask, torch.arange(mask.shape[1], device=mask.device)[None, :] < lengths[:, None])
    return right_padded and bool((lengths > 0).all())


def padded_position_ids(encoder, input_ids: torch.Tensor) -> torch.Tensor:
    """The ``(N, L)`` position ids ``encoder`` gives a right-padded batch itself.

    RoBERTa-style embeddings (RoBERTa, XLM-R, CamemBERT) number the real tokens from ``padding_idx + 1``
    (``create_position_ids_from_input_ids``); the others (BERT, DistilBERT, ELECTRA, ModernBERT's rotary positions)
    use ``arange(L)``.
    """
    embeddings = getattr(encoder, "embeddings", None)
    create = getattr(embeddings, "create_position_ids_from_input_ids", None)
    padding_idx = getattr(embeddings, "padding_idx", None)
    if create is not None and padding_idx is not None:
        return create(input_ids, padding_idx)
    return torch.arange(input_ids.shape[1], device=input_ids.device).expand_as(input_ids)


# ----------------------------------------------------------------------------------------------------------------
# The attention function registered with transformers, and its kernels
# ----------------------------------------------------------------------------------------------------------------


@torch.compiler.disable  # reads the host data of the packed batch: run as written under torch.compile
def packed_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    packed_sequences: PackedSequences | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature: ``(B, H, L, D)`` query, key and value -> ``((B, L, H, D), None)``.

    With ``packed_sequences`` (B = 1, L = T) attention stays inside each sentence; without, this is transformers'
    ``sdpa`` on an ordinary padded batch (the mask interface gives this name sdpa's masks, see `register`).
    """
    if packed_sequences is None:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    sliding_window = kwargs.get("sliding_window")
    causal = attends_causally(module)
    if key.shape[1] != query.shape[1]:  # grouped-query attention (Llama's kind): each key/value head serves a group
        key, value = (repeat_kv(states, query.shape[1] // key.shape[1]) for states in (key, value))
    return packed_sequences.attend(query, key, value, scaling, dropout, sliding_window, causal), None


def without_kv_cache(encoder) -> dict:
    """The forward argument that keeps a decoder from building a key/value cache (``use_cache=False``; {} for an
    encoder): a sentence encoder never generates, and transformers' decoders otherwise fill a cache at every forward
    pass, a copy of every layer's keys and values, started from host tensors that make a GPU's host wait."""
    return {"use_cache": False} if is_decoder(encoder.config) else {}


def attends_causally(module: torch.nn.Module) -> bool:
    """Whether an attention module attends causally: a decoder's (its ``is_causal``), unless its model's config makes
    it attend both ways (``is_causal=False``, `configuration_contrastive.set_bidirectional_attention`)."""
    config = getattr(module, "config", None)
    return bool(getattr(module, "is_causal", False)) and getattr(config, "is_causal", True) is not False


@dataclass
class AttentionGroups:
    """The sentences of a packed batch sorted by length and cut into groups, for attention on padded blocks.

    Group g gathers its sentences' tokens into a ``(G, w_g)`` block (``w_g``: its longest sentence); padding slots
    repeat the sentence's last token and are masked out as keys (``valid``) and dropped as queries (``kept``: the
    block's real slots). ``inverse`` puts the groups' concatenated real tokens back in packed order. Every move is an
    ``index_select``, whose backward adds into the gradient (``index_add_``); advanced indexing's backward
    (``index_put_`` with accumulation) took 6-9% of a training step on CPU.
    """

    gather: list[torch.Tensor]  # (G, w_g) indices into the T packed tokens
    valid: list[torch.Tensor | None]  # (G, w_g) bool; None where every sentence of the group has length w_g
    inverse: torch.Tensor  # (T,)
    kept: list[torch.Tensor | None] = None  # (real slots of the group,) indices into its G * w_g slots; None: all


def length_sorted_groups(
    sorted_lengths: list[int], group_tokens: int | None = None, group_size: int | None = None
) -> list[tuple[int, int]]:
    """``(start, stop)`` bounds of consecutive groups of sentences sorted longest first: each group holds
    ``group_size`` sentences, or as many as fit in ``group_tokens`` token slots (sentences x the group's longest; a
    sentence longer than that is a group of its own)."""
    bounds, start = [], 0
    while start < len(sorted_lengths):
        count = group_size or max(1, group_tokens // max(sorted_lengths[start], 1))
        bounds.append((start, min(start + count, len(sorted_lengths))))
        start += count
    return bounds


def attention_groups(lengths: list[int], group_tokens: int, device: torch.device | str = "cpu") -> AttentionGroups:
    """Sort the sentences by length (longest first) and cut them into `length_sorted_groups` of ``group_tokens``;
    every index is computed on the host and copied to ``device`` without blocking."""
    lengths = np.asarray(lengths, dtype=np.int64)
    order = np.argsort(-lengths, kind="stable")
    sorted_lengths = lengths[order].tolist()
    starts = np.cumsum(lengths) - lengths
    gather, valid, kept, tokens = [], [], [], []
    for first, stop in length_sorted_groups(sorted_lengths, group_tokens=group_tokens):
        width = sorted_lengths[first]
        rows = order[first:stop]
        offsets = np.arange(width)
        keep = offsets[None, :] < lengths[rows, None]  # (G, w)
        index = starts[rows, None] + np.minimum(offsets[None, :], lengths[rows, None] - 1)  # (G, w)
        all_real = sorted_lengths[stop - 1] == width
        gather.append(to_device(index, device))
        valid.append(None if all_real else to_device(keep, device, torch.bool))
        kept.append(None if all_real else to_device(np.flatnonzero(keep), device))
        tokens.append(index.reshape(-1) if all_real else index[keep])
    tokens = np.concatenate(tokens)  # a permutation of range(T)
    inverse = np.empty_like(tokens)
    inverse[tokens] = np.arange(len(tokens))
    return AttentionGroups(gather=gather, valid=valid, inverse=to_device(inverse, device), kept=kept)


def group_attention_mask(
    valid: torch.Tensor | None, width: int, sliding_window: int | None, causal: bool = False
) -> torch.Tensor | None:
    """The attention mask of a group of ``width`` slots: ``(G, 1, w, w)`` or broadcastable to it, True where a query
    (row) may attend to a key (column); None where every query may attend to every key.

    ``valid`` ``(G, w)``: the real slots (None: all real); padding slots are no keys. ``sliding_window``: a query
    attends to keys at most ``sliding_window - 1`` positions away. Every query row keeps a key: a padding query far
    past its sentence's end would otherwise have none (the band leaves only padding there), a fully masked row whose
    softmax some CUDA kernels fill with NaN, which its backward spreads though the row's output is dropped. Padding
    queries attend to their sentence's real tokens instead, out of the band. ``causal``: a query attends to keys at
    its position or before (every sentence starts at its group's first slot); a padding query, after its sentence's
    end, then still sees its sentence's tokens.
    """
    if causal:
        positions = torch.arange(width, device=None if valid is None else valid.device)
        order = positions[:, None] >= positions[None, :]  # (w, w)
        if sliding_window is not None and width > sliding_window - 1:
            order = order & (positions[:, None] - positions[None, :] <= sliding_window - 1)
        return order if valid is None else order & valid[:, None, None, :]
    keys = None if valid is None else valid[:, None, None, :]  # (G, 1, 1, w)
    if sliding_window is None or width <= sliding_window - 1:
        return keys
    positions = torch.arange(width, device=None if valid is None else valid.device)
    band = (positions[:, None] - positions[None, :]).abs() <= sliding_window - 1  # (w, w)
    if valid is None:
        return band
    padding_queries = ~valid[:, None, :, None]  # (G, 1, w, 1)
    return keys & (band | padding_queries)


def grouped_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    groups: AttentionGroups,
    scaling: float | None,
    dropout: float,
    sliding_window: int | None = None,
    causal: bool = False,
) -> torch.Tensor:
    """Attention per group of length-sorted sentences (`AttentionGroups`): ``(1, H, T, D)`` -> ``(1, T, H, D)``."""
    tokens = [states[0].transpose(0, 1) for states in (query, key, value)]  # (T, H, D) each
    heads = tokens[0].shape[1]
    outputs = []
    for gather, valid, kept in zip(groups.gather, groups.valid, groups.kept, strict=True):
        q, k, v = (
            states.index_select(0, gather.reshape(-1)).view(*gather.shape, heads, -1).transpose(1, 2)
            for states in tokens
        )  # (G, H, w, D)
        mask = group_attention_mask(valid, gather.shape[1], sliding_window, causal)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout, scale=scaling)
        out = out.transpose(1, 2).reshape(-1, heads, out.shape[-1])  # (G * w, H, D)
        outputs.append(out if kept is None else out.index_select(0, kept))
    return torch.cat(outputs).index_select(0, groups.inverse).unsqueeze(0)  # (1, T, H, D)


def reference_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    packed: PackedSequences,
    scaling: float | None,
    dropout: float,
    sliding_window: int | None = None,
    causal: bool = False,
) -> torch.Tensor:
    """Attention over the whole packed sequence under a ``(T, T)`` block-diagonal mask (a token sees the tokens of
    its own sentence; ``causal``: those up to itself): ``(1, H, T, D)`` -> ``(1, T, H, D)``. Exact and slow (T x T
    scores), the reference of tests."""
    sentence = packed.sequence_index
    mask = sentence[:, None] == sentence[None, :]  # (T, T)
    positions = torch.arange(packed.num_tokens, device=sentence.device)
    if sliding_window is not None:
        mask = mask & ((positions[:, None] - positions[None, :]).abs() <= sliding_window - 1)
    if causal:
        mask = mask & (positions[:, None] >= positions[None, :])
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, dropout_p=dropout, scale=scaling)
    return out.transpose(1, 2)


@functools.cache
def _varlen_parameters() -> frozenset[str] | None:
    """The parameters of the installed ``varlen_attn`` (None: torch < 2.10 has none). torch 2.10 takes ``is_causal``;
    2.11 made the options keyword-only and added ``scale`` and ``window_size``; 2.12 added ``enable_gqa`` and more."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    return frozenset(inspect.signature(varlen_attn).parameters)


def varlen_problem(
    query: torch.Tensor, dropout: float, scaling: float | None, sliding_window: int | None, max_length: int
) -> str | None:
    """Why ``varlen_attn`` cannot compute this call (None: it can)."""
    parameters = _varlen_parameters()
    if parameters is None:
        return f"torch {torch.__version__} has no torch.nn.attention.varlen (torch >= 2.10)"
    if query.device.type != "cuda":
        return f"it runs on CUDA only, the tensors are on {query.device.type}"
    if query.dtype not in (torch.float16, torch.bfloat16):
        return f"it takes float16 or bfloat16, the attention inputs are {query.dtype} (train with bf16=True)"
    if dropout > 0:
        return f"it has no attention dropout, and this call has {dropout}"
    if scaling is not None and abs(scaling - query.shape[-1] ** -0.5) > 1e-12 and "scale" not in parameters:
        return "this torch's varlen_attn has no scale parameter"
    if sliding_window is not None and max_length > sliding_window - 1 and "window_size" not in parameters:
        return "this torch's varlen_attn has no window_size parameter"
    return None


def varlen_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    packed: PackedSequences,
    scaling: float | None,
    sliding_window: int | None = None,
    causal: bool = False,
) -> torch.Tensor:
    """``torch.nn.attention.varlen.varlen_attn`` (FlashAttention on CUDA): ``(1, H, T, D)`` -> ``(1, T, H, D)``."""
    from torch.nn.attention.varlen import varlen_attn

    parameters = _varlen_parameters()
    options = {}
    if "scale" in parameters:
        options["scale"] = scaling
    if sliding_window is not None and "window_size" in parameters:
        options["window_size"] = (sliding_window - 1, 0 if causal else sliding_window - 1)
    if causal:
        options["is_causal"] = True
    tokens_first = lambda states: states[0].transpose(0, 1).contiguous()  # (1, H, T, D) -> (T, H, D)
    cu_seqlens = packed.cu_seqlens.to(query.device)
    out = varlen_attn(
        tokens_first(query),
        tokens_first(key),
        tokens_first(value),
        cu_seqlens,
        cu_seqlens,
        packed.max_length,
        packed.max_length,
        **options,
    )
    return out.unsqueeze(0)  # (1, T, H, D)


def choose_attention_kernel(device: torch.device, dtype: torch.dtype, dropout: float) -> str:
    """The kernel of a packed attention call: ``varlen`` on CUDA where it can run (fp16/bf16, no attention dropout,
    torch >= 2.10), else ``grouped``."""
    if device.type == "cuda" and dropout == 0 and dtype in (torch.float16, torch.bfloat16):
        if _varlen_parameters() is not None:
            return "varlen"
    return "grouped"


def register() -> None:
    """Register `PACKED_ATTENTION` with transformers' attention and mask interfaces (idempotent).

    The mask interface gets sdpa's mask builder: a padded call through this implementation then gets the usual
    padding mask. Without it transformers' mask builders return ``None`` for an unknown implementation, silently
    dropping the padding mask.
    """
    AttentionInterface.register(PACKED_ATTENTION, packed_attention_forward)
    AttentionMaskInterface.register(PACKED_ATTENTION, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])


register()


# ----------------------------------------------------------------------------------------------------------------
# Encoding
# ----------------------------------------------------------------------------------------------------------------


def packing_unsupported_reason(encoder, asked: bool = False) -> str | None:
    """Why ``encoder`` cannot encode packed batches, in words (None: it can); ``asked``: packing was asked for by
    name (``sub_batch_size="packed"``), which also packs the decoders of `PACKABLE_DECODER_MODEL_TYPES`."""
    config = encoder.config
    packable = PACKABLE_MODEL_TYPES + (PACKABLE_DECODER_MODEL_TYPES if asked else ())
    if config.model_type not in packable:
        if config.model_type in PACKABLE_DECODER_MODEL_TYPES:
            return f"{config.model_type!r} decoders are packed when asked for (sub_batch_size='packed')"
        return (
            f"packing is implemented and tested for {', '.join(PACKABLE_MODEL_TYPES)} encoders and, when asked for, "
            f"{', '.join(PACKABLE_DECODER_MODEL_TYPES)} decoders, not {config.model_type!r}"
        )
    if not getattr(encoder, "_supports_attention_backend", False):
        return f"{type(encoder).__name__} does not compute attention through transformers' attention interface"
    implementation = config._attn_implementation
    if implementation not in ("sdpa", PACKED_ATTENTION):
        return f"the encoder's attention implementation is {implementation!r}; packing replaces 'sdpa' only"
    return None


def enable_packed_attention(encoder) -> None:
    """Set ``encoder``'s attention implementation to `PACKED_ATTENTION` (padded calls still get sdpa)."""
    reason = packing_unsupported_reason(encoder, asked=True)
    if reason is not None:
        raise ValueError(f"{type(encoder).__name__} cannot encode packed batches: {reason}.")
    if encoder.config._attn_implementation != PACKED_ATTENTION:
        encoder.set_attn_implementation(PACKED_ATTENTION)


def packed_encoder_forward(
    encoder,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    token_type_ids: torch.Tensor | None = None,
    output_hidden_states: bool = False,
    with_pooler: bool = False,
    kernel: str | None = None,
    group_tokens: int | None = None,
    lengths=None,
):
    """Run ``encoder`` once on the ``(N, L)`` right-padded batch packed: ``(outputs, packed)``; ``lengths`` ``(N,)``
    on the host, as `pack_sequences` takes them.

    ``outputs`` is the encoder's output with ``(1, T, h)`` token states (``hidden_states`` too when asked); with
    ``with_pooler`` its ``pooler_output`` is the encoder's pooler layer (BERT: dense + tanh) on each sentence's first
    token, ``(N, h)``, else None. ``packed`` is the `PackedSequences` (boundaries for pooling, ``flat_index`` to
    scatter token states back to the padded layout).
    """
    enable_packed_attention(encoder)
    packed = pack_sequences(
        input_ids,
        attention_mask,
        token_type_ids,
        padded_position_ids(encoder, input_ids),
        kernel=kernel,
        group_tokens=group_tokens,
        lengths=lengths,
    )
    kwargs = {"packed_sequences": packed, "position_ids": packed.position_ids, **without_kv_cache(encoder)}
    if packed.token_type_ids is not None:
        kwargs["token_type_ids"] = packed.token_type_ids
    layer_types = set(getattr(encoder.config, "layer_types", None) or ())
    if layer_types:
        # ModernBERT takes a ready mask per layer type: none, else its local layers would build a (T, T) band mask
        # over the whole packed sequence (the packed kernels apply the window inside each sentence themselves).
        kwargs["attention_mask"] = dict.fromkeys(layer_types)
    outputs = encoder(
        input_ids=packed.input_ids, output_hidden_states=output_hidden_states, return_dict=True, **kwargs
    )
    # The encoder's own pooler output read the packed sequence's first token only (the first sentence's [CLS]).
    pooler = getattr(encoder, "pooler", None) if with_pooler else None
    if pooler is not None:
        first = packed.first_tokens(outputs.last_hidden_state[0])  # (N, h)
        outputs["pooler_output"] = pooler(first.unsqueeze(1))  # BertPooler reads hidden_states[:, 0]
    elif "pooler_output" in outputs:
        outputs["pooler_output"] = None
    return outputs, packed
