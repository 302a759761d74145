"""Everything a checkpoint carries: configurations, models, losses and what they need.

A saved checkpoint ships ``modeling_*.py`` and the sibling files they import (``trust_remote_code`` copies a modeling
file and its relative imports only), so the modules of this folder import torch, transformers and each other only.
"""

from __future__ import annotations

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
]
