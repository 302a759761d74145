"""ContrastiveTrainer: the transformers Trainer computing the model's MLM + contrastive objective."""

from __future__ import annotations

import torch
from transformers import Trainer

__all__ = ["ContrastiveTrainer", "LOSS_COMPONENTS"]

# Parts of the objective logged beside `loss` (each unweighted; `loss` is their weighted sum).
LOSS_COMPONENTS = ("mlm_loss", "cl_loss")


class ContrastiveTrainer(Trainer):
    """A `Trainer` for [`ContrastiveForPreTraining`]-style models.

    `compute_loss` runs the model's objective (L = mlm_weight * L_MLM + cl_weight * L_CL) and the trainer logs
    ``mlm_loss`` and ``cl_loss``, averaged over the steps since the last log and over processes, beside ``loss``.
    Use it with `ContrastiveTrainingArguments` and `ContrastiveDataCollator`.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._component_sums: dict[str, torch.Tensor] = {}
        self._component_counts: dict[str, int] = {}

    def compute_loss(self, model, inputs, return_outputs: bool = False, num_items_in_batch=None):
        outputs = model(**inputs)
        if outputs.loss is None:
            raise ValueError("The model returned no loss: pass its inputs with return_loss=True (the default).")
        if model.training:
            for name in LOSS_COMPONENTS:
                value = getattr(outputs, name, None)
                if value is not None:
                    # accumulate on the device: no host sync per step
                    self._component_sums[name] = self._component_sums.get(name, 0.0) + value.detach().float()
                    self._component_counts[name] = self._component_counts.get(name, 0) + 1
        return (outputs.loss, outputs) if return_outputs else outputs.loss

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if "loss" in logs and self._component_sums:
            for name, total in self._component_sums.items():
                mean = total / self._component_counts[name]
                logs[name] = round(self.accelerator.gather(mean.reshape(1)).mean().item(), 4)
            self._component_sums, self._component_counts = {}, {}
        super().log(logs, start_time)
