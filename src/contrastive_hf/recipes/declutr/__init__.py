"""DeCLUTR-style span views: positives sampled as spans of the same document.

From "Investigating Views for Contrastive Learning of Language Representations" (building on DeCLUTR, Giorgi et
al., 2021): spans of ``span_words`` words (default 32) are sampled from each document, and a positive pair is

* ``slice``: two differently masked copies of one span (15% of the tokens masked in each, the two masks disjoint);
* ``neighbour``: two adjacent spans of the document;
* ``neighbouring_slice``: both at once, two adjacent spans, each masked (15%).

Spans of the other documents of the batch are the negatives. With ``hard_negatives``, a third span of the same
document, overlapping neither positive, is added as each anchor's hard negative (``input_ids`` of shape
``(B, 3, L)``, for ``contrastive_loss="info_nce"``).

Documents too short for the views (fewer than `words_needed` words) are dropped, and counted in the log, by
`tokenize_documents` (and again by the collator, if a dataset was not filtered). Words are the tokenizer's
(`synonyms.word_start_table`): a word-start piece and its continuations; punctuation counts as a word.

In the layout of every recipe (`contrastive_hf.recipes`): ``data`` samples the views, ``run`` is the script
(``examples/run_declutr.py``, ``python -m contrastive_hf.recipes declutr``) with its defaults.
"""

from __future__ import annotations

from ..._lazy import lazy_exports
from .. import register_recipe

MODEL_CARD = {
    "name": "DeCLUTR",
    "description": "DeCLUTR-style training samples positives as spans of the same document (two overlapping or "
    "adjacent spans), with the other documents' spans as negatives and MLM on the anchor spans.",
    "citation_short": "Giorgi et al., 2021",
    "bibtex": "@inproceedings{giorgi2021declutr,\n  title={{DeCLUTR}: Deep Contrastive Learning for Unsupervised "
    "Textual Representations},\n  author={Giorgi, John and Nitski, Osvald and Wang, Bo and Bader, Gary},\n"
    "  booktitle={ACL-IJCNLP},\n  year={2021}\n}",
}
MODEL_CARDS = {MODEL_CARD["name"]: MODEL_CARD}

_DATA = ("SPAN_VIEWS", "SPAN_WORDS", "SPAN_MASK_PROBABILITY", "SpanViewCollator", "tokenize_documents", "words_needed")
__getattr__, __dir__ = lazy_exports(__name__, dict.fromkeys(_DATA, ".data"))
__all__ = ["MODEL_CARDS", "MODEL_CARD", *_DATA]

register_recipe(__name__, cards=MODEL_CARDS)
