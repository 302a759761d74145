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

    # What the model card says about the run (a `ModelCardInfo`: method, views, data, results); set it before
    # `create_model_card` or `push_to_hub`.
    model_card_info = None

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

    def create_model_card(self, model_name: str | None = None, **kwargs) -> None:
        """Write contrastive_hf's model card (README.md in output_dir) instead of the Trainer's generic one.

        `push_to_hub` calls this before uploading, so the pushed card states the method, views, loss weights,
        temperature, negatives, data, hyper-parameters, hardware and results. Without `model_card_info` it falls
        back to the Trainer's card.
        """
        if self.model_card_info is None:
            return super().create_model_card(model_name=model_name, **kwargs)
        if not self.is_world_process_zero():
            return None
        from dataclasses import replace

        from .model_card import write_model_card

        info = replace(
            self.model_card_info,
            world_size=self.args.world_size,
            zero_stage=self._zero_stage(),
            repo_id=self.args.hub_model_id or self.model_card_info.repo_id,
        )
        write_model_card(self.args.output_dir, self.accelerator.unwrap_model(self.model), info)
        return None

    def init_hf_repo(self, token: str | None = None, private: bool | None = None) -> None:
        """Create the Hub repository (at construction when `push_to_hub=True`), with an error that says what to do."""
        try:
            super().init_hf_repo(token=token, private=private)
        except Exception as error:
            raise RuntimeError(
                f"Could not create the Hub repository {self.args.hub_model_id or self.args.output_dir!r} "
                f"({type(error).__name__}: {error}). Check --hub_token (or `hf auth login`) and the network, or run "
                "without --push_to_hub and upload the output directory later. Nothing has been trained or written yet."
            ) from error

    def _zero_stage(self) -> int | None:
        plugin = getattr(self.accelerator.state, "deepspeed_plugin", None)
        return None if plugin is None else plugin.zero_stage
