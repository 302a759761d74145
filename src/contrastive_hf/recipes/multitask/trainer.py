"""MultitaskTrainer: a transformers Trainer for [`MultitaskModel`]: task schedules, PCGrad, per-task metrics.

- Batches: `MultitaskBatchSampler` orders the tasks' batches (``--task_schedule fixed|round_robin|random|
  super_batch``); each training batch is ``{task: batch}``.
- Loss: without PCGrad, the weighted sum of the task losses through the Trainer's usual backward.
  With ``--pcgrad``, each task's gradient is computed separately and `.pcgrad` projects away the
  conflicting components before they are summed.
- Evaluation: ``eval_dataset={task: dataset}``; each task is scored with its own metrics (`task_metrics`:
  accuracy and, for two classes, F1; Spearman and Pearson for regression, all x 100), logged as
  ``eval_<task>_<metric>``, plus ``eval_average``, the mean of every task's main metric (accuracy or Spearman).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import torch
from torch.utils.data import DataLoader
from transformers import Trainer, TrainingArguments

from ...data import seeding
from ...data.batch_groups import SCHEDULES, grouped_dataloader, loader_options
from ...models.modeling_multitask import TaskSpec
from ...models.objectives import build_loss
from ...training.deepspeed_weights import SavesMasterWeights
from ...training.progress import show_losses_on_progress_bar
from ...training.resuming import CheckedResume
from ...training.trainer import means_over_processes
from ...training.training_args import RunDefaults, SecretFreeOutputs
from .data import MultitaskBatchSampler, MultitaskCollator, MultitaskDataset, TaskCollator
from .pcgrad import average_over_processes, combine_task_gradients, task_gradients

__all__ = [
    "MultitaskTrainingArguments",
    "MultitaskTrainer",
    "task_metrics",
    "main_metric",
    "check_pcgrad_setup",
]


@dataclass
class MultitaskTrainingArguments(RunDefaults, TrainingArguments):
    """`TrainingArguments` plus how the tasks' batches are scheduled and whether PCGrad combines their gradients.

    The tasks themselves (type, head, loss weight) live in the model's `MultitaskConfig`, their single source of
    truth, and travel with the checkpoint.
    """

    task_schedule: str = field(
        default="random",
        metadata={
            "help": "Order of the tasks' batches: fixed (task after task), round_robin, random (interleaved at "
            "random, in proportion to the tasks' sizes) or super_batch (one batch of every task per step)."
        },
    )
    super_batch_length: str = field(
        default="max",
        metadata={
            "help": "With super_batch, steps per epoch: max (the largest task's batches; smaller tasks restart "
            "reshuffled) or min (the smallest task's; larger tasks see a fresh random subset each epoch)."
        },
    )
    pcgrad: bool = field(
        default=False,
        metadata={
            "help": "Combine the tasks' gradients with PCGrad (Yu et al., 2020): a task's gradient loses its "
            "component along another task's gradient when they conflict. Needs several tasks per optimizer step "
            "(super_batch, or gradient accumulation) and whole gradients (one device, DDP or ZeRO-1)."
        },
    )
    remove_unused_columns: bool = field(
        default=False, metadata={"help": "Kept False: the multitask collators read the text columns themselves."}
    )

    def __post_init__(self):
        if self.load_best_model_at_end and self.metric_for_best_model is None:
            # the figure the multitask evaluation is judged by (it logs no overall loss, transformers' default)
            self.metric_for_best_model, self.greater_is_better = "average", True
        super().__post_init__()
        if self.task_schedule not in SCHEDULES:
            raise ValueError(f"Unknown --task_schedule {self.task_schedule!r}; choose one of {', '.join(SCHEDULES)}.")
        if self.super_batch_length not in ("max", "min"):
            raise ValueError(f"--super_batch_length must be max or min, got {self.super_batch_length!r}.")


def check_pcgrad_setup(
    zero_stage: int | None, fsdp: bool, task_schedule: str, gradient_accumulation_steps: int
) -> None:
    """Raise a `ValueError` saying what to change when PCGrad cannot run as configured."""
    if zero_stage is not None and zero_stage >= 2:
        raise ValueError(
            f"PCGrad needs every process to hold whole per-task gradients, but DeepSpeed ZeRO stage {zero_stage} "
            "shards them. Use ZeRO stage 0 or 1 (or plain DDP), or train without --pcgrad."
        )
    if fsdp:
        raise ValueError(
            "PCGrad needs every process to hold whole per-task gradients, but FSDP shards them. Use DDP or "
            "DeepSpeed ZeRO stage 0/1, or train without --pcgrad."
        )
    if task_schedule != "super_batch" and gradient_accumulation_steps == 1:
        raise ValueError(
            f"With --task_schedule {task_schedule} and no gradient accumulation every optimizer step sees one "
            "task, so PCGrad has nothing to project. Use --task_schedule super_batch (one batch of every task per "
            "step), or --gradient_accumulation_steps >= the number of tasks with round_robin."
        )


def main_metric(spec: TaskSpec) -> str:
    """The metric a task is judged by: accuracy for classification (in-batch top-1 for a contrastive task),
    Spearman for regression."""
    return "spearman" if spec.is_regression else "accuracy"


def task_metrics(spec: TaskSpec, predictions: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """A task's scores (x 100) from the head outputs ``(N, num_labels)`` and the labels ``(N,)``: ``accuracy`` (and
    ``f1`` of class 1 when there are two classes, MRPC's second figure), or ``spearman`` and ``pearson``; for a
    contrastive task, ``accuracy``: the share of queries whose own positive scored highest among their evaluation
    batch's passages (the model's outputs, 1 or 0 each)."""
    predictions = np.asarray(predictions)
    if spec.is_contrastive:
        return {"accuracy": 100.0 * float(predictions.reshape(-1).astype(np.float64).mean())}
    labels = np.asarray(labels).reshape(-1)
    if spec.is_regression:
        from ...evaluation.sts import sts_correlations

        return sts_correlations(predictions.reshape(-1).astype(np.float64), labels.astype(np.float64))
    predicted = predictions.argmax(axis=-1)
    scores = {"accuracy": 100.0 * float((predicted == labels).mean())}
    if spec.num_labels == 2:
        true_positive = float(((predicted == 1) & (labels == 1)).sum())
        predicted_positive, actual_positive = float((predicted == 1).sum()), float((labels == 1).sum())
        denominator = predicted_positive + actual_positive
        scores["f1"] = 100.0 * 2 * true_positive / denominator if denominator else 0.0
    return scores


class MultitaskTrainer(CheckedResume, SecretFreeOutputs, SavesMasterWeights, Trainer):
    """A `Trainer` for [`MultitaskModel`]: ``train_dataset`` and ``eval_dataset`` are ``{task name: dataset}``
    (columns as `task_dataset` makes them), ``args`` a `MultitaskTrainingArguments`.

    The collator defaults to `MultitaskCollator(processing_class, tasks)`; pass your own `MultitaskCollator` for
    another ``max_length``. A contrastive task trains with the loss the encoder's config names (its
    ``contrastive_loss``), or with ``loss`` (a `models.objectives.ContrastiveLoss`), as `ContrastiveTrainer` takes one;
    with several processes it contrasts each query with the passages of every process. Per-task training losses are
    logged as ``loss_<task>`` beside ``loss``; with PCGrad, ``pcgrad_conflict_fraction`` is the share of task pairs
    whose gradients conflicted (negative inner product) before the projection, averaged over the optimizer steps since
    the last log.

    PCGrad and several processes: each process computes its tasks' gradients under ``no_sync``, they are averaged
    over processes per task (the global batch's gradients), every process draws the same random projection order
    from (seed, step), and each adds the same update to its ``.grad``; then the optimizer steps as usual (clipping,
    fp16 loss scaling and the learning-rate schedule included). With gradient accumulation, the per-task gradients
    are accumulated over the micro-batches and projected once per optimizer step, as on one large batch.
    """

    def __init__(
        self, model=None, args=None, data_collator=None, train_dataset=None, eval_dataset=None, loss=None, **kwargs
    ):
        if args is None:
            args = MultitaskTrainingArguments()
        if not isinstance(args, MultitaskTrainingArguments):
            raise ValueError("MultitaskTrainer takes MultitaskTrainingArguments (task_schedule, pcgrad, ...).")
        if model is None or not hasattr(model, "task_specs"):
            raise ValueError("MultitaskTrainer trains a contrastive_hf MultitaskModel; pass model=...")
        self.task_specs: dict[str, TaskSpec] = dict(model.task_specs)
        if isinstance(train_dataset, Mapping):
            train_dataset = MultitaskDataset(train_dataset)
        if train_dataset is not None:
            if not isinstance(train_dataset, MultitaskDataset):
                raise ValueError("train_dataset must be {task name: dataset} (or a MultitaskDataset).")
            self._check_task_names(train_dataset.task_names, "train_dataset")
        if isinstance(eval_dataset, Mapping):
            self._check_task_names(list(eval_dataset), "eval_dataset")
        if data_collator is None:
            tokenizer = kwargs.get("processing_class")
            if tokenizer is None:
                raise ValueError("MultitaskTrainer needs processing_class=tokenizer (or a MultitaskCollator).")
            data_collator = MultitaskCollator(tokenizer, list(self.task_specs.values()))
        if not isinstance(data_collator, MultitaskCollator):
            raise ValueError("MultitaskTrainer's data_collator must be a contrastive_hf MultitaskCollator.")
        super().__init__(
            model=model,
            args=args,
            data_collator=data_collator,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            **kwargs,
        )
        self._check_best_model_metric()
        show_losses_on_progress_bar(self)
        self._loss_sums: dict[str, torch.Tensor] = {}
        self._loss_counts: dict[str, int] = {}
        self._pcgrad_buffers: dict[str, list[torch.Tensor | None]] = {}
        self._conflict_fractions: list[torch.Tensor] = []  # on the device, read at the next log
        unwrapped = self.accelerator.unwrap_model(self.model)
        owner = unwrapped.get_base_model() if hasattr(unwrapped, "get_base_model") else unwrapped  # a peft model's
        if loss is not None:
            if not any(spec.is_contrastive for spec in self.task_specs.values()):
                raise ValueError(
                    "MultitaskTrainer(loss=...) is the contrastive tasks' loss, and this model has none (a task of "
                    "type 'contrastive')."
                )
            owner.loss_fn = loss
        elif owner.loss_fn is None and any(spec.is_contrastive for spec in self.task_specs.values()):
            # the loss the encoder's config names, registered since the model was built (else the registry's error
            # naming it): built here, so that it gathers as the one the model built would
            owner.loss_fn = build_loss(owner.config.contrastive)
        if owner.loss_fn is not None:  # the contrastive tasks' negatives: the global batch's
            owner.loss_fn.gather_across_devices = self.args.world_size > 1
        if self.args.pcgrad:
            plugin = getattr(self.accelerator.state, "deepspeed_plugin", None)
            check_pcgrad_setup(
                None if plugin is None else plugin.zero_stage,
                self.is_fsdp_enabled,
                self.args.task_schedule,
                self.args.gradient_accumulation_steps,
            )

    def _check_best_model_metric(self) -> None:
        """``load_best_model_at_end`` ranks checkpoints by a metric `evaluate` logs: refused before training
        otherwise (the Trainer would stop with a KeyError at the first evaluation)."""
        if not self.args.load_best_model_at_end:
            return
        metrics = ["average"] + [
            f"{name}_{metric}"
            for name, spec in self.task_specs.items()
            for metric in ("loss", *(("spearman", "pearson") if spec.is_regression else ("accuracy",)))
        ]
        metrics += [f"{name}_f1" for name, spec in self.task_specs.items() if spec.num_labels == 2]
        given = self.args.metric_for_best_model
        if given.removeprefix("eval_") not in metrics:
            raise ValueError(
                f"--metric_for_best_model {given} is not a metric the multitask evaluation logs (it logs each "
                "task's loss and scores, and their average, no overall loss): --load_best_model_at_end could not "
                f"rank checkpoints. Give one of {', '.join(metrics)} (average, the default with "
                "--load_best_model_at_end, is the mean of the tasks' main scores)."
            )

    def _check_task_names(self, names, what: str) -> None:
        unknown = [name for name in names if name not in self.task_specs]
        if unknown:
            raise ValueError(
                f"{what} has tasks {', '.join(unknown)} that the model has no head for (it has "
                f"{', '.join(self.task_specs)})."
            )

    # ---- Data ----

    def get_train_dataloader(self) -> DataLoader:
        if self.train_dataset is None:
            raise ValueError("MultitaskTrainer: training requires a train_dataset.")
        args = self.args
        sampler = MultitaskBatchSampler(
            self.train_dataset.sizes,
            self._train_batch_size,
            schedule=args.task_schedule,
            seed=args.data_seed if args.data_seed is not None else args.seed,
            num_processes=self.accelerator.num_processes,
            process_index=self.accelerator.process_index,
            drop_last=args.dataloader_drop_last,
            super_batch_length=args.super_batch_length,
        )
        return grouped_dataloader(self, sampler)

    def _task_eval_dataloader(self, task: str, dataset) -> DataLoader:
        template = self.data_collator.collators[task]
        collator = TaskCollator(template.tokenizer, template.spec, template.max_length, add_task_name=True)
        loader = DataLoader(
            dataset, batch_size=self.args.eval_batch_size, collate_fn=collator, **loader_options(self.args)
        )
        return self.accelerator.prepare(loader)

    # ---- Training ----

    def compute_loss(self, model, inputs, return_outputs: bool = False, num_items_in_batch=None):
        if "task" in inputs:  # an evaluation batch of one task
            outputs = model(**inputs)
        else:  # a training batch {task: batch}
            outputs = model(task_batches=inputs)
            if model.training:
                self._record_task_losses(outputs.task_losses)
        if outputs.loss is None:
            raise ValueError("The model returned no loss: every batch needs its labels.")
        return (outputs.loss, outputs) if return_outputs else outputs.loss

    def _record_task_losses(self, losses: Mapping[str, torch.Tensor]) -> None:
        for name, value in losses.items():  # accumulated on the device: no host sync per step
            self._loss_sums[name] = self._loss_sums.get(name, 0.0) + value.detach().float()
            self._loss_counts[name] = self._loss_counts.get(name, 0) + 1

    def training_step(self, model, inputs, num_items_in_batch=None) -> torch.Tensor:
        if not self.args.pcgrad:
            return super().training_step(model, inputs, num_items_in_batch)
        model.train()
        if hasattr(self.optimizer, "train") and callable(self.optimizer.train):
            self.optimizer.train()
        inputs = self._prepare_inputs(inputs)
        parameters = [p for p in self.model.parameters() if p.requires_grad]
        scaler = getattr(self.accelerator, "scaler", None)
        loss_scale = scaler.get_scale() if scaler is not None else 1.0  # fp16: keep small gradients from underflowing
        micro_batch_share = 1.0 / self.current_gradient_accumulation_steps

        # 1. One forward pass over every task of the batch, through the unwrapped model: neither DDP's reducer nor
        # DeepSpeed's backward hooks must see the per-task gradients, which are reduced per task below.
        with self.compute_loss_context_manager():
            outputs = self.model(task_batches=inputs)
        self._record_task_losses(outputs.task_losses)
        names = list(outputs.task_losses)
        losses = [
            outputs.task_losses[name] * (self.task_specs[name].loss_weight * micro_batch_share * loss_scale)
            for name in names
        ]
        # 2. Each task's gradient, accumulated over the micro-batches of this optimizer step.
        for name, gradients in zip(names, task_gradients(losses, parameters), strict=True):
            buffer = self._pcgrad_buffers.setdefault(name, [None] * len(parameters))
            for index, gradient in enumerate(gradients):
                if gradient is not None:
                    buffer[index] = gradient if buffer[index] is None else buffer[index] + gradient

        # 3. At the last micro-batch: average over processes, project, and hand the update to the usual backward.
        backward_kwargs = {}
        if self.is_deepspeed_enabled:
            backward_kwargs["scale_wrt_gas"] = False  # the losses above are already divided, as Trainer does
        if self.accelerator.sync_gradients:
            update = self._pcgrad_update(parameters)
            # d/dp sum(p * u) = u: the Trainer's backward (loss scaling, DeepSpeed's buffers) receives exactly u.
            surrogate = sum(
                (p * (u / loss_scale)).sum() for p, u in zip(parameters, update, strict=True) if u is not None
            )
            self.accelerator.backward(surrogate, **backward_kwargs)
        elif self.is_deepspeed_enabled:  # DeepSpeed counts micro-steps in its backward: give it a zero gradient
            self.accelerator.backward(sum((p * 0.0).sum() for p in parameters), **backward_kwargs)
        return outputs.loss.detach() * micro_batch_share

    def _pcgrad_update(self, parameters) -> list[torch.Tensor | None]:
        names = list(self._pcgrad_buffers)
        gradients = average_over_processes([self._pcgrad_buffers[name] for name in names])
        self._pcgrad_buffers = {}
        # The same random orders on every process: a generator keyed by (seed, optimizer step).
        key = seeding.combine(seeding.mix64(self.args.seed), self.state.global_step)
        generator = torch.Generator().manual_seed(int(key))
        update, stats = combine_task_gradients(gradients, generator=generator)
        if stats.task_pairs:
            self._conflict_fractions.append(stats.conflict_fraction)
        return update

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if "loss" in logs:  # each task's mean loss over every process's steps since the last log, one gather
            names = list(self.task_specs)
            means = means_over_processes(self.accelerator, names, self._loss_sums, self._loss_counts, self.args.device)
            logs.update({f"loss_{name}": mean for name, mean in means.items()})
            if self._conflict_fractions:
                fraction = torch.stack(self._conflict_fractions).float().mean().item()
                logs["pcgrad_conflict_fraction"] = round(fraction, 4)
            self._loss_sums, self._loss_counts, self._conflict_fractions = {}, {}, []
        super().log(logs, start_time)

    # ---- Evaluation ----

    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval") -> dict[str, float]:
        """Score every task of ``eval_dataset`` (default: the trainer's), ``{task name: dataset}``: the loss and
        `task_metrics` of each, as ``<prefix>_<task>_<metric>``, and ``<prefix>_average`` (mean of the tasks'
        main metrics). Distributed runs shard each task's data and gather the predictions."""
        datasets = self.eval_dataset if eval_dataset is None else eval_dataset
        if not isinstance(datasets, Mapping) or not datasets:
            raise ValueError("MultitaskTrainer.evaluate takes {task name: dataset}; no evaluation data was given.")
        self._check_task_names(list(datasets), "eval_dataset")
        start = time.time()
        metrics, main_scores = {}, []
        for name, dataset in datasets.items():
            spec = self.task_specs[name]
            prefix = f"{metric_key_prefix}_{name}"
            output = self.evaluation_loop(
                self._task_eval_dataloader(name, dataset),
                description=f"Evaluation of {name}",
                prediction_loss_only=False,
                ignore_keys=ignore_keys,
                metric_key_prefix=prefix,
            )
            if f"{prefix}_loss" in output.metrics:
                metrics[f"{prefix}_loss"] = output.metrics[f"{prefix}_loss"]
            scores = task_metrics(spec, output.predictions, output.label_ids)
            metrics.update({f"{prefix}_{metric}": value for metric, value in scores.items()})
            main_scores.append(scores[main_metric(spec)])
        metrics[f"{metric_key_prefix}_average"] = float(np.mean(main_scores))
        metrics[f"{metric_key_prefix}_runtime"] = round(time.time() - start, 4)
        self.log(metrics)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
        return metrics
