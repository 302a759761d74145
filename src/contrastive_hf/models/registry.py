"""A name -> specification table that parts of the library offer themselves to (as peft's ``register_peft_method``).

Poolers (`poolers.py`), in-batch losses (`objectives.py`) and CLEAR's augmentations (`data/augmentations.py`) each
keep one `Registry`: a registration holds everything about one entry (its class or function, its sentence-transformers
mapping, its card text...), and every list of names, command-line help and validation reads the registry when it is
asked, so an entry registered later (by a user's module, a test) is seen everywhere. This module imports nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, Generic, TypeVar

__all__ = ["Registry", "RegisteredNames"]

Spec = TypeVar("Spec")


class Registry(Generic[Spec]):
    """Specifications by name, in registration order.

    Args:
        kind: what an entry is, as a user names it in a setting (``"pooler_type"``, ``"contrastive_loss"``...), for
            the error messages.
        register_with: the function a user calls to add one (named in the error for an unknown name).
        needed: what needs an entry registered first, for the same error (a loss: training, not loading).
    """

    def __init__(self, kind: str, register_with: str, needed: str = "the model or data using it is built or loaded"):
        self.kind = kind
        self.register_with = register_with
        self.needed = needed
        self._specs: dict[str, Spec] = {}

    def add(self, name: str, spec: Spec, replace: bool = False) -> Spec:
        if not isinstance(name, str) or not name or any(separator in name for separator in "+, "):
            raise ValueError(
                f"A {self.kind} name must be a non-empty string without '+', ',' or spaces, got {name!r}."
            )
        if name in self._specs and not replace:
            raise ValueError(
                f"{self.kind} {name!r} is registered already; pass replace=True to {self.register_with} to replace it."
            )
        self._specs[name] = spec
        return spec

    def remove(self, name: str) -> Spec:
        """Forget ``name`` (a test's toy entry); returns its specification."""
        return self._specs.pop(name)

    def get(self, name: str) -> Spec:
        """The specification of ``name``; a `ValueError` naming the registered ones where there is none."""
        try:
            return self._specs[name]
        except (KeyError, TypeError):
            raise ValueError(
                f"Unknown {self.kind} {name!r}: choose one of {', '.join(self._specs)} (one of your own: register it "
                f"with {self.register_with} before {self.needed})."
            ) from None

    def names(self) -> tuple[str, ...]:
        return tuple(self._specs)

    def names_view(self, keep: Callable[[Spec], bool] | None = None) -> RegisteredNames:
        """A live sequence of the registered names (those whose spec ``keep`` accepts): what a module constant such
        as ``POOLER_TYPES`` holds."""
        return RegisteredNames(self, keep)

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def __iter__(self) -> Iterator[Spec]:
        return iter(tuple(self._specs.values()))

    def __len__(self) -> int:
        return len(self._specs)


class RegisteredNames(Sequence):
    """The names of a `Registry`, read at each use: a module constant of 0.2 (``POOLER_TYPES``...) that also lists
    what was registered after it was imported. Compares equal to the tuple of the names."""

    def __init__(self, registry: Registry, keep: Callable[[Any], bool] | None = None):
        self._registry = registry
        self._keep = keep

    def _names(self) -> tuple[str, ...]:
        names = self._registry.names()
        if self._keep is None:
            return names
        return tuple(name for name in names if self._keep(self._registry.get(name)))

    def __getitem__(self, index):
        return self._names()[index]

    def __len__(self) -> int:
        return len(self._names())

    def __contains__(self, name: object) -> bool:
        return name in self._names()

    def __eq__(self, other: object) -> bool:
        return tuple(self) == (tuple(other) if isinstance(other, Sequence) and not isinstance(other, str) else other)

    def __hash__(self):
        return hash(tuple(self))

    def __repr__(self) -> str:
        return repr(tuple(self))
