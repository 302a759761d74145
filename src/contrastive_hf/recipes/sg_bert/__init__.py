r"""SG-BERT: self-guided contrastive learning (Kim, Yoo & Lee, ACL 2021, "Self-Guided Contrastive Learning for BERT
Sentence Representations", arXiv:2106.07345).

No data augmentation: the positives of a sentence come from BERT itself. Two copies of the encoder are used:

* BERT_F, frozen, gives the training signal: every layer k = 0..l of it (k = 0 is the embedding layer) pooled over the
  tokens (max pooling by default) is a view :math:`h_{i,k}` of sentence i;
* BERT_T, tuned, gives the sentence vector :math:`c_i`, its last layer's [CLS]. Its layer 0 (the embeddings) stays
  frozen, and a regulariser keeps it close to BERT_F: :math:`L^{reg} = \|BERT_F - BERT_T\|_2^2`, the squared L2
  distance of all their parameters.

A projection head f (two linear layers of width 4096, GELU after each, shared by :math:`c` and :math:`h`) maps both
into the space of the loss, with :math:`\phi(u, v) = \exp(\cos(f(u), f(v)) / \tau)`. The objectives (§3.1-3.2):

* ``base`` (SG): a sampler :math:`\sigma` (uniform over the l + 1 layers by default, drawn for each sentence) picks
  one view :math:`h_i`; NT-Xent over the 2b vectors :math:`x = \{c_1..c_b, h_1..h_b\}` of a batch of b sentences, in
  which the matching function :math:`\mu(m)` gives the index of the other half of pair m (:math:`\mu(m) = m + b` for
  :math:`m \le b`, :math:`m - b` otherwise):
  :math:`L^{base} = \frac{1}{2b}\sum_{m=1}^{2b} -\log \frac{\phi(x_m, x_{\mu(m)})}{\sum_{n \ne m} \phi(x_m, x_n)}`.
* ``opt1``: BERT_F is not trained, so the terms whose anchor is an :math:`h` are dropped: only the b anchors
  :math:`c_i` remain, each still against all other 2b - 1 vectors.
* ``opt2``: opt1 without the other sentences' :math:`c_j` in the denominator; :math:`c_i` is contrasted with the
  views only: :math:`-\log \phi(c_i, h_i) / \sum_j \phi(c_i, h_j)`.
* ``opt3`` (SG-OPT, the paper's method): no sampling; :math:`c_i` is pulled towards every layer view of its sentence
  and pushed from every view of the other sentences:
  :math:`L^{opt3}_{i,k} = -\log \frac{\phi(c_i, h_{i,k})}{\phi(c_i, h_{i,k}) + \sum_{m \ne i}\sum_{n=0}^{l}
  \phi(c_i, h_{m,n})}`, and :math:`L^{opt} = \frac{1}{b(l+1)}\sum_i\sum_k L^{opt3}_{i,k} + \lambda L^{reg}`.

Every objective adds :math:`\lambda L^{reg}`. Which reading this implements: the formulas above are written from
the paper's §3.1-3.2 as we read them, and each was checked against the authors' released code (galsang/SG-BERT,
``loss.py``: the same positives and denominators for base, opt1, opt2 and opt3). Where the paper leaves room we
follow that code: f is applied to both :math:`c` and :math:`h`; the sampler draws one layer per sentence (uniform
over 0..l); :math:`L^{reg}` sums over the encoder's parameters (not f's); every loss is a mean over its anchors.
With several processes the views of every process are gathered (as `ContrastiveForPreTraining` does), so each
sentence's negatives are the global batch.

Defaults are the paper's Table 8 (tau = 0.01, lambda = 0.1, max pooling, uniform sampler, learning rate 5e-5,
batch 16, AdamW betas (0.9, 0.9)) and its released code (10% linear warm-up, no weight decay); the optimisation ones
live in `SelfGuidedTrainingArguments`. After training only BERT_T is kept:
`SelfGuidedTrainer` saves it as a plain `ContrastiveModel` checkpoint (pooler ``cls_before_pooler``, no projection),
which loads with ``AutoModel.from_pretrained`` and embeds with its [CLS].

Example:

```python
>>> from contrastive_hf.recipes.sg_bert import SelfGuidedCollator, SelfGuidedModel, SelfGuidedTrainer
>>> from contrastive_hf.recipes.sg_bert import SelfGuidedTrainingArguments
>>> model = SelfGuidedModel.from_encoder_pretrained("bert-base-uncased", loss="opt3")
>>> trainer = SelfGuidedTrainer(
...     model=model, args=SelfGuidedTrainingArguments(output_dir="sg-bert"), train_dataset=sentences,
...     data_collator=SelfGuidedCollator(tokenizer, max_length=64), processing_class=tokenizer)
>>> trainer.train(); trainer.save_model()  # output_dir holds BERT_T only
```
"""

from __future__ import annotations

from ..._lazy import lazy_exports
from .. import register_recipe

MODEL_CARD = {
    "name": "SG-BERT",
    "description": "SG-BERT (self-guided contrastive learning) tunes the encoder's [CLS] vector towards the "
    "max-pooled layers of a frozen copy of the same encoder, with a regulariser keeping the two close; no data "
    "augmentation.",
    "citation_short": "Kim et al., 2021",
    "bibtex": "@inproceedings{kim2021self,\n  title={Self-Guided Contrastive Learning for {BERT} Sentence "
    "Representations},\n  author={Kim, Taeuk and Yoo, Kang Min and Lee, Sang-goo},\n  booktitle={ACL-IJCNLP},\n"
    "  year={2021}\n}",
}
MODEL_CARDS = {MODEL_CARD["name"]: MODEL_CARD}

_EXPORTS = {
    **dict.fromkeys(("SelfGuidedCollator",), ".data"),
    **dict.fromkeys(
        (
            "LAYER_POOLINGS",
            "pool_layers",
            "sample_layer_views",
            "self_guided_base_loss",
            "self_guided_opt1_loss",
            "self_guided_opt2_loss",
            "self_guided_opt3_loss",
            "SelfGuidedLoss",
            "SELF_GUIDED_LOSSES",
            "parameter_distance",
        ),
        ".losses",
    ),
    **dict.fromkeys(("HEAD_FILE", "SelfGuidedConfig", "SelfGuidedModel", "SelfGuidedOutput"), ".modeling"),
    **dict.fromkeys(("SelfGuidedTrainer", "SelfGuidedTrainingArguments"), ".trainer"),
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = ["MODEL_CARDS", "MODEL_CARD", *_EXPORTS]

register_recipe(__name__, cards=MODEL_CARDS)
