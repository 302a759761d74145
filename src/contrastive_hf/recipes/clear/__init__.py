"""CLEAR (Wu et al., 2020, "CLEAR: Contrastive Learning for Sentence Representation", arXiv:2012.15466).

CLEAR pre-trains an encoder on ``L = L_MLM + L_CL``: masked language modelling on the sentence, plus NT-Xent between
two augmented views of it (word deletion, span deletion, reordering, synonym substitution, or two of them composed).
Its parts are the library's core, so this recipe only names them and their paper defaults:

* the views: `contrastive_hf.data.augmentations` (``del_word`` deletes 70% of the tokens, CLEAR's §4.1), built into
  batches with an MLM copy by `ContrastiveDataCollator`;
* the model and loss: `ContrastiveForPreTraining`, whose `ContrastiveConfig` defaults are CLEAR's (the encoder's
  [CLS] through its pooler, a 2-layer MLP projection used in training only, NT-Xent at tau 0.05,
  ``mlm_weight = cl_weight = 1``);
* the script: ``run`` (``examples/run_clear.py``, ``python -m contrastive_hf.recipes clear``).

Its card and script are in the layout of every recipe (`contrastive_hf.recipes`).
"""

from __future__ import annotations

from .. import register_recipe

__all__ = ["MODEL_CARDS", "MODEL_CARD"]

MODEL_CARD = {
    "name": "CLEAR",
    "description": "CLEAR pre-trains with masked language modelling plus a contrastive loss between two augmented "
    "views of each sentence (word deletion, span deletion, reordering, substitution).",
    "citation_short": "Wu et al., 2020",
    "bibtex": "@article{wu2020clear,\n  title={CLEAR: Contrastive Learning for Sentence Representation},\n"
    "  author={Wu, Zhuofeng and Wang, Sinong and Gu, Jiatao and Khabsa, Madian and Sun, Fei and Ma, Hao},\n"
    "  journal={arXiv preprint arXiv:2012.15466},\n  year={2020}\n}",
}
MODEL_CARDS = {MODEL_CARD["name"]: MODEL_CARD}


def runs_clear(facts) -> bool:
    """A sentence encoder trained on the core's augmented views (`ContrastiveDataCollator`): any views but dropout
    alone, or dropout views with BERT's MLM (with a decoder's masked next-token prediction, LLM2Vec's run)."""
    views = facts.get("augmentation")
    bert_mlm = facts.get("mlm") and not facts.get("masked_next_token")
    return facts.get("model_type") != "dual_encoder" and views is not None and (views != "dropout" or bert_mlm)


register_recipe(__name__, cards=MODEL_CARDS, claims={"CLEAR": runs_clear})
