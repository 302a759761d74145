"""TrainingArguments for contrastive training."""

from __future__ import annotations

import copyreg
import os
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from transformers import TrainingArguments
from transformers.trainer import TRAINER_STATE_NAME
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from ..models.precision import Precision, training_precision

__all__ = [
    "ContrastiveTrainingArguments",
    "RunDefaults",
    "arguments_set",
    "SecretFreePickle",
    "SecretFreeOutputs",
    "secret_free",
    "without_local_paths",
]


def without_local_paths(value):
    """``value`` with every absolute local path (in strings, lists and dicts) replaced by its base name: what a
    saved or pushed file may say about where a run lived on its machine."""
    if isinstance(value, str):
        return os.path.basename(os.path.normpath(value)) if os.path.isabs(value) else value
    if isinstance(value, dict):
        return {key: without_local_paths(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(without_local_paths(item) for item in value)
    return value


class SecretFreePickle:
    """Training arguments that pickle (``training_args.bin``, which the Trainer saves with every checkpoint and
    pushes to the Hub) without secrets: every ``*token*`` field is written as None and every absolute local path as
    its base name. The object in memory keeps both (a push needs the token). Unpickling gives the arguments' own
    class, so reading a ``training_args.bin`` needs nothing of this package beyond that class."""

    def __reduce_ex__(self, protocol):
        state = {
            name: None if "token" in name and isinstance(value, str) else without_local_paths(value)
            for name, value in vars(self).items()
        }
        cls = getattr(type(self), "_secret_free_original", type(self))
        # the standard library's own reconstructor (pickle's for plain classes): loading needs only ``cls``
        return copyreg._reconstructor, (cls, object, None), state


def secret_free(args: TrainingArguments) -> TrainingArguments:
    """Make ``args`` (any `TrainingArguments`, e.g. given to `ContrastiveTrainer` by an existing script) pickle
    without secrets (`SecretFreePickle`), in place; returns it."""
    if not isinstance(args, SecretFreePickle):
        original = type(args)
        args.__class__ = type(
            original.__name__,
            (SecretFreePickle, original),
            {"_secret_free_original": original, "__module__": original.__module__},
        )
    return args


@contextmanager
def arguments_set(args, **values):
    """Training arguments set to ``values`` while the context lasts."""
    saved = {name: getattr(args, name) for name in values}
    for name, value in values.items():
        setattr(args, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(args, name, value)


class SecretFreeOutputs:
    """Trainer mixin: nothing the Trainer writes into ``output_dir`` (and pushes from it) holds the Hub token or an
    absolute local path: ``training_args.bin`` pickles without them (`secret_free`), and every ``trainer_state.json``
    (the run's and each checkpoint's) names the best checkpoint by its folder name, which a resumed run finds beside
    the checkpoint it resumes (`checkpoints.recorded_best_checkpoint`)."""

    def __init__(self, *args, **kwargs):
        training_args = kwargs.get("args", args[1] if len(args) > 1 else None)
        if training_args is not None:
            secret_free(training_args)
        super().__init__(*args, **kwargs)

    def save_state(self) -> None:
        best = self.state.best_model_checkpoint
        self.state.best_model_checkpoint = without_local_paths(best)
        try:
            super().save_state()
        finally:
            self.state.best_model_checkpoint = best

    def _save_checkpoint(self, model, trial) -> None:
        """The Trainer's checkpoint, its ``trainer_state.json`` then written again without local paths, and only
        then pushed (the Trainer would push the first one)."""
        pushing = self.args.push_to_hub
        self.args.push_to_hub = False
        try:
            super()._save_checkpoint(model, trial)
        finally:
            self.args.push_to_hub = pushing
        folder = os.path.join(self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
        state_file = os.path.join(folder, TRAINER_STATE_NAME)
        if self.args.should_save and os.path.isfile(state_file):
            best = self.state.best_model_checkpoint
            self.state.best_model_checkpoint = without_local_paths(best)
            try:
                self.state.save_to_json(state_file)
            finally:
                self.state.best_model_checkpoint = best
        if pushing:
            self._push_from_checkpoint(folder)


@dataclass
class RunDefaults:
    """What this package's training arguments change in `TrainingArguments` for every run: losses logged often
    enough to plot (every 2% of the steps), no pinned memory without an accelerator (torch warns about it at every
    DataLoader), and a resume that would train other rows than the saved run refused unless asked for
    (``resume_with_changed_data``). It goes before `TrainingArguments` among the bases:
    ``A(RunDefaults, TrainingArguments)``."""

    logging_steps: float = field(
        default=0.02,
        metadata={
            "help": "Log the losses every N steps, or, below 1, every this fraction of the run: the default logs "
            "every 2%% of the steps, 50 points for `contrastive-hf plot` however long the run (transformers: 500)."
        },
    )
    resume_with_changed_data: bool = field(
        default=False,
        metadata={
            "help": "Resume even when the training data, its views (--augmentations, --max_seq_length), the seed or "
            "the data layout (processes, batch size, gradient accumulation) differ from the checkpoint's. The "
            "Trainer resumes by skipping the steps already taken in batches of the new data, so some rows of that "
            "epoch go untrained and others train twice: the log says how many. Without it such a resume is refused."
        },
    )

    def __post_init__(self):
        super().__post_init__()
        if self.dataloader_pin_memory and not torch.accelerator.is_available():
            self.dataloader_pin_memory = False


@dataclass
class ContrastiveTrainingArguments(SecretFreePickle, RunDefaults, TrainingArguments):
    """`TrainingArguments` with defaults suited to contrastive training.

    Gradient accumulation with in-batch negatives: each micro-batch is its own contrastive problem, so a query's
    negatives are the other sentences of its micro-batch (times the number of processes), not of the accumulated
    batch. To train with the negatives of a large batch on little memory, use ``grad_cache_chunk_size`` instead.

    The loss hyper-parameters (temperature, mlm_weight, cl_weight, hard_negative_weight) live in the model's
    `ContrastiveConfig`, their single source of truth, and travel with the checkpoint.

    The ``training_args.bin`` written with every checkpoint holds no ``--hub_token`` and no absolute local path
    (`SecretFreePickle`).

    Evaluation: ``prediction_loss_only`` keeps transformers' default (False), so a ``compute_metrics`` given to the
    trainer runs (run_mlm.py's MLM accuracy, from the model's MLM ``logits``); without one the Trainer gathers no
    predictions and reports the loss. Eval sets that score the model themselves (`STSData`, `RetrievalData`) are
    scored as they say, whatever this is.

    Precision: ``bf16`` left unset (None) is decided by the device (`models.precision.training_precision`): bf16
    autocast on a GPU of compute capability 8.0 or later and on a CPU with bf16 matrix instructions (AMX or AVX-512
    BF16), float32 elsewhere; DeepSpeed's ``"auto"`` follows the decision; ``precision_reason`` says why, and the
    trainer logs it. ``--bf16`` also runs on a machine without an accelerator when ``--use_cpu`` is not given (the
    CPU is the device there, DeepSpeed's CPU accelerator included).
    """

    # Annotated bool, though unset is None, so that HfArgumentParser takes a bare --bf16 as transformers' flag (a
    # `bool | None` field would need a value); __post_init__ decides what None means.
    bf16: bool = field(
        default=None,
        metadata={
            "help": "bf16 mixed precision (autocast to bfloat16, float32 master weights; similarities, logits and "
            "losses in float32). Default: bf16 where the device computes it natively, a GPU of compute capability "
            "8.0 or later or a CPU with bf16 matrix instructions (AMX or AVX-512 BF16): faster at float32's quality "
            "(docs/benchmarks.md); float32 elsewhere. --bf16 true or false forces either."
        },
    )

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
    # Why this run computes in its precision (`training_precision`): set from ``bf16``, logged by the trainer.
    precision_reason: str = field(init=False, default="", repr=False)

    def __post_init__(self):
        precision = self._precision()
        self.precision_reason = precision.reason
        self.bf16 = precision.bf16
        super().__post_init__()  # with bf16 decided: accelerate's mixed precision and DeepSpeed's "auto" follow it
        if self.fsdp and self.use_cpu:
            # accelerate runs FSDP on accelerators only: on CPU processes it would train with DDP, the setting unused
            raise ValueError(
                "--fsdp shards the weights across accelerators, and accelerate runs it on GPUs only: with --use_cpu "
                "the run would train with DistributedDataParallel and leave --fsdp unused. Drop --fsdp to train on "
                "CPUs, or run on GPUs without --use_cpu (DeepSpeed ZeRO-3 also shards on CPU processes)."
            )
        for name in ("grad_cache_chunk_size", "prebatch_size", "prebatch_warmup_steps"):
            if getattr(self, name) < 0:
                raise ValueError(f"--{name} must be >= 0 (0 turns it off), got {getattr(self, name)}.")

    def _validate_args(self):
        """transformers' checks, less its refusal of bf16 without ``--use_cpu`` where there is no accelerator: the
        CPU is the device there (DeepSpeed's CPU accelerator included), and computes bf16."""
        cpu_is_the_device = self.bf16 and not torch.accelerator.is_available()
        if cpu_is_the_device:
            self.bf16 = False
        try:
            super()._validate_args()
        finally:
            self.bf16 = self.bf16 or cpu_is_the_device

    def _precision(self) -> Precision:
        """`training_precision` of these arguments: ``bf16`` as given; when unset, ``--fp16`` or a launcher's mixed
        precision (``accelerate launch --mixed_precision``) where given, else the device's default."""
        launcher = os.environ.get("ACCELERATE_MIXED_PRECISION", "no")
        if self.bf16 is None and self.fp16:
            return Precision(False, "--fp16 was given")
        if self.bf16 is None and launcher in ("fp16", "bf16"):
            return Precision(launcher == "bf16", f"the launcher's mixed precision is {launcher}")
        on_cpu = self.use_cpu or not torch.accelerator.is_available()
        device = "cpu" if on_cpu else torch.accelerator.current_accelerator()  # the process's own device
        return training_precision(self.bf16, device)
