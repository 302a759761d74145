"""A change detector, not a check of correctness: model_cards/ holds the card each recipe's example script writes
(rendered from a short run by model_cards/regenerate.py); rendered again from its record with today's code, each must
equal the file, so that a change to a card shows in review as a change of model_cards/ (regenerate and commit). What a
card must say is checked against the run it describes in tests/hub/test_model_card.py."""

from __future__ import annotations

import json

import pytest

import contrastive_hf
import contrastive_hf.recipes
from contrastive_hf.hub.model_card import ModelCardInfo, render_model_card

from conftest import REPO_ROOT

CARDS = REPO_ROOT / "model_cards"
RECIPES = sorted(path.stem for path in CARDS.glob("*.json"))


@pytest.fixture(scope="module", autouse=True)
def _recipes_registered():
    """Each recipe registers its card text when imported, as the scripts import theirs."""
    contrastive_hf.recipes.import_recipes()


def test_every_recipe_has_its_card():
    assert RECIPES == ["clear", "declutr", "dpr", "sg-bert", "simcse-sup", "simcse-unsup"]


@pytest.mark.parametrize("recipe", RECIPES)
def test_the_card_renders_as_recorded(recipe):
    record = json.loads((CARDS / f"{recipe}.json").read_text())
    model_class = getattr(contrastive_hf, record["model_class"])
    model = model_class(model_class.config_class.from_dict(record["config"]))
    card = render_model_card(model, ModelCardInfo(**record["info"]))
    expected = (CARDS / f"{recipe}.md").read_text()
    assert str(card) + "\n" == expected or str(card) == expected, (
        f"model_cards/{recipe}.md is not what the code renders today: run "
        "`HF_HUB_OFFLINE=1 .venv/bin/python model_cards/regenerate.py` and commit the cards."
    )


def test_a_dpr_card_holds_its_retrieval_results_and_their_model_index():
    from huggingface_hub import ModelCardData, metadata_load

    results = ModelCardData(**metadata_load(CARDS / "dpr.md")).eval_results  # the Hub's own parser
    assert {result.metric_type for result in results} >= {"dot_accuracy@1", "dot_mrr"}
    text = (CARDS / "dpr.md").read_text()
    assert "No evaluation was run" not in text
    assert "| retrieval | recall@1 |" in text and "| retrieval | mrr |" in text
    assert "type: information-retrieval" in text and "type: dot_accuracy@1" in text and "type: dot_mrr" in text
