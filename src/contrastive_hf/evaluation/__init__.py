"""Evaluation of sentence embeddings as the papers compute it.

- `sts`: STS12-16, STS-B, SICK-R readers and scoring (cosine similarity, Spearman x 100, SimCSE's "all" setting).
- `transfer`: SentEval's transfer tasks (MR, CR, SUBJ, MPQA, SST-2, TREC, MRPC) with SentEval's PyTorch classifier
  as SimCSE runs it, or its scikit-learn logistic regression; `transfer_data`: their data, from SentEval's files.
- `glue`: GLUE by fine-tuning the checkpoint per task (the Trainer, RoBERTa's recipe, CLEAR's metrics).
- `alignment`: Wang & Isola's alignment and uniformity on STS-B.
- `encoders`: one interface over our checkpoints, plain transformers encoders and sentence-transformers models.
- `training`: STS-B dev figures during training (`ContrastiveTrainer.evaluate`).
- `retrieval`: recall@k and MRR of a dual encoder (or any encoder) over an in-memory passage collection.
- `suite`: everything ``contrastive-hf evaluate`` runs; `plots`: ``contrastive-hf plot``'s pictures.
"""

from __future__ import annotations

from .alignment import evaluate_alignment_uniformity
from .encoders import SentenceEncoder, as_encoder, load_encoder
from .glue import GlueArguments, evaluate_glue
from .glue_tasks import GLUE_TASKS
from .retrieval import RetrievalData, build_retrieval_data, evaluate_retrieval, retrieval_eval_metrics, search
from .sts import (
    STS_TASKS,
    STSData,
    evaluate_sts,
    evaluate_sts_per_dimension,
    evaluate_sts_suite,
    read_sick,
    read_sts_year,
    read_stsbenchmark,
    sts_eval_metrics,
)
from .suite import format_results, run_evaluation
from .transfer import evaluate_transfer
from .transfer_data import TRANSFER_TASKS

__all__ = [
    "RetrievalData",
    "build_retrieval_data",
    "evaluate_retrieval",
    "retrieval_eval_metrics",
    "search",
    "STSData",
    "STS_TASKS",
    "TRANSFER_TASKS",
    "GLUE_TASKS",
    "GlueArguments",
    "evaluate_glue",
    "SentenceEncoder",
    "as_encoder",
    "load_encoder",
    "evaluate_sts",
    "evaluate_sts_per_dimension",
    "evaluate_sts_suite",
    "evaluate_transfer",
    "evaluate_alignment_uniformity",
    "read_stsbenchmark",
    "read_sick",
    "read_sts_year",
    "run_evaluation",
    "format_results",
    "sts_eval_metrics",
]
