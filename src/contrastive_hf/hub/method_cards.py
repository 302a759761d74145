"""The model-card text of each training method, offered by the recipe that implements it.

A recipe registers its text when it is imported (``register_method_card(MODEL_CARD)`` at the end of its module), as
peft's methods register themselves: the card code never imports a recipe by name, it looks the method up here. A
run's method is named by a recipe's own collator (``card_description()["method"]``); a run of the core's parts
(`ContrastiveDataCollator`, `PairCollator`, a bare model) is described by facts instead (its ``augmentation``,
``mlm``, ``pairs``, the model's ``model_type`` and ``mlm_weight``), and the method whose recipe claims those facts
(``register_method_claim``) names it: the core never names a method. A name or facts nobody registered ask the card
finders (the recipes' registry installs one that imports the recipes), then get the generic text.

This module imports only the standard library: a recipe registers its text without loading the card template or the
Hub client.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

__all__ = [
    "METHOD_CARD_FIELDS",
    "METHODS",
    "GENERIC_METHOD",
    "method_card",
    "register_method_card",
    "register_method_claim",
    "claimed_method",
    "register_card_finder",
]

# What a card says about its method: the name the collator gives, a paragraph, "Gao et al., 2021", the BibTeX entry.
METHOD_CARD_FIELDS = ("name", "description", "citation_short", "bibtex")

# Every registered method's text, by name (a live mapping: a recipe imported later adds to it).
METHODS: dict[str, dict] = {}

# Called with a method's name when no text is registered under it, to import what may register it.
_CARD_FINDERS: list[Callable[[str], None]] = []

# method name -> whether a run's facts are that method's (registered by its recipe)
_CLAIMS: dict[str, Callable[[Mapping], bool]] = {}

# The name a card gives a run that no registered method claims.
GENERIC_METHOD = "Contrastive learning"

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


def register_method_claim(name: str, claims: Callable[[Mapping], bool]) -> None:
    """Name the run ``name`` when ``claims(facts)`` is true of its facts (`claimed_method`). Registering a name again
    replaces its claim (a module reloaded)."""
    _CLAIMS[name] = claims


def claimed_method(facts: Mapping) -> str | None:
    """The registered method whose claim holds of ``facts`` (what a run of the core's parts did: its collator's
    ``card_description()`` and its model's ``model_type`` and ``mlm_weight``), asking the card finders first; None
    when no method claims them."""
    for finder in _CARD_FINDERS:
        finder("")
    for name, claims in _CLAIMS.items():
        if claims(facts):
            return name
    return None


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
