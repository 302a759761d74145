"""Prompts, as sentence-transformers spells them: the prompt names of each role, how many tokens a prompt takes, a
refusal of a prompt that leaves no room for text, and the pooling mask without the prompt (``include_prompt=False``).
`encode`, the training collators and every encoding path read them here."""

from __future__ import annotations

import torch

__all__ = [
    "QUERY_PROMPT_NAMES",
    "DOCUMENT_PROMPT_NAMES",
    "DEFAULT_PROMPT_NAMES",
    "role_prompt",
    "prompt_token_count",
    "refuse_prompt_filling",
    "mask_prompt_tokens",
]

# The prompt names of each role, tried in order: a query (an anchor), and a document (a positive, a negative, a
# passage), as sentence-transformers' encode_query / encode_document look them up.
QUERY_PROMPT_NAMES = ("query",)
DOCUMENT_PROMPT_NAMES = ("document", "passage", "corpus")
# The prompts every sentence-transformers model has, empty unless it sets them: encode(prompt_name="query") works on
# a model without prompts.
DEFAULT_PROMPT_NAMES = ("query", "document")


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
