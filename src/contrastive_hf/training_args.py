"""TrainingArguments for contrastive training."""

from __future__ import annotations

from dataclasses import dataclass, field

from transformers import TrainingArguments

__all__ = ["ContrastiveTrainingArguments"]


@dataclass
class ContrastiveTrainingArguments(TrainingArguments):
    """`TrainingArguments` with defaults suited to contrastive training.

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
    prediction_loss_only: bool = field(
        default=True,
        metadata={"help": "Evaluation reports the loss only; embeddings are scored by the STS evaluator instead."},
    )
