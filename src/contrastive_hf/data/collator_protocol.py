"""What every collator of the package is: the one contract between the data, the trainer, its sanity checks and the
model card, written once.

A collator turns a list of examples into a batch (``__call__``: tensors, and the host-side numpy arrays of
`models.host_data`), says what its batches are for the model card (``card_description()``: the ``views``, any
``hard_negatives``, and either the ``method`` whose card text a recipe registered, for a recipe's collator, or the
facts a recipe claims, for the core's: ``augmentation`` and ``mlm``, or ``pairs``), and answers the sanity checks
(``hard_negatives_in_batches(dataset)``: whether each query gets hard negatives; None when it cannot tell before
training or the question does not apply). Every collator in ``data/`` and ``recipes/`` implements it
(tests/data/test_collator_protocol.py checks them all); a user's own collator need not, and then gets a generic card
and no answer to the sanity check.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

__all__ = ["Collator"]


@runtime_checkable
class Collator(Protocol):
    """A collator of contrastive_hf (see the module docstring)."""

    def __call__(self, features: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
        """The batch of ``features`` (the examples of one step on this process)."""
        ...

    def card_description(self) -> dict:
        """What a model card says about these batches: ``views`` (and ``hard_negatives``), ``method`` or the facts
        that name it (module docstring), each optional."""
        ...

    def hard_negatives_in_batches(self, dataset) -> bool | None:
        """Whether its batches of ``dataset`` give each query hard negatives; None when it cannot tell."""
        ...
