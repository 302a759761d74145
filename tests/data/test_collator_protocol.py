"""Every collator of the package, in data/ and in each recipe, implements the one `Collator` protocol
(`data/collator_protocol.py`): found by walking the modules, so that a new collator cannot miss it."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import contrastive_hf.data
import contrastive_hf.recipes
from contrastive_hf.data.collator_protocol import Collator


def package_collators() -> dict[str, type]:
    """``{module.Class: class}`` of every class named ``*Collator`` defined in a module of data/ or recipes/."""
    found = {}
    for package in (contrastive_hf.data, contrastive_hf.recipes):
        for info in pkgutil.walk_packages(package.__path__, prefix=f"{package.__name__}."):
            module = importlib.import_module(info.name)
            for name, value in vars(module).items():
                if inspect.isclass(value) and name.endswith("Collator") and value.__module__ == module.__name__:
                    found[f"{module.__name__}.{name}"] = value
    return found


COLLATORS = package_collators()


def test_the_walk_finds_the_collators_of_the_core_and_of_every_recipe():
    names = {name.rpartition(".")[2] for name in COLLATORS}
    assert {"ContrastiveDataCollator", "PairCollator", "MixtureCollator", "QueryPassageCollator"} <= names
    assert {"SpanViewCollator", "SelfGuidedCollator", "MultitaskCollator", "TaskCollator"} <= names


@pytest.mark.parametrize("name", sorted(COLLATORS))
def test_every_collator_implements_the_protocol(name):
    collator = COLLATORS[name]
    assert issubclass(collator, Collator), f"{name} lacks " + ", ".join(
        member
        for member in ("__call__", "card_description", "hard_negatives_in_batches")
        if not hasattr(collator, member)
    )
