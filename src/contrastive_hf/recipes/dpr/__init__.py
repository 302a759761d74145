"""DPR (Karpukhin et al., 2020, "Dense Passage Retrieval for Open-Domain Question Answering") with DensePhrases'
pre-batch negatives (Lee et al., 2021): a question encoder and a passage encoder (`models.modeling_dual_encoder`)
trained with in-batch, hard and pre-batch negatives on (question, positive passage[, hard negatives]) pairs.

In the layout of every recipe (`contrastive_hf.recipes`): ``data`` tokenizes the pairs and builds the batches, ``run``
is the script (``examples/run_dpr.py``, ``python -m contrastive_hf.recipes dpr``) with its held-out retrieval
evaluation."""

from __future__ import annotations

from ..._lazy import lazy_exports
from .. import register_recipe

MODEL_CARD = {
    "name": "DPR",
    "description": "DPR trains a question encoder and a passage encoder so that a question's inner product with its "
    "answering passage exceeds that with the other passages of the batch (and hard negatives); DensePhrases adds the "
    "passages of the previous batches as further negatives.",
    "citation_short": "Karpukhin et al., 2020; Lee et al., 2021",
    "bibtex": "@inproceedings{karpukhin2020dense,\n  title={Dense Passage Retrieval for Open-Domain Question "
    "Answering},\n  author={Karpukhin, Vladimir and O{\\u{g}}uz, Barlas and Min, Sewon and Lewis, Patrick and Wu, "
    "Ledell and Edunov, Sergey and Chen, Danqi and Yih, Wen-tau},\n  booktitle={EMNLP},\n  year={2020}\n}",
}
MODEL_CARDS = {MODEL_CARD["name"]: MODEL_CARD}


def runs_dpr(facts) -> bool:
    """A dual encoder (`DualEncoderModel`), whatever its batches."""
    return facts.get("model_type") == "dual_encoder"


_DATA = ("TOKENIZED_COLUMNS", "QueryPassageCollator", "tokenized_columns", "tokenize_query_passage_pairs")
__getattr__, __dir__ = lazy_exports(__name__, dict.fromkeys(_DATA, ".data"))
__all__ = ["MODEL_CARDS", "MODEL_CARD", *_DATA]

register_recipe(__name__, cards=MODEL_CARDS, claims={"DPR": runs_dpr})
