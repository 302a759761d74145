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
The training batches' encoding, `EncodingPolicy` (packed, length-sorted or padded), is `encoding_policy.py`; prompts
are `prompts.py`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from .encoding_policy import EncodingPolicy
from .positions import usable_positions
from .precision import encoding_precision, log_precision_once
from .prompts import DEFAULT_PROMPT_NAMES, prompt_token_count, refuse_prompt_filling, role_prompt

logger = logging.getLogger(__name__)

__all__ = [
    "SentenceEmbeddingMixin",
    "OUTPUT_VALUES",
    "PRECISIONS",
    "quantize",
]

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


def _check_encode_arguments(batch_size: int, output_value: str | None, precision: str) -> None:
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}.")
    if output_value not in OUTPUT_VALUES:
        raise ValueError(f"output_value must be one of {OUTPUT_VALUES}, got {output_value!r}.")
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}.")
    if precision != "float32" and output_value != "sentence_embedding":
        raise ValueError(
            f"precision={precision!r} quantizes sentence embeddings: use it with output_value='sentence_embedding'."
        )


class SentenceEmbeddingMixin:
    """`encode` and `similarity` in sentence-transformers' spelling, for a model with `embed_tokens`; and the
    `EncodingPolicy` of its training batches (`encoding_policy`)."""

    tokenizer = None  # set by callers or loaders; not saved with the weights
    # The attention kernel of packed batches (`packing.ATTENTION_KERNELS`); None: chosen at each call by device,
    # dtype and dropout (`packing.choose_attention_kernel`). Tests and benchmarks set one; it is not saved.
    packed_attention_kernel: str | None = None

    def encoding_policy(self) -> EncodingPolicy:
        """How this model encodes training batches: its config's ``sub_batch_size`` and ``sub_batch_tokens`` and its
        `packed_attention_kernel`, built once (`EncodingPolicy.of`)."""
        return EncodingPolicy.of(self)

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
            normalize_embeddings: L2-normalise the embeddings (then dot product = cosine similarity), after
                ``truncate_dim``. A model whose config says ``normalize_embeddings`` (a sentence-transformers
                ``Normalize`` module) normalises them before truncating, whatever this says.
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
        _check_encode_arguments(batch_size, output_value, precision)
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
        with_tokens = output_value != "sentence_embedding"
        embeddings, token_rows = self._embed_in_batches(
            tokenizer, encoded, batch_size, show_progress_bar, device, bf16, task, prompt_length, with_tokens
        )
        if getattr(self.config, "normalize_embeddings", False):  # the model's Normalize module, before truncation
            embeddings = F.normalize(embeddings, dim=-1)
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

    def _embed_in_batches(
        self, tokenizer, encoded, batch_size, show_progress_bar, device, bf16, task, prompt_length, with_tokens
    ) -> tuple[torch.Tensor, dict[int, dict]]:
        """The float32 ``(n, d)`` embeddings of the tokenized sentences ``encoded``, in their order, computed in
        batches of similar length in eval mode (the model's mode is restored); with ``with_tokens``, each sentence's
        row of its padded batch and its token states (``{sentence: {name: tensor}}``), else ``{}``."""
        order = sorted(range(len(encoded["input_ids"])), key=lambda index: -len(encoded["input_ids"][index]))
        if show_progress_bar is None:
            show_progress_bar = logger.getEffectiveLevel() <= logging.INFO and len(order) > batch_size
        batches = range(0, len(order), batch_size)
        if show_progress_bar:
            from tqdm.auto import tqdm

            batches = tqdm(batches, desc="Batches", unit="batch")
        parts: list[torch.Tensor] = []
        token_rows: dict[int, dict] = {}  # sentence -> its token outputs, for output_value other than the embedding
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
        if not parts:
            return torch.empty(0, getattr(self.config, "embedding_size", 0), device=device), token_rows
        return torch.cat(parts)[torch.argsort(torch.tensor(order, device=device))], token_rows

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
        """The longest input the model takes: the tokenizer's limit, capped by the encoder's position embeddings
        (`positions.usable_positions`) and by the config's ``max_seq_length`` (what sentence-transformers truncates
        at)."""
        limits = [self.config.max_seq_length] if getattr(self.config, "max_seq_length", None) else []
        model_max = getattr(tokenizer, "model_max_length", None)
        if model_max is not None and model_max < 1_000_000:  # transformers uses ~1e30 for "unset"
            limits.append(int(model_max))
        positions = usable_positions(self)
        if positions is None:  # no learned position table (rotary, relative): the configs' nominal length
            nominal = [getattr(config, "max_position_embeddings", None) for config in self.encoder_configs()]
            positions = min((int(value) for value in nominal if value), default=None)
        if positions is not None:
            limits.append(positions)
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
