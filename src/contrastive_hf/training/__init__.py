"""Training: `ContrastiveTrainer`, its arguments and GradCache."""

from __future__ import annotations

from .._lazy import lazy_exports

_EXPORTS = {
    "ContrastiveTrainer": ".trainer",
    "ContrastiveTrainingArguments": ".training_args",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = list(_EXPORTS)
