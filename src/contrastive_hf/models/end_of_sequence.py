"""The end-of-sequence rule of last-token pooling: every text ends with the tokenizer's end-of-sequence token.

A decoder embedder pools its last token, the only one a causal decoder lets see the whole text; E5-Mistral,
Qwen3-Embedding and LLM2Vec all pool an end-of-sequence token appended to every text, so that the pooled state is one
the model reads at the same place in every text. Decoder tokenizers mostly do not append it (Llama's and Qwen2's add
a beginning-of-sequence token or nothing), so the rule is:

    A model whose pooler reads the end of the sequence (`PoolerSpec.reads_end_of_sequence`: ``last_token``) is
    trained with a tokenizer that appends its ``eos_token`` to every text. `ContrastiveTrainer` makes the tokenizer
    it is given do so (`append_eos_token`) where it does not, and says so once.

The tokenizer does it itself, through its post-processor (a ``TemplateProcessing`` of ``[bos] $A eos``): so every
reader of the saved tokenizer applies the same rule without code of this library, `AutoTokenizer`,
sentence-transformers' ``Transformer`` and Text Embeddings Inference alike, and the collators, `encode` and the STS
evaluation need no rule of their own. A tokenizer that already ends texts with a special token (BERT's ``[SEP]``) is
left as it is; one without an ``eos_token`` cannot follow the rule and is refused, naming the fix. This module
imports nothing beyond the standard library.
"""

from __future__ import annotations

import logging

__all__ = ["append_eos_token", "ends_with_eos"]

logger = logging.getLogger(__name__)

# A text to see what the tokenizer adds around it.
_PROBE = "probe"


def ends_with_eos(tokenizer) -> bool:
    """Whether ``tokenizer`` ends every text with a special token (its ``eos_token``, or BERT's ``[SEP]``)."""
    ids = tokenizer(_PROBE)["input_ids"]
    return bool(ids) and ids[-1] in set(tokenizer.all_special_ids) and ids[-1] != tokenizer.unk_token_id


def append_eos_token(tokenizer) -> bool:
    """Make ``tokenizer`` append its ``eos_token`` to every text, keeping the tokens it puts before a text (a
    beginning-of-sequence token); nothing where it already ends texts with a special token. Returns whether it
    changed. A `ValueError` says what to do where the tokenizer has no ``eos_token`` or cannot change its
    post-processor (a slow, Python tokenizer)."""
    if ends_with_eos(tokenizer):
        return False
    name = type(tokenizer).__name__
    if tokenizer.eos_token is None:
        raise ValueError(
            f"Last-token pooling reads each text's end-of-sequence token, and the {name} has no eos_token to "
            "append: set one (tokenizer.eos_token = '...', a token of its vocabulary) before training."
        )
    if not hasattr(type(tokenizer), "add_eos_token") or not hasattr(tokenizer, "update_post_processor"):
        raise ValueError(
            f"Last-token pooling reads each text's end-of-sequence token, which the {name} does not append and "
            "cannot be made to (it is not a fast tokenizer with a post-processor): load its fast version "
            "(AutoTokenizer.from_pretrained(..., use_fast=True)), or append the eos_token to every text yourself."
        )
    before = tokenizer(_PROBE)["input_ids"]
    if before and before[0] == tokenizer.bos_token_id and not tokenizer.add_bos_token:
        object.__setattr__(tokenizer, "_add_bos_token", True)  # kept: the template is rebuilt from the two flags
    tokenizer.add_eos_token = True  # rebuilds the post-processor: [bos] $A eos
    after = tokenizer(_PROBE)["input_ids"]
    if after != [*before, tokenizer.eos_token_id]:
        raise ValueError(
            f"Making the {name} append its eos_token changed more than the end of a text ({before} became "
            f"{after}); append the eos_token to every text yourself."
        )
    logger.warning(
        "The model pools each text's last token: its tokenizer (%s) now appends its eos_token %r to every text, and "
        "the saved tokenizer does the same wherever it is loaded.",
        name,
        tokenizer.eos_token,
    )
    return True
