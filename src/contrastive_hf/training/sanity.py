"""Training that cannot silently learn nothing: what can never work is refused when the trainer is built, and a
logged window showing that the contrastive loss has nothing to learn from is warned about, naming the likely cause
and the fix.

Refused by `check_training_setup` (called by `ContrastiveTrainer.__init__`):

* a ``contrastive_loss`` nobody registered (a checkpoint trained with a user's loss loads and encodes without it,
  but trains only once the module registering it is imported);
* no negatives: a contrastive batch of one sentence (``per_device_train_batch_size`` 1, on one process or without
  gathering across processes) with no hard negatives (each collator says whether its batches have them:
  ``hard_negatives_in_batches(dataset)``) and no pre-batch queue; the loss of a query whose only candidate is its own
  positive is 0, whatever the model;
* inputs longer than the encoder's position embeddings (a collator's ``max_length``, ``--max_seq_length``), which
  would stop training with a tensor-size error at the first batch holding such a sentence.
* weights that hold NaN or infinite values (a model loaded from a run that diverged), whose loss is NaN from the
  first step (checkpoints in contrastive_hf's layout are refused already when they load, naming the file);
* ``load_best_model_at_end`` ranking checkpoints by the eval loss (transformers' default ``metric_for_best_model``)
  when every eval set scores the model itself (`TrainingEvalSet`: STS-B dev, retrieval) and logs no loss: the
  Trainer would stop with a KeyError at the first evaluation, after training that far.

The collators refuse the rest of what can never work where they hold the information (`collators.content_room`:
a ``max_length`` that leaves no token between the special tokens; a word deletion that deletes every token).

Warned by `TrainingSanityCallback`, once per run and condition, from the metrics `ContrastiveTrainer.log` reports:

* ``negatives_per_query`` below 1: the queries of that window had (nearly) no negatives;
* ``uniformity`` above `COLLAPSED_UNIFORMITY` while ``cl_loss`` is at chance: the training embeddings have collapsed
  to nearly one vector (as [CLS] pooling of an encoder trained from scratch does, issue 13).

So that a run shorter than ``logging_steps`` is checked too, the steps since the last log are logged as a window of
their own at the end of training.
"""

from __future__ import annotations

import logging
import math

import torch
from torch import nn
from transformers import TrainerCallback
from transformers.trainer_utils import IntervalStrategy

from ..evaluation.training import TrainingEvalSet
from ..models.checkpoint_diagnostics import refuse_non_finite
from ..models.checkpoint_names import CONTRASTIVE_CONFIG_NAME
from ..models.objectives import LOSSES
from ..models.positions import check_max_length

__all__ = [
    "COLLAPSED_UNIFORMITY",
    "NonFiniteLossWatch",
    "TrainingSanityCallback",
    "check_training_setup",
    "hard_negatives_in_batches",
]

logger = logging.getLogger(__name__)

# Uniformity (Wang & Isola, t = 2) of the logged training embeddings (projected, dropout on) above which they count
# as collapsed. Measured on the shipped Wikipedia sample in batches of 64 (2026-11-23): the demo's 2-layer encoder
# as initialised gives -0.23 ([CLS] through BERT's pooler), -0.34 (raw [CLS]) and -0.42 (mean pooling),
# all-MiniLM-L6-v2 -1.25 ([CLS]) and -2.36 (mean); healthy runs go down from there (the README's subs+del_span
# command of examples/run_clear.py with --pooler_type mean --logging_steps 10: -1.9 over steps 1-10, -3.3 over steps
# 41-50; the tests' hidden-32 model: -0.5). The same command with its [CLS] pooling from scratch (issue 13) logged
# -0.046 over steps 1-10, then -0.002 to -0.008, whether at lr 5e-4 or 1e-4 (-0.044 over steps 11-20, then -0.03),
# with warmup or without MLM, cl_loss at chance throughout. -0.05 is above every collapsed window after the first
# and 4.6x below the nearest healthy or initial value.
COLLAPSED_UNIFORMITY = -0.05
# ... and only while cl_loss is within 5% of chance, ln(1 + negatives_per_query), the loss of embeddings that are
# all equal (collapsed windows: within 0.1%; healthy ones: 31% of chance for MiniLM at its first step, 43% for the
# mean-pooled example after 10 steps, 80% for the tests' hidden-32 model): embeddings that are close together but
# whose loss is still well below chance (an anisotropic pretrained encoder) still tell positives from negatives.
CHANCE_FRACTION = 0.95


def check_training_setup(trainer) -> None:
    """Refuse a `ContrastiveTrainer` whose training can never learn (see the module docstring), with an error that
    names the value and what to set instead."""
    model = trainer.accelerator.unwrap_model(trainer.model)
    _check_loss(model)
    _check_negatives(trainer, model)
    _check_positions(model, trainer.data_collator)
    _check_best_model_metric(trainer.args, trainer.eval_dataset)
    refuse_non_finite(
        dict(model.named_parameters()),
        f"The model to train ({type(model).__name__})",
        "load it from a checkpoint saved before the loss diverged, or from the pretrained encoder",
    )


def _check_best_model_metric(args, eval_dataset) -> None:
    if not args.load_best_model_at_end or (args.metric_for_best_model or "loss").removeprefix("eval_") != "loss":
        return
    eval_sets = eval_dataset if isinstance(eval_dataset, dict) else {"": eval_dataset}
    if not eval_sets or not all(isinstance(eval_set, TrainingEvalSet) for eval_set in eval_sets.values()):
        return  # a set evaluated by the Trainer logs its loss
    choices = [  # each set's own metric, in its own words: STS-B dev's Spearman, DPR's held-out MRR...
        (f"{name}_{primary}" if name else primary)
        + (f" ({description})" if (description := getattr(eval_set, "primary_metric_description", None)) else "")
        for name, eval_set in eval_sets.items()
        if (primary := getattr(eval_set, "primary_metric", None))
    ]
    named = ", ".join(repr(name) for name in eval_sets if name) or "the eval set"
    raise ValueError(
        f"load_best_model_at_end keeps the checkpoint with the best metric_for_best_model, which is "
        f"{args.metric_for_best_model!r} (transformers' default), but {named} score(s) the model and log no loss. "
        "Set --metric_for_best_model to one of their metrics" + (f": {'; '.join(choices)}" if choices else "") + "."
    )


def _check_loss(model) -> None:
    config = getattr(model, "config", None)
    name = getattr(config, "contrastive_loss", None)
    if name is None or name in LOSSES or getattr(config, "cl_weight", 1.0) == 0:
        return
    raise ValueError(
        f"The model to train has contrastive_loss {name!r} (set in its config, or in the checkpoint's "
        f"{CONTRASTIVE_CONFIG_NAME} it was loaded from), which is not registered: import the module that registers "
        f"it (contrastive_hf.models.objectives.register_loss) before training, or train with one of "
        f"{', '.join(LOSSES.names())} (--contrastive_loss)."
    )


def _check_negatives(trainer, model) -> None:
    if getattr(getattr(model, "config", None), "cl_weight", 1.0) == 0:
        return  # no contrastive loss (MLM only)
    per_device = trainer.args.per_device_train_batch_size
    gathered = trainer.args.world_size > 1 and trainer._option("gather_negatives_across_devices")
    sentences = per_device * (trainer.args.world_size if gathered else 1)
    if sentences >= 2 or trainer._option("prebatch_size"):
        return
    if hard_negatives_in_batches(trainer.data_collator, trainer.train_dataset) is not False:
        return  # hard negatives, or a collator whose batches we cannot tell: the logged window will say
    where = f"per_device_train_batch_size={per_device} on {trainer.args.world_size} process(es)" + (
        "" if gathered or trainer.args.world_size == 1 else " without gather_negatives_across_devices"
    )
    raise ValueError(
        f"The contrastive loss has no negatives: each batch holds {sentences} sentence ({where}) and no hard "
        "negatives or pre-batch queue, so a query's only candidate is its own positive, the loss is 0 whatever the "
        "model, and nothing is learned. Set --per_device_train_batch_size to 2 or more (SimCSE and CLEAR use 64 or "
        "more; GradCache, --grad_cache_chunk_size, keeps the memory of a small batch), or add negatives "
        "(--prebatch_size with --contrastive_loss info_nce, or a hard-negative column)."
    )


def hard_negatives_in_batches(collator, dataset) -> bool | None:
    """Whether ``collator``'s batches of ``dataset`` give each query hard negatives (views of other sentences than its
    own), as the collator answers it (its ``hard_negatives_in_batches(dataset)``, beside ``card_description()``);
    None when it cannot be told: a collator that does not say, or a stream it cannot read before training."""
    from ..data.collator_protocol import Collator

    return collator.hard_negatives_in_batches(dataset) if isinstance(collator, Collator) else None


# The collators' truncation lengths, by the name of the attribute holding each.
_MAX_LENGTH_ATTRIBUTES = ("max_length", "max_query_length", "max_passage_length")


def _check_positions(model: nn.Module, collator) -> None:
    for name in _MAX_LENGTH_ATTRIBUTES:
        check_max_length(
            model,
            getattr(collator, name, None),
            f"{type(collator).__name__}'s {name}",
            "--max_seq_length" if name == "max_length" else f"--{name}",
            "the first batch with a longer sentence would stop training with a tensor-size error",
        )


class TrainingSanityCallback(TrainerCallback):
    """Warns, once per run and condition, when a logged training window shows that the contrastive loss cannot
    learn: no negatives (``negatives_per_query`` below 1) or collapsed embeddings (``uniformity`` above
    `COLLAPSED_UNIFORMITY`), with the likely causes and their fixes. `ContrastiveTrainer` adds it by itself."""

    def __init__(self):
        self.warned: set[str] = set()

    def on_train_begin(self, args, state, control, **kwargs):
        self.warned = set()

    def on_step_end(self, args, state, control, **kwargs):
        # The steps since the last log are a window of their own at the end: a run shorter than logging_steps (the
        # README's 50-step examples, under the default 500) would otherwise log no window, and show nothing.
        if args.logging_strategy == IntervalStrategy.STEPS and state.global_step >= state.max_steps:
            control.should_log = True

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or "loss" not in logs or not state.is_world_process_zero:
            return  # evaluation logs, or another process (the logged metrics are already averaged over all)
        negatives, cl_loss = logs.get("negatives_per_query"), logs.get("cl_loss")
        if negatives is not None and negatives < 1:
            self._warn_once(
                "negatives",
                f"No negatives at step {state.global_step}: negatives_per_query={negatives} over the last "
                f"{args.logging_steps} step(s), so cl_loss ({cl_loss}) teaches nothing. Identical sentences are "
                "never each other's negatives: a batch whose sentences are all the same (a corpus of repeated "
                "lines, or a dataset sorted so that copies of a line come together) leaves none. Deduplicate or "
                "shuffle the corpus, and give each batch at least two different sentences "
                "(--per_device_train_batch_size).",
            )
            return  # a batch of one sentence repeated is one point: its uniformity says nothing more
        uniformity = logs.get("uniformity")
        if uniformity is None or uniformity <= COLLAPSED_UNIFORMITY:
            return
        chance = math.log1p(negatives) if negatives else None
        if cl_loss is not None and chance is not None and cl_loss < CHANCE_FRACTION * chance:
            return  # close together, yet the loss still tells positives from negatives
        at_chance = "" if chance is None else f", cl_loss {cl_loss} (chance: ln(1 + negatives) = {chance:.4g})"
        self._warn_once(
            "collapse",
            f"Collapsed embeddings at step {state.global_step}: uniformity {uniformity} (0 when every embedding "
            f"is the same vector), alignment {logs.get('alignment')}{at_chance}. The encoder maps every sentence "
            "to nearly one point and the contrastive loss no longer tells them apart. Likely causes: [CLS] pooling "
            "of an encoder trained from scratch, whose [CLS] hardly depends on the sentence at first "
            "(--pooler_type mean); views that are all alike (a del_word_probability near 1, or a --max_seq_length "
            "that leaves few words); a learning rate too high (lower --learning_rate, add --warmup_steps); a "
            "corpus of near-identical lines.",
        )

    def _warn_once(self, condition: str, message: str) -> None:
        if condition not in self.warned:
            self.warned.add(condition)
            logger.warning(message)


class NonFiniteLossWatch:
    """Notes, on the device, the first step whose loss (or a part of it) was NaN or infinite, and stops training
    when asked (`raise_if_any`: the trainer asks when it logs, saves a checkpoint or ends), naming that step and the
    part that went wrong.

    Checking the loss at every step would read it back from the device, which makes the host wait for the GPU at
    every step (issue 32); recording costs a few elementwise operations queued with the step's own. The price: a
    run stops at the next log, not at the bad step itself, and says which step it was.
    """

    def __init__(self):
        self.first_step: dict[str, torch.Tensor] = {}  # name -> the first bad step (-1: none), a device scalar
        self.value: dict[str, torch.Tensor] = {}  # name -> its value at that step

    def record(self, step: int, parts: dict[str, torch.Tensor | None]) -> None:
        """Note ``parts`` (scalar tensors by name) of optimisation step ``step`` (counted from 1)."""
        for name, value in parts.items():
            if value is None:
                continue
            value = value.detach().float().reshape(-1)[:1].reshape(())
            if name not in self.first_step:
                self.first_step[name] = torch.full_like(value, -1.0)
                self.value[name] = torch.zeros_like(value)
            first = self.first_step[name]
            new = ~torch.isfinite(value) & (first < 0)
            self.first_step[name] = torch.where(new, torch.full_like(first, float(step)), first)
            self.value[name] = torch.where(new, value, self.value[name])

    def raise_if_any(self, epoch: float | None = None) -> None:
        """A `FloatingPointError` naming the first bad step and its non-finite parts, if one was noted (a read back
        from the device: call it where the trainer reads values anyway, at a log)."""
        if not self.first_step:
            return
        names = list(self.first_step)
        steps = torch.stack([self.first_step[name] for name in names]).tolist()
        bad = [step for step in steps if step >= 0]
        if not bad:
            return
        step = int(min(bad))
        values = torch.stack([self.value[name] for name in names]).tolist()
        parts = [name for name, first in zip(names, steps, strict=True) if first == step and name != "loss"]
        shown = ", ".join(
            f"{name}={value:.4g}" for name, value, first in zip(names, values, steps, strict=True) if first == step
        )
        where = f" (the run is now at epoch {epoch:.2f})" if epoch is not None else ""
        raise FloatingPointError(
            f"Non-finite loss at step {step}{where} in {', '.join(parts) or 'loss'}: "
            f"{shown}. Lower the learning rate or warm it up longer, use bf16 rather than fp16, or check the batch "
            "for empty or corrupt examples; resume from the last checkpoint."
        )
