"""Every recipe has the one shape of `contrastive_hf.recipes` (its cards and defaults first, then its parts, and a
``run`` module with the script's ``ARGUMENTS`` and ``build``), registers itself when imported, and is found by its
folder; every example script applies its recipe's defaults the one way (`parse_arguments(..., defaults=
recipe.DEFAULTS)`), which its ``--help`` shows; ``import contrastive_hf`` imports no recipe."""

from __future__ import annotations

import importlib
import re

import pytest

from contrastive_hf.recipes import Recipe, recipe_for_model_type, recipe_names, registered_recipes

from conftest import REPO_ROOT, example_script

RECIPES = recipe_names()
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


def test_the_recipes_are_found_by_their_folders_and_each_has_its_script():
    assert set(RECIPES) >= {"clear", "simcse", "declutr", "dpr", "sg_bert", "multitask"}
    for name in RECIPES:
        assert (REPO_ROOT / "examples" / f"{SCRIPTS[name]}.py").is_file(), name


@pytest.mark.parametrize("name", RECIPES)
def test_every_recipe_registers_itself_and_builds_its_scripts_run(name):
    recipe = importlib.import_module(f"contrastive_hf.recipes.{name}")
    assert registered_recipes()[name] is recipe
    run = importlib.import_module(f"contrastive_hf.recipes.{name}.run")
    assert callable(run.build) and all(isinstance(group, type) for group in run.ARGUMENTS)


def test_a_recipes_model_type_finds_its_recipe():
    assert recipe_for_model_type("contrastive_multitask") is importlib.import_module(
        "contrastive_hf.recipes.multitask"
    )
    assert recipe_for_model_type("bert") is None
