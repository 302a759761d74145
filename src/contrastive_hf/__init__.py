"""contrastive_hf: contrastive learning of sentence representations on the Hugging Face stack.

Importing the package registers the "contrastive" model type with AutoConfig, AutoModel, AutoModelForPreTraining
and AutoModelForSequenceClassification, the "dual_encoder" type (DPR) with AutoConfig and AutoModel (both by
``models/``), and "contrastive_multitask" (`MultitaskModel`, by its recipe) likewise; and the model-card text of the
methods the core's own collators and models name (CLEAR, SimCSE, by their recipes). The trainers, collators, corpus
readers and evaluation helpers are exported here too, imported on first use. Nothing inside the package imports this
module: it is the top of the layers docs/architecture.md states.

The folders say what each part is: ``models/`` (what a checkpoint carries), ``data/`` (text in, batches out),
``training/`` (the trainer, GradCache, the pre-batch queue), ``recipes/`` (one module per paper), ``evaluation/``,
``metrics/``, ``hub/`` (model cards, adapters) and ``commands/`` (the CLI and the example scripts' shared steps).
"""

from __future__ import annotations

from . import _moved_modules
from ._lazy import lazy_exports
from .models import (
    ContrastiveConfig,
    ContrastiveForPreTraining,
    ContrastiveForSequenceClassification,
    ContrastiveModel,
    ContrastiveModelOutput,
    ContrastivePreTrainedModel,
    ContrastivePreTrainingOutput,
    DualEncoderConfig,
    DualEncoderModel,
    DualEncoderOutput,
    DualEncoderPreTrainedModel,
)

# The card text of the methods the core's own collators and models name (ContrastiveDataCollator: CLEAR or SimCSE;
# PairCollator: Supervised SimCSE), registered by their recipes whatever a user imports first.
from .recipes import clear as _clear  # noqa: F401
from .recipes import simcse as _simcse  # noqa: F401
from .recipes.multitask.modeling import MultitaskConfig, MultitaskModel

__version__ = "0.2.0"

_moved_modules.install()

# Imported on first use (`from contrastive_hf import ContrastiveTrainer` works as usual).
_LAZY_EXPORTS = {
    "ContrastiveTrainer": ".training.trainer",
    "ContrastiveTrainingArguments": ".training.training_args",
    "PrebatchQueue": ".training.prebatch_queue",
    "ContrastiveDataCollator": ".data.collators",
    "PairCollator": ".data.collators",
    "add_del_token": ".data.augmentations",
    "load_corpus": ".data.corpus",
    "DatasetMixture": ".data.mixture",
    "MixtureCollator": ".data.mixture",
    "mine_hard_negatives": ".data.mining",
    "tokenize_corpus": ".data.corpus",
    "SpanViewCollator": ".recipes.declutr",
    "QueryPassageCollator": ".recipes.dpr",
    "SelfGuidedModel": ".recipes.sg_bert",
    "SelfGuidedCollator": ".recipes.sg_bert",
    "SelfGuidedTrainer": ".recipes.sg_bert",
    "SelfGuidedTrainingArguments": ".recipes.sg_bert",
    "MultitaskTrainer": ".recipes.multitask.trainer",
    "MultitaskTrainingArguments": ".recipes.multitask.trainer",
    "evaluate_sts": ".evaluation.sts",
    "evaluate_sts_per_dimension": ".evaluation.sts",
    "read_stsbenchmark": ".evaluation.sts",
    "run_evaluation": ".evaluation.suite",
    "ModelCardInfo": ".hub.model_card",
}
__getattr__, __dir__ = lazy_exports(__name__, _LAZY_EXPORTS)

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
    *_LAZY_EXPORTS,
]
