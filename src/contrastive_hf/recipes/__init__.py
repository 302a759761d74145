"""One recipe per paper, each a package of one layout, which registers itself in one call when imported.

=============  ======================================================================
``clear``      CLEAR (Wu et al., 2020): MLM + NT-Xent on augmented views (the library's core parts)
``simcse``     SimCSE (Gao et al., 2021): unsupervised (dropout views) and supervised (NLI) defaults
``declutr``    DeCLUTR (Giorgi et al., 2021): span views of one document
``dpr``        DPR (Karpukhin et al., 2020) with DensePhrases' pre-batch negatives: query/passage data
``sg_bert``    SG-BERT (Kim et al., 2021): self-guided losses, model and trainer
``multitask``  multitask fine-tuning with PCGrad (Yu et al., 2020)
``llm2vec``    LLM2Vec (BehnamGhader et al., 2024): masked next-token prediction on a bidirectional decoder
=============  ======================================================================

The layout of every recipe's package:

* ``__init__.py``: what the method is (its docstring), its model card texts (``MODEL_CARDS``: ``{method name: card
  text}``, each with ``name``, ``description``, ``citation_short`` and ``bibtex``; ``MODEL_CARD`` too where it has
  one), the public parts it offers (its front door), and one call, ``register_recipe(__name__, ...)``, as peft's
  methods call ``register_peft_method``: its cards, the runs of the core's parts it claims, the model types it
  registered with the Auto classes, and its script.
* ``run.py``, its script: ``ARGUMENTS`` (the argument dataclasses, the training arguments last), ``DEFAULTS`` (the
  paper's settings as values of those arguments, ``{flag name without --: value}``, where they differ from what the
  dataclasses say; or a function of the settings given, as SimCSE's follow its ``--mode``), ``TRAINER_CLASS`` and
  ``build(arguments)``, which returns a `RecipeRun`: the Trainer's parts, and what the run does before training and
  at its end. `run_recipe` runs it: parse, build, Trainer, train, end; ``examples/run_<recipe>.py`` and ``python -m
  contrastive_hf.recipes <recipe>`` are that one body.
* its parts, as it has them: ``data.py`` (views, tokenization, collators), ``losses.py``, ``modeling.py``,
  ``trainer.py``.

The rest of the package never names a recipe. `recipe_names` finds the package's recipes by their folders without
importing them; `get_recipe` imports one by name and returns its registration (a user's recipe too, once its module
is imported); a model card naming a method nobody has registered yet or describing a run of the core's parts (which
CLEAR, SimCSE, DPR and LLM2Vec claim), and `recipe_for_model_type`, import them on demand.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from ..hub.method_cards import register_card_finder, register_method_card, register_method_claim

__all__ = [
    "Recipe",
    "RecipeRun",
    "SentenceEncoderRun",
    "register_recipe",
    "get_recipe",
    "run_recipe",
    "registered_recipes",
    "recipe_names",
    "import_recipes",
    "recipe_for_model_type",
]


@dataclass
class RecipeRun:
    """What a recipe's ``build(arguments)`` gives its script: the Trainer's parts. A recipe whose run ends with more
    (an STS-B dev set, a retrieval evaluation) returns a subclass with those fields."""

    model: Any
    tokenizer: Any
    train_dataset: Any
    data_collator: Any
    eval_dataset: Any = None

    def before_training(self, trainer) -> None:
        """What the run does once its trainer is built, before training (a score to compare with at the end)."""

    def finish(self, trainer, train_result) -> None:
        """The end of the run, after training: save, evaluate, write the card, push, say how to load the model."""
        raise NotImplementedError(f"{type(self).__name__} does not say how its run ends: define its finish().")


@dataclass
class SentenceEncoderRun(RecipeRun):
    """`RecipeRun` of a sentence encoder (CLEAR, SimCSE, DeCLUTR, SG-BERT), with what the end of its run takes: the
    STS-B dev set and its figures before training, what its model card says beyond the trainer's
    (``card_info_from_trainer``'s keyword arguments) and the counts the run logs (``train_samples=...``)."""

    stsb: Any = None
    sts_before: dict[str, float] | None = None
    card: dict[str, Any] = field(default_factory=dict)
    train_counts: dict[str, int | None] = field(default_factory=dict)

    def finish(self, trainer, train_result) -> None:
        """Save, STS-B dev before and after, card, push, LoRA merge and the reload check
        (`commands.run_end.finish_sentence_encoder_run`)."""
        from ..commands.run_end import finish_sentence_encoder_run
        from ..hub.model_card import card_info_from_trainer

        card_info = card_info_from_trainer(trainer, **self.card)
        finish_sentence_encoder_run(
            trainer,
            train_result,
            self.tokenizer,
            card_info,
            stsb=self.stsb,
            sts_before=self.sts_before,
            **self.train_counts,
        )


def sentence_encoder_run(
    model,
    tokenizer,
    train_dataset,
    data_collator,
    data_args,
    training_args,
    *,
    card: dict[str, Any] | None = None,
    train_counts: dict[str, int | None],
) -> SentenceEncoderRun:
    """The `SentenceEncoderRun` of a sentence encoder's recipe: its STS-B dev set, scored before training on the
    training device and evaluated during training with ``--eval_strategy`` or ``--eval_on_start``, and the card's
    training data named beside the recipe's own ``card`` words."""
    from ..commands.arguments import training_data_name
    from ..commands.loaders import evaluates_during_training, load_sts_dev

    stsb, before = load_sts_dev(data_args, training_args, model, tokenizer)
    return SentenceEncoderRun(
        model,
        tokenizer,
        train_dataset,
        data_collator,
        eval_dataset={"stsb": stsb} if evaluates_during_training(training_args) else None,
        stsb=stsb,
        sts_before=before,
        card={"training_data": training_data_name(data_args), **(card or {})},
        train_counts=train_counts,
    )


@dataclass(frozen=True)
class Recipe:
    """A registered recipe (`register_recipe`): its package, card texts, claims, model types and script."""

    name: str
    module: ModuleType
    cards: Mapping[str, Mapping[str, str]]
    claims: Mapping[str, Callable[[Mapping], bool]]
    model_types: tuple[str, ...]
    script_module: str

    @property
    def script(self) -> ModuleType:
        """The recipe's script (its ``run`` module: ``ARGUMENTS``, ``DEFAULTS``, ``TRAINER_CLASS``, ``build``),
        imported on first use: importing a recipe for its parts or its card does not import its script's."""
        script = importlib.import_module(self.script_module)
        missing = [name for name in SCRIPT_NAMES if not hasattr(script, name)]
        if missing:
            raise ValueError(
                f"The script of the recipe {self.name!r} ({self.script_module}) lacks {', '.join(missing)}: a "
                f"recipe's script defines {', '.join(SCRIPT_NAMES)} (see contrastive_hf.recipes)."
            )
        return script


# What a recipe's script module defines (the module docstring says what each holds).
SCRIPT_NAMES = ("ARGUMENTS", "DEFAULTS", "TRAINER_CLASS", "build")
CARD_FIELDS = ("name", "description", "citation_short", "bibtex")

_REGISTRY: dict[str, Recipe] = {}


def register_recipe(
    module_name: str,
    *,
    cards: Mapping[str, Mapping[str, str]] | None = None,
    claims: Mapping[str, Callable[[Mapping], bool]] | None = None,
    model_types: Sequence[str] = (),
    script: str = ".run",
) -> Recipe:
    """Register the recipe ``module_name`` (its package, already imported: call this at the end of its
    ``__init__``), in one call:

    * ``cards``: ``{method name: card text}``, offered to every model card naming the method;
    * ``claims``: ``{method name: whether a run's facts are that method's}``, for runs of the core's parts
      (`hub.method_cards.claimed_method`);
    * ``model_types``: the checkpoint model types it registered with the Auto classes (`recipe_for_model_type`);
    * ``script``: the module of its script, relative to the package (``".run"``) or absolute, imported when the
      recipe is run (`Recipe.script`).

    The recipe's name is its module's last part (``contrastive_hf.recipes.simcse``: ``simcse``). Registering a name
    again replaces it (a module reloaded)."""
    cards = dict(cards or {})
    for method, card in cards.items():
        if card.get("name") != method or set(card) != set(CARD_FIELDS):
            raise ValueError(
                f"The recipe {module_name}'s card for {method!r} must give {', '.join(CARD_FIELDS)}, with name "
                f"{method!r}; it gives {sorted(card)}."
            )
    for method in claims or {}:
        if method not in cards:
            raise ValueError(f"The recipe {module_name} claims runs for {method!r}, which its cards lack.")
    register_method_card(*cards.values())
    for method, claim in (claims or {}).items():
        register_method_claim(method, claim)
    name = module_name.rpartition(".")[2]
    script_module = importlib.util.resolve_name(script, module_name) if script.startswith(".") else script
    recipe = Recipe(name, sys.modules[module_name], cards, dict(claims or {}), tuple(model_types), script_module)
    _REGISTRY[name] = recipe
    return recipe


def get_recipe(name: str) -> Recipe:
    """The registered recipe ``name``: one of the package's (imported now if need be) or a user's whose module was
    imported; a name neither is raises a ValueError listing the recipes."""
    if name not in _REGISTRY and name in recipe_names():
        importlib.import_module(f"{__name__}.{name}")
    if name not in _REGISTRY:
        known = sorted(set(recipe_names()) | set(_REGISTRY))
        raise ValueError(
            f"No recipe named {name!r}: the recipes are {', '.join(known)}. A recipe of your own registers itself "
            "with contrastive_hf.recipes.register_recipe when its module is imported: import it first."
        )
    return _REGISTRY[name]


def run_recipe(name: str, argv: list[str] | None = None) -> None:
    """Run the registered recipe ``name`` (`get_recipe`) on ``argv`` (default: the command line): flags, or a JSON
    file of the same keys and flags, over its script's ``DEFAULTS``; then its ``build``, its ``TRAINER_CLASS``,
    training, and its run's end. A usage mistake is a `commands.errors.UsageError` (a script's ``main``, under
    `exit_on_usage_error`, ends with it as argparse does)."""
    import logging

    from transformers import HfArgumentParser

    from ..commands.arguments import parse_arguments
    from ..commands.errors import as_usage_error
    from ..commands.logs import run_training, setup_logging

    with as_usage_error():  # an unknown recipe: the known ones
        script = get_recipe(name).script
    arguments = parse_arguments(HfArgumentParser(script.ARGUMENTS), argv, defaults=script.DEFAULTS)
    training_args = arguments[-1]
    # the script's logger reports its summary lines (settings, data counts) on the main process at any level
    setup_logging(training_args, logging.getLogger(script.__name__), summary=True)
    run = script.build(arguments)

    with as_usage_error():  # settings a trainer refuses (e.g. a --metric_for_best_model it does not log)
        trainer = script.TRAINER_CLASS(
            model=run.model,
            args=training_args,
            train_dataset=run.train_dataset,
            eval_dataset=run.eval_dataset,
            data_collator=run.data_collator,
            processing_class=run.tokenizer,
        )
    run.before_training(trainer)
    train_result = run_training(trainer)
    run.finish(trainer, train_result)


def registered_recipes() -> dict[str, Recipe]:
    """``{name: registration}`` of the recipes imported so far."""
    return dict(_REGISTRY)


def recipe_names() -> tuple[str, ...]:
    """The names of the package's recipes, from its folders (none is imported)."""
    return tuple(sorted(info.name for info in pkgutil.iter_modules(__path__) if info.ispkg))


def import_recipes() -> dict[str, Recipe]:
    """Import every recipe of the package (each registers itself) and return all registered ones."""
    for name in recipe_names():
        importlib.import_module(f"{__name__}.{name}")
    return registered_recipes()


def recipe_for_model_type(model_type: str) -> Recipe | None:
    """The recipe that registered ``model_type`` with the Auto classes (e.g. ``contrastive_multitask``), imported on
    demand; None for a type no recipe owns (the core's, or another library's)."""
    for _ in range(2):  # those imported so far, then every recipe
        for recipe in _REGISTRY.values():
            if model_type in recipe.model_types:
                return recipe
        import_recipes()
    return None


def _find_method_card(method: str) -> None:
    """A model card names a method nobody registered, or describes a run that no registered method claims yet: import
    the recipes, one of which may offer it."""
    import_recipes()


register_card_finder(_find_method_card)
