"""contrastive_hf: contrastive learning of sentence representations on the Hugging Face stack.

Importing the package registers the "contrastive" model type with AutoConfig, AutoModel, AutoModelForPreTraining
and AutoModelForSequenceClassification, and the "dual_encoder" type (DPR) with AutoConfig and AutoModel (both by
``models/``); it imports no recipe. A recipe registers itself when imported (`contrastive_hf.recipes`): the multitask
recipe its "contrastive_multitask" type (also on first use of ``contrastive_hf.MultitaskModel``), and each its card
text, which a model card naming a method not yet registered imports. The trainers, collators, corpus readers and
evaluation helpers are exported here too, imported on first use. Nothing inside the package imports this
module: it is the top of the layers docs/architecture.md states.

The folders say what each part is: ``models/`` (what a checkpoint carries), ``data/`` (text in, batches out),
``training/`` (the trainer, GradCache), ``recipes/`` (one package per paper), ``evaluation/``,
``metrics/``, ``hub/`` (model cards, adapters) and ``commands/`` (the CLI and the example scripts' shared steps).
"""

from __future__ import annotations

from . import _saved_module_paths

# The recipes' registry (no recipe): a card naming a method of the core's collators (ContrastiveDataCollator: CLEAR
# or SimCSE; PairCollator: Supervised SimCSE) imports the recipe that offers its text, whatever a user imported.
from . import recipes as _recipes  # noqa: F401
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

__version__ = "0.2.0"

# The module paths files saved by 0.1 name (training_args.bin, adapter configs), so that those files load.
_saved_module_paths.install()

# Imported on first use (`from contrastive_hf import ContrastiveTrainer` works as usual).
_LAZY_EXPORTS = {
    "ContrastiveTrainer": ".training.trainer",
    "ContrastiveTrainingArguments": ".training.training_args",
    "PrebatchQueue": ".models.prebatch_queue",
    "ContrastiveDataCollator": ".data.collators",
    "PairCollator": ".data.collators",
    "add_del_token": ".data.augmentations",
    "load_corpus": ".data.reading",
    "DatasetMixture": ".data.mixture",
    "MixtureCollator": ".data.mixture",
    "mine_hard_negatives": ".data.mining",
    "tokenize_corpus": ".data.tokenizing",
    "SpanViewCollator": ".recipes.declutr",
    "QueryPassageCollator": ".recipes.dpr",
    "SelfGuidedModel": ".recipes.sg_bert.modeling",
    "SelfGuidedCollator": ".recipes.sg_bert.data",
    "SelfGuidedTrainer": ".recipes.sg_bert.trainer",
    "SelfGuidedTrainingArguments": ".recipes.sg_bert.trainer",
    "MultitaskConfig": ".models.modeling_multitask",
    "MultitaskModel": ".models.modeling_multitask",
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
    *_LAZY_EXPORTS,
]
