"""ContrastiveTrainer: the transformers Trainer computing the model's MLM + contrastive objective."""

from __future__ import annotations

import os

import torch
from safetensors.torch import load_file, save_file
from transformers import Trainer, TrainerCallback

from .collators import CollatorEpochCallback
from .evaluation.sts import STSData
from .prebatch_queue import PrebatchQueue

__all__ = ["ContrastiveTrainer", "LOSS_COMPONENTS", "PREBATCH_QUEUE_FILE"]

PREBATCH_QUEUE_FILE = "prebatch_queue.safetensors"

# Parts of the objective logged beside `loss` (each unweighted; `loss` is their weighted sum).
LOSS_COMPONENTS = ("mlm_loss", "cl_loss")


class ContrastiveTrainer(Trainer):
    """A `Trainer` for [`ContrastiveForPreTraining`]-style models.

    `compute_loss` runs the model's objective (L = mlm_weight * L_MLM + cl_weight * L_CL) and the trainer logs
    ``mlm_loss`` and ``cl_loss``, averaged over the steps since the last log and over processes, beside ``loss``.
    Use it with `ContrastiveTrainingArguments` and `ContrastiveDataCollator`.

    STS evaluation during training, as SimCSE selects checkpoints: an `STSData` among the eval datasets, e.g.
    ``eval_dataset={"stsb": read_stsbenchmark("sts-dev.csv")}``, is scored every ``eval_steps`` (cosine similarity,
    Spearman x 100, plus alignment and uniformity) and logged as ``eval_stsb_spearman``, ``eval_stsb_pearson``,
    ``eval_stsb_alignment`` and ``eval_stsb_uniformity``; so ``metric_for_best_model="eval_stsb_spearman"`` with
    ``load_best_model_at_end=True`` keeps the best checkpoint. Other eval datasets get the Trainer's loss evaluation.
    """

    # What the model card says about the run (a `ModelCardInfo`: method, views, data, results); set it before
    # `create_model_card` or `push_to_hub`.
    model_card_info = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._component_sums: dict[str, torch.Tensor] = {}
        self._component_counts: dict[str, int] = {}
        if hasattr(self.data_collator, "set_epoch"):  # new views each epoch, the same ones when resuming
            self.add_callback(CollatorEpochCallback(self.data_collator))
        self.prebatch_queue = None
        if self.args.prebatch_size:
            config = getattr(self.accelerator.unwrap_model(self.model), "config", None)
            if getattr(config, "contrastive_loss", "info_nce") != "info_nce":
                raise ValueError(
                    "--prebatch_size needs contrastive_loss='info_nce' (queued keys are negatives of the anchors), "
                    f"the model uses {config.contrastive_loss!r}: set it in the model config (--contrastive_loss)."
                )
            self.prebatch_queue = PrebatchQueue(self.args.prebatch_size, self.args.prebatch_warmup_steps)
            if self.args.prebatch_reset_each_epoch:
                self.add_callback(_ResetQueueEachEpoch(self.prebatch_queue))

    def compute_loss(self, model, inputs, return_outputs: bool = False, num_items_in_batch=None):
        if self.args.world_size > 1 and self.args.gather_negatives_across_devices:
            inputs = {**inputs, "gather_across_devices": True}  # exact global-batch negatives (distributed.py)
        queue = self.prebatch_queue if model.training else None
        if queue is not None:
            inputs = {**inputs, "extra_negatives": queue.negatives(self.state.global_step)}
        outputs = model(**inputs)
        if outputs.loss is None:
            raise ValueError("The model returned no loss: pass its inputs with return_loss=True (the default).")
        if queue is not None:
            queue.push(outputs.embeddings[:, 1])  # this batch's keys are the next batches' negatives
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

    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval") -> dict[str, float]:
        """Score an `STSData` eval dataset with `sts_eval_metrics`; anything else goes to `Trainer.evaluate` (a dict
        of eval datasets comes back here once per name, with the name in ``metric_key_prefix``)."""
        dataset = self.eval_dataset if eval_dataset is None else eval_dataset
        if isinstance(dataset, str) and isinstance(self.eval_dataset, dict):
            dataset = self.eval_dataset[dataset]
        if not isinstance(dataset, STSData):
            return super().evaluate(eval_dataset, ignore_keys=ignore_keys, metric_key_prefix=metric_key_prefix)
        from .evaluation.training import sts_eval_metrics

        metrics = sts_eval_metrics(
            self.model, dataset, self.processing_class, self.args.per_device_eval_batch_size, metric_key_prefix
        )
        self.log(metrics)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
        return metrics

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
            negatives_gathered=getattr(self.args, "gather_negatives_across_devices", False),
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

    def _save_checkpoint(self, model, trial) -> None:
        super()._save_checkpoint(model, trial)
        if self.prebatch_queue is not None and self.args.should_save:  # the queue is part of an exact resume
            folder = os.path.join(self._get_output_dir(trial=trial), f"checkpoint-{self.state.global_step}")
            save_file(self.prebatch_queue.state_dict(), os.path.join(folder, PREBATCH_QUEUE_FILE))

    def _load_rng_state(self, checkpoint: str | None) -> None:
        super()._load_rng_state(checkpoint)
        path = os.path.join(checkpoint or "", PREBATCH_QUEUE_FILE)
        if self.prebatch_queue is not None and checkpoint is not None and os.path.isfile(path):
            self.prebatch_queue.load_state_dict(load_file(path), device=self.args.device)

    def _zero_stage(self) -> int | None:
        plugin = getattr(self.accelerator.state, "deepspeed_plugin", None)
        return None if plugin is None else plugin.zero_stage


class _ResetQueueEachEpoch(TrainerCallback):
    """Empties the pre-batch queue at the start of every epoch (its keys would be an epoch old)."""

    def __init__(self, queue: PrebatchQueue):
        self.queue = queue

    def on_epoch_begin(self, args, state, control, **kwargs):
        self.queue.reset()
