"""contrastive_hf: contrastive learning of sentence representations on the Hugging Face stack.

Importing the package registers the "contrastive" model type with AutoConfig, AutoModel,
AutoModelForPreTraining and AutoModelForSequenceClassification, and the "dual_encoder" type (DPR) with AutoConfig
and AutoModel, as is "contrastive_multitask" (`MultitaskModel`).
"""

from __future__ import annotations

from transformers import AutoConfig, AutoModel, AutoModelForPreTraining, AutoModelForSequenceClassification

from .configuration_contrastive import ContrastiveConfig
from .configuration_dual_encoder import DualEncoderConfig
from .modeling_contrastive import (
    ContrastiveForPreTraining,
    ContrastiveForSequenceClassification,
    ContrastiveModel,
    ContrastiveModelOutput,
    ContrastivePreTrainedModel,
    ContrastivePreTrainingOutput,
)
from .modeling_dual_encoder import DualEncoderModel, DualEncoderOutput, DualEncoderPreTrainedModel
from .multitask import MultitaskConfig, MultitaskModel

__version__ = "0.1.0"

AutoConfig.register(ContrastiveConfig.model_type, ContrastiveConfig, exist_ok=True)
AutoModel.register(ContrastiveConfig, ContrastiveModel, exist_ok=True)
AutoModelForPreTraining.register(ContrastiveConfig, ContrastiveForPreTraining, exist_ok=True)
AutoModelForSequenceClassification.register(ContrastiveConfig, ContrastiveForSequenceClassification, exist_ok=True)
AutoConfig.register(DualEncoderConfig.model_type, DualEncoderConfig, exist_ok=True)
AutoModel.register(DualEncoderConfig, DualEncoderModel, exist_ok=True)
AutoConfig.register(MultitaskConfig.model_type, MultitaskConfig, exist_ok=True)
AutoModel.register(MultitaskConfig, MultitaskModel, exist_ok=True)

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
