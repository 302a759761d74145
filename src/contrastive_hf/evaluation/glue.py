"""GLUE (Wang et al., 2019) as CLEAR reports it: the checkpoint fine-tuned on each task with the transformers
`Trainer`, a fresh classification head (a regression head for STS-B) per task, scored on the task's dev set. The
tasks and their metrics are `glue_tasks.py`; reading GLUE's files or the Hub's copy, `glue_data.py`; this module
fine-tunes, selects over seeds and summarises.

**Protocol**: RoBERTa's single-task dev setting (Liu et al., 2019, arXiv 1907.11692, §5.1, Appendix C, Tables 9
and 10; the same values in fairseq's ``examples/roberta/README.glue.md``):

- a grid of learning rates {1e-5, 2e-5, 3e-5} x batch sizes {16, 32};
- 10 epochs; linear warm-up over the first 6% of the steps, then linear decay to 0; weight decay 0.1; Adam with
  beta1 0.9, beta2 0.98, epsilon 1e-6 and no gradient clipping (RoBERTa's pre-training values, which its
  fine-tuning keeps); the encoder's own dropout (0.1 in BERT and RoBERTa);
- early stopping on the task's dev metric: each run scores dev after every epoch and keeps its best epoch;
- five seeds per configuration (each seed draws the head's initial weights and the order of the training data);
  the configuration with the best median over the seeds is chosen, and its median is the task's score, reported
  with its spread over the seeds (min, max, standard deviation) and every run's figures.

Every value is a field of `GlueArguments`, so any can be overridden (``contrastive-hf evaluate --learning-rates 2e-5
--train-batch-sizes 32 --seeds 0 1``: `commands/glue_options.py`). The whole grid is 30 runs per task: on a CPU, run
one configuration, few seeds and ``max_train_samples`` (a fixed random subset of the training set, drawn with
``subset_seed``, the same for every run; run_glue.py's first rows would be one genre of STS-B, whose files are sorted
by genre). Dev figures from a subset of the training data, or from fewer epochs, seeds or configurations, are not
comparable with the papers'.

**Heads** (``head``):

- ``encoder`` (default): `AutoModelForSequenceClassification`, the encoder architecture's own head (BERT: [CLS], the
  pooler's dense layer and tanh, dropout, a linear layer; RoBERTa: <s>, dense, tanh, linear). It is what CLEAR,
  RoBERTa and transformers' run_glue.py fine-tune, so its figures compare with theirs.
- ``embedding``: `ContrastiveForSequenceClassification`, a linear layer (after dropout) on the checkpoint's own
  sentence embedding: its pooler, and its projection when kept at inference. It measures the trained sentence
  embedding as the input of a classifier. A checkpoint that is not contrastive_hf's is pooled as its
  sentence-transformers Pooling module says (mean for all-MiniLM-L6-v2; its Normalize module, a per-example scale,
  is left out), else with ``pooler_type``.

In both, the two sentences of a pair are one input (``[CLS] a [SEP] b [SEP]``), as in the papers.

**Data** (`glue_data.py`): GLUE's own files under ``data_dir``, else the Hub's copy. Every task's data is read and
checked before the first run starts.
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from .glue_data import GLUE_HUB_DATASET, GlueData, load_glue_tasks
from .glue_tasks import GLUE_GROUP, GLUE_TASKS, METRICS, GlueTask, figure_name, glue_task, split_metrics, task_score

__all__ = [
    "HEADS",
    "GlueArguments",
    "build_classifier",
    "fine_tune",
    "summarise_runs",
    "evaluate_glue",
    "glue_card_results",
]

HEADS = ("encoder", "embedding")


def _option(default, help: str, **metadata):
    """A field of `GlueArguments` with its help text (``contrastive-hf evaluate`` names the fields it takes as
    options: `commands.glue_options.GLUE_FLAGS`)."""
    factory = (lambda: default) if isinstance(default, tuple) else None
    metadata = {"help": help, **metadata}
    return field(default_factory=factory, metadata=metadata) if factory else field(default=default, metadata=metadata)


@dataclass
class GlueArguments:
    """How GLUE fine-tunes: RoBERTa's single-task recipe by default (see the module's docstring)."""

    head: str = _option(
        "encoder",
        "encoder: the architecture's own head (CLEAR's, run_glue.py's); embedding: a linear layer on the checkpoint's "
        "sentence embedding.",
        choices=HEADS,
    )
    learning_rates: tuple[float, ...] = _option((1e-5, 2e-5, 3e-5), "Learning rates of the grid.")
    train_batch_sizes: tuple[int, ...] = _option((16, 32), "Training batch sizes of the grid.")
    seeds: tuple[int, ...] = _option((0, 1, 2, 3, 4), "Seeds of each configuration (head init, data order).")
    num_train_epochs: float = _option(10.0, "Epochs; dev is scored after each, the best kept.")
    warmup_ratio: float = _option(0.06, "Linear warm-up over this share of the steps.")
    weight_decay: float = _option(0.1, "Decoupled weight decay (AdamW).")
    adam_beta1: float = _option(0.9, "Adam beta1.")
    adam_beta2: float = _option(0.98, "Adam beta2.")
    adam_epsilon: float = _option(1e-6, "Adam epsilon.")
    max_grad_norm: float = _option(0.0, "Gradient clipping norm (0: none, as RoBERTa).")
    max_train_samples: int | None = _option(
        None,
        "Fine-tune on a fixed random subset of this many training examples per task (CPU budgets; not comparable "
        "with the papers).",
        type=int,
    )
    max_eval_samples: int | None = _option(
        None,
        "Score a fixed random subset of this many dev examples per split (not comparable with the papers).",
        type=int,
    )
    subset_seed: int = _option(0, "Seed of the subsets drawn by max_train_samples and max_eval_samples.")
    hub_dataset: str = _option(GLUE_HUB_DATASET, "Hub dataset (or a local copy of it) for tasks not under --data-dir.")
    pooler_type: str = _option("mean", "Pooling of the embedding head for checkpoints that name none.")
    max_length: int | None = _option(None, "Truncation of each input in tokens (default: the model's, at most 512).")
    eval_batch_size: int = _option(64, "Batch size of the dev scoring.")
    use_cpu: bool = _option(False, "Train on the CPU even when a GPU is there.")

    def __post_init__(self):
        if self.head not in HEADS:
            raise ValueError(f"Unknown GLUE head {self.head!r}; choose one of {', '.join(HEADS)}.")
        for name in ("learning_rates", "train_batch_sizes", "seeds"):
            values = tuple(getattr(self, name))
            if not values:
                raise ValueError(f"GLUE needs at least one value of {name}.")
            setattr(self, name, values)
        for name in ("learning_rates", "train_batch_sizes", "num_train_epochs", "eval_batch_size"):
            values = getattr(self, name)
            if any(value <= 0 for value in (values if isinstance(values, tuple) else (values,))):
                raise ValueError(f"GLUE {name} must be positive, got {values}.")
        for name in ("max_train_samples", "max_eval_samples", "max_length"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"GLUE {name} must be at least 1 (or unset), got {value}.")
        if not 0 <= self.warmup_ratio < 1:
            raise ValueError(f"GLUE warmup_ratio must be in [0, 1), got {self.warmup_ratio}.")

    def configurations(self) -> list[tuple[float, int]]:
        """The grid's ``(learning rate, batch size)`` pairs, in order."""
        return [(rate, size) for rate in self.learning_rates for size in self.train_batch_sizes]


def _sentence_transformers_pooler(name_or_path: str) -> str | None:
    """The pooler_type of a sentence-transformers folder's Pooling module; None when it is not such a folder."""
    from ..models.poolers import pooler_for_sentence_transformers_mode

    modules_path = os.path.join(name_or_path, "modules.json")
    if not os.path.isfile(modules_path):
        return None
    with open(modules_path, encoding="utf-8") as handle:
        modules = json.load(handle)
    dense = [module["path"] for module in modules if module.get("type", "").endswith("Dense")]
    if dense:
        raise ValueError(
            f"{name_or_path} ends in Dense module(s) ({', '.join(dense)}), which the embedding head does not "
            "reproduce: use --glue-head encoder, or a contrastive_hf checkpoint."
        )
    pooling = next((module for module in modules if module.get("type", "").endswith("Pooling")), None)
    if pooling is None:
        return None
    with open(os.path.join(name_or_path, pooling["path"], "config.json"), encoding="utf-8") as handle:
        config = json.load(handle)
    modes = [key.removeprefix("pooling_mode_") for key, value in config.items() if key.startswith("pooling_mode_")
             and value is True]  # fmt: skip
    pooler_type = pooler_for_sentence_transformers_mode(modes[0]) if len(modes) == 1 else None
    if pooler_type is None:
        raise ValueError(
            f"{name_or_path}'s Pooling module ({', '.join(modes) or 'no mode'}) is not one pooling mode alone that a "
            "registered pooler computes (CLS, mean or max), which the embedding head reproduces: use --glue-head "
            "encoder."
        )
    return pooler_type


def build_classifier(name_or_path: str | os.PathLike, task: str | GlueTask, head: str = "encoder", pooler_type="mean"):
    """A fresh classifier (a regressor for STS-B) for ``task`` on the checkpoint ``name_or_path``; see the module's
    docstring for the two heads. Its new head is drawn from torch's current random state."""
    from .encoders import detect_backend

    task, name_or_path = glue_task(task), os.fspath(name_or_path)
    labels: dict = {"num_labels": len(task.labels) or 1}
    if task.labels:
        labels.update(id2label=dict(enumerate(task.labels)), label2id={name: i for i, name in enumerate(task.labels)})
    if head == "encoder":
        from transformers import AutoModelForSequenceClassification

        return AutoModelForSequenceClassification.from_pretrained(name_or_path, **labels)
    if head != "embedding":
        raise ValueError(f"Unknown GLUE head {head!r}; choose one of {', '.join(HEADS)}.")
    from ..models.modeling_contrastive import ContrastiveForSequenceClassification

    backend = detect_backend(name_or_path)
    if backend == "contrastive":
        return ContrastiveForSequenceClassification.from_pretrained(name_or_path, **labels)
    if backend == "sentence-transformers":
        pooler_type = _sentence_transformers_pooler(name_or_path) or pooler_type
    return ContrastiveForSequenceClassification.from_encoder_pretrained(
        name_or_path, pooler_type=pooler_type, projection_type="none", **labels
    )


@contextlib.contextmanager
def _errors_only():
    """transformers' and contrastive_hf's loggers at ERROR (their reports of a fresh head's weights) for the block."""
    from transformers.utils import logging as transformers_logging

    ours = logging.getLogger("contrastive_hf")
    verbosity, level = transformers_logging.get_verbosity(), ours.level
    transformers_logging.set_verbosity_error()
    ours.setLevel(logging.ERROR)
    try:
        yield
    finally:
        transformers_logging.set_verbosity(verbosity)
        ours.setLevel(level)


@contextlib.contextmanager
def _datasets_bars_off():
    import datasets

    shown = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        if shown:
            datasets.enable_progress_bars()


def _subset(dataset, size: int | None, seed: int):
    """A fixed random subset of ``size`` examples (all when ``size`` is None or not smaller)."""
    if size is None or size >= len(dataset):
        return dataset
    return dataset.shuffle(seed=seed).select(range(size))


def _tokenized(dataset, task: GlueTask, tokenizer, max_length: int):
    def encode(batch):
        return tokenizer(*(batch[column] for column in task.text_columns), truncation=True, max_length=max_length)

    removed = [column for column in dataset.column_names if column != "label"]
    return dataset.map(encode, batched=True, remove_columns=removed, desc=f"Tokenizing GLUE {task.name}")


def _epoch_figures(log_history: list[dict], task: GlueTask) -> list[dict]:
    """Each evaluated epoch's ``{"epoch", "score", "figures"}`` from the Trainer's log (one entry per dev split)."""
    by_epoch: dict[float, dict[str, float]] = {}
    for entry in log_history:
        for _, _, key in task.dev_splits:
            prefix = f"eval_{key}_"
            found = {
                name[len(prefix) :]: value
                for name, value in entry.items()
                if name.startswith(prefix) and name[len(prefix) :] in METRICS[task.metric].figures
            }
            if found:
                figures = by_epoch.setdefault(round(entry["epoch"], 4), {})
                figures.update({figure_name(metric, key): value for metric, value in found.items()})
    expected = len(METRICS[task.metric].figures) * len(task.dev_splits)
    return [
        {"epoch": epoch, "score": task_score(figures), "figures": figures}
        for epoch, figures in sorted(by_epoch.items())
        if len(figures) == expected
    ]


def fine_tune(
    name_or_path: str | os.PathLike,
    tokenizer,
    task: str | GlueTask,
    train,
    dev: dict,
    learning_rate: float,
    batch_size: int,
    seed: int,
    arguments: GlueArguments,
    show_progress: bool = False,
    load_report: bool = True,
) -> dict:
    """One run: a fresh classifier fine-tuned on the tokenized ``train`` set, ``dev`` (key -> tokenized Dataset)
    scored after every epoch; ``load_report=False`` keeps the report of the fresh head's weights quiet (the same for
    every run of an evaluation). Returns ``{"learning_rate", "batch_size", "seed", "score", "figures", "best_epoch",
    "last_epoch_score", "epochs": [{"epoch", "score", "figures"}], "training_loss", "steps", "seconds"}``, ``score``
    and ``figures`` those of the best epoch."""
    import torch
    from transformers import PrinterCallback, Trainer, TrainingArguments, set_seed

    task = glue_task(task)
    set_seed(seed)  # before the head is drawn: the seed is the run's initialisation, as in RoBERTa's five
    with contextlib.nullcontext() if load_report else _errors_only():
        model = build_classifier(name_or_path, task, arguments.head, arguments.pooler_type)
    use_cpu = arguments.use_cpu or not torch.cuda.is_available()
    with tempfile.TemporaryDirectory(prefix="glue-") as output_dir:
        training_arguments = TrainingArguments(
            output_dir=output_dir,
            learning_rate=learning_rate,
            per_device_train_batch_size=batch_size,
            per_device_eval_batch_size=arguments.eval_batch_size,
            num_train_epochs=arguments.num_train_epochs,
            lr_scheduler_type="linear",
            warmup_steps=arguments.warmup_ratio,  # below 1: a share of the training steps
            weight_decay=arguments.weight_decay,
            adam_beta1=arguments.adam_beta1,
            adam_beta2=arguments.adam_beta2,
            adam_epsilon=arguments.adam_epsilon,
            max_grad_norm=arguments.max_grad_norm,
            eval_strategy="epoch",
            logging_strategy="epoch",
            save_strategy="no",
            report_to="none",
            seed=seed,
            use_cpu=use_cpu,
            bf16=not use_cpu and torch.cuda.is_bf16_supported(),
            disable_tqdm=not show_progress,
        )

        def compute_metrics(prediction) -> dict[str, float]:
            outputs = (
                prediction.predictions[0] if isinstance(prediction.predictions, tuple) else prediction.predictions
            )
            return split_metrics(task, outputs, prediction.label_ids)

        trainer = Trainer(
            model=model,
            args=training_arguments,
            train_dataset=train,
            eval_dataset=dev,
            processing_class=tokenizer,
            compute_metrics=compute_metrics,
        )
        if not show_progress:
            trainer.remove_callback(PrinterCallback)  # it prints every log when progress bars are off
        start = time.perf_counter()
        training_loss = trainer.train().training_loss
        seconds = time.perf_counter() - start
        epochs = _epoch_figures(trainer.state.log_history, task)
        steps = trainer.state.global_step
        effective_batch_size = training_arguments.train_batch_size  # x the GPUs under DataParallel
    del trainer, model
    gc.collect()
    if not use_cpu:
        torch.cuda.empty_cache()
    if not epochs:
        raise RuntimeError(f"GLUE {task.name}: the run logged no dev evaluation; was num_train_epochs below 1?")
    best = max(epochs, key=lambda epoch: epoch["score"])  # early stopping: the first best epoch
    run = {
        "learning_rate": learning_rate,
        "batch_size": batch_size,
        "seed": seed,
        "score": best["score"],
        "figures": best["figures"],
        "best_epoch": best["epoch"],
        "last_epoch_score": epochs[-1]["score"],
        "epochs": epochs,
        "training_loss": training_loss,
        "steps": steps,
        "seconds": round(seconds, 1),
    }
    if effective_batch_size != batch_size:
        run["effective_batch_size"] = effective_batch_size
    return run


def _spread(scores: Sequence[float]) -> dict:
    return {
        "median": float(statistics.median(scores)),
        "mean": float(statistics.fmean(scores)),
        "std": float(statistics.stdev(scores)) if len(scores) > 1 else 0.0,
        "min": float(min(scores)),
        "max": float(max(scores)),
        "scores": [float(score) for score in scores],
    }


def summarise_runs(runs: Sequence[dict]) -> dict:
    """A task's result from its runs (`fine_tune`'s dicts): per configuration the median, mean, standard deviation,
    min and max over the seeds; the configuration with the best median (the first on ties), whose median is the
    ``score`` and whose per-figure medians are the ``figures``, as RoBERTa selects and reports."""
    configurations: dict[tuple[float, int], list[dict]] = {}
    for run in runs:
        configurations.setdefault((run["learning_rate"], run["batch_size"]), []).append(run)
    grid = [
        {"learning_rate": rate, "batch_size": size, "seeds": [run["seed"] for run in group],
         **_spread([run["score"] for run in group])}
        for (rate, size), group in configurations.items()
    ]  # fmt: skip
    best = max(range(len(grid)), key=lambda index: (grid[index]["median"], -index))
    chosen = configurations[(grid[best]["learning_rate"], grid[best]["batch_size"])]
    figures = {name: float(statistics.median(run["figures"][name] for run in chosen)) for name in chosen[0]["figures"]}
    return {
        "score": grid[best]["median"],
        "figures": figures,
        "learning_rate": grid[best]["learning_rate"],
        "batch_size": grid[best]["batch_size"],
        "spread": {key: grid[best][key] for key in ("seeds", "scores", "min", "max", "mean", "std")},
        "grid": grid,
        "runs": list(runs),
    }


def _max_length(tokenizer, name_or_path: str, requested: int | None) -> int:
    import torch
    from transformers import AutoConfig, AutoModel

    from ..models.positions import check_max_length
    from .encoders import MAX_LENGTH_FLAG

    config = AutoConfig.from_pretrained(name_or_path)
    if requested is not None:  # refused before any fine-tuning when the encoder has fewer positions
        with torch.device("meta"):  # its modules alone: nothing allocated, no weights read
            encoder = AutoModel.from_config(config)
        consequence = "the first longer example would stop fine-tuning with an index error"
        check_max_length(encoder, requested, flag=MAX_LENGTH_FLAG, consequence=consequence)
        return requested
    limit = getattr(config, "max_position_embeddings", 512) or 512
    return min(tokenizer.model_max_length, limit, 512)


def _describe(task: GlueTask) -> str:
    description = METRICS[task.metric].description
    return description + (" (mean of matched and mismatched)" if len(task.dev_splits) > 1 else "")


def evaluate_glue(
    name_or_path: str | os.PathLike,
    tasks: Sequence[str] = GLUE_GROUP,
    data_dir: str | os.PathLike | None = None,
    arguments: GlueArguments | None = None,
    datasets: dict[str, GlueData] | None = None,
    show_progress: bool = True,
    report: Callable[[str], None] | None = print,
) -> dict:
    """Fine-tune ``name_or_path`` (a checkpoint folder or Hub id) on each of ``tasks`` as ``arguments`` say and score
    the dev sets; ``report`` gets a line per finished run (None: silent).

    Returns ``{"head", "arguments", "tasks": {task: {"score", "metric", "figures", "learning_rate", "batch_size",
    "spread", "grid", "runs", "data": {"source", "train", "dev", "train_used", ...}}}, "avg": {"score", "tasks"}}``,
    figures x 100. ``datasets`` (from `load_glue_tasks`) skips the reading.
    """
    import torch
    from transformers import AutoTokenizer

    arguments = arguments or GlueArguments()
    name_or_path = os.fspath(name_or_path)
    tokenizer = AutoTokenizer.from_pretrained(name_or_path)
    max_length = _max_length(tokenizer, name_or_path, arguments.max_length)  # a length it cannot take: before the data
    if datasets is None:
        datasets = load_glue_tasks(tasks, data_dir, arguments.hub_dataset)
    configurations = arguments.configurations()
    results = {}
    for name, data in datasets.items():
        task = data.task
        train = _subset(data.train, arguments.max_train_samples, arguments.subset_seed)
        dev = {
            key: _subset(split, arguments.max_eval_samples, arguments.subset_seed) for key, split in data.dev.items()
        }
        with contextlib.nullcontext() if show_progress else _datasets_bars_off():
            tokenized_train = _tokenized(train, task, tokenizer, max_length)
            tokenized_dev = {key: _tokenized(split, task, tokenizer, max_length) for key, split in dev.items()}
        runs = []
        for learning_rate, batch_size in configurations:
            for seed in arguments.seeds:
                run = fine_tune(
                    name_or_path, tokenizer, task, tokenized_train, tokenized_dev, learning_rate, batch_size, seed,
                    arguments, show_progress, load_report=not results and not runs,
                )  # fmt: skip
                runs.append(run)
                if report is not None:
                    report(
                        f"GLUE {name}: lr {learning_rate:g}, batch {batch_size}, seed {seed}: {run['score']:.2f} "
                        f"(epoch {run['best_epoch']:g} of {arguments.num_train_epochs:g}; {run['steps']} steps, "
                        f"{run['seconds']:.0f} s)"
                    )
        summary = summarise_runs(runs)
        results[name] = {
            "score": summary.pop("score"),
            "metric": _describe(task),
            **summary,
            "data": {
                **data.describe(),
                "train_used": len(train),
                **{f"{figure_name('dev', key)}_used": len(split) for key, split in dev.items()},
            },
        }
    average = float(np.mean([result["score"] for result in results.values()])) if results else None
    settings = asdict(arguments)
    settings["max_length"] = max_length
    on_gpu = not arguments.use_cpu and torch.cuda.is_available()
    settings["device"] = torch.cuda.get_device_name(0) if on_gpu else "cpu"
    return {
        "head": arguments.head,
        "arguments": settings,
        "tasks": results,
        "avg": {"score": average, "tasks": list(results)},
    }


def glue_card_results(glue: dict) -> dict[str, dict]:
    """The GLUE section of `evaluate_glue`'s results as `ModelCardInfo.eval_results` entries: ``glue_<config>``
    (MNLI: ``glue_mnli_matched``, ``glue_mnli_mismatched``) -> its figures x 100, with ``"dataset"``: the Hub id
    when the data came from the Hub (not from a local copy of it); and ``avg_glue`` -> ``{"score"}``."""
    from .._files import written_as_local_path

    entries: dict[str, dict] = {}
    for name, result in glue["tasks"].items():
        task = GLUE_TASKS[name]
        hub = result.get("data", {}).get("hub_dataset")
        if hub and (written_as_local_path(hub) or os.path.isdir(hub)):
            hub = None  # the card names data sets by Hub id only when they came from the Hub
        for _, _, key in task.dev_splits:
            suffix = "" if key == "dev" else f"_{key}"
            figures = {metric: result["figures"][figure_name(metric, key)] for metric in METRICS[task.metric].figures}
            entries[f"glue_{task.config}{suffix}"] = {**figures, **({"dataset": hub} if hub else {})}
    if glue.get("avg", {}).get("score") is not None:
        entries["avg_glue"] = {"score": glue["avg"]["score"]}
    return entries
