"""Multitask fine-tuning of one sentence encoder (minBERT's SST-2 / MRPC / STS-B heads, and contrastive tasks trained
with any registered in-batch loss) with PCGrad (Yu et al., 2020).

``data``: task datasets, collators and the batch schedules; ``trainer``: `MultitaskTrainer`; ``pcgrad``: the gradient
projection; ``run``: the script (``examples/run_multitask.py``, ``python -m contrastive_hf.recipes multitask``). In
the layout of every recipe (`contrastive_hf.recipes`): its parts are imported on first use. The model (task specs,
heads and `MultitaskModel`) lives with the other model types in `contrastive_hf.models.modeling_multitask`, which
registers the ``contrastive_multitask`` model type with AutoConfig and AutoModel on ``import contrastive_hf``.
"""

from __future__ import annotations

from ..._lazy import lazy_exports
from ...models import modeling_multitask as _modeling
from .. import register_recipe

# No card text: a multitask run ends with the Trainer's own model card.
MODEL_CARDS: dict = {}

_DATA = ("task_dataset", "MultitaskDataset", "TaskCollator", "MultitaskCollator", "MultitaskBatchSampler")
_TRAINER = ("MultitaskTrainer", "MultitaskTrainingArguments", "check_pcgrad_setup", "main_metric", "task_metrics")
_EXPORTS = {
    **dict.fromkeys(_DATA, ".data"),
    **dict.fromkeys(_TRAINER, ".trainer"),
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = ["MODEL_CARDS", *_EXPORTS]

register_recipe(__name__, cards=MODEL_CARDS, model_types=(_modeling.MultitaskConfig.model_type,))
