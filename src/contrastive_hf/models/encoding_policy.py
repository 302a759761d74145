"""How a model encodes the texts of a batch into sentence vectors: `EncodingPolicy`, the one policy of every model
family (`ContrastiveModel`'s views, each tower of `DualEncoderModel`, CLEAR's MLM copy). Built once per model from the
config's ``sub_batch_size`` and ``sub_batch_tokens`` (`EncodingPolicy.of`), it encodes a batch packed (`packing.py`),
in length-sorted groups or in one padded pass (`encode_with`), prompts left out of the pooling included, with the
embeddings of the padded pass. `encoding.py`'s `encode` (inference) encodes its batches through `encode_with` too.
"""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
import torch

from .configuration_contrastive import BIDIRECTIONAL_DECODERS, parse_encoding_fields
from .host_data import host_array, row_lengths, to_device
from .packing import (
    PACKED_ATTENTION,
    can_pack,
    length_sorted_groups,
    packed_encoder_forward,
    packing_unsupported_reason,
    without_kv_cache,
)
from .prompts import mask_prompt_tokens

logger = logging.getLogger(__name__)

__all__ = [
    "EncodingPolicy",
    "ENCODING_PATH_WORDS",
    "READY_MASK_MODEL_TYPES",
    "attention_mask_for",
    "ready_decoder_mask",
    "encode_with",
    "encoder_inputs",
    "keeps_a_token",
]


# Decoders whose learned absolute position embeddings are read at each token's index, not at its place among the
# real tokens: a left-padded text would start at the padding's length. Their position ids are counted from the
# attention mask instead (`encoder_inputs`), so that left and right padding give the same embeddings, as a text
# alone does (rotary positions, Llama's kind, see only distances; OPT counts from the mask itself).
MASK_POSITION_MODEL_TYPES = ("gpt2",)


def encoder_inputs(
    encoder,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    token_type_ids: torch.Tensor | None = None,
    output_hidden_states: bool = False,
) -> dict:
    """The keyword arguments of ``encoder``'s forward for ``(..., L)`` inputs, flattened to ``(N, L)``: an all-ones
    attention mask when none is given, ``token_type_ids`` only when given, hidden states only when asked, no key/value
    cache for a decoder (`without_kv_cache`), and for the decoders of `MASK_POSITION_MODEL_TYPES` each token's position
    among its text's real tokens."""
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
    kwargs.update(without_kv_cache(encoder))
    if attention_mask is not None and getattr(encoder.config, "model_type", None) in MASK_POSITION_MODEL_TYPES:
        kwargs["position_ids"] = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)  # on the device: no sync
    return kwargs


# Encoders whose 2D attention mask transformers turns into the attention's mask in one call
# (`create_bidirectional_mask`), which takes a ready 4D mask as it is, without reading the 2D one back to see
# whether it can be dropped. ModernBERT builds a second, sliding-window mask from the 2D one: not here.
READY_MASK_MODEL_TYPES = ("bert", "roberta", "xlm-roberta", "camembert", "electra", "distilbert", "mpnet")


def attention_mask_for(encoder, attention_mask: torch.Tensor, lengths: np.ndarray | None) -> torch.Tensor | None:
    """The mask to give ``encoder`` for a padded ``(N, L)`` batch whose rows' real tokens are known on the host
    (``lengths``, `host_data`): none when no row is padded; under sdpa attention a ready boolean mask, ``(N, 1, 1,
    L)`` for the encoders of `READY_MASK_MODEL_TYPES`, ``(N, 1, L, L)`` for the decoders whose masks transformers'
    masking utilities build (`configuration_contrastive.BIDIRECTIONAL_DECODERS`, `ready_decoder_mask`); else the 2D
    mask. transformers reads a 2D mask back from the device to decide whether the batch is padded at all (the host
    then waits for the GPU at every forward pass); the lengths say it on the host. Without ``lengths``, the 2D
    mask."""
    if lengths is None:
        return attention_mask
    width = attention_mask.shape[-1]
    if bool((lengths == width).all()):
        return None  # no padding: what transformers decides after reading the mask back
    config = encoder.config
    if config._attn_implementation not in ("sdpa", PACKED_ATTENTION):
        return attention_mask
    if config.model_type in READY_MASK_MODEL_TYPES:
        return attention_mask[:, None, None, :].bool()
    # a decoder's masks (`create_causal_mask`, and for layers with a sliding window
    # `create_sliding_window_causal_mask`) each take a ready mask as it is: one serves every layer only while the batch
    # is no longer than the decoder's sliding window, if it has one
    window = getattr(config, "sliding_window", None)
    if config.model_type in BIDIRECTIONAL_DECODERS and (window is None or width <= window):
        return ready_decoder_mask(attention_mask, causal=getattr(config, "is_causal", True) is not False)
    return attention_mask


def ready_decoder_mask(attention_mask: torch.Tensor, causal: bool) -> torch.Tensor:
    """The boolean mask a decoder's attention takes for a padded ``(N, L)`` batch, built on the device: each token
    attends to the real tokens (before it and itself when ``causal``), and a padding token at least to itself, so
    that no row of a left-padded batch is masked whole (its state is never pooled)."""
    keys = attention_mask.bool()[:, None, None, :]  # (N, 1, 1, L)
    width = attention_mask.shape[-1]
    itself = torch.eye(width, dtype=torch.bool, device=attention_mask.device)
    if not causal:
        return keys | itself  # (N, 1, L, L)
    before = torch.ones(width, width, dtype=torch.bool, device=attention_mask.device).tril()
    return (keys & before) | itself  # (N, 1, L, L)


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
    encoder_kwargs = encoder_inputs(encoder, input_ids, attention_mask, token_type_ids, pooler.needs_hidden_states)
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

    @classmethod
    def of(cls, model) -> EncodingPolicy:
        """The policy of ``model``: its config's ``sub_batch_size`` and ``sub_batch_tokens`` and its
        ``packed_attention_kernel``, built (and parsed) once, and again only when one of them changes (a config
        edited after the model was built)."""
        settings = (model.config.sub_batch_size, model.config.sub_batch_tokens, model.packed_attention_kernel)
        built = vars(model).get("_contrastive_hf_encoding_policy")
        if built is None or built[0] != settings:
            built = (settings, cls(*settings))
            vars(model)["_contrastive_hf_encoding_policy"] = built  # beside the module's state, never saved
        return built[1]

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
        unsupported = packing_unsupported_reason(encoder, asked=size == "packed")
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
        encoder_kwargs = encoder_inputs(encoder, input_ids, attention_mask)
        lengths = None if lengths is None else host_array(lengths).reshape(-1)
        encoder_kwargs["attention_mask"] = attention_mask_for(encoder, encoder_kwargs["attention_mask"], lengths)
        states = encoder(**encoder_kwargs).last_hidden_state
        return states.reshape(-1, states.shape[-1]), None


def keeps_a_token(lengths: np.ndarray, prompt_lengths: np.ndarray | None) -> bool:
    """Whether every text of ``(N,)`` host ``lengths`` pools at least one token after its ``(N,)`` prompt (a packed
    batch pools real tokens only; the padded pass pools a row that is all prompt in its own way)."""
    return prompt_lengths is None or bool((prompt_lengths < lengths).all())
