"""SG-BERT's trainer and arguments: the paper's optimisation defaults, and checkpoints of BERT_T alone."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

import torch
from safetensors.torch import save_file
from transformers.trainer import TRAINING_ARGS_NAME

from ...models.checkpoint_files import save_tokenizer
from ...training.trainer import STEP_METRICS, ContrastiveTrainer
from ...training.training_args import ContrastiveTrainingArguments
from .modeling import HEAD_FILE, SelfGuidedModel

__all__ = ["SelfGuidedTrainingArguments", "SelfGuidedTrainer"]

logger = logging.getLogger(__name__)


@dataclass
class SelfGuidedTrainingArguments(ContrastiveTrainingArguments):
    """`ContrastiveTrainingArguments` with SG-BERT's optimisation defaults (its Table 8 and released code):
    batch 16, AdamW betas (0.9, 0.9), learning rate 5e-5 (the Trainer's default), 10% linear warm-up, no weight
    decay."""

    per_device_train_batch_size: int = field(
        default=16, metadata={"help": "Sentences per device and step (SG-BERT: 16)."}
    )
    adam_beta2: float = field(default=0.9, metadata={"help": "AdamW beta2 (SG-BERT: 0.9, with beta1 0.9)."})
    warmup_steps: float = field(
        default=0.1, metadata={"help": "Warm-up steps; a value below 1 is a fraction of training (SG-BERT: 0.1)."}
    )


class SelfGuidedTrainer(ContrastiveTrainer):
    """The `ContrastiveTrainer` for a [`SelfGuidedModel`]: logs ``cl_loss`` and ``regularization_loss`` beside
    ``loss``, scores STS eval datasets with BERT_T, and saves BERT_T alone.

    What it writes:

    * ``save_model()`` (the end of training): a `ContrastiveModel` checkpoint of BERT_T (weights, config, modeling
      code, sentence-transformers files, tokenizer), loadable with ``AutoModel.from_pretrained``: no BERT_F, no f;
    * each ``checkpoint-N``: the same, plus the head f (`HEAD_FILE`) and the Trainer's optimiser and RNG states, so
      ``resume_from_checkpoint`` and ``load_best_model_at_end`` restore BERT_T and f (BERT_F is the starting
      encoder, rebuilt by the script).
    """

    def __init__(self, model=None, args=None, *more, **kwargs):
        if args is not None and getattr(args, "prebatch_size", 0):
            raise ValueError(
                "SG-BERT's negatives are the views of the current batch; a pre-batch queue (--prebatch_size) does not "
                "apply to it: leave prebatch_size at 0."
            )
        if model is not None and not isinstance(model, SelfGuidedModel):
            raise TypeError(f"SelfGuidedTrainer trains a SelfGuidedModel, got {type(model).__name__}.")
        super().__init__(model, args, *more, **kwargs)
        self._saving_checkpoint = False
        regularized = self.accelerator.unwrap_model(self.model).self_guided_config.regularization_weight > 0
        if regularized and self._zero_stage() == 3:
            raise ValueError(
                "DeepSpeed ZeRO-3 partitions every parameter across processes, so ||BERT_F - BERT_T||^2 cannot be "
                "computed locally: use ZeRO stage 1 or 2 (SG-BERT's encoders fit on one device), or "
                "regularization_weight 0."
            )

    # Logged beside ContrastiveTrainer's step metrics (cl_loss...), averaged the same way.
    step_metrics = (*STEP_METRICS, "regularization_loss")

    def _save(self, output_dir: str | None = None, state_dict: dict | None = None) -> None:
        if not self.args.should_save:
            return
        output_dir = output_dir if output_dir is not None else self.args.output_dir
        os.makedirs(output_dir, exist_ok=True)
        model = self.accelerator.unwrap_model(self.model, keep_torch_compile=False)
        tuned_state = head_state = None
        if state_dict is not None:  # consolidated by DeepSpeed / FSDP: keys of the whole training model
            tuned_state = _with_prefix(state_dict, "contrastive.")
            head_state = _with_prefix(state_dict, "projection.")
        logger.info("Saving BERT_T (the trained encoder, without the frozen copy) to %s", output_dir)
        model.contrastive.save_pretrained(output_dir, state_dict=tuned_state)
        if self._saving_checkpoint:
            head_state = head_state if head_state is not None else model.projection.state_dict()
            save_file(
                {k: v.detach().contiguous().cpu() for k, v in head_state.items()}, os.path.join(output_dir, HEAD_FILE)
            )
        if self.processing_class is not None:
            save_tokenizer(self.processing_class, output_dir)
        torch.save(self.args, os.path.join(output_dir, TRAINING_ARGS_NAME))

    def saved_model(self):
        """BERT_T: what `save_model` writes and the model card describes."""
        return self.accelerator.unwrap_model(self.model).contrastive

    def _save_checkpoint(self, model, trial) -> None:
        self._saving_checkpoint = True  # checkpoints also carry the head f, for an exact resume
        try:
            super()._save_checkpoint(model, trial)
        finally:
            self._saving_checkpoint = False

    def checkpoint_extra_files(self) -> tuple[str, ...]:
        return (*super().checkpoint_extra_files(), HEAD_FILE)  # the head f resumes too (`_save` writes it)

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model=None) -> None:
        if self.is_fsdp_enabled:
            return super()._load_from_checkpoint(resume_from_checkpoint, model)
        self.accelerator.unwrap_model(model if model is not None else self.model).load_checkpoint(
            resume_from_checkpoint
        )

    def _load_best_model(self) -> None:
        if self.is_deepspeed_enabled or self.is_fsdp_enabled:
            return super()._load_best_model()
        logger.info(
            "Loading the best BERT_T from %s (score: %s).", self.state.best_model_checkpoint, self.state.best_metric
        )
        self.accelerator.unwrap_model(self.model).load_checkpoint(self.state.best_model_checkpoint)


def _with_prefix(state_dict: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    return {key[len(prefix) :]: value for key, value in state_dict.items() if key.startswith(prefix)}
