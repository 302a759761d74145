"""Everything a checkpoint carries: configurations, models, losses, poolers and what they need.

The modules of this folder import torch, transformers and each other only. A 0.2 checkpoint ships no code (it names
its model type, registered with the Auto classes below, and its pooler and loss, registered in `poolers.py` and
`objectives.py`); a 0.1 checkpoint carries its own copy of the modeling files of its release, which
``trust_remote_code`` loads, so those copies never import this folder.

Importing this folder registers its model types with transformers' Auto classes: "contrastive" with AutoConfig,
AutoModel, AutoModelForPreTraining and AutoModelForSequenceClassification, "dual_encoder" (DPR) with AutoConfig and
AutoModel, and "contrastive_multitask" (the multitask recipe's shared encoder with task heads) with AutoConfig and
AutoModel: a checkpoint's model type loads after ``import contrastive_hf`` whichever recipe trained it.
"""

from __future__ import annotations

from transformers import AutoConfig, AutoModel, AutoModelForPreTraining, AutoModelForSequenceClassification

from .configuration_contrastive import ContrastiveConfig
from .configuration_dual_encoder import DualEncoderConfig
from .modeling_contrastive import (
    ContrastiveForSequenceClassification,
    ContrastiveModel,
    ContrastiveModelOutput,
    ContrastivePreTrainedModel,
)
from .modeling_contrastive_pretraining import ContrastiveForPreTraining, ContrastivePreTrainingOutput
from .modeling_dual_encoder import DualEncoderModel, DualEncoderOutput, DualEncoderPreTrainedModel
from .modeling_multitask import MultitaskConfig, MultitaskModel

__all__ = [
    "ContrastiveConfig",
    "ContrastiveModel",
    "ContrastiveForPreTraining",
    "ContrastiveForSequenceClassification",
    "ContrastivePreTrainedModel",
    "ContrastiveModelOutput",
    "ContrastivePreTrainingOutput",
    "DualEncoderConfig",
    "DualEncoderModel",
    "DualEncoderPreTrainedModel",
    "DualEncoderOutput",
    "MultitaskConfig",
    "MultitaskModel",
]

AutoConfig.register(ContrastiveConfig.model_type, ContrastiveConfig, exist_ok=True)
AutoModel.register(ContrastiveConfig, ContrastiveModel, exist_ok=True)
AutoModelForPreTraining.register(ContrastiveConfig, ContrastiveForPreTraining, exist_ok=True)
AutoModelForSequenceClassification.register(ContrastiveConfig, ContrastiveForSequenceClassification, exist_ok=True)
AutoConfig.register(DualEncoderConfig.model_type, DualEncoderConfig, exist_ok=True)
AutoModel.register(DualEncoderConfig, DualEncoderModel, exist_ok=True)
AutoConfig.register(MultitaskConfig.model_type, MultitaskConfig, exist_ok=True)
AutoModel.register(MultitaskConfig, MultitaskModel, exist_ok=True)
