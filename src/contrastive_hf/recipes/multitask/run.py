"""The multitask script (``examples/run_multitask.py``, ``python -m contrastive_hf.recipes multitask``): its arguments,
`build` (the task data in SentEval's layouts and a pairs file for a contrastive task, the task specs, the multitask
model from a plain encoder, a contrastive_hf checkpoint or a multitask checkpoint, and the collator), and the end of
the run: the dev figures before and after, and the check that the saved multitask model and its sentence encoder give
what the trained one gives."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import ClassVar

import torch
from transformers import AutoTokenizer
from transformers.integrations import unset_hf_deepspeed_config

from ...commands.arguments import AdapterArguments, LoadingArguments, loss_help
from ...commands.errors import UsageError, as_usage_error
from ...commands.loading import with_lora_adapter
from ...commands.reload_check import ReloadReference, loading_instructions, trained_embeddings, verify_reload
from ...commands.run_end import log_before_after, publish, save_merged_model, save_trained_model
from ...commands.zero3 import built_whole
from ...data.collators import PairCollator
from ...data.reading import load_corpus
from ...evaluation.sts import read_stsbenchmark
from ...evaluation.transfer_data import read_mrpc, read_sst2
from ...models.checkpoint_contents import checkpoint_model_type
from ...models.configuration_contrastive import ContrastiveConfig
from ...models.modeling_multitask import MultitaskConfig, MultitaskModel, TaskSpec
from ...models.objectives import get_loss
from .. import RecipeRun
from ..simcse.data import prepare_pairs
from .data import MultitaskCollator, task_dataset
from .trainer import MultitaskTrainer, MultitaskTrainingArguments

__all__ = [
    "DEFAULTS",
    "ModelArguments",
    "DataArguments",
    "ARGUMENTS",
    "MultitaskRun",
    "build",
    "dev_figures",
    "dev_figures_before",
    "check_and_describe_saved_models",
    "check_saved_models",
    "trained_outputs",
]

logger = logging.getLogger(__name__)
# The flags default to the parts' own values (`TaskSpec`, `MultitaskTrainingArguments`): nothing to set.
DEFAULTS: dict = {}
TRAINER_CLASS = MultitaskTrainer

ENCODER_DIR = "sentence_encoder"
STSB_SCALE = 5.0  # STS-B's 0-5 scores are divided by 5, so that a cosine head can reach them (SBERT's recipe)


@dataclass
class ModelArguments(LoadingArguments):
    hub_ids_or_paths: ClassVar[tuple[str, ...]] = ("model_name_or_path", "tokenizer_name")

    model_name_or_path: str = field(
        metadata={
            "help": "A pretrained encoder (Hub id or folder), a contrastive_hf checkpoint (run_clear.py, "
            "run_simcse.py output) or a multitask checkpoint of this script to continue from."
        },
    )
    tokenizer_name: str | None = field(default=None, metadata={"help": "Tokenizer, if not the model's own."})
    pooler_type: str | None = field(
        default=None,
        metadata={
            "help": "Pooler of a plain encoder: cls, cls_before_pooler, mean, max, avg_first_last, avg_top2 "
            "(default mean). A contrastive_hf checkpoint keeps its own unless this is given."
        },
    )
    classifier_dropout: float | None = field(
        default=None, metadata={"help": "Dropout before the heads' linear layers (default: the encoder's)."}
    )
    mrpc_head: str = field(
        default="uv_absdiff", metadata={"help": "MRPC's pair features: concat, uv_absdiff or uv_absdiff_product."}
    )
    stsb_head: str = field(
        default="cosine",
        metadata={"help": "STS-B's head: cosine (cos(u, v), no parameters) or a pair-feature head (uv_absdiff...)."},
    )
    sst_weight: float = field(default=1.0, metadata={"help": "Weight of the SST-2 loss."})
    mrpc_weight: float = field(default=1.0, metadata={"help": "Weight of the MRPC loss."})
    stsb_weight: float = field(default=1.0, metadata={"help": "Weight of the STS-B loss."})
    pairs_weight: float = field(default=1.0, metadata={"help": "Weight of the contrastive loss on --pairs_file."})
    contrastive_loss: str | None = field(default=None, metadata={"help": loss_help()})  # rewritten when parsing
    temperature: float | None = field(
        default=None, metadata={"help": "tau of the contrastive task's loss (default: the encoder config's, 0.05)."}
    )

    def loss_settings(self) -> dict:
        """The encoder config's loss settings these flags give (`ContrastiveConfig` fields)."""
        if self.contrastive_loss is not None:
            with as_usage_error():  # the registered names, in one usage line
                get_loss(self.contrastive_loss)
        settings = {"contrastive_loss": self.contrastive_loss, "temperature": self.temperature}
        return {name: value for name, value in settings.items() if value is not None}


@dataclass
class DataArguments:
    local_paths: ClassVar[tuple[str, ...]] = ("sst_dir", "mrpc_dir", "stsb_dir", "pairs_file")

    sst_dir: str | None = field(
        default=None, metadata={"help": "SST-2 folder (SentEval SST/binary: sentiment-train, -dev, -test)."}
    )
    mrpc_dir: str | None = field(
        default=None, metadata={"help": "MRPC folder (msr_paraphrase_train.txt, msr_paraphrase_test.txt)."}
    )
    stsb_dir: str | None = field(
        default=None, metadata={"help": "STS Benchmark folder (sts-train.csv, sts-dev.csv, sts-test.csv)."}
    )
    pairs_file: str | None = field(
        default=None,
        metadata={
            "help": "A contrastive task, 'pairs': a csv/tsv/json file of (query, positive, optional hard negatives) "
            "rows, e.g. SimCSE's NLI triples (sent0, sent1, hard_neg) or anchor, positive, negative, trained with the "
            "encoder's in-batch loss (--contrastive_loss; info_nce takes hard negatives)."
        },
    )
    pairs_dev_fraction: float = field(
        default=0.1, metadata={"help": "Share of --pairs_file's rows held out as its dev set."}
    )
    max_seq_length: int = field(default=128, metadata={"help": "Maximum tokens per sentence."})
    max_train_samples: int | None = field(
        default=None, metadata={"help": "Keep the first N training examples of each task (quick runs)."}
    )
    max_eval_samples: int | None = field(
        default=None, metadata={"help": "Keep the first N examples of each task's dev (and test) set."}
    )
    mrpc_dev_fraction: float = field(
        default=0.1, metadata={"help": "Share of MRPC's training pairs held out as its dev set."}
    )
    split_seed: int = field(default=42, metadata={"help": "Seed of the MRPC dev split (independent of --seed)."})
    evaluate_test: bool = field(default=False, metadata={"help": "Also score the test sets at the end."})


def load_task_data(data_args: DataArguments, tokenizer) -> tuple[dict, dict, dict]:
    """``{task: dataset}`` for train, dev and test, for the tasks whose folder (or file) is given."""
    train, dev, test = {}, {}, {}
    if data_args.sst_dir:
        splits = read_sst2(data_args.sst_dir)
        train["sst"], dev["sst"], test["sst"] = (task_dataset(splits[name]) for name in ("train", "dev", "test"))
    if data_args.mrpc_dir:
        if not 0 < data_args.mrpc_dev_fraction < 1:
            raise UsageError(f"--mrpc_dev_fraction must be in (0, 1), got {data_args.mrpc_dev_fraction}.")
        splits = read_mrpc(data_args.mrpc_dir)
        held_out = task_dataset(splits["train"]).train_test_split(
            test_size=data_args.mrpc_dev_fraction, seed=data_args.split_seed
        )
        train["mrpc"], dev["mrpc"], test["mrpc"] = held_out["train"], held_out["test"], task_dataset(splits["test"])
    if data_args.stsb_dir:
        train["stsb"], dev["stsb"], test["stsb"] = (
            task_dataset(read_stsbenchmark(data_args.stsb_dir, split), normalize_scores=STSB_SCALE)
            for split in ("train", "dev", "test")
        )
    if data_args.pairs_file:
        if not 0 < data_args.pairs_dev_fraction < 1:
            raise UsageError(f"--pairs_dev_fraction must be in (0, 1), got {data_args.pairs_dev_fraction}.")
        with as_usage_error("(--pairs_file)"):
            corpus = load_corpus(data_args.pairs_file)
        with as_usage_error(f"Name the columns of {data_args.pairs_file} so (e.g. sent0, sent1, hard_neg)."):
            pairs = prepare_pairs(corpus, PairCollator(tokenizer, max_length=data_args.max_seq_length, seed=0))
        held_out = pairs.train_test_split(test_size=data_args.pairs_dev_fraction, seed=data_args.split_seed)
        train["pairs"], dev["pairs"] = held_out["train"], held_out["test"]
    for splits, limit in ((train, data_args.max_train_samples), (dev, data_args.max_eval_samples)):
        for name, dataset in splits.items():
            if limit is not None:
                splits[name] = dataset.select(range(min(limit, len(dataset))))
    if data_args.max_eval_samples is not None:
        test = {
            name: dataset.select(range(min(data_args.max_eval_samples, len(dataset))))
            for name, dataset in test.items()
        }
    return train, dev, test


def task_specs(model_args: ModelArguments, names) -> list[TaskSpec]:
    specs = {
        "sst": TaskSpec("sst", "classification", num_labels=2, loss_weight=model_args.sst_weight),
        "mrpc": TaskSpec(
            "mrpc", "pair_classification", num_labels=2, head=model_args.mrpc_head, loss_weight=model_args.mrpc_weight
        ),
        "stsb": TaskSpec("stsb", "pair_regression", head=model_args.stsb_head, loss_weight=model_args.stsb_weight),
        "pairs": TaskSpec("pairs", "contrastive", loss_weight=model_args.pairs_weight),
    }
    return [specs[name] for name in names]


def build_model(model_args: ModelArguments, tasks: list[TaskSpec], loading: dict) -> MultitaskModel:
    """The multitask model to train: a saved one continued, or new heads on a sentence encoder or plain encoder;
    ``loading``: `from_pretrained`'s loading arguments (`LoadingArguments.loading`)."""
    model_type = checkpoint_model_type(model_args.model_name_or_path)
    if model_type == MultitaskConfig.model_type:  # continue a multitask run
        model = MultitaskModel.from_pretrained(model_args.model_name_or_path, **loading)
        if [spec.name for spec in model.config.task_specs] != [spec.name for spec in tasks]:
            raise UsageError(
                f"{model_args.model_name_or_path} has the tasks {[s.name for s in model.config.task_specs]}, "
                f"but the data given is for {[s.name for s in tasks]}: give the folders of the same tasks."
            )
        settings = model_args.loss_settings()
        if settings:  # the contrastive task's loss, as the flags say: built from the config by the trainer
            model.config.contrastive.update(settings)
            model.loss_fn = None
        return model
    overrides = model_args.loss_settings()
    if model_args.pooler_type is not None:
        overrides["pooler_type"] = model_args.pooler_type
    elif model_type != ContrastiveConfig.model_type:
        overrides["pooler_type"] = "mean"  # a plain encoder: mean pooling unless told otherwise (SBERT's default)
    return MultitaskModel.from_sentence_encoder(
        model_args.model_name_or_path,
        tasks,
        classifier_dropout=model_args.classifier_dropout,
        **loading,
        **overrides,
    )


ARGUMENTS = (ModelArguments, DataArguments, AdapterArguments, MultitaskTrainingArguments)


@dataclass
class MultitaskRun(RecipeRun):
    """`RecipeRun` with each task's test set (``{task: dataset}``, scored with --evaluate_test)."""

    test_dataset: dict | None = None
    evaluate_test: bool = False

    def finish(self, trainer, train_result) -> None:
        save_trained_model(
            trainer, train_result, train_samples=sum(len(dataset) for dataset in self.train_dataset.values())
        )
        # the dev figures after training, beside those of --eval_on_start (logged at step 0) when it was given
        log_before_after(trainer, dev_figures(trainer.evaluate()), dev_figures_before(trainer))
        if self.evaluate_test:
            metrics = trainer.evaluate(self.test_dataset, metric_key_prefix="test")
            trainer.log_metrics("test", metrics)
            trainer.save_metrics("test", metrics)
        publish(trainer)  # the Trainer's card, with the evaluations; pushes with --push_to_hub
        # with --lora_r: the adapter and heads in output_dir, the merged multitask model beside it
        model_dir = save_merged_model(trainer, self.tokenizer)
        # reload the saved model, save its encoder alone in sentence_encoder/, check both against the trained model
        check_and_describe_saved_models(trainer, model_dir, self.tokenizer, self.eval_dataset)


def build(arguments: tuple) -> MultitaskRun:
    """The task data, the tokenizer, the multitask model (the encoder with a LoRA adapter when asked, the heads in
    full) and the collator of ``arguments`` (parsed `ARGUMENTS`)."""
    model_args, data_args, adapter_args, training_args = arguments
    if not any((data_args.sst_dir, data_args.mrpc_dir, data_args.stsb_dir, data_args.pairs_file)):
        raise UsageError("No task to train on: give at least one of --sst_dir, --mrpc_dir, --stsb_dir, --pairs_file.")
    tokenizer = AutoTokenizer.from_pretrained(model_args.tokenizer_name or model_args.model_name_or_path)
    train, dev, test = load_task_data(data_args, tokenizer)
    tasks = task_specs(model_args, list(train))
    logger.info("Tasks: %s", ", ".join(f"{name} ({len(train[name])} train, {len(dev[name])} dev)" for name in train))
    with built_whole(training_args):  # whole in each process, also under DeepSpeed ZeRO-3
        model = build_model(model_args, tasks, model_args.loading(adapter_args, training_args))
    # the heads are new: trained in full beside the encoder's adapter, and saved with it
    heads = tuple(f"heads.{spec.name}" for spec in tasks if spec.name in model.heads)
    model = with_lora_adapter(model, adapter_args, modules_to_save=heads)
    collator = MultitaskCollator(tokenizer, tasks, max_length=data_args.max_seq_length)
    return MultitaskRun(
        model, tokenizer, train, collator, eval_dataset=dev, test_dataset=test, evaluate_test=data_args.evaluate_test
    )


def dev_figures_before(trainer) -> dict[str, float] | None:
    """The dev figures of --eval_on_start (logged at step 0), when it was given."""
    before = next(
        (entry for entry in trainer.state.log_history if entry.get("step") == 0 and "eval_average" in entry), None
    )
    return dev_figures(before) if before else None


def check_and_describe_saved_models(trainer, model_dir: str, tokenizer, dev: dict) -> None:
    """Check the saved multitask model and save and check its encoder alone (`check_saved_models`: computed on every
    process, under DeepSpeed ZeRO-3 a forward pass needs every process's shards), then say how to load both."""
    expected = trained_outputs(trainer.model, tokenizer, dev)
    if not trainer.is_world_process_zero():
        return
    encoder_dir = os.path.join(model_dir, ENCODER_DIR)
    check_saved_models(model_dir, encoder_dir, tokenizer, expected)
    print(
        f"\nThe multitask model (encoder and heads) is in {model_dir}. Load it with:\n\n"
        "    from contrastive_hf import MultitaskModel\n"
        f"    multitask = MultitaskModel.from_pretrained({model_dir!r})\n"
        f"\nThe encoder alone, a sentence encoder checkpoint, is in {encoder_dir}."
        + loading_instructions(encoder_dir).removeprefix(f"\nSaved to {encoder_dir}.")
    )


def dev_figures(metrics: dict) -> dict[str, float]:
    """The dev set's figures of `MultitaskTrainer.evaluate` (each task's loss and metrics, their average), without
    the ``eval_`` prefix that `log_before_after` adds back."""
    return {
        name.removeprefix("eval_"): value
        for name, value in metrics.items()
        if name.startswith("eval_") and not name.endswith(("_runtime", "_per_second"))
    }


@dataclass(frozen=True)
class TrainedOutputs:
    """The trained model's head outputs on a few dev examples of each task (``batches``, on its device; a
    contrastive task's embeddings, `task_outputs`), and the embeddings the sentence encoder saved from it must
    reproduce (``embeddings``)."""

    batches: dict[str, dict]
    logits: dict[str, torch.Tensor]
    embeddings: ReloadReference


@torch.no_grad()
def trained_outputs(model: MultitaskModel, tokenizer, dev: dict) -> TrainedOutputs:
    """`TrainedOutputs` of the trained ``model``; every process calls it (DeepSpeed ZeRO-3)."""
    model = model.eval()
    device = next(model.parameters()).device
    collator = MultitaskCollator(tokenizer, list(model.task_specs.values()))
    examples = [{**dev[name][i], "task": name} for name in dev for i in range(min(8, len(dev[name])))]
    batches = {
        name: {key: value.to(device) for key, value in batch.items()} for name, batch in collator(examples).items()
    }
    logits = {name: task_outputs(model, name, batch) for name, batch in batches.items()}
    sentences = ["A man is playing a guitar.", "The film is a charming journey."]
    return TrainedOutputs(batches, logits, trained_embeddings(model, sentences, tokenizer))


def task_outputs(model: MultitaskModel, task: str, batch: dict) -> torch.Tensor:
    """What a saved model must reproduce of a task's batch: its head's outputs, or a contrastive task's embeddings
    (its in-batch loss gathers across processes, and its hits are argmaxes a rounding may flip)."""
    if model.task_specs[task].is_contrastive:
        lengths = batch.get("input_lengths")
        return model.embed(batch["input_ids"], batch.get("attention_mask"), lengths=lengths).float()
    return model(task=task, **batch).logits.float()


@torch.no_grad()
def check_saved_models(model_dir: str, encoder_dir: str, tokenizer, expected: TrainedOutputs) -> None:
    """Reload the saved multitask model in this one process, save its encoder alone in ``encoder_dir``, and compare
    both with the trained model (``expected``): head outputs, and embeddings (`verify_reload`), on the trained
    model's device, within what the precision it was trained in allows (1e-5 for float32 weights; 16-bit weights,
    DeepSpeed's under --bf16, keep their rounding: 2%)."""
    unset_hf_deepspeed_config()  # whole in this process: after ZeRO-3, transformers would otherwise shard it
    device = expected.embeddings.device
    reloaded = MultitaskModel.from_pretrained(model_dir).to(device).eval()
    reloaded.save_sentence_encoder(encoder_dir, tokenizer)  # the saved (after a LoRA run, merged) encoder alone
    tolerance = 1e-5 if expected.embeddings.weights_dtype == torch.float32 else 2e-2
    for name, batch in expected.batches.items():
        got = task_outputs(reloaded, name, batch)
        if not torch.allclose(expected.logits[name], got, atol=tolerance, rtol=tolerance):
            difference = float((expected.logits[name] - got).abs().max())
            raise RuntimeError(
                f"The saved multitask model gives other {name} outputs than the trained one (max difference "
                f"{difference:.2e})."
            )
    del reloaded
    verify_reload(encoder_dir, tokenizer, expected.embeddings)
    print(f"Reloaded {model_dir}: the same head outputs.")
