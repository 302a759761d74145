"""SimCSE (Gao, Yao & Chen, EMNLP 2021, "SimCSE: Simple Contrastive Learning of Sentence Embeddings").

* ``unsup``: each sentence is encoded twice; the two dropout masks make the two views (the ``dropout``
  augmentation of `ContrastiveDataCollator`), and the other sentences of the batch are the negatives.
* ``sup``: natural language inference triples (premise, entailment hypothesis, contradiction hypothesis): the
  entailment is the positive and the contradiction the anchor's hard negative (`PairCollator`, SimCSE's NLI format
  ``sent0,sent1,hard_neg``).

Both train InfoNCE at temperature 0.05 on the [CLS] vector through SimCSE's MLP head (one dense layer and tanh): in
training only for ``unsup``, kept at inference for ``sup``. In the layout of every recipe (`contrastive_hf.recipes`):
``data`` builds its batches, ``run`` is its script with its defaults (its paper's §3-4 and Appendix A, and its
released ``run_unsup_example.sh`` / ``run_sup_example.sh``) and model configuration; ``examples/run_simcse.py`` and
``python -m contrastive_hf.recipes simcse`` run it.
"""

from __future__ import annotations

from ..._lazy import lazy_exports
from .. import register_recipe

_BIBTEX = (
    "@inproceedings{gao2021simcse,\n  title={SimCSE: Simple Contrastive Learning of Sentence Embeddings},\n"
    "  author={Gao, Tianyu and Yao, Xingcheng and Chen, Danqi},\n  booktitle={EMNLP},\n  year={2021}\n}"
)
MODEL_CARDS = {
    "SimCSE": {
        "name": "SimCSE",
        "description": "Unsupervised SimCSE contrasts two encodings of the same sentence that differ only by "
        "dropout, with the other sentences of the batch as negatives.",
        "citation_short": "Gao et al., 2021",
        "bibtex": _BIBTEX,
    },
    "Supervised SimCSE": {
        "name": "Supervised SimCSE",
        "description": "Supervised SimCSE trains on natural language inference pairs: each premise's entailment "
        "hypothesis is its positive and its contradiction hypothesis a hard negative, with the other sentences of "
        "the batch as further negatives.",
        "citation_short": "Gao et al., 2021",
        "bibtex": _BIBTEX,
    },
}


def runs_simcse(facts) -> bool:
    """A sentence encoder trained on dropout views alone, no MLM (`ContrastiveDataCollator`'s default views)."""
    sentence_encoder = facts.get("model_type") != "dual_encoder"
    return sentence_encoder and facts.get("augmentation") == "dropout" and not facts.get("mlm")


def runs_supervised_simcse(facts) -> bool:
    """A sentence encoder trained on (anchor, positive[, negatives]) pairs (`PairCollator`)."""
    return facts.get("model_type") != "dual_encoder" and bool(facts.get("pairs"))


_EXPORTS = {
    **dict.fromkeys(("build_collator", "prepare_pairs", "build_mixture", "describe_views"), ".data"),
    **dict.fromkeys(("MODES", "SIMCSE_HEAD", "MODE_DEFAULTS", "mode_defaults", "model_config"), ".run"),
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = ["MODEL_CARDS", *_EXPORTS]

register_recipe(
    __name__, cards=MODEL_CARDS, claims={"SimCSE": runs_simcse, "Supervised SimCSE": runs_supervised_simcse}
)
