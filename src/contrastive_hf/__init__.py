"""contrastive_hf: contrastive learning of sentence representations on the Hugging Face stack.

Importing the package registers the "contrastive" model type with AutoConfig, AutoModel,
AutoModelForPreTraining and AutoModelForSequenceClassification.
"""

from __future__ import annotations

from transformers import AutoConfig, AutoModel, AutoModelForPreTraining, AutoModelForSequenceClassification

from .configuration_contrastive import ContrastiveConfig
from .modeling_contrastive import (
    ContrastiveForPreTraining,
    ContrastiveForSequenceClassification,
    ContrastiveModel,
    ContrastiveModelOutput,
    ContrastivePreTrainedModel,
    ContrastivePreTrainingOutput,
)

__version__ = "0.1.0"

AutoConfig.register(ContrastiveConfig.model_type, ContrastiveConfig, exist_ok=True)
AutoModel.register(ContrastiveConfig, ContrastiveModel, exist_ok=True)
AutoModelForPreTraining.register(ContrastiveConfig, ContrastiveForPreTraining, exist_ok=True)
AutoModelForSequenceClassification.register(ContrastiveConfig, ContrastiveForSequenceClassification, exist_ok=True)

__all__ = [
    "ContrastiveConfig",
    "ContrastiveModel",
    "ContrastiveForPreTraining",
    "ContrastiveForSequenceClassification",
    "ContrastivePreTrainedModel",
    "ContrastiveModelOutput",
    "ContrastivePreTrainingOutput",
]
