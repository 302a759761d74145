"""One recipe per paper, each a module (or a package, when its parts are many) of one shape.

=============  ======================================================================
``clear``      CLEAR (Wu et al., 2020): MLM + NT-Xent on augmented views (the library's core parts)
``simcse``     SimCSE (Gao et al., 2021): unsupervised (dropout views) and supervised (NLI) defaults
``declutr``    DeCLUTR (Giorgi et al., 2021): span views of one document
``dpr``        DPR (Karpukhin et al., 2020) with DensePhrases' pre-batch negatives: query/passage data
``sg_bert``    SG-BERT (Kim et al., 2021): self-guided losses, model and trainer
``multitask``  multitask fine-tuning with PCGrad (Yu et al., 2020)
=============  ======================================================================

The shape (`Recipe`): every recipe exports, first in its ``__all__``,

* ``MODEL_CARDS``: ``{method name: card text}``, what a model card says of the method (``name``, ``description``,
  ``citation_short``, ``bibtex``), under the names its collators give as ``card_description()["method"]``; a recipe
  with one card also exports it as ``MODEL_CARD``. The multitask recipe has none: its runs end with the Trainer's
  own card.
* ``DEFAULTS``: the paper's settings as values of the recipe script's arguments (``{flag name without --: value}``),
  where they differ from what the argument dataclasses say (the shared ones of `contrastive_hf.commands.arguments`;
  a script's own flags default to the values of the recipe's parts). Every script applies them the one way,
  ``parse_arguments(parser, argv, defaults=recipe.DEFAULTS)``: a flag or a key of the settings file wins, and
  ``--help`` shows them. SimCSE's depend on ``--mode``: its ``DEFAULTS`` holds one table per mode, and its script
  passes `simcse.argument_defaults`, which picks the table of the mode given.

and then its parts, as it has them: views and data (collators, tokenization), losses, model, trainer. A package's
``__init__`` holds its cards and defaults and exports its parts lazily (importing ``recipes.multitask.modeling``, as
``import contrastive_hf`` does, loads neither trainer).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

__all__ = ["RECIPES", "Recipe"]

RECIPES = ("clear", "simcse", "declutr", "dpr", "sg_bert", "multitask")


@runtime_checkable
class Recipe(Protocol):
    """What every module of `RECIPES` exports (the module docstring says what each name holds)."""

    MODEL_CARDS: Mapping[str, Mapping[str, str]]
    DEFAULTS: Mapping[str, Any]
