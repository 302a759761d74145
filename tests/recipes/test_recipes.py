"""Every recipe has the one shape of `contrastive_hf.recipes` (its cards and defaults first, then its parts), and
every example script applies its recipe's defaults the one way (`parse_arguments(..., defaults=recipe.DEFAULTS)`),
which its ``--help`` shows."""

from __future__ import annotations

import importlib
import re

import pytest

from contrastive_hf.recipes import RECIPES, Recipe

from conftest import example_script

SCRIPTS = {name: f"run_{name}" for name in RECIPES}
CARD_FIELDS = {"name", "description", "citation_short", "bibtex"}


@pytest.mark.parametrize("name", RECIPES)
def test_every_recipe_exports_its_cards_and_defaults_before_its_parts(name):
    recipe = importlib.import_module(f"contrastive_hf.recipes.{name}")
    assert isinstance(recipe, Recipe)
    assert {"MODEL_CARDS", "DEFAULTS"} <= set(recipe.__all__[:3])
    for method, card in recipe.MODEL_CARDS.items():
        assert card["name"] == method and set(card) == CARD_FIELDS
    if len(recipe.MODEL_CARDS) == 1:  # the name of 0.1, kept
        assert list(recipe.MODEL_CARDS.values()) == [recipe.MODEL_CARD]
    assert all(hasattr(recipe, part) for part in recipe.__all__)  # lazy parts of a package included


def help_default(help_text: str, flag: str) -> str:
    """The ``(default: ...)`` argparse shows for ``flag`` in ``help_text``."""
    entry = re.search(rf"^  --{flag}\b.*?(?=^  -)", help_text, flags=re.MULTILINE | re.DOTALL)
    assert entry, f"--{flag} is not in the help"
    return re.findall(r"\(default: ([^)]*)\)", " ".join(entry.group(0).split()))[-1]


@pytest.mark.parametrize("name", [name for name in RECIPES if name != "simcse"])  # SimCSE's: test_run_simcse.py
def test_every_script_applies_its_recipes_defaults_and_shows_them_in_its_help(name, capsys):
    recipe = importlib.import_module(f"contrastive_hf.recipes.{name}")
    with pytest.raises(SystemExit) as exit_:
        example_script(SCRIPTS[name]).main(["--help"])
    assert exit_.value.code == 0
    help_text = capsys.readouterr().out
    for flag, value in recipe.DEFAULTS.items():
        assert help_default(help_text, flag) == str(value), flag
