"""How many tokens a model's encoders take, and the refusal of a maximum length beyond it.

An input longer than an encoder's learned position table stops with an index error deep in its embeddings, at the
first sentence that long, after loading and reading everything before it. Every length a user sets is checked here
first, with one message: a training collator's (``--max_seq_length``, `training/sanity.py`), and the ``max_length``
of `evaluation.load_encoder` and `data.mining.load_mining_encoder`: ``--max-length`` of ``contrastive-hf evaluate``
(GLUE's fine-tuning too) and ``mine``. ``encode`` itself truncates at most at the positions by default
(`usable_positions`), and takes a caller's ``max_length`` as given (DPR's 256-token passages on any encoder).

This module imports only torch, as every module of `models/` imports only torch, numpy, transformers and this folder.
"""

from __future__ import annotations

from torch import nn

__all__ = ["usable_positions", "check_max_length"]


def usable_positions(model: nn.Module) -> int | None:
    """The most tokens ``model``'s encoders take: the smallest learned position table (an embedding named
    ``position_embeddings``) of any of them. RoBERTa-style tables, whose positions start after the padding index,
    lose ``padding_idx + 1`` rows (514 rows: 512 tokens). None when there is no learned table (rotary or relative
    positions)."""
    limits = [
        module.num_embeddings - (0 if module.padding_idx is None else module.padding_idx + 1)
        for name, module in model.named_modules()
        if name.rsplit(".", 1)[-1] == "position_embeddings" and isinstance(module, nn.Embedding)
    ]
    return min(limits, default=None)


def check_max_length(
    model: nn.Module,
    length: int | None,
    setting: str = "max_length",
    flag: str | None = None,
    consequence: str = "the first longer input would stop encoding with an index error",
) -> None:
    """A `ValueError` when ``length`` (the value of ``setting``, given as the option ``flag``) is more tokens than
    ``model``'s encoders take (`usable_positions`), naming the value, the limit and the fix; nothing for None or a
    model without a learned position table."""
    limit = usable_positions(model)
    if length is None or limit is None or length <= limit:
        return
    option = flag or setting
    named = f"{setting}={length}" + (f" ({flag})" if flag else "")
    raise ValueError(
        f"{named} is longer than the encoder's position embeddings, which take at most {limit} tokens: "
        f"{consequence}. Set {option} to {limit} or less, or use an encoder with more positions "
        "(max_position_embeddings in its config)."
    )
