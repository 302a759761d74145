"""Every recipe has the one layout of `contrastive_hf.recipes` (an ``__init__`` of its cards, claims, front door and
one ``register_recipe`` call; a ``run`` module with the script's ``ARGUMENTS``, ``DEFAULTS``, ``TRAINER_CLASS`` and
``build``; its parts), registers itself when imported, and is found by its folder; every example script is the one
body, `run_recipe`, which ``python -m contrastive_hf.recipes <recipe>`` runs too, also for a user's own recipe;
``import contrastive_hf`` imports no recipe."""

from __future__ import annotations

import ast
import importlib
import json
import re
import sys

import pytest
from transformers import Trainer, TrainingArguments

from contrastive_hf.recipes import (
    SCRIPT_NAMES,
    Recipe,
    get_recipe,
    recipe_for_model_type,
    recipe_names,
    registered_recipes,
    run_recipe,
)
from contrastive_hf.recipes.__main__ import main as recipes_main

from conftest import DEMO_TOKENIZER, REPO_ROOT, example_script, tiny_bert_config

RECIPES = recipe_names()
SCRIPTS = {name: f"run_{name}" for name in RECIPES}
CARD_FIELDS = {"name", "description", "citation_short", "bibtex"}
# What a recipe's folder may hold beside __init__.py and run.py: its parts.
PARTS = {"data.py", "losses.py", "modeling.py", "trainer.py", "pcgrad.py"}


@pytest.mark.parametrize("name", RECIPES)
def test_every_recipe_registers_its_cards_and_script_in_one_call(name):
    package = importlib.import_module(f"contrastive_hf.recipes.{name}")
    recipe = get_recipe(name)
    assert isinstance(recipe, Recipe) and recipe.module is package and registered_recipes()[name] is recipe
    assert recipe.cards == package.MODEL_CARDS
    for method, card in recipe.cards.items():
        assert card["name"] == method and set(card) == CARD_FIELDS
    if len(recipe.cards) == 1:  # the name of 0.1, kept
        assert list(recipe.cards.values()) == [package.MODEL_CARD]
    assert all(hasattr(package, part) for part in package.__all__)  # lazy parts of a package included

    script = recipe.script
    assert script.__name__ == f"contrastive_hf.recipes.{name}.run"
    assert all(isinstance(group, type) for group in script.ARGUMENTS)
    assert issubclass(script.ARGUMENTS[-1], TrainingArguments)
    assert issubclass(script.TRAINER_CLASS, Trainer) and callable(script.build)
    assert callable(script.DEFAULTS) or isinstance(script.DEFAULTS, dict)


@pytest.mark.parametrize("name", RECIPES)
def test_every_recipe_has_the_one_layout(name):
    """``__init__.py`` holds no part of the recipe (no class, no function but the claims it registers), and calls
    ``register_recipe`` once, last; the script is ``run.py``; the other modules are parts."""
    folder = REPO_ROOT / "src" / "contrastive_hf" / "recipes" / name
    assert (folder / "run.py").is_file()
    assert {path.name for path in folder.glob("*.py")} - {"__init__.py", "run.py"} <= PARTS
    tree = ast.parse((folder / "__init__.py").read_text(encoding="utf-8"))
    assert not [node.name for node in tree.body if isinstance(node, ast.ClassDef)]
    functions = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    assert all(function.startswith("runs_") for function in functions), functions
    assert set(get_recipe(name).claims.values()) >= {getattr(get_recipe(name).module, f) for f in functions}
    calls = [
        node
        for node in tree.body
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and node.value.func.id == "register_recipe"
    ]
    assert len(calls) == 1 and tree.body[-1] is calls[0]


def help_default(help_text: str, flag: str) -> str:
    """The ``(default: ...)`` argparse shows for ``flag`` in ``help_text``."""
    entry = re.search(rf"^  --{flag}\b.*?(?=^  -)", help_text, flags=re.MULTILINE | re.DOTALL)
    assert entry, f"--{flag} is not in the help"
    return re.findall(r"\(default: ([^)]*)\)", " ".join(entry.group(0).split()))[-1]


def script_help(main, argv, capsys) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("name", [name for name in RECIPES if name != "simcse"])  # SimCSE's: test_run_simcse.py
def test_every_script_applies_its_recipes_defaults_and_the_command_line_runs_the_same_script(name, capsys):
    help_text = script_help(example_script(SCRIPTS[name]).main, ["--help"], capsys)
    for flag, value in get_recipe(name).script.DEFAULTS.items():  # argparse wraps a long value anywhere: no spaces
        assert "".join(help_default(help_text, flag).split()) == "".join(str(value).split()), flag
    # python -m contrastive_hf.recipes <recipe> is the same script: the same flags and defaults
    command_help = script_help(recipes_main, [name, "--help"], capsys)
    assert command_help.split("options:")[1] == help_text.split("options:")[1]


def test_an_unknown_recipe_is_refused_naming_the_recipes(capsys):
    with pytest.raises(SystemExit) as exit_:
        recipes_main(["simcsee", "--output_dir", "x"])
    assert exit_.value.code == 2
    error = capsys.readouterr().err
    assert "No recipe named 'simcsee'" in error and "clear, declutr, dpr, llm2vec, multitask, sg_bert, simcse" in error


@pytest.mark.slow  # a whole recipe run (in this process): 1 s of CPU
def test_a_users_recipe_registered_in_one_call_trains_with_run_recipe(tmp_path, monkeypatch, capsys):
    """A recipe of one's own: a package registering its card and script (CLEAR's parts, other defaults, its method
    named on its runs), imported, then trained end to end by `run_recipe` on the shipped sentences: its defaults
    applied and its card text in the saved model card."""
    from contrastive_hf.hub.method_cards import METHODS
    from contrastive_hf.recipes import _REGISTRY

    package = tmp_path / "short_clear"
    package.mkdir()
    (package / "__init__.py").write_text(
        "from contrastive_hf.recipes import register_recipe\n"
        "CARD = {'name': 'Short CLEAR', 'description': 'CLEAR on short sentences.', 'citation_short': 'Us, 2026',\n"
        "        'bibtex': '@misc{us}'}\n"
        "register_recipe(__name__, cards={'Short CLEAR': CARD})\n"
    )
    (package / "run.py").write_text(
        "from contrastive_hf.recipes.clear import run as clear\n"
        "ARGUMENTS, TRAINER_CLASS = clear.ARGUMENTS, clear.TRAINER_CLASS\n"
        "DEFAULTS = {'max_seq_length': 16, 'augmentations': 'del_word'}\n"
        "def build(arguments):\n"
        "    run = clear.build(arguments)\n"
        "    run.card['method'] = 'Short CLEAR'\n"
        "    return run\n"
    )
    encoder_config = tmp_path / "encoder.json"
    encoder_config.write_text(json.dumps({**tiny_bert_config().to_dict(), "model_type": "bert"}))
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join((REPO_ROOT / "examples/demo/data/wiki1m_sample.txt").read_text().splitlines()[:32]))
    monkeypatch.syspath_prepend(str(tmp_path))
    argv = [
        "--config_name", encoder_config, "--tokenizer_name", DEMO_TOKENIZER, "--train_file", corpus,
        "--stsb_dev_file", "", "--max_steps", 2, "--per_device_train_batch_size", 8, "--report_to", "none",
        "--use_cpu", "true", "--output_dir", tmp_path / "out",
    ]  # fmt: skip
    try:
        importlib.import_module("short_clear")
        run_recipe("short_clear", [str(argument) for argument in argv])
    finally:  # the registrations go with the modules
        _REGISTRY.pop("short_clear", None)
        METHODS.pop("Short CLEAR", None)
        sys.modules.pop("short_clear", None)
        sys.modules.pop("short_clear.run", None)
    card = (tmp_path / "out" / "README.md").read_text()
    assert "| Method | Short CLEAR (Us, 2026) |" in card and "CLEAR on short sentences." in card
    assert "max length 16 |" in card and "| Positive pairs | `del_word`" in card  # its defaults, not CLEAR's


def test_the_recipes_are_found_by_their_folders_and_each_has_its_script():
    assert set(RECIPES) >= {"clear", "simcse", "declutr", "dpr", "sg_bert", "multitask", "llm2vec"}
    for name in RECIPES:
        assert (REPO_ROOT / "examples" / f"{SCRIPTS[name]}.py").is_file(), name


def test_every_example_script_is_the_one_body():
    """An example's ``main`` is `run_recipe` of its recipe, nothing else: no script writes a run's steps."""
    for name in RECIPES:
        source = (REPO_ROOT / "examples" / f"{SCRIPTS[name]}.py").read_text(encoding="utf-8")
        main = next(node for node in ast.parse(source).body if getattr(node, "name", None) == "main")
        calls = [node for node in ast.walk(main) if isinstance(node, ast.Call)]
        assert [ast.unparse(call) for call in calls] == [f"run_recipe('{name}', argv)"], name


def test_a_script_without_its_parts_is_refused_naming_them(tmp_path, monkeypatch):
    from contrastive_hf.recipes import _REGISTRY

    (tmp_path / "half_recipe.py").write_text(
        "from contrastive_hf.recipes import register_recipe\n"
        "register_recipe(__name__, script='half_recipe')\n"
        "ARGUMENTS = ()\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        importlib.import_module("half_recipe")
        with pytest.raises(ValueError, match="lacks DEFAULTS, TRAINER_CLASS, build"):
            get_recipe("half_recipe").script  # noqa: B018
    finally:
        _REGISTRY.pop("half_recipe", None)
        sys.modules.pop("half_recipe", None)
    assert SCRIPT_NAMES == ("ARGUMENTS", "DEFAULTS", "TRAINER_CLASS", "build")


def test_a_recipes_model_type_finds_its_recipe():
    recipe = recipe_for_model_type("contrastive_multitask")
    assert recipe.module is importlib.import_module("contrastive_hf.recipes.multitask")
    assert recipe_for_model_type("bert") is None


def test_a_card_missing_a_field_or_a_claim_without_a_card_is_refused():
    from contrastive_hf.recipes import register_recipe

    module = type(sys)("bad_recipe")
    sys.modules["bad_recipe"] = module
    try:
        with pytest.raises(ValueError, match="must give name, description, citation_short, bibtex"):
            register_recipe("bad_recipe", cards={"Bad": {"name": "Bad"}})
        with pytest.raises(ValueError, match="claims runs for 'Bad', which its cards lack"):
            register_recipe("bad_recipe", claims={"Bad": lambda facts: False})
    finally:
        sys.modules.pop("bad_recipe", None)


def test_the_recipes_command_without_a_recipe_lists_them(capsys):
    with pytest.raises(SystemExit) as exit_:
        recipes_main(["--help"])
    assert exit_.value.code == 0
    assert "RECIPE: clear, declutr, dpr, llm2vec, multitask, sg_bert, simcse" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_:
        recipes_main([])
    assert exit_.value.code == 2 and "usage: python -m contrastive_hf.recipes RECIPE" in capsys.readouterr().err
