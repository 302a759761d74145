"""The model-card text of each training method, offered by the recipe that implements it.

A recipe registers its text when it is imported (``register_method_card(MODEL_CARD)`` at the end of its module), as
peft's methods register themselves: the card code never imports a recipe by name, it looks the method up here. A
run's method is named by its collator (``card_description()["method"]``) or its model, and the module defining that
collator or model is the recipe's own (it had to be imported to build them), or the core's, whose methods (CLEAR,
SimCSE) are offered by recipes not imported yet: a name not registered asks the card finders (the recipes' registry
installs one that imports the recipes), then gets the generic text if still nobody offers it.

This module imports only the standard library: a recipe registers its text without loading the card template or the
Hub client.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

__all__ = ["METHOD_CARD_FIELDS", "METHODS", "method_card", "register_method_card", "register_card_finder"]

# What a card says about its method: the name the collator gives, a paragraph, "Gao et al., 2021", the BibTeX entry.
METHOD_CARD_FIELDS = ("name", "description", "citation_short", "bibtex")

# Every registered method's text, by name (a live mapping: a recipe imported later adds to it).
METHODS: dict[str, dict] = {}

# Called with a method's name when no text is registered under it, to import what may register it.
_CARD_FINDERS: list[Callable[[str], None]] = []

_GENERIC = {
    "description": "A contrastive objective on pairs of views of the training data, with the other examples of "
    "the batch as negatives.",
    "citation_short": "contrastive_hf",
    "bibtex": "",
}


def register_method_card(*cards: Mapping[str, str]) -> None:
    """Offer each method's card text (``name``, ``description``, ``citation_short``, ``bibtex``) to every model card
    that names the method. Registering a name again replaces its text (a module reloaded)."""
    for card in cards:
        missing = [name for name in METHOD_CARD_FIELDS if not isinstance(card.get(name), str)]
        if missing:
            raise ValueError(
                f"A method's card text needs the string fields {', '.join(METHOD_CARD_FIELDS)}; "
                f"{card.get('name', dict(card))!r} lacks {', '.join(missing)}."
            )
        METHODS[card["name"]] = dict(card)


def register_card_finder(finder: Callable[[str], None]) -> None:
    """Call ``finder(name)`` when a card names a method whose text nobody registered, so that it can import the
    module that registers it (the recipes' registry does: this module imports no recipe)."""
    if finder not in _CARD_FINDERS:
        _CARD_FINDERS.append(finder)


def method_card(name: str) -> dict:
    """The card text of the method ``name``: its registered text, or a generic paragraph under that name."""
    if name not in METHODS:
        for finder in _CARD_FINDERS:
            finder(name)
    return METHODS.get(name, {**_GENERIC, "name": name})
