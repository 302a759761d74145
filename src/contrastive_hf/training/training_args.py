"""TrainingArguments for contrastive training."""

from __future__ import annotations

from dataclasses import dataclass, field

from transformers import TrainingArguments

__all__ = ["ContrastiveTrainingArguments"]


@dataclass
class ContrastiveTrainingArguments(TrainingArguments):
    """`TrainingArguments` with defaults suited to contrastive training.

    Gradient accumulation with in-batch negatives: each micro-batch is its own contrastive problem, so a query's
    negatives are the other sentences of its micro-batch (times the number of processes), not of the accumulated
    batch. To train with the negatives of a large batch on little memory, use ``grad_cache_chunk_size`` instead.

    The loss hyper-parameters (temperature, mlm_weight, cl_weight, hard_negative_weight) live in the model's
    `ContrastiveConfig`, their single source of truth, and travel with the checkpoint.
    """

    remove_unused_columns: bool = field(
        default=False,
        metadata={
            "help": "Keep dataset columns the model's forward does not name: the contrastive collator reads them "
            "(raw `text`, several sentence columns) and builds the model's inputs itself."
        },
    )
    gather_negatives_across_devices: bool = field(
        default=True,
        metadata={
            "help": "With several processes, gather every process's embeddings (differentiably) so that each "
            "sentence's negatives are the whole global batch, as on one device. False: each process's own batch."
        },
    )
    prebatch_size: int = field(
        default=0,
        metadata={
            "help": "Pre-batch negatives (DensePhrases): keep the keys of the previous C batches, gathered from every "
            "device, as extra negatives (0: off; DensePhrases found 2 best). Needs contrastive_loss='info_nce'."
        },
    )
    prebatch_warmup_steps: int = field(
        default=0, metadata={"help": "Use the pre-batch queue only after this many optimisation steps."}
    )
    prebatch_reset_each_epoch: bool = field(
        default=False, metadata={"help": "Empty the pre-batch queue at the start of every epoch."}
    )
    grad_cache_chunk_size: int = field(
        default=0,
        metadata={
            "help": "GradCache: encode each batch in chunks of this many sentences, with the loss and gradients "
            "of the whole batch (all its negatives) for the activation memory of one chunk, at the cost of a "
            "second forward pass (0: off). Unlike gradient accumulation, which gives each query only the "
            "negatives of its micro-batch."
        },
    )
    prediction_loss_only: bool = field(
        default=True,
        metadata={"help": "Evaluation reports the loss only; embeddings are scored by the STS evaluator instead."},
    )

    def __post_init__(self):
        super().__post_init__()
        for name in ("grad_cache_chunk_size", "prebatch_size", "prebatch_warmup_steps"):
            if getattr(self, name) < 0:
                raise ValueError(f"--{name} must be >= 0 (0 turns it off), got {getattr(self, name)}.")
