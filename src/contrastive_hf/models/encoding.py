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
`pool_encoder_outputs` is the one path from an encoder's token states to pooled, projected vectors that every model
uses.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F

logger = logging.getLogger(__name__)

__all__ = [
    "SentenceEmbeddingMixin",
    "encode_with",
    "mask_prompt_tokens",
    "prompt_token_count",
    "refuse_prompt_filling",
    "role_prompt",
    "QUERY_PROMPT_NAMES",
    "DOCUMENT_PROMPT_NAMES",
]

# The prompt names of each role, tried in order: a query (an anchor), and a document (a positive, a negative, a
# passage), as sentence-transformers' encode_query / encode_document look them up.
QUERY_PROMPT_NAMES = ("query",)
DOCUMENT_PROMPT_NAMES = ("document", "passage", "corpus")


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


def encode_with(
    encoder,
    pooler,
    projection,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    token_type_ids: torch.Tensor | None = None,
    prompt_length: int | torch.Tensor | None = None,
) -> torch.Tensor:
    """``(..., L)`` token ids -> ``(..., d)`` vectors through ``encoder``, ``pooler`` (a `SentencePooler`) and an
    optional ``projection``; the first ``prompt_length`` tokens are left out of the pooling when given."""
    leading = input_ids.shape[:-1]
    encoder_kwargs = encoder_inputs(input_ids, attention_mask, token_type_ids, pooler.needs_hidden_states)
    pooling_mask = mask_prompt_tokens(encoder_kwargs["attention_mask"], prompt_length)  # (N, L)
    pooled = pooler(encoder(**encoder_kwargs), pooling_mask, getattr(encoder, "pooler", None))  # (N, h)
    if projection is not None:
        pooled = projection(pooled)
    return pooled.reshape(*leading, pooled.shape[-1])


class SentenceEmbeddingMixin:
    """`encode` and `similarity` in sentence-transformers' spelling, for a model with `embed_tokens`."""

    tokenizer = None  # set by callers or loaders; not saved with the weights

    def embed_tokens(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        task: str | None = None,
        prompt_length: int | None = None,
    ) -> torch.Tensor:
        """The sentence vectors ``(B, d)`` of a padded batch, as the model embeds at inference."""
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
        convert_to_numpy: bool = True,
        convert_to_tensor: bool = False,
        device: str | torch.device | None = None,
        normalize_embeddings: bool = False,
        truncate_dim: int | None = None,
        task: str | None = None,
        tokenizer=None,
        max_length: int | None = None,
        **deprecated,
    ) -> np.ndarray | torch.Tensor:
        """Sentence embeddings, in the input order, as `SentenceTransformer.encode` returns them.

        Args:
            sentences: a sentence or a list of them.
            prompt_name: a key of the model's ``config.prompts`` (e.g. ``"query"``), prepended to every sentence;
                defaults to ``config.default_prompt_name``.
            prompt: a prompt text instead (wins over ``prompt_name``).
            batch_size: sentences per forward pass.
            show_progress_bar: a progress bar over the batches (default: when logging at INFO or below).
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
        was_training = self.training
        self.eval()
        try:
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
                )
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
        if convert_to_tensor:
            return embeddings[0] if single else embeddings
        if convert_to_numpy:
            array = embeddings.cpu().numpy()
            return array[0] if single else array
        rows = list(embeddings)
        return rows[0] if single else rows

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
                if prompt_name not in prompts:
                    raise ValueError(
                        f"Unknown prompt_name {prompt_name!r}: this model's prompts are {sorted(prompts) or 'none'} "
                        "(config.prompts); pass prompt='...' for another prompt."
                    )
                prompt = prompts[prompt_name]
        if not prompt:
            return "", None
        if getattr(self.config, "include_prompt", True):
            return prompt, None
        return prompt, prompt_token_count(tokenizer, prompt)

    def _max_length(self, tokenizer) -> int:
        """The longest input the model takes: the tokenizer's limit, capped by the encoder's position embeddings."""
        limits = []
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
