"""ContrastiveTrainer: the transformers Trainer computing the model's MLM + contrastive objective."""

from __future__ import annotations

import dataclasses
import inspect
import itertools
import logging
import math
import os
import warnings
import weakref

import torch
from safetensors.torch import load_file, save_file
from transformers import Trainer, TrainerCallback
from transformers.trainer_utils import has_length

from .._files import hub_id_or_none
from ..data.collators import CollatorEpochCallback
from ..data.mixture import DATASET_KEY, DatasetMixture, mixture_dataloader
from ..data.streams import data_counts_logger
from ..evaluation.training import TrainingEvalSet
from ..hub.model_card import card_info_from_trainer, write_model_card
from ..models.checkpoint_files import EmbeddingCheckpointMixin, make_tokenizer_config_portable
from ..models.distributed import gather_sizes
from ..models.encoding import SentenceEmbeddingMixin
from ..models.end_of_sequence import append_eos_token
from ..models.losses import alignment, uniformity
from ..models.objectives import ContrastiveLoss, build_registered_loss
from ..models.poolers import POOLERS, get_pooler
from ..models.precision import Precision, log_precision_once
from .deepspeed_weights import SavesMasterWeights, ZeroCannotSaveError
from .grad_cache import GradCacheModel, chunk_backward, chunk_count, grad_cache_step
from .progress import show_losses_on_progress_bar
from .resuming import CheckedResume
from .sanity import NonFiniteLossWatch, TrainingSanityCallback, check_training_setup
from .training_args import ContrastiveTrainingArguments, SecretFreeOutputs, arguments_set

__all__ = ["ContrastiveTrainer", "LOSS_COMPONENTS", "STEP_METRICS", "LOSS_STATE_FILE", "means_over_processes"]

logger = logging.getLogger(__name__)

# The loss's state in a checkpoint (`ContrastiveLoss.loss_state`: its pre-batch queue), for an exact resume; the
# name checkpoints have always had
LOSS_STATE_FILE = "prebatch_queue.safetensors"

# Logged beside `loss`, each averaged over the steps since the last log and over processes: the parts of the
# objective (unweighted; `loss` is their weighted sum), the alignment and uniformity of the training embeddings
# (Wang & Isola, 2020: query vs positive views, and the queries), the negatives each query was contrasted with, and
# how full the pre-batch queue is; training on a `DatasetMixture`, also ``cl_loss_<name>``, each dataset's
# contrastive loss over its steps since the last log.
LOSS_COMPONENTS = ("mlm_loss", "cl_loss")
STEP_METRICS = (*LOSS_COMPONENTS, "alignment", "uniformity", "negatives_per_query", "queue_fill")


class ContrastiveTrainer(CheckedResume, SecretFreeOutputs, SavesMasterWeights, Trainer):
    """A `Trainer` for [`ContrastiveForPreTraining`]-style models.

    `compute_loss` runs the model's objective (L = mlm_weight * L_MLM + cl_weight * L_CL) and the trainer logs
    `STEP_METRICS` (``mlm_loss``, ``cl_loss``, ``alignment``, ``uniformity``, ``negatives_per_query``,
    ``queue_fill``), averaged over the steps since the last log and over processes, beside ``loss``. A loss that is
    NaN or infinite stops training with an error naming the step and the part of the loss. Use it with
    `ContrastiveTrainingArguments` and `ContrastiveDataCollator` (or `PairCollator`).

    Negatives: the other sentences of the global batch (gathered from every process), hard negatives when the batch
    has a third view, and with ``prebatch_size`` the keys of earlier batches; identical sentences (``sentence_ids``)
    are never each other's negatives. With ``grad_cache_chunk_size`` the batch is encoded in chunks (GradCache,
    `contrastive_hf.training.grad_cache`): the loss and gradients of the whole batch for the memory of one chunk.

    The contrastive loss is the model's ``loss_fn`` (`models.objectives.ContrastiveLoss`, built from its config);
    ``loss=`` hands the model another (e.g. ``NTXentLoss(temperature=0.1)`` for DPR's two towers, or a
    ``MatryoshkaLoss`` of a loss of one's own). The trainer tells the loss once whether to gather the views of every
    process (``gather_negatives_across_devices`` with several processes) and whether to keep a pre-batch queue
    (``prebatch_size``: `ContrastiveLoss.use_prebatch`); the loss owns its state, and the trainer only tells it the
    steps and epochs, logs its `step_metrics` and saves and restores its `loss_state` with each checkpoint.

    STS evaluation during training, as SimCSE selects checkpoints: an `STSData` among the eval datasets, e.g.
    ``eval_dataset={"stsb": read_stsbenchmark("sts-dev.csv")}``, is scored every ``eval_steps`` (cosine similarity,
    Spearman x 100, plus alignment and uniformity) and logged as ``eval_stsb_spearman``, ``eval_stsb_pearson``,
    ``eval_stsb_alignment`` and ``eval_stsb_uniformity``; so ``metric_for_best_model="eval_stsb_spearman"`` with
    ``load_best_model_at_end=True`` keeps the best checkpoint. A `RetrievalData` eval set (dual encoders) is scored
    the same way, as ``eval_<name>_recall@k`` and ``eval_<name>_mrr``. Other eval datasets get the Trainer's
    evaluation: the loss, and the trainer's ``compute_metrics`` when it has one (run_mlm.py's MLM accuracy, from
    `ContrastiveForPreTraining`'s MLM ``logits``).
    """

    # The metrics `log` reports (see STEP_METRICS); a subclass adds names here, and any model-output field of that
    # name is averaged and logged the same way.
    step_metrics = STEP_METRICS

    # What the model card says about the run (a `ModelCardInfo`: method, views, data, results); set it before
    # `create_model_card` or `push_to_hub`.
    model_card_info = None

    def __init__(self, *args, loss: torch.nn.Module | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        bf16 = bool(self.args.bf16)
        reason = getattr(self.args, "precision_reason", "") or f"bf16={bf16} in the training arguments"
        log_precision_once(self, "Training", Precision(bf16, reason))
        self._metric_sums: dict[str, torch.Tensor] = {}
        self._nonfinite = NonFiniteLossWatch()
        self._metric_counts: dict[str, int] = {}
        # the training iterator `get_batch_samples` last read from, not kept alive by it: the Trainer drops an epoch's
        # iterator when the epoch or the run ends, which shuts its dataloader workers down then (kept, those of a
        # stream outlived `train()` until the garbage collector found them, and its shutdown waited 5 s per worker)
        self._epoch_iterator = lambda: None
        show_losses_on_progress_bar(self, ("loss", *LOSS_COMPONENTS))
        if hasattr(self.data_collator, "set_epoch"):  # new views each epoch, the same ones when resuming
            self.add_callback(CollatorEpochCallback(self.data_collator))
        unwrapped = self.accelerator.unwrap_model(self.model)
        # read once: unwrapping the model at every step costs a millisecond (accelerate reads package metadata)
        self._view_input_names = getattr(unwrapped, "view_input_names", ("input_ids",))
        self._scores_tokens_on_request = "return_mlm_logits" in inspect.signature(unwrapped.forward).parameters
        if isinstance(unwrapped, SentenceEmbeddingMixin) and unwrapped.tokenizer is None:
            # `encode` uses it, and a two-tower checkpoint saves it beside each tower
            unwrapped.tokenizer = getattr(self.processing_class, "tokenizer", self.processing_class)
        _append_eos_where_pooled(unwrapped, self.processing_class, self.data_collator)
        self.loss_fn = _contrastive_loss(unwrapped, loss)
        if self.loss_fn is not None:  # exact global-batch negatives (distributed.py)
            gather = self.args.world_size > 1 and self._option("gather_negatives_across_devices")
            self.loss_fn.gather_across_devices = gather
        if self._option("prebatch_size"):
            if not isinstance(self.loss_fn, ContrastiveLoss):
                own = type(self.loss_fn).__name__
                raise ValueError(f"--prebatch_size needs a contrastive loss (models.objectives.ContrastiveLoss) to "
                                 f"queue keys for; {type(unwrapped).__name__}'s is {own}.")  # fmt: skip
            try:
                self.loss_fn.use_prebatch(
                    self._option("prebatch_size"),
                    self._option("prebatch_warmup_steps"),
                    self._option("prebatch_reset_each_epoch"),
                )
            except ValueError as error:
                raise ValueError(
                    f"--prebatch_size: {error} Set it in the model config (--contrastive_loss)."
                ) from None
        if isinstance(self.loss_fn, ContrastiveLoss):  # its state follows the steps and epochs
            self.add_callback(_LossSteps(self.loss_fn))
        if self._option("grad_cache_chunk_size"):
            model = self.accelerator.unwrap_model(self.model)
            if not isinstance(model, GradCacheModel):
                raise ValueError(
                    f"--grad_cache_chunk_size needs a model that implements contrastive_hf.training.grad_cache."
                    f"GradCacheModel (ContrastiveForPreTraining, DualEncoderModel); {type(model).__name__} does not. "
                    "Unset grad_cache_chunk_size."
                )
        check_training_setup(self)  # refuse what can never learn; warn when a logged window shows it has stopped
        self.add_callback(TrainingSanityCallback())
        self._check_zero3_can_save()
        if self.is_deepspeed_enabled:
            quiet_deepspeed_deprecations()
        self._epoch_examples = _EpochExampleCount(self)  # says at each epoch's end how many examples it held
        self.add_callback(self._epoch_examples)

    def _build_accelerator_args(self, **kwargs) -> dict:
        """The Trainer's Accelerator arguments, with ``--torch_compile`` as regional compilation
        (`training_args` docstring): each transformer layer, the embeddings and the heads are compiled, and the step
        around them (packing, pooling, the losses, all driven by host data) runs as written."""
        args = super()._build_accelerator_args(**kwargs)
        plugin = args.get("dynamo_plugin")
        if plugin is not None and self.args.torch_compile:
            plugin.use_regional_compilation = True
        return args

    def _option(self, name: str):
        """A contrastive option of the arguments; its `ContrastiveTrainingArguments` default when the trainer was
        given plain `TrainingArguments` (e.g. dropped into an existing script)."""
        if hasattr(self.args, name):
            return getattr(self.args, name)
        return next(field.default for field in dataclasses.fields(ContrastiveTrainingArguments) if field.name == name)

    def compute_loss(self, model, inputs, return_outputs: bool = False, num_items_in_batch=None):
        outputs = model(**inputs)
        if outputs.loss is None:
            raise ValueError("The model returned no loss: pass its inputs with return_loss=True (the default).")
        if model.training:
            self._check_finite(outputs.loss, {name: getattr(outputs, name, None) for name in LOSS_COMPONENTS})
            self._after_step(outputs, inputs)
        return (outputs.loss, outputs) if return_outputs else outputs.loss

    def training_step(self, model, inputs, num_items_in_batch=None) -> torch.Tensor:
        """The Trainer's step, or with ``grad_cache_chunk_size`` GradCache's chunked forward and backward."""
        self._batch_dataset = inputs.pop(DATASET_KEY, None)  # a `DatasetMixture`'s batch names its dataset
        names = self._view_input_names
        batch_size = next((len(inputs[name]) for name in names if inputs.get(name) is not None), 0)
        self._epoch_examples.count(batch_size)
        chunk_size = self._option("grad_cache_chunk_size")
        if not chunk_size:
            return super().training_step(model, inputs, num_items_in_batch)
        # Every process takes the same path, and runs as many chunks as the others: their passes are collective.
        batch_sizes = gather_sizes(batch_size, self.args.device)
        if chunk_count(batch_sizes, chunk_size) <= 1:  # one chunk everywhere: the plain step, without the second pass
            return super().training_step(model, inputs, num_items_in_batch)
        model.train()
        if hasattr(self.optimizer, "train") and callable(self.optimizer.train):
            self.optimizer.train()
        inputs = self._prepare_inputs(inputs)
        scale = 1.0 / self.current_gradient_accumulation_steps  # as the Trainer scales the loss it back-propagates
        # The replayed passes go through the prepared model, whose forward accelerate runs under the run's autocast;
        # the first pass calls the bare model, so the same autocast is entered here: both passes then compute the
        # same embeddings (bf16 included), and the cached gradients are those of the replay.
        with self.compute_loss_context_manager(), self.accelerator.autocast():
            result = grad_cache_step(
                model,
                self.accelerator.unwrap_model(model),
                inputs,
                chunk_size,
                backward=chunk_backward(self.accelerator, model),
                loss_scale=scale,
                check_finite=lambda parts: self._check_finite(None, parts),
                batch_sizes=batch_sizes,
            )
        self._after_step(result, inputs)
        return result.loss * scale

    def _check_finite(self, loss: torch.Tensor | None, parts: dict[str, torch.Tensor | None]) -> None:
        """Note a NaN or infinite loss on the device (`sanity.NonFiniteLossWatch`): training stops at the next log,
        naming the step and the part of the loss that went wrong, without reading the loss back at every step."""
        self._nonfinite.record(self.state.global_step + 1, {**parts, "loss": loss})

    @torch.no_grad()
    def _after_step(self, outputs, inputs) -> None:
        """Record the step's metrics (on the device)."""
        embeddings = outputs.embeddings
        metrics = {name: getattr(outputs, name, None) for name in self.step_metrics}
        if embeddings is not None and embeddings.dim() == 3 and embeddings.shape[1] >= 2:
            metrics["alignment"] = alignment(embeddings[:, 0], embeddings[:, 1])
            if embeddings.shape[0] >= 2:
                metrics["uniformity"] = uniformity(embeddings[:, 0])
        if self._loss_metrics:
            metrics.update(self.loss_fn.step_metrics())  # host numbers
        dataset = getattr(self, "_batch_dataset", None)
        if dataset is not None and getattr(outputs, "cl_loss", None) is not None:
            metrics[f"cl_loss_{dataset}"] = outputs.cl_loss  # every process draws the same dataset at a step
        for name, value in metrics.items():
            if value is not None:  # accumulated where it is (a tensor on the device): no host sync per step
                value = value.detach().float() if torch.is_tensor(value) else float(value)
                self._metric_sums[name] = self._metric_sums.get(name, 0.0) + value
                self._metric_counts[name] = self._metric_counts.get(name, 0) + 1

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        self._nonfinite.raise_if_any(self.state.epoch)  # the trainer reads values back here anyway
        if "loss" in logs:
            logs.update(self._gathered_step_metrics())
        super().log(logs, start_time)

    def _gathered_step_metrics(self) -> dict[str, float]:
        """Each step metric's mean over the steps of every process since the last log (`means_over_processes`): a
        process may lack a metric another has (uniformity needs two rows in a batch)."""
        names = list(self.step_metrics)
        if self._loss_metrics:  # the same loss, so the same names, on every process
            names += [name for name in self.loss_fn.step_metrics() if name not in names]
        if isinstance(self.train_dataset, DatasetMixture):  # every process knows every dataset's name
            names += [f"cl_loss_{name}" for name in self.train_dataset.names]
        means = means_over_processes(self.accelerator, names, self._metric_sums, self._metric_counts, self.args.device)
        self._metric_sums, self._metric_counts = {}, {}
        return means

    def get_train_dataloader(self):
        """The Trainer's training dataloader, refused when the processes would get different numbers of batches per
        epoch (``accelerator_config.even_batches=False`` with a batch count that does not divide by the number of
        processes): one would then wait forever for the others in the gather of negatives or of gradients."""
        if isinstance(self.train_dataset, DatasetMixture):  # one dataset per batch, the same on every process
            dataloader = mixture_dataloader(self)
        else:
            dataloader = super().get_train_dataloader()
        if self.args.world_size > 1 and has_length(dataloader):
            counts = gather_sizes(len(dataloader), self.args.device)
            if len(set(counts)) > 1:
                raise ValueError(
                    f"The processes would get {' / '.join(map(str, counts))} training batches per epoch (process 0 "
                    f"first): accelerator_config even_batches=False leaves the last batches of an epoch to some "
                    "processes only, and the others would wait for them forever. Keep even_batches true (the default: "
                    "the last batches are completed with examples from the start of the data), or set "
                    "--dataloader_drop_last true."
                )
        return dataloader

    def get_batch_samples(self, epoch_iterator, num_batches: int, device: torch.device):
        """The next ``num_batches`` training batches; from a stream (an iterable dataset) on several processes, the
        same number on every process, the fewest any has.

        A process that runs out of batches while the others still have some would otherwise leave them waiting
        forever in the next gather: here every process stops the epoch together. A process with no batch at all at
        the start of an epoch, while others have some (its shards of the stream hold no example), is an error
        raised on every process at once.
        """
        if self.args.world_size == 1 or not isinstance(self.train_dataset, torch.utils.data.IterableDataset):
            return super().get_batch_samples(epoch_iterator, num_batches, device)
        batches = list(itertools.islice(epoch_iterator, num_batches))
        counts = gather_sizes(len(batches), device)  # one tiny collective per optimisation step
        starting = epoch_iterator is not self._epoch_iterator()
        try:
            self._epoch_iterator = weakref.ref(epoch_iterator)
        except TypeError:  # an iterator that takes no weak reference (a list's, not the Trainer's): kept
            self._epoch_iterator = lambda: epoch_iterator
        if starting and min(counts) == 0 < max(counts):
            raise RuntimeError(self._no_batch_message(counts))
        batches = batches[: min(counts)]
        return super().get_batch_samples(iter(batches), len(batches), device)

    def _no_batch_message(self, counts: list[int]) -> str:
        """What went wrong when some processes have no training batch at all, naming them."""
        empty = [index for index, count in enumerate(counts) if count == 0]
        return (
            f"No training example on process(es) {', '.join(map(str, empty))} of {len(counts)}, while the others "
            "have some: the part of the stream each of them reads holds none (the log names its lines or shards, "
            "files and byte ranges). A plain-text file is cut into parts of equal line counts, so one of fewer lines "
            "than readers (processes times dataloader workers) leaves some without any; another corpus is cut into "
            "whole files. Stopping every process: give a corpus with more lines, train on fewer processes, or train "
            "without --streaming."
        )

    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval") -> dict[str, float]:
        """Score an eval set that scores itself (a `TrainingEvalSet`: `STSData`, `RetrievalData`); anything else
        goes to `Trainer.evaluate` (a dict of eval datasets comes back here once per name, with the name in
        ``metric_key_prefix``)."""
        dataset = self.eval_dataset if eval_dataset is None else eval_dataset
        if isinstance(dataset, str) and isinstance(self.eval_dataset, dict):
            dataset = self.eval_dataset[dataset]
        if not isinstance(dataset, TrainingEvalSet):
            return super().evaluate(eval_dataset, ignore_keys=ignore_keys, metric_key_prefix=metric_key_prefix)
        metrics = dataset.training_metrics(
            self.model, self.processing_class, self.args.per_device_eval_batch_size, metric_key_prefix
        )
        self.log(metrics)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
        return metrics

    def prediction_step(self, model, inputs, prediction_loss_only: bool, ignore_keys=None):
        """The Trainer's evaluation step. A model that scores every token for metrics when evaluated (the MLM
        ``logits`` of `ContrastiveForPreTraining`, as transformers' masked-LM models return them for
        ``compute_metrics``) is asked not to when the evaluation reports the loss only (``prediction_loss_only``,
        and any evaluation without ``compute_metrics``): the same loss, without a vocabulary-wide score per token."""
        if prediction_loss_only and self._scores_tokens_on_request:
            inputs = {**inputs, "return_mlm_logits": False}
        return super().prediction_step(model, inputs, prediction_loss_only, ignore_keys=ignore_keys)

    def create_model_card(
        self,
        language: str | list[str] | None = None,
        license: str | None = None,
        tags: str | list[str] | None = None,
        model_name: str | None = None,
        finetuned_from: str | None = None,
        tasks: str | list[str] | None = None,
        dataset_tags: str | list[str] | None = None,
        dataset: str | list[str] | None = None,
        dataset_args: str | list[str] | None = None,
        output_dir: str | None = None,
    ) -> None:
        """Write contrastive_hf's model card (README.md in ``output_dir``, by default the arguments') instead of the
        Trainer's generic one.

        `push_to_hub` calls this before uploading. The card states the method and its paper, base model, views,
        objective, temperature, negatives, data, hyper-parameters, hardware, framework versions and results, and how
        to load the checkpoint. It is built from the run itself (`hub.model_card.card_info_from_trainer`) unless a
        script set ``model_card_info``; the Trainer's arguments add to it: ``language``, ``license``, ``tags``,
        ``finetuned_from`` (a Hub id; a local path, as run_mlm.py passes its ``--model_name_or_path``, is not
        written: the card's ``base_model`` names a Hub model or nothing), ``dataset_tags`` (Hub ids of the training
        data) and ``dataset`` (its name in words). ``tasks`` and ``dataset_args`` are the Trainer's and not used.
        """
        if not self.is_world_process_zero():
            return None
        info = self.model_card_info or card_info_from_trainer(self, model_name)
        as_list = lambda value: [value] if isinstance(value, str) else list(value or [])  # noqa: E731
        info = dataclasses.replace(
            info,
            world_size=self.args.world_size,
            negatives_gathered=getattr(self.args, "gather_negatives_across_devices", False),
            zero_stage=self._zero_stage(),
            prebatch_size=self._option("prebatch_size"),
            repo_id=self.args.hub_model_id or info.repo_id,
            model_name=model_name or info.model_name,
            license=license or info.license,
            language=language or info.language,
            tags=[*info.tags, *as_list(tags)],
            base_model=hub_id_or_none(finetuned_from) or info.base_model,
            datasets=[*info.datasets, *as_list(dataset_tags)],
            training_data=", ".join(as_list(dataset)) or info.training_data,
        )
        write_model_card(output_dir or self.args.output_dir, self.saved_model(), info)
        return None

    def init_hf_repo(self, *args, **kwargs) -> None:
        """Create the Hub repository (at construction when `push_to_hub=True`), with an error that says what to do.
        Arguments as the installed `Trainer.init_hf_repo`'s: ``token``, and ``private`` from transformers 5.23 on."""
        try:
            super().init_hf_repo(*args, **kwargs)
        except Exception as error:
            raise RuntimeError(
                f"Could not create the Hub repository {self.args.hub_model_id or self.args.output_dir!r} "
                f"({type(error).__name__}: {error}). Check --hub_token (or `hf auth login`) and the network, or run "
                "without --push_to_hub and upload the output directory later. Nothing has been trained or written yet."
            ) from error

    def _init_training_state(self, max_steps, *args, **kwargs):
        """The Trainer's state, fresh or read from the checkpoint resumed, with the logging, eval and save steps given
        as a fraction of the run (``--logging_steps 0.02``, the default) resolved to steps first, as the state
        stores them: resuming then compares like with like, and transformers warns of a mismatch only when the
        resolved steps differ (not ``logging_steps: 0.02 (from args) != 1`` at every resume)."""
        with arguments_set(self.args, **_resolved_step_fractions(self.args, max_steps)):
            return super()._init_training_state(max_steps, *args, **kwargs)

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        """`Trainer.save_model` (under DeepSpeed, the float32 master weights: `SavesMasterWeights`), and when called
        by the user its model card beside the model (`create_model_card`; a checkpoint, a push and the example
        scripts write theirs themselves)."""
        super().save_model(output_dir, _internal_call=_internal_call)
        if not _internal_call:
            self.create_model_card(output_dir=output_dir)

    def _save(self, output_dir: str | None = None, state_dict=None) -> None:
        """The Trainer's save (the model, the tokenizer, the arguments), with a tokenizer configuration that
        transformers 4.x reads too (`models.checkpoint_files.make_tokenizer_config_portable`), rewritten by the
        process that wrote it: the others only join what the save gathers, and would read the file while it is
        written."""
        super()._save(output_dir, state_dict=state_dict)
        if self.args.should_save:
            make_tokenizer_config_portable(output_dir if output_dir is not None else self.args.output_dir)

    def _save_checkpoint(self, model, trial) -> None:
        """The checkpoint (`CheckedResume`); a run whose loss went NaN since the last log stops before saving its
        weights."""
        self._nonfinite.raise_if_any(self.state.epoch)
        super()._save_checkpoint(model, trial)

    @property
    def _loss_has_state(self) -> bool:
        return bool(getattr(self.loss_fn, "has_state", False))

    @property
    def _loss_metrics(self) -> bool:
        return isinstance(self.loss_fn, ContrastiveLoss)

    def checkpoint_extra_files(self) -> tuple[str, ...]:
        return (LOSS_STATE_FILE,) if self._loss_has_state else ()

    def save_checkpoint_extras(self, folder: str) -> None:
        if self._loss_has_state:  # the loss's state (e.g. its queue) is part of an exact resume
            save_file(self.loss_fn.loss_state(), os.path.join(folder, LOSS_STATE_FILE))

    def _load_rng_state(self, checkpoint: str | None) -> None:
        """The random states, and the loss's own state (e.g. its pre-batch queue): the last of a checkpoint's states
        that every resume reads, with DeepSpeed too."""
        super()._load_rng_state(checkpoint)
        path = os.path.join(checkpoint or "", LOSS_STATE_FILE)
        if self._loss_has_state and checkpoint is not None and os.path.isfile(path):
            self.loss_fn.load_loss_state(load_file(path), device=self.args.device)

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model=None) -> None:
        """Resume: a checkpoint in contrastive_hf's layout (the encoder in its own architecture, heads beside it) is
        loaded by the model itself; others (FSDP, peft adapters, 0.1 checkpoints) as transformers loads them."""
        target = self.accelerator.unwrap_model(model if model is not None else self.model)
        if self._loads_own_layout(target, resume_from_checkpoint):
            target.load_saved_weights(resume_from_checkpoint)
            return
        super()._load_from_checkpoint(resume_from_checkpoint, model)

    def _load_best_model(self) -> None:
        target = self.accelerator.unwrap_model(self.model)
        if self.is_deepspeed_enabled or not self._loads_own_layout(target, self.state.best_model_checkpoint):
            return super()._load_best_model()
        logger.info(
            "Loading the best model from %s (score: %s).", self.state.best_model_checkpoint, self.state.best_metric
        )
        target.load_saved_weights(self.state.best_model_checkpoint)

    def _loads_own_layout(self, model, folder: str) -> bool:
        return (
            not self.is_fsdp_enabled
            and isinstance(model, EmbeddingCheckpointMixin)
            and os.path.isfile(os.path.join(folder, model.checkpoint_config_name))
        )

    def _check_zero3_can_save(self) -> None:
        """Refuse, before any training, a DeepSpeed ZeRO-3 run whose model could not be saved. Without
        ``stage3_gather_16bit_weights_on_model_save`` the Trainer has no whole weights to save (it passes an empty
        state dict), and `save_pretrained` refuses to write shards (`PartialWeightsError`): at the first checkpoint,
        or after the last step with the trained weights lost. A peft model is exempt: the Trainer gathers its
        adapter without that setting."""
        plugin = getattr(self.accelerator.state, "deepspeed_plugin", None)
        if plugin is None or plugin.zero_stage != 3 or getattr(self.model, "peft_config", None):
            return
        if not plugin.deepspeed_config.get("zero_optimization", {}).get("stage3_gather_16bit_weights_on_model_save"):
            raise ZeroCannotSaveError(
                'DeepSpeed ZeRO-3 without "stage3_gather_16bit_weights_on_model_save": true cannot save the model: '
                "each process holds only a shard of every weight, and a checkpoint of shards would not load. Set it "
                'to true in the DeepSpeed config\'s "zero_optimization" (as ds_configs/zero3.json does), or '
                "zero3_save_16bit_model: true in the Accelerate config."
            )

    def _zero_stage(self) -> int | None:
        plugin = getattr(self.accelerator.state, "deepspeed_plugin", None)
        return None if plugin is None else plugin.zero_stage


# torch 2.13 deprecates the collectives DeepSpeed 0.19 calls in every ZeRO step (reduce_scatter_tensor,
# all_gather_into_tensor), and the warning is repeated at each call: hundreds of lines per process in a short run,
# which bury the progress bar and the project's own warnings. Only these two messages are filtered.
DEEPSPEED_DEPRECATION_FLOOD = r"`torch\.distributed\.(reduce_scatter_tensor|all_gather_into_tensor)` is deprecated"


def quiet_deepspeed_deprecations() -> None:
    """Filter torch's deprecation warnings for the collectives DeepSpeed calls (`DEEPSPEED_DEPRECATION_FLOOD`)."""
    warnings.filterwarnings("ignore", message=DEEPSPEED_DEPRECATION_FLOOD, category=FutureWarning)


def means_over_processes(accelerator, names, sums: dict, counts: dict, device) -> dict[str, float]:
    """``{name: sum over processes of sums[name] / sum of counts[name]}`` (rounded to 4 places) for each of ``names``
    that some process counted, in one gather of the same shape on every process: a process may lack a name another
    has (a metric that needs two rows, a task it drew no batch of), and gathering per name present would then leave
    the processes in different collectives."""
    local_sums = [torch.as_tensor(sums.get(name, 0.0), device=device).float() for name in names]
    local_counts = torch.tensor([float(counts.get(name, 0)) for name in names], device=device)
    local = torch.stack([torch.stack(local_sums), local_counts])  # (2, names)
    totals = accelerator.gather(local[None]).sum(dim=0).tolist()  # (processes, 2, names) -> (2, names)
    return {name: round(total / count, 4) for name, total, count in zip(names, *totals, strict=True) if count > 0}


def _resolved_step_fractions(args, max_steps: int) -> dict[str, int]:
    """``{"logging_steps": 1, ...}``: each of the logging, eval and save steps given below 1 (a fraction of the run's
    ``max_steps``), in steps, rounded up as `TrainerState.compute_steps` rounds them."""
    resolved = {}
    for name in ("logging_steps", "eval_steps", "save_steps"):
        value = getattr(args, name, None)
        if value is not None and value < 1:
            resolved[name] = math.ceil(max_steps * value)
    return resolved


class _EpochExampleCount(TrainerCallback):
    """Counts the examples each epoch of a map-style training set gives the model, on every process, and says at the
    epoch's end how they compare with the training set (`data_counts_logger`): each once, some again to complete the
    last batches (accelerate's ``even_batches``), some left out (``--dataloader_drop_last``), or an epoch cut short
    by a resume or by ``max_steps``. A stream's passes are counted where they are read (`data.streams.stream_passes`).
    """

    def __init__(self, trainer: ContrastiveTrainer):
        self.trainer = trainer
        self.examples = 0
        self.batches_per_epoch = self.skipped_batches = None

    def count(self, examples: int) -> None:
        self.examples += examples

    def on_train_begin(self, args, state, control, train_dataloader=None, **kwargs):
        self.examples = 0
        if train_dataloader is None or not has_length(train_dataloader) or not has_length(self.trainer.train_dataset):
            return
        self.batches_per_epoch = len(train_dataloader)  # on each process
        steps_per_epoch = max(self.batches_per_epoch // args.gradient_accumulation_steps, 1)
        self.skipped_batches = (state.global_step % steps_per_epoch) * args.gradient_accumulation_steps  # resumed

    def on_epoch_end(self, args, state, control, **kwargs):
        if self.batches_per_epoch is None:
            return
        examples = sum(gather_sizes(self.examples, args.device))  # every process ends the epoch at the same step
        batches = round(state.epoch * self.batches_per_epoch) % self.batches_per_epoch or self.batches_per_epoch
        size, epoch = len(self.trainer.train_dataset), int(-(-state.epoch // 1))
        if self.skipped_batches:
            cut = f"resumed after {self.skipped_batches} of its {self.batches_per_epoch} batches per process"
        elif batches < self.batches_per_epoch:
            cut = f"ended by max_steps after {batches} of its {self.batches_per_epoch} batches per process"
        else:
            cut = None
        if cut:
            message = f"Epoch {epoch} ({cut}): {examples:,} examples."
        elif examples == size:
            message = f"Epoch {epoch}: {examples:,} examples, all {size:,} of the training set once."
        elif examples > size:
            message = (
                f"Epoch {epoch}: {examples:,} examples, the {size:,} of the training set once and {examples - size:,} "
                "of them again to complete the last batch of each process (accelerate's even_batches)."
            )
        else:
            message = (
                f"Epoch {epoch}: {examples:,} examples of the {size:,} of the training set; {size - examples:,} left "
                "out (--dataloader_drop_last drops each process's incomplete last batch)."
            )
        if self.trainer.is_world_process_zero():
            data_counts_logger.info(message)
        self.examples, self.skipped_batches = 0, None


class _LossSteps(TrainerCallback):
    """Tells the loss which optimisation step and epoch begin (`ContrastiveLoss.on_step_begin`, `on_epoch_begin`:
    e.g. its pre-batch queue's warm-up and reset)."""

    def __init__(self, loss: ContrastiveLoss):
        self.loss = loss

    def on_step_begin(self, args, state, control, **kwargs):
        self.loss.on_step_begin(state.global_step)

    def on_epoch_begin(self, args, state, control, **kwargs):
        self.loss.on_epoch_begin()


def _append_eos_where_pooled(model, *holders) -> None:
    """The end-of-sequence rule (`models.end_of_sequence`): a model pooling its last token trains on texts ending
    with the tokenizer's eos_token, so the tokenizers of ``holders`` (the processing class, the collator) append it."""
    owner = model.get_base_model() if hasattr(model, "get_base_model") else model
    pooler_type = getattr(getattr(owner, "config", None), "pooler_type", None)
    if pooler_type is None or pooler_type not in POOLERS or not get_pooler(pooler_type).reads_end_of_sequence:
        return
    tokenizers = {}
    for holder in holders:
        tokenizer = getattr(holder, "tokenizer", holder)
        if tokenizer is not None and callable(tokenizer) and hasattr(tokenizer, "all_special_ids"):
            tokenizers[id(tokenizer)] = tokenizer
    for tokenizer in tokenizers.values():
        append_eos_token(tokenizer)


def _contrastive_loss(model, loss: torch.nn.Module | None) -> torch.nn.Module | None:
    """The loss the model computes (its ``loss_fn``): ``loss`` when the trainer was handed one; the one its config
    names when it was registered after the model was built; None for a model without one (a plain transformers
    model, the multitask model)."""
    owner = model.get_base_model() if hasattr(model, "get_base_model") else model  # a peft model's base
    if loss is not None:
        if not hasattr(owner, "loss_fn"):
            raise ValueError(
                f"ContrastiveTrainer(loss=...) replaces the contrastive loss a model holds as its loss_fn "
                f"(ContrastiveForPreTraining, DualEncoderModel, SelfGuidedModel); {type(owner).__name__} has none."
            )
        owner.loss_fn = loss
    current = getattr(owner, "loss_fn", None)
    config = getattr(owner, "config", None)
    if current is None and hasattr(owner, "loss_fn") and getattr(config, "contrastive_loss", None) is not None:
        owner.loss_fn = current = build_registered_loss(config)
    return current
