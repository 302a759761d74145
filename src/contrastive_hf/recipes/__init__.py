"""One recipe per paper, each a package of one shape, which registers itself when imported.

=============  ======================================================================
``clear``      CLEAR (Wu et al., 2020): MLM + NT-Xent on augmented views (the library's core parts)
``simcse``     SimCSE (Gao et al., 2021): unsupervised (dropout views) and supervised (NLI) defaults
``declutr``    DeCLUTR (Giorgi et al., 2021): span views of one document
``dpr``        DPR (Karpukhin et al., 2020) with DensePhrases' pre-batch negatives: query/passage data
``sg_bert``    SG-BERT (Kim et al., 2021): self-guided losses, model and trainer
``multitask``  multitask fine-tuning with PCGrad (Yu et al., 2020)
=============  ======================================================================

The shape (`Recipe`): every recipe's ``__init__`` exports, first in its ``__all__``,

* ``MODEL_CARDS``: ``{method name: card text}``, what a model card says of the method (``name``, ``description``,
  ``citation_short``, ``bibtex``), under the names its collators give as ``card_description()["method"]`` or that it
  claims (``register_recipe(..., claims=...)``: runs of the core's parts, described by facts); a recipe
  with one card also exports it as ``MODEL_CARD``. The multitask recipe has none: its runs end with the Trainer's
  own card.
* ``DEFAULTS``: the paper's settings as values of the recipe script's arguments (``{flag name without --: value}``),
  where they differ from what the argument dataclasses say (the shared ones of `contrastive_hf.commands.arguments`;
  a script's own flags default to the values of the recipe's parts). Every script applies them the one way,
  ``parse_arguments(parser, argv, defaults=recipe.DEFAULTS)``: a flag or a key of the settings file wins, and
  ``--help`` shows them. SimCSE's depend on ``--mode``: its ``DEFAULTS`` holds one table per mode, and its script
  passes `simcse.argument_defaults`, which picks the table of the mode given.

and then its parts, as it has them: views and data (collators, tokenization), losses, model, trainer. Its ``run``
module is what ``examples/run_<name>.py`` runs: the script's argument dataclasses (``ARGUMENTS``) and one
``build(arguments)`` that returns a `RecipeRun` (the model, tokenizer, datasets and collator the Trainer takes, and
what the end of the run needs), so that the script reads top to bottom: parse, build, Trainer, train, save, evaluate.

A recipe's ``__init__`` ends with ``register_recipe(__name__, ...)``, as peft's methods call
``register_peft_method``: it registers the recipe's card texts (`hub.method_cards`) and its model types, and the rest
of the package never names a recipe. `recipe_names` finds the recipes by their folders, without importing them;
a model card naming a method nobody has registered yet or describing a run of the core's parts (which CLEAR, SimCSE
and DPR claim), and `recipe_for_model_type`, import them on demand.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Protocol, runtime_checkable

from ..hub.method_cards import register_card_finder, register_method_card, register_method_claim

__all__ = [
    "Recipe",
    "RecipeRun",
    "SentenceEncoderRun",
    "register_recipe",
    "registered_recipes",
    "recipe_names",
    "import_recipes",
    "recipe_for_model_type",
]


@runtime_checkable
class Recipe(Protocol):
    """What every recipe's package exports (the module docstring says what each name holds)."""

    MODEL_CARDS: Mapping[str, Mapping[str, str]]
    DEFAULTS: Mapping[str, Any]


@dataclass
class RecipeRun:
    """What a recipe's ``build(arguments)`` gives its script: the Trainer's parts. A recipe whose run ends with more
    (an STS-B dev set, a retrieval evaluation) returns a subclass with those fields."""

    model: Any
    tokenizer: Any
    train_dataset: Any
    data_collator: Any
    eval_dataset: Any = None


@dataclass
class SentenceEncoderRun(RecipeRun):
    """`RecipeRun` of a sentence encoder (CLEAR, SimCSE, DeCLUTR, SG-BERT), with what the end of its run takes: the
    STS-B dev set and its figures before training, what its model card says beyond the trainer's
    (``card_info_from_trainer``'s keyword arguments) and the counts the run logs (``train_samples=...``)."""

    stsb: Any = None
    sts_before: dict[str, float] | None = None
    card: dict[str, Any] = field(default_factory=dict)
    train_counts: dict[str, int | None] = field(default_factory=dict)


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
class _Registered:
    module: ModuleType
    model_types: tuple[str, ...]


_REGISTRY: dict[str, _Registered] = {}


def register_recipe(
    module_name: str,
    *,
    model_types: Sequence[str] = (),
    claims: Mapping[str, Callable[[Mapping], bool]] | None = None,
) -> None:
    """Offer the recipe ``module_name`` (its package, already imported: call this at the end of its ``__init__``):
    its card texts to every model card naming its methods, its ``claims`` (``{method name: whether a run's facts are
    that method's}``, for runs of the core's parts: `hub.method_cards.claimed_method`), and the checkpoint
    ``model_types`` it registered with the Auto classes to `recipe_for_model_type`. Registering a name again
    replaces it (a module reloaded)."""
    module = sys.modules[module_name]
    if not isinstance(module, Recipe):
        raise ValueError(f"The recipe {module_name} needs MODEL_CARDS and DEFAULTS (see contrastive_hf.recipes).")
    register_method_card(*module.MODEL_CARDS.values())
    for name, claim in (claims or {}).items():
        if name not in module.MODEL_CARDS:
            raise ValueError(f"The recipe {module_name} claims runs for {name!r}, which its MODEL_CARDS lack.")
        register_method_claim(name, claim)
    _REGISTRY[module_name.rpartition(".")[2]] = _Registered(module, tuple(model_types))


def registered_recipes() -> dict[str, ModuleType]:
    """``{name: module}`` of the recipes imported so far."""
    return {name: entry.module for name, entry in _REGISTRY.items()}


def recipe_names() -> tuple[str, ...]:
    """The names of the package's recipes, from its folders (none is imported)."""
    return tuple(sorted(info.name for info in pkgutil.iter_modules(__path__) if info.ispkg))


def import_recipes() -> dict[str, ModuleType]:
    """Import every recipe of the package (each registers itself) and return all registered ones."""
    for name in recipe_names():
        importlib.import_module(f"{__name__}.{name}")
    return registered_recipes()


def recipe_for_model_type(model_type: str) -> ModuleType | None:
    """The recipe that registered ``model_type`` with the Auto classes (e.g. ``contrastive_multitask``), imported on
    demand; None for a type no recipe owns (the core's, or another library's)."""
    for _ in range(2):  # those imported so far, then every recipe
        for entry in _REGISTRY.values():
            if model_type in entry.model_types:
                return entry.module
        import_recipes()
    return None


def _find_method_card(method: str) -> None:
    """A model card names a method nobody registered, or describes a run that no registered method claims yet: import
    the recipes, one of which may offer it."""
    import_recipes()


register_card_finder(_find_method_card)
