"""Texts in, sentence vectors out, as sentence-transformers spells it: one ``encode`` for every model of the library.

`SentenceEmbeddingMixin.encode` takes sentence-transformers' arguments (``batch_size``, ``show_progress_bar``,
``convert_to_numpy`` / ``convert_to_tensor``, ``normalize_embeddings``, ``device``, ``prompt`` / ``prompt_name``,
``truncate_dim``) and returns what `SentenceTransformer.encode` returns: a float32 numpy array ``(n, d)`` by default
(``(d,)`` for one sentence). It tokenizes once, encodes in batches of sentences of similar length (little padding
is computed), in eval mode under ``no_grad`` in the model's dtype, and restores the model's mode afterwards.
`similarity` scores embeddings with the model's similarity function (cosine, or dot for DPR), as
`SentenceTransformer.similarity` does.

A model provides `embed_tokens(input_ids, attention_mask, token_type_ids, task, prompt_length)` (vectors of a
padded batch) and, optionally, prompts in its config (``prompts``, ``default_prompt_name``) and ``include_prompt``.

Training batches are encoded by `EncodingPolicy`, the one policy of every model family (`ContrastiveModel`'s views,
each tower of `DualEncoderModel`): built from the config's ``sub_batch_size`` and ``sub_batch_tokens``, it encodes
a batch packed (`packing.py`), in length-sorted groups or in one padded pass (`encode_with`), prompts left out of the
pooling included, with the embeddings of the padded pass.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import warnings
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from .configuration_contrastive import parse_encoding_fields
from .host_data import host_array, row_lengths, to_device
from .packing import (
    PACKED_ATTENTION,
    can_pack,
    length_sorted_groups,
    packed_encoder_forward,
    packing_unsupported_reason,
)
from .precision import encoding_precision, log_precision_once

logger = logging.getLogger(__name__)

__all__ = [
    "SentenceEmbeddingMixin",
    "EncodingPolicy",
    "ENCODING_PATH_WORDS",
    "encode_with",
    "mask_prompt_tokens",
    "prompt_token_count",
    "refuse_prompt_filling",
    "role_prompt",
    "QUERY_PROMPT_NAMES",
    "DOCUMENT_PROMPT_NAMES",
    "DEFAULT_PROMPT_NAMES",
    "OUTPUT_VALUES",
    "PRECISIONS",
    "quantize",
]

# The prompt names of each role, tried in order: a query (an anchor), and a document (a positive, a negative, a
# passage), as sentence-transformers' encode_query / encode_document look them up.
QUERY_PROMPT_NAMES = ("query",)
DOCUMENT_PROMPT_NAMES = ("document", "passage", "corpus")
# The prompts every sentence-transformers model has, empty unless it sets them: encode(prompt_name="query") works on
# a model without prompts.
DEFAULT_PROMPT_NAMES = ("query", "document")
# `encode`'s choices, as sentence-transformers names them.
OUTPUT_VALUES = ("sentence_embedding", "token_embeddings", None)
PRECISIONS = ("float32", "int8", "uint8", "binary", "ubinary")


def quantize(embeddings: torch.Tensor, precision: str) -> np.ndarray:
    """``(n, d)`` float embeddings quantized to ``precision`` by sentence-transformers' ``quantize_embeddings`` (the
    ranges of int8/uint8 from these embeddings, as `SentenceTransformer.encode` does), so that both give the same
    codes."""
    try:
        from sentence_transformers.util import quantize_embeddings
    except ImportError:
        try:  # sentence-transformers < 6
            from sentence_transformers.quantization import quantize_embeddings
        except ImportError as error:
            raise ImportError(
                f"precision={precision!r} quantizes with sentence-transformers' quantize_embeddings: "
                "pip install sentence-transformers, or encode with precision='float32'."
            ) from error
    return quantize_embeddings(embeddings.cpu().numpy(), precision=precision)


def role_prompt(prompts: dict[str, str] | None, role: str) -> str | None:
    """The name of the prompt of ``role`` (``"query"`` or ``"document"``) among ``prompts``, or None."""
    names = QUERY_PROMPT_NAMES if role == "query" else DOCUMENT_PROMPT_NAMES
    return next((name for name in names if name in (prompts or {})), None)


def prompt_token_count(tokenizer, prompt: str) -> int:
    """How many leading tokens a prompt takes, as sentence-transformers counts them for ``include_prompt=False`` (what
    `mask_prompt_tokens` leaves out): the prompt tokenized alone, its leading special token included, less a trailing
    special token ([SEP], </s>) where the tokenizer adds one."""
    input_ids = tokenizer(prompt, add_special_tokens=True)["input_ids"]
    trailing_special = bool(input_ids) and input_ids[-1] in tokenizer.all_special_ids
    return len(input_ids) - int(trailing_special)


def refuse_prompt_filling(
    tokenizer,
    prompt: str | None,
    max_length: int | None,
    texts: str = "sentences",
    length_name: str = "max_length",
    flag: str | None = None,
) -> None:
    """A `ValueError` when ``prompt`` with the special tokens takes ``max_length`` tokens or more: the texts it is
    prepended to, truncated at ``max_length``, would all be the prompt alone (cut short), one vector for every text.
    ``texts``, ``length_name`` and the script's ``flag`` for it name what is cut where, in the message."""
    if not prompt or max_length is None:
        return
    taken = len(tokenizer(prompt, add_special_tokens=True)["input_ids"])
    if taken >= max_length:
        setting = f"{length_name} ({flag})" if flag else length_name
        raise ValueError(
            f"The prompt {prompt!r} takes {taken} tokens with the special ones, and {texts} are cut at "
            f"{length_name}={max_length}: every one would be the prompt alone, the same for all, with nothing of its "
            f"text. Shorten the prompt or set {setting} to at least {taken + 1}."
        )


def mask_prompt_tokens(attention_mask: torch.Tensor, prompt_length: int | torch.Tensor | None) -> torch.Tensor:
    """The attention mask with each row's first ``prompt_length`` real tokens (the leading special token and the
    prompt; after the padding of a left-padded row) left out, for pooling only, as sentence-transformers'
    ``include_prompt=False`` leaves them out. Unchanged when there is no prompt."""
    if prompt_length is None or (not torch.is_tensor(prompt_length) and prompt_length <= 0):
        return attention_mask
    positions = torch.arange(attention_mask.shape[-1], device=attention_mask.device)
    first_real = attention_mask.to(torch.int).argmax(dim=-1, keepdim=True)  # (..., 1): 0 unless left-padded
    prompt_length = torch.as_tensor(prompt_length, device=attention_mask.device).reshape(-1, 1)  # (B or 1, 1)
    keep = positions >= first_real.reshape(-1, 1) + prompt_length  # (B, L)
    return attention_mask * keep.reshape(attention_mask.shape).to(attention_mask.dtype)


def encoder_inputs(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    token_type_ids: torch.Tensor | None = None,
    output_hidden_states: bool = False,
) -> dict:
    """The keyword arguments of an encoder's forward for ``(..., L)`` inputs, flattened to ``(N, L)``: an all-ones
    attention mask when none is given, ``token_type_ids`` only when given, hidden states only when asked."""
    flat = lambda tensor: None if tensor is None else tensor.reshape(-1, tensor.shape[-1])  # noqa: E731
    input_ids, attention_mask, token_type_ids = flat(input_ids), flat(attention_mask), flat(token_type_ids)
    kwargs = {
        "input_ids": input_ids,
        "attention_mask": torch.ones_like(input_ids) if attention_mask is None else attention_mask,
        "return_dict": True,
    }
    if token_type_ids is not None:
        kwargs["token_type_ids"] = token_type_ids
    if output_hidden_states:
        kwargs["output_hidden_states"] = True
    return kwargs


# Encoders whose 2D attention mask transformers turns into the attention's mask in one call
# (`create_bidirectional_mask`), which takes a ready 4D mask as it is, without reading the 2D one back to see
# whether it can be dropped. ModernBERT builds a second, sliding-window mask from the 2D one: not here.
READY_MASK_MODEL_TYPES = ("bert", "roberta", "xlm-roberta", "camembert", "electra", "distilbert", "mpnet")


def attention_mask_for(encoder, attention_mask: torch.Tensor, lengths: np.ndarray | None) -> torch.Tensor | None:
    """The mask to give ``encoder`` for a right-padded ``(N, L)`` batch whose rows' real tokens are known on the host
    (``lengths``, `host_data`): none when no row is padded, a ready ``(N, 1, 1, L)`` boolean mask for the encoders
    of `READY_MASK_MODEL_TYPES` under sdpa attention, else the 2D mask. transformers reads a 2D mask back from the
    device to decide whether the batch is padded at all (the host then waits for the GPU at every forward pass); the
    lengths say it on the host. Without ``lengths``, the 2D mask."""
    if lengths is None:
        return attention_mask
    if bool((lengths == attention_mask.shape[-1]).all()):
        return None  # no padding: what transformers decides after reading the mask back
    config = encoder.config
    if config.model_type in READY_MASK_MODEL_TYPES and config._attn_implementation in ("sdpa", PACKED_ATTENTION):
        return attention_mask[:, None, None, :].bool()
    return attention_mask


def encode_with(
    encoder,
    pooler,
    projection,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    token_type_ids: torch.Tensor | None = None,
    prompt_length: int | torch.Tensor | None = None,
    return_token_states: bool = False,
    lengths: np.ndarray | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """``(..., L)`` token ids -> ``(..., d)`` vectors through ``encoder``, ``pooler`` (a `SentencePooler`) and an
    optional ``projection``; the first ``prompt_length`` tokens are left out of the pooling when given. With
    ``return_token_states``, also the encoder's last hidden states ``(..., L, h)`` (sentence-transformers'
    ``token_embeddings``). ``lengths`` ``(N,)``: each row's real tokens on the host (`attention_mask_for`)."""
    leading = input_ids.shape[:-1]
    encoder_kwargs = encoder_inputs(input_ids, attention_mask, token_type_ids, pooler.needs_hidden_states)
    pooling_mask = mask_prompt_tokens(encoder_kwargs["attention_mask"], prompt_length)  # (N, L)
    encoder_kwargs["attention_mask"] = attention_mask_for(encoder, encoder_kwargs["attention_mask"], lengths)
    outputs = encoder(**encoder_kwargs)
    pooled = pooler(outputs, pooling_mask, getattr(encoder, "pooler", None))  # (N, h)
    if projection is not None:
        pooled = projection(pooled)
    vectors = pooled.reshape(*leading, pooled.shape[-1])
    if not return_token_states:
        return vectors
    states = outputs.last_hidden_state
    return vectors, states.reshape(*leading, *states.shape[-2:])


# How `EncodingPolicy.path`'s choices are logged.
ENCODING_PATH_WORDS = {
    "packed": "packed batches (one sequence of real tokens, attention inside each sentence)",
    "sorted": "length-sorted groups, each padded to its own longest",
    "padded": "one pass padded to the batch's longest",
}


@dataclasses.dataclass(frozen=True)
class EncodingPolicy:
    """How a model encodes the texts of a training batch: packed, in length-sorted groups, or in one padded pass.

    Built from a config (`from_config`), whose ``sub_batch_size`` and ``sub_batch_tokens`` it parses once
    (`configuration_contrastive.parse_encoding_fields`; their meaning is `ContrastiveConfig`'s docstring), and used by
    every model family through `embed` (`ContrastiveModel`'s views, each tower of `DualEncoderModel`) and
    `token_states` (CLEAR's MLM copy). Every path gives the embeddings of one padded pass (`encode_with`): absolute
    positions and attention masks make right-padding invisible, and a prompt left out of the pooling
    (``include_prompt=False``) is left out on every path. Inputs a path cannot take (not right-padded, a row without
    tokens; for packing, a row that is all prompt) take the padded pass.

    Args:
        sub_batch_size: ``"auto"``, ``"packed"``, ``"sorted"``, or an integer (0: one padded pass; N: length-sorted
            groups of N texts).
        sub_batch_tokens: the token slots (texts x the group's longest) of a ``"sorted"`` group.
        packed_attention_kernel: the attention kernel of packed batches (`packing.ATTENTION_KERNELS`); None: chosen
            at each call by device, dtype and dropout.
    """

    sub_batch_size: int | str = 0
    sub_batch_tokens: int = 1024
    packed_attention_kernel: str | None = None

    def __post_init__(self):
        sub_batch_size, sub_batch_tokens = parse_encoding_fields(self.sub_batch_size, self.sub_batch_tokens)
        object.__setattr__(self, "sub_batch_size", sub_batch_size)
        object.__setattr__(self, "sub_batch_tokens", sub_batch_tokens)

    @classmethod
    def from_config(cls, config, packed_attention_kernel: str | None = None) -> EncodingPolicy:
        """The policy of a model config (`ContrastiveConfig`, `DualEncoderConfig`)."""
        return cls(config.sub_batch_size, config.sub_batch_tokens, packed_attention_kernel)

    def path(self, encoder, device: torch.device) -> str:
        """How `embed` encodes ``encoder``'s batches on ``device``: ``"packed"``, ``"sorted"`` or ``"padded"``.

        ``"auto"`` packs where the encoder supports it (`packing.packing_unsupported_reason`), else sorts on CPU and
        pads elsewhere; ``"packed"`` raises where packing cannot run. Each encoder logs each choice once, with its
        reason.
        """
        path, reason = self._path_and_reason(encoder, device)
        logged = vars(encoder).setdefault("_contrastive_hf_logged_encoding_paths", set())
        if (path, reason) not in logged:
            logged.add((path, reason))
            logger.info("%s encodes %s: %s.", type(encoder).__name__, ENCODING_PATH_WORDS[path], reason)
        return path

    def _path_and_reason(self, encoder, device: torch.device) -> tuple[str, str]:
        size = self.sub_batch_size
        if size == 0:
            return "padded", "sub_batch_size=0"
        if isinstance(size, int):
            return "sorted", f"sub_batch_size={size}: length-sorted groups of that many texts"
        if size == "sorted":
            return "sorted", f"sub_batch_size='sorted' ({self.sub_batch_tokens} token slots a group)"
        unsupported = packing_unsupported_reason(encoder)
        if unsupported is None:
            return "packed", f"sub_batch_size={size!r} and the encoder supports packing"
        if size == "packed":
            raise ValueError(
                f"sub_batch_size='packed' cannot run: {unsupported}. Use sub_batch_size='auto' (packs where it "
                "can), 'sorted' (length-sorted groups, any encoder) or 0 (one padded pass)."
            )
        if device.type == "cpu":
            return "sorted", f"sub_batch_size='auto' cannot pack ({unsupported}); on CPU length-sorted groups"
        return "padded", (
            f"sub_batch_size='auto' cannot pack ({unsupported}); on {device.type} one padded pass (small "
            "length-sorted groups would leave the device idle)"
        )

    def embed(
        self,
        encoder,
        pooler,
        projection,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        prompt_lengths=None,
        lengths=None,
    ) -> torch.Tensor:
        """``(..., L)`` token ids -> ``(..., d)`` vectors through ``encoder``, ``pooler`` (a `SentencePooler`) and
        an optional ``projection``, on the path `path` chooses, with the vectors of one padded pass.

        ``prompt_lengths`` (an int, or ``(...)`` host values or a tensor): how many leading tokens of each text are
        its prompt, left out of the pooling (``include_prompt=False``, as `encode` leaves them out). ``lengths``
        ``(...)``: each text's real tokens, on the host (`host_data`: the collators give them); with them the packed
        and sorted paths read nothing back from the device, without them the lengths are read from the mask.
        """
        leading, width = input_ids.shape[:-1], input_ids.shape[-1]
        flat = lambda tensor: None if tensor is None else tensor.reshape(-1, width)  # noqa: E731
        input_ids, token_type_ids = flat(input_ids), flat(token_type_ids)
        attention_mask = torch.ones_like(input_ids) if attention_mask is None else flat(attention_mask)
        if prompt_lengths is not None:  # (N,), on the host
            prompt_lengths = np.broadcast_to(host_array(prompt_lengths), tuple(leading)).reshape(-1)
        path = self.path(encoder, input_ids.device)
        lengths = None if lengths is None else host_array(lengths).reshape(-1)  # (N,) host
        if path in ("packed", "sorted") and (lengths is not None or can_pack(attention_mask)):
            lengths = row_lengths(attention_mask, lengths)
            if path == "packed" and not keeps_a_token(lengths, prompt_lengths):
                path = "padded"  # a text that is all prompt: the padded pass pools it in its own way
        else:
            path = "padded"
        if path == "packed":
            pooled = self._pool_packed(
                encoder, pooler, input_ids, attention_mask, token_type_ids, prompt_lengths, lengths
            )
        elif path == "sorted":
            pooled = self._pool_sorted_groups(
                encoder, pooler, input_ids, attention_mask, token_type_ids, prompt_lengths, lengths
            )
        else:
            prompts = None if prompt_lengths is None else to_device(prompt_lengths, input_ids.device)
            pooled = encode_with(
                encoder, pooler, None, input_ids, attention_mask, token_type_ids, prompts, lengths=lengths
            )
        if projection is not None:
            pooled = projection(pooled)
        return pooled.reshape(*leading, pooled.shape[-1])

    def _pool_packed(self, encoder, pooler, input_ids, attention_mask, token_type_ids, prompt_lengths, lengths):
        """``(N, L)`` right-padded inputs -> ``(N, h)`` pooled vectors, in one pass over their real tokens."""
        outputs, packed = packed_encoder_forward(
            encoder,
            input_ids,
            attention_mask,
            token_type_ids,
            output_hidden_states=pooler.needs_hidden_states,
            kernel=self.packed_attention_kernel,
            lengths=lengths,
        )
        if prompt_lengths is not None:
            packed = packed.without_leading_tokens(prompt_lengths)
        return pooler(outputs, packed, getattr(encoder, "pooler", None))

    def _pool_sorted_groups(self, encoder, pooler, input_ids, attention_mask, token_type_ids, prompt_lengths, lengths):
        """``(N, L)`` right-padded inputs -> ``(N, h)`` pooled vectors, in length-sorted groups of ``sub_batch_size``
        rows (or, for ``"sorted"`` and ``"auto"``, of ``sub_batch_tokens`` token slots), each cut to its own longest
        row; back in input order. ``lengths`` ``(N,)`` on the host: the groups are cut there."""
        order = np.argsort(-lengths, kind="stable")
        sorted_lengths = lengths[order].tolist()
        if isinstance(self.sub_batch_size, int):
            bounds = length_sorted_groups(sorted_lengths, group_size=self.sub_batch_size)
        else:
            bounds = length_sorted_groups(sorted_lengths, group_tokens=self.sub_batch_tokens)
        device = input_ids.device
        take = lambda tensor, rows, cut: None if tensor is None else tensor.index_select(0, rows)[:, :cut]  # noqa: E731
        parts = []
        for start, stop in bounds:
            rows, cut = to_device(order[start:stop], device), max(sorted_lengths[start], 1)
            prompts = None if prompt_lengths is None else to_device(prompt_lengths[order[start:stop]], device)
            parts.append(
                encode_with(
                    encoder,
                    pooler,
                    None,
                    take(input_ids, rows, cut),
                    take(attention_mask, rows, cut),
                    take(token_type_ids, rows, cut),
                    prompts,
                    lengths=lengths[order[start:stop]],
                )
            )
        return torch.cat(parts).index_select(0, to_device(np.argsort(order), device))  # back to batch order, (N, h)

    def token_states(
        self, encoder, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, lengths=None
    ) -> tuple[torch.Tensor, object]:
        """The last layer's token states of ``(B, L)`` inputs, for a head on tokens (CLEAR's MLM head).

        Returns ``(states, packed)``: packed (`path` says ``"packed"``), the ``(T, h)`` states of the real tokens and
        the `PackedSequences` (``flat_index``: each token's row in the inputs flattened to ``(B * L)``); otherwise
        one padded pass, the ``(B * L, h)`` states of every position and ``None``. ``lengths`` ``(B,)`` on the host,
        as `embed` takes them.
        """
        attention_mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask
        packable = lengths is not None or can_pack(attention_mask)
        if self.path(encoder, input_ids.device) == "packed" and packable:
            outputs, packed = packed_encoder_forward(
                encoder, input_ids, attention_mask, kernel=self.packed_attention_kernel, lengths=lengths
            )
            return outputs.last_hidden_state[0], packed
        encoder_kwargs = encoder_inputs(input_ids, attention_mask)
        lengths = None if lengths is None else host_array(lengths).reshape(-1)
        encoder_kwargs["attention_mask"] = attention_mask_for(encoder, encoder_kwargs["attention_mask"], lengths)
        states = encoder(**encoder_kwargs).last_hidden_state
        return states.reshape(-1, states.shape[-1]), None


def keeps_a_token(lengths: np.ndarray, prompt_lengths: np.ndarray | None) -> bool:
    """Whether every text of ``(N,)`` host ``lengths`` pools at least one token after its ``(N,)`` prompt (a packed
    batch pools real tokens only; the padded pass pools a row that is all prompt in its own way)."""
    return prompt_lengths is None or bool((prompt_lengths < lengths).all())


class SentenceEmbeddingMixin:
    """`encode` and `similarity` in sentence-transformers' spelling, for a model with `embed_tokens`; and the
    `EncodingPolicy` of its training batches (`encoding_policy`)."""

    tokenizer = None  # set by callers or loaders; not saved with the weights
    # The attention kernel of packed batches (`packing.ATTENTION_KERNELS`); None: chosen at each call by device,
    # dtype and dropout (`packing.choose_attention_kernel`). Tests and benchmarks set one; it is not saved.
    packed_attention_kernel: str | None = None

    def encoding_policy(self, sub_batch_size: int | str | None = None) -> EncodingPolicy:
        """How this model encodes training batches: its config's ``sub_batch_size`` (or the one given) and
        ``sub_batch_tokens``, and its `packed_attention_kernel`."""
        policy = EncodingPolicy.from_config(self.config, self.packed_attention_kernel)
        return policy if sub_batch_size is None else dataclasses.replace(policy, sub_batch_size=sub_batch_size)

    def embed_tokens(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        task: str | None = None,
        prompt_length: int | None = None,
        return_token_states: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """The sentence vectors ``(B, d)`` of a padded batch, as the model embeds at inference (`encode_with`), and
        with ``return_token_states`` the encoder's last hidden states ``(B, L, h)``."""
        raise NotImplementedError

    @property
    def similarity_fn_name(self) -> str:
        """``cosine`` or ``dot``: how this model's embeddings are compared (sentence-transformers' name)."""
        return getattr(self.config, "similarity", "cosine")

    @torch.no_grad()
    def encode(
        self,
        sentences: str | Sequence[str],
        prompt_name: str | None = None,
        prompt: str | None = None,
        batch_size: int = 32,
        show_progress_bar: bool | None = None,
        output_value: str | None = "sentence_embedding",
        precision: str = "float32",
        convert_to_numpy: bool = True,
        convert_to_tensor: bool = False,
        device: str | torch.device | None = None,
        normalize_embeddings: bool = False,
        truncate_dim: int | None = None,
        task: str | None = None,
        tokenizer=None,
        max_length: int | None = None,
        bf16: bool | None = None,
        **deprecated,
    ) -> np.ndarray | torch.Tensor | list:
        """Sentence embeddings, in the input order, as `SentenceTransformer.encode` returns them.

        Args:
            sentences: a sentence or a list of them.
            prompt_name: a key of the model's ``config.prompts`` (e.g. ``"query"``), prepended to every sentence;
                defaults to ``config.default_prompt_name``.
            prompt: a prompt text instead (wins over ``prompt_name``).
            batch_size: sentences per forward pass.
            show_progress_bar: a progress bar over the batches (default: when logging at INFO or below).
            output_value: ``"sentence_embedding"`` (the default); ``"token_embeddings"``, each sentence's encoder
                states over its real tokens (a list of ``(tokens, h)`` tensors); or None, a dict per sentence with
                both and its ``input_ids`` and ``attention_mask``, as sentence-transformers returns them (the row of
                its padded batch).
            precision: ``"float32"`` (the default), or ``"int8"``, ``"uint8"``, ``"binary"``, ``"ubinary"``:
                quantized with sentence-transformers' own ``quantize_embeddings`` (needs sentence-transformers),
                as `SentenceTransformer.encode` does.
            convert_to_numpy: a float32 numpy array (the default), else a list of tensors.
            convert_to_tensor: one tensor (on the encoding device); wins over ``convert_to_numpy``.
            device: where to encode (default: the model's device); the model is moved there.
            normalize_embeddings: L2-normalise the embeddings (then dot product = cosine similarity).
            truncate_dim: keep the first ``truncate_dim`` dimensions (Matryoshka embeddings); default: the config's
                ``truncate_dim`` (none when unset).
            task: for models with several towers, ``"query"`` or ``"document"``; see `encode_query` and
                `encode_document`.
            tokenizer: the tokenizer (default: ``self.tokenizer``, then the one saved with the checkpoint).
            max_length: truncation length in tokens (default: what the encoder takes).
            bf16: compute under bf16 autocast (True) or in the weights' own dtype (False); default (None): bf16 on a
                CPU with bf16 matrix instructions and on a CUDA device that supports bf16, for float32 weights
                (`models.precision.encoding_precision`: embeddings within cosine 0.999 of float32,
                docs/benchmarks.md). The embeddings returned are float32 either way.
        """
        if "normalize" in deprecated:
            warnings.warn(
                "encode(normalize=...) is deprecated; use normalize_embeddings=..., as sentence-transformers does.",
                FutureWarning,
                stacklevel=2,
            )
            normalize_embeddings = deprecated.pop("normalize")
        if deprecated:
            raise TypeError(f"encode() got unexpected argument(s) {sorted(deprecated)}.")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}.")
        if output_value not in OUTPUT_VALUES:
            raise ValueError(f"output_value must be one of {OUTPUT_VALUES}, got {output_value!r}.")
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}.")
        if precision != "float32" and output_value != "sentence_embedding":
            raise ValueError(
                f"precision={precision!r} quantizes sentence embeddings: use it with output_value="
                "'sentence_embedding'."
            )
        single = isinstance(sentences, str)
        sentences = [sentences] if single else list(sentences)
        tokenizer = tokenizer or self.tokenizer or self._load_saved_tokenizer()
        prompt, prompt_length = self._resolve_prompt(tokenizer, prompt_name, prompt)
        if prompt:
            sentences = [prompt + sentence for sentence in sentences]
        if device is not None:
            self.to(device)
        device = next(self.parameters()).device
        max_length = max_length or self._max_length(tokenizer)
        refuse_prompt_filling(tokenizer, prompt, max_length)
        encoded = tokenizer(sentences, truncation=True, max_length=max_length)
        order = sorted(range(len(sentences)), key=lambda index: -len(encoded["input_ids"][index]))
        if show_progress_bar is None:
            show_progress_bar = logger.getEffectiveLevel() <= logging.INFO and len(order) > batch_size
        batches = range(0, len(order), batch_size)
        if show_progress_bar:
            from tqdm.auto import tqdm

            batches = tqdm(batches, desc="Batches", unit="batch")
        parts: list[torch.Tensor] = []
        token_rows: dict[int, dict] = {}  # sentence -> its token outputs, for output_value other than the embedding
        with_tokens = output_value != "sentence_embedding"
        compute = encoding_precision(bf16, device, next(self.parameters()).dtype)
        if bf16 is None:  # the device's choice is said once; a caller that forces one knows it
            log_precision_once(self, "encode", compute)
        was_training = self.training
        self.eval()
        try:
            # one autocast context for every batch: it casts each weight to bf16 once, not once a batch
            with compute.autocast(device):
                for start in batches:
                    rows = order[start : start + batch_size]
                    batch = tokenizer.pad(
                        {name: [encoded[name][row] for row in rows] for name in encoded}, return_tensors="pt"
                    )
                    vectors = self.embed_tokens(
                        batch["input_ids"].to(device),
                        batch["attention_mask"].to(device),
                        batch["token_type_ids"].to(device) if "token_type_ids" in batch else None,
                        task=task,
                        prompt_length=prompt_length,
                        return_token_states=with_tokens,
                    )
                    if with_tokens:  # as sentence-transformers: each sentence's row of its padded batch
                        vectors, states = vectors
                        for index, row in enumerate(rows):
                            token_rows[row] = {name: batch[name][index] for name in batch}
                            token_rows[row]["token_embeddings"] = states[index].float()
                    parts.append(vectors.float())
        finally:
            self.train(was_training)
        width = getattr(self.config, "embedding_size", 0)
        embeddings = torch.cat(parts) if parts else torch.empty(0, width, device=device)
        embeddings = embeddings[torch.argsort(torch.tensor(order, device=device))] if parts else embeddings
        truncate_dim = truncate_dim or getattr(self.config, "truncate_dim", None)
        if truncate_dim is not None:
            embeddings = embeddings[:, :truncate_dim]
        if normalize_embeddings:
            embeddings = F.normalize(embeddings, dim=-1)
        if with_tokens:  # as sentence-transformers: a list, whatever convert_to_* say
            if output_value == "token_embeddings":  # the real tokens only (right-padded: they come first)
                outputs = [
                    token_rows[row]["token_embeddings"][: int(token_rows[row]["attention_mask"].sum())]
                    for row in range(len(sentences))
                ]
            else:
                outputs = [{**token_rows[row], "sentence_embedding": embeddings[row]} for row in range(len(sentences))]
            return outputs[0] if single else outputs
        if precision != "float32":
            quantized = quantize(embeddings, precision)
            if convert_to_tensor:
                quantized = torch.from_numpy(quantized)
            return quantized[0] if single else quantized
        if convert_to_tensor:
            return embeddings[0] if single else embeddings
        if convert_to_numpy:
            array = embeddings.cpu().numpy()
            return array[0] if single else array
        rows = list(embeddings)
        return rows[0] if single else rows

    def encode_query(self, sentences: str | Sequence[str], **kwargs):
        """`encode` for queries, as `SentenceTransformer.encode_query`: the ``query`` prompt of ``config.prompts``
        unless a prompt is given (none when the model has none, whatever ``default_prompt_name`` says), and the
        query tower of a model with two."""
        return self._encode_role(sentences, "query", kwargs)

    def encode_document(self, sentences: str | Sequence[str], **kwargs):
        """`encode` for documents, as `SentenceTransformer.encode_document`: the first of the ``document``,
        ``passage`` and ``corpus`` prompts the model has unless a prompt is given, and the passage tower of a model
        with two."""
        return self._encode_role(sentences, "document", kwargs)

    def _encode_role(self, sentences, role: str, kwargs: dict):
        if kwargs.get("prompt_name") is None and kwargs.get("prompt") is None:
            name = role_prompt(getattr(self.config, "prompts", None), role)
            kwargs = {**kwargs, "prompt_name": name} if name is not None else {**kwargs, "prompt": ""}
        return self.encode(sentences, task=role, **kwargs)

    def similarity(self, embeddings1, embeddings2) -> torch.Tensor:
        """``(n, d), (m, d) -> (n, m)`` similarities under the model's similarity function (cosine, or dot)."""
        a = torch.as_tensor(np.asarray(embeddings1) if not torch.is_tensor(embeddings1) else embeddings1).float()
        b = torch.as_tensor(np.asarray(embeddings2) if not torch.is_tensor(embeddings2) else embeddings2).float()
        a, b = a.reshape(-1, a.shape[-1]), b.reshape(-1, b.shape[-1])
        if self.similarity_fn_name == "cosine":
            a, b = F.normalize(a, dim=-1), F.normalize(b, dim=-1)
        return a @ b.T

    def _resolve_prompt(self, tokenizer, prompt_name: str | None, prompt: str | None) -> tuple[str, int | None]:
        """The prompt text, and how many leading tokens to leave out of the pooling (None: pool them)."""
        prompts = getattr(self.config, "prompts", None) or {}
        if prompt is None:
            prompt_name = prompt_name or getattr(self.config, "default_prompt_name", None)
            if prompt_name is not None:
                if prompt_name not in prompts and prompt_name in DEFAULT_PROMPT_NAMES:
                    prompt = ""  # sentence-transformers' default prompts: {"query": "", "document": ""}
                elif prompt_name not in prompts:
                    raise ValueError(
                        f"Unknown prompt_name {prompt_name!r}: this model's prompts are {sorted(prompts) or 'none'} "
                        "(config.prompts); pass prompt='...' for another prompt."
                    )
                else:
                    prompt = prompts[prompt_name]
        if not prompt:
            return "", None
        if getattr(self.config, "include_prompt", True):
            return prompt, None
        return prompt, prompt_token_count(tokenizer, prompt)

    def _max_length(self, tokenizer) -> int:
        """The longest input the model takes: the tokenizer's limit, capped by the encoder's position embeddings and
        by the config's ``max_seq_length`` (what sentence-transformers truncates at)."""
        limits = [self.config.max_seq_length] if getattr(self.config, "max_seq_length", None) else []
        model_max = getattr(tokenizer, "model_max_length", None)
        if model_max is not None and model_max < 1_000_000:  # transformers uses ~1e30 for "unset"
            limits.append(int(model_max))
        for encoder_config in self.encoder_configs():
            positions = getattr(encoder_config, "max_position_embeddings", None)
            if positions:
                # RoBERTa-style models reserve padding_idx + 1 positions before the first token
                roberta_like = encoder_config.model_type in ("roberta", "xlm-roberta", "camembert")
                offset = (getattr(encoder_config, "pad_token_id", None) or 0) + 1 if roberta_like else 0
                limits.append(int(positions) - offset)
        return min(limits) if limits else 512

    def encoder_configs(self) -> list:
        """The configs of the model's encoders (one, or a query and a passage tower)."""
        raise NotImplementedError

    def _load_saved_tokenizer(self):
        path = getattr(self.config, "_name_or_path", "")
        if not path:
            raise ValueError(
                "encode() needs a tokenizer: pass tokenizer=AutoTokenizer.from_pretrained(...) or set model.tokenizer."
            )
        from transformers import AutoTokenizer

        try:
            self.tokenizer = AutoTokenizer.from_pretrained(path)
        except (OSError, ValueError) as error:
            where = path if os.path.isdir(path) else f"the Hub repository {path!r}"
            raise ValueError(f"encode() found no tokenizer in {where}; pass tokenizer=... explicitly.") from error
        return self.tokenizer
