"""LLM2Vec (BehnamGhader et al., COLM 2024, "LLM2Vec: Large Language Models Are Secretly Powerful Text Encoders").

LLM2Vec turns a decoder LLM into a text encoder in three steps: it makes the decoder attend both ways, trains it on
masked next-token prediction (MNTP: a fraction of the tokens is masked and each is predicted, through the decoder's own
language-model head, from the state of the position before it, §2.2), then trains unsupervised SimCSE on it with mean
pooling. This recipe is the first two steps, on the core's parts:

* bidirectional attention: `ContrastiveConfig`'s ``bidirectional_attention``, saved in the decoder's config.json;
* MNTP: `ContrastiveForPreTraining` with a decoder (its MLM is masked next-token prediction, `NextTokenHead`),
  trained alone (``mlm_weight=1, cl_weight=0``) on masked copies that `ContrastiveDataCollator` builds (20% of the
  tokens, the mask token ``_``, as LLM2Vec's Llama and Qwen2 settings);
* the script: ``run`` (``examples/run_llm2vec.py``, ``python -m contrastive_hf.recipes llm2vec``): CLEAR's with
  LLM2Vec's MNTP settings (a LoRA adapter of rank 16 on every projection, 1000 steps of 32 sequences).

The third step is SimCSE's script on the merged MNTP model, with ``examples/llm/llm2vec_simcse.json`` (docs/recipes/
llm2vec.md). Its card and script are in the layout of every recipe (`contrastive_hf.recipes`).
"""

from __future__ import annotations

from .. import register_recipe

__all__ = ["MODEL_CARD", "MODEL_CARDS"]

MODEL_CARD = {
    "name": "LLM2Vec",
    "description": "LLM2Vec makes a decoder LLM attend both ways and trains it on masked next-token prediction: "
    "masked tokens are predicted by the decoder's language-model head from the position before each, so that it "
    "learns to use the context on both sides (the step before unsupervised SimCSE).",
    "citation_short": "BehnamGhader et al., 2024",
    "bibtex": "@inproceedings{behnamghader2024llm2vec,\n  title={{LLM2Vec}: Large Language Models Are Secretly "
    "Powerful Text Encoders},\n  author={BehnamGhader, Parishad and Adlakha, Vaibhav and Mosbach, Marius and "
    "Bahdanau, Dzmitry and Chapados, Nicolas and Reddy, Siva},\n  booktitle={COLM},\n  year={2024}\n}",
}
MODEL_CARDS = {MODEL_CARD["name"]: MODEL_CARD}


def runs_llm2vec(facts) -> bool:
    """A decoder trained on masked next-token prediction over the sentences themselves (dropout views, the only ones
    that are the sentence: `ContrastiveDataCollator` with ``masked_next_token``)."""
    sentence_encoder = facts.get("model_type") != "dual_encoder"
    return sentence_encoder and facts.get("augmentation") == "dropout" and bool(facts.get("masked_next_token"))


register_recipe(__name__, cards=MODEL_CARDS, claims={"LLM2Vec": runs_llm2vec})
