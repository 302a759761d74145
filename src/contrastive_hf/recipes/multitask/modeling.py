"""The multitask model's former home: it lives in `contrastive_hf.models.modeling_multitask`, with every other model
type a checkpoint names (so ``import contrastive_hf`` registers it with the Auto classes)."""

from __future__ import annotations

from ...models.modeling_multitask import *  # noqa: F403
from ...models.modeling_multitask import __all__  # noqa: F401
