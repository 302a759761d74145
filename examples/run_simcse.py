#!/usr/bin/env python
"""SimCSE (Gao, Yao & Chen, 2021): train a sentence encoder contrastively, unsupervised or on NLI.

``--mode unsup``: each sentence is encoded twice and the two dropout masks make the two views (the ``dropout``
augmentation); the other sentences of the batch are the negatives. ``--mode sup``: (premise, entailment hypothesis)
pairs are the positives and each premise's contradiction hypothesis is its hard negative (SimCSE's NLI format, a
csv with columns ``sent0,sent1,hard_neg``). Both use SimCSE's InfoNCE at temperature 0.05 on the [CLS] vector through
SimCSE's MLP head (one dense layer + tanh): in training only for ``unsup``, kept at inference for ``sup``.

Each mode applies SimCSE's own hyper-parameters unless the flag is given (``SIMCSE_DEFAULTS``); the log shows the
resolved values. Batch sizes are SimCSE's global ones, split over the processes of ``accelerate launch``. Optional:
``--do_mlm`` (SimCSE's auxiliary MLM, weight ``--mlm_weight`` 0.1) and ``--prebatch_size C`` (a queue of the
previous C batches' keys as extra negatives); every TrainingArguments flag works, and a single JSON file of the same
keys does too. A small unsupervised run on the shipped Wikipedia sentences:

    python examples/run_simcse.py --mode unsup --model_name_or_path bert-base-uncased \
        --train_file examples/demo/data/wiki1m_sample.txt --stsb_dev_file examples/demo/data/sts-dev.csv \
        --output_dir outputs/unsup-simcse

and supervised, on SimCSE's NLI triples (nli_for_simcse.csv from its repository, or any csv of those columns):

    python examples/run_simcse.py --mode sup --model_name_or_path bert-base-uncased \
        --train_file nli_for_simcse.csv --stsb_dev_file examples/demo/data/sts-dev.csv --output_dir outputs/sup-simcse
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from dataclasses import dataclass, field, fields

from transformers import AutoTokenizer, HfArgumentParser

from contrastive_hf import ContrastiveForPreTraining
from contrastive_hf.commands.loading import (
    built_whole,
    hub_id_or_none,
    load_pretraining_model,
    loading_instructions,
    verify_reload,
)
from contrastive_hf.commands.scripts import setup_logging
from contrastive_hf.data.collators import EXAMPLE_INDEX_COLUMN, ContrastiveDataCollator, PairCollator
from contrastive_hf.data.corpus import load_corpus, tokenize_corpus
from contrastive_hf.evaluation import evaluate_sts, read_stsbenchmark
from contrastive_hf.hub.model_card import ModelCardInfo
from contrastive_hf.training.trainer import ContrastiveTrainer
from contrastive_hf.training.training_args import ContrastiveTrainingArguments

logger = logging.getLogger(__name__)

MODES = ("unsup", "sup")
# SimCSE's hyper-parameters for BERT-base (paper §3-4 and Appendix A; its run_unsup_example.sh / run_sup_example.sh).
# "batch_size" is the global batch: each process gets batch_size / WORLD_SIZE (--per_device_train_batch_size).
SIMCSE_DEFAULTS = {
    "unsup": {"batch_size": 64, "learning_rate": 3e-5, "num_train_epochs": 1, "projection_at_inference": False},
    # 512 on 4 GPUs x 128 in SimCSE; the MLP stays in the embeddings (no --mlp_only_train for supervised SimCSE)
    "sup": {"batch_size": 512, "learning_rate": 5e-5, "num_train_epochs": 3, "projection_at_inference": True},
}
# The settings the log lists, each beside its SimCSE default.
LOGGED_SETTINGS = (
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "learning_rate",
    "num_train_epochs",
    "max_steps",
    "max_seq_length",
    "temperature",
    "pooler_type",
    "projection_type",
    "projection_at_inference",
    "hard_negative_weight",
    "do_mlm",
    "mlm_weight",
    "prebatch_size",
)
# SimCSE's MLP head over [CLS]: one dense layer (hidden -> hidden) followed by tanh, freshly initialised. Its encoder
# has no pooler layer, hence "cls_before_pooler" (the raw [CLS] state) under the MLP.
SIMCSE_HEAD = {"projection_layers": 1, "projection_activation": "tanh", "projection_output_activation": True}


@dataclass
class ModelArguments:
    model_name_or_path: str | None = field(
        default=None,
        metadata={"help": "A pretrained encoder or a contrastive_hf checkpoint; unset to train from --config_name."},
    )
    config_name: str | None = field(default=None, metadata={"help": "Encoder config for training from scratch."})
    tokenizer_name: str | None = field(default=None, metadata={"help": "Tokenizer, if not the model's."})
    cache_dir: str | None = field(default=None, metadata={"help": "Where Hub downloads are cached."})
    pooler_type: str = field(
        default="cls_before_pooler",
        metadata={
            "help": "The [CLS] hidden state under SimCSE's MLP (SimCSE's 'cls'), or mean, max, avg_first_last..."
        },
    )
    projection_type: str = field(
        default="mlp", metadata={"help": "mlp: SimCSE's head (dense + tanh); linear or none."}
    )
    projection_at_inference: bool = field(
        default=False,
        metadata={
            "help": "Keep the MLP in the embeddings at inference (mode default: False for unsup, True for sup)."
        },
    )
    temperature: float = field(default=0.05, metadata={"help": "Temperature of InfoNCE (SimCSE: 0.05)."})
    hard_negative_weight: float = field(
        default=0.0, metadata={"help": "Added to each anchor's hard-negative logit (sup; SimCSE's default 0)."}
    )
    do_mlm: bool = field(default=False, metadata={"help": "Add SimCSE's auxiliary MLM objective."})
    mlm_weight: float = field(default=0.1, metadata={"help": "Weight of the MLM loss with --do_mlm (SimCSE: 0.1)."})


@dataclass
class DataArguments:
    mode: str = field(
        metadata={
            "help": "unsup: dropout views of each sentence of a text corpus (SimCSE defaults: batch 64, lr 3e-5, "
            "1 epoch); sup: NLI pairs with contradiction hard negatives (batch 512, lr 5e-5, 3 epochs).",
            "choices": list(MODES),
        }
    )
    train_file: str | None = field(
        default=None,
        metadata={"help": "unsup: .txt, one sentence per line (or .csv/.json); sup: .csv/.json of pairs/triplets."},
    )
    dataset_name: str | None = field(default=None, metadata={"help": "A Hub dataset to train on instead."})
    dataset_config_name: str | None = field(default=None, metadata={"help": "Its configuration name."})
    text_column: str | None = field(default=None, metadata={"help": "unsup: the sentence column (default: text)."})
    pair_columns: str | None = field(
        default=None,
        metadata={
            "help": "sup: anchor,positive[,hard_negative] column names (default: sent0,sent1,hard_neg or "
            "anchor,positive,hard_negative, whichever the data has)."
        },
    )
    max_seq_length: int = field(default=32, metadata={"help": "Maximum tokens per sentence (SimCSE: 32)."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Use only the first N examples."})
    preprocessing_num_workers: int | None = field(default=None, metadata={"help": "Processes for tokenization."})
    mlm_probability: float = field(default=0.15, metadata={"help": "Fraction of tokens masked with --do_mlm."})
    stsb_dev_file: str | None = field(
        default=None,
        metadata={
            "help": "STS Benchmark sts-dev.csv: scored before and after training, and every --eval_steps with "
            "--eval_strategy steps (SimCSE keeps the best: --metric_for_best_model eval_stsb_spearman "
            "--load_best_model_at_end)."
        },
    )


def parse_arguments(argv: list[str]) -> tuple[ModelArguments, DataArguments, ContrastiveTrainingArguments]:
    """Flags or one JSON file, with SimCSE's defaults for the chosen ``--mode`` under whatever is given."""
    parser = HfArgumentParser((ModelArguments, DataArguments, ContrastiveTrainingArguments))
    if len(argv) == 1 and argv[0].endswith(".json"):
        with open(argv[0], encoding="utf-8") as handle:
            given = json.load(handle)
        if given.get("mode") not in MODES:
            raise ValueError(f'{argv[0]} must set "mode" to one of {", ".join(MODES)}, got {given.get("mode")!r}.')
        return parser.parse_dict({**mode_defaults(given["mode"]), **given})
    probe = argparse.ArgumentParser(add_help=False)
    probe.add_argument("--mode")
    mode = probe.parse_known_args(argv)[0].mode
    parser.set_defaults(**mode_defaults(mode))  # argparse applies a default only where the flag is absent
    return parser.parse_args_into_dataclasses(args=argv)


def mode_defaults(mode: str | None) -> dict:
    """SimCSE's hyper-parameters for ``mode`` as argument defaults; {} for a missing or unknown mode (the parser then
    reports it)."""
    if mode not in SIMCSE_DEFAULTS:
        return {}
    defaults = dict(SIMCSE_DEFAULTS[mode])
    world_size = int(os.environ.get("WORLD_SIZE", "1"))  # set by accelerate launch / torchrun
    defaults["per_device_train_batch_size"] = max(1, defaults.pop("batch_size") // world_size)
    return defaults


def describe_hyperparameters(mode: str, *argument_groups) -> str:
    """One line with the resolved SimCSE settings, and those that differ from SimCSE's defaults for ``mode``."""
    values = {
        name: getattr(group, name) for group in argument_groups for name in LOGGED_SETTINGS if hasattr(group, name)
    }
    defaults = {
        field.name: field.default
        for group in (ModelArguments, DataArguments, ContrastiveTrainingArguments)
        for field in fields(group)
    }
    defaults.update(mode_defaults(mode))
    changed = [f"{name} ({defaults[name]} -> {value})" for name, value in values.items() if value != defaults[name]]
    settings = ", ".join(f"{name}={value}" for name, value in values.items())
    return f"SimCSE --mode {mode}: {settings}. Differing from SimCSE's defaults: {', '.join(changed) or 'none'}."


def build_model(model_args: ModelArguments, tokenizer) -> ContrastiveForPreTraining:
    overrides = {
        "pooler_type": model_args.pooler_type,
        "projection_type": model_args.projection_type,
        "projection_at_inference": model_args.projection_at_inference,
        "temperature": model_args.temperature,
        "contrastive_loss": "info_nce",  # SimCSE's loss: first views against second views (and hard negatives)
        "hard_negative_weight": model_args.hard_negative_weight,
        "mlm_weight": model_args.mlm_weight if model_args.do_mlm else 0.0,
        "cl_weight": 1.0,
        **SIMCSE_HEAD,
    }
    return load_pretraining_model(
        model_args.model_name_or_path, model_args.config_name, tokenizer, model_args.cache_dir, **overrides
    )


def load_sentences(data_args, tokenizer, cache_dir):
    """unsup: the corpus tokenized one sentence per example (empty lines dropped and counted)."""
    corpus = load_corpus(
        data_args.train_file, data_args.dataset_name, data_args.dataset_config_name, cache_dir=cache_dir
    )
    return tokenize_corpus(
        corpus,
        tokenizer,
        max_seq_length=data_args.max_seq_length,
        text_column=data_args.text_column,
        num_proc=data_args.preprocessing_num_workers,
    )


def load_pairs(data_args, collator: PairCollator, cache_dir):
    """sup: the pairs/triplets as text (the collator tokenizes each batch), incomplete rows dropped and counted."""
    corpus = load_corpus(
        data_args.train_file, data_args.dataset_name, data_args.dataset_config_name, cache_dir=cache_dir
    )
    columns = collator.resolve_columns({name: name for name in corpus.column_names})  # by the names present
    collator.columns = columns  # every batch uses the same columns

    def complete(batch):
        rows = zip(*(batch[column] for column in columns), strict=True)
        return [all(isinstance(text, str) and text.strip() for text in row) for row in rows]

    total = len(corpus)
    corpus = corpus.filter(
        complete, batched=True, num_proc=data_args.preprocessing_num_workers, desc="Dropping incomplete rows"
    )
    if len(corpus) < total:
        logger.warning(
            "Dropped %d of %d rows with an empty or missing %s.", total - len(corpus), total, "/".join(columns)
        )
    if len(corpus) == 0:
        raise ValueError(f"No complete rows in the training data (columns {', '.join(columns)}).")
    # a stable identity per example, from which the collator draws its MLM masks
    corpus = corpus.map(
        lambda batch, indices: {EXAMPLE_INDEX_COLUMN: indices}, batched=True, with_indices=True, desc="Numbering"
    )
    kinds = "(anchor, positive, hard negative) triplets" if len(columns) == 3 else "(anchor, positive) pairs"
    logger.info("Training on %d %s from columns %s.", len(corpus), kinds, ", ".join(columns))
    return corpus


def main(argv: list[str] | None = None):
    model_args, data_args, training_args = parse_arguments(sys.argv[1:] if argv is None else argv)

    setup_logging(training_args, logger, summary=True)
    logger.info(describe_hyperparameters(data_args.mode, model_args, data_args, training_args))

    tokenizer_name = model_args.tokenizer_name or model_args.model_name_or_path
    if tokenizer_name is None:
        raise ValueError("Give --tokenizer_name (or --model_name_or_path, whose tokenizer is then used).")
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_name, cache_dir=model_args.cache_dir)
    with built_whole(training_args):  # whole in each process, also under DeepSpeed ZeRO-3
        model = build_model(model_args, tokenizer)

    with training_args.main_process_first(desc="training data"):
        if data_args.mode == "unsup":
            collator = ContrastiveDataCollator(
                tokenizer,
                augmentation="dropout",  # two identical copies: the encoder's dropout makes the views
                mlm=model_args.do_mlm,
                mlm_probability=data_args.mlm_probability,
                max_length=data_args.max_seq_length,
                seed=training_args.seed,
            )
            train_dataset = load_sentences(data_args, tokenizer, model_args.cache_dir)
        else:
            collator = PairCollator(
                tokenizer,
                columns=[name.strip() for name in data_args.pair_columns.split(",")]
                if data_args.pair_columns
                else None,
                max_length=data_args.max_seq_length,
                mlm=model_args.do_mlm,
                mlm_probability=data_args.mlm_probability,
                seed=training_args.seed,
            )
            train_dataset = load_pairs(data_args, collator, model_args.cache_dir)
    if data_args.max_train_samples is not None:
        train_dataset = train_dataset.select(range(min(data_args.max_train_samples, len(train_dataset))))

    # STS-B dev is scored on every process (each computes the same figures): under DeepSpeed ZeRO-3 a forward pass
    # needs every process's parameter shards
    stsb, before = None, None
    if data_args.stsb_dev_file:
        stsb = read_stsbenchmark(data_args.stsb_dev_file)
        before = evaluate_sts(model, stsb, tokenizer=tokenizer)
        logger.info("STS-B dev before training: Spearman %.2f.", before["spearman"])
    if training_args.eval_strategy != "no" and stsb is None:
        raise ValueError("--eval_strategy scores STS-B dev during training: give --stsb_dev_file (sts-dev.csv).")

    trainer = ContrastiveTrainer(
        model=model,
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset={"stsb": stsb} if training_args.eval_strategy != "no" else None,
        data_collator=collator,
        processing_class=tokenizer,
    )
    train_result = trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    trainer.save_model(_internal_call=True)  # with --push_to_hub, the push waits for the model card below
    metrics = {**train_result.metrics, "train_samples": len(train_dataset)}
    trainer.log_metrics("train", metrics)
    trainer.save_metrics("train", metrics)
    trainer.save_state()

    eval_results, reference = {}, None
    if stsb is not None:
        after = evaluate_sts(trainer.model, stsb, tokenizer=tokenizer)
        eval_results["stsb_dev"] = {"spearman": after["spearman"]}
        figures = {"stsb_spearman": after["spearman"], "stsb_pearson": after["pearson"]}
        figures.update(stsb_spearman_before=before["spearman"], stsb_pearson_before=before["pearson"])
        trainer.log_metrics("eval", figures)  # log_metrics and save_metrics write on the main process only
        trainer.save_metrics("eval", {f"eval_{name}": value for name, value in figures.items()})
        logger.info("STS-B dev Spearman: %.2f before training, %.2f after.", before["spearman"], after["spearman"])
        # embeddings at the end of training, to check the saved checkpoint against
        reference = (stsb.sentences1[:32], trainer.model.contrastive.encode(stsb.sentences1[:32], tokenizer=tokenizer))

    if data_args.mode == "unsup":
        views = "dropout"
    else:
        views = f"NLI: {collator.columns[0]} -> {collator.columns[1]} (entailment)"
        views += f", hard negative {collator.columns[2]} (contradiction)" if len(collator.columns) == 3 else ""
    hyperparameters = {
        "mode": data_args.mode,
        "steps": trainer.state.global_step,
        "batch size": training_args.per_device_train_batch_size * training_args.world_size,
        "learning rate": training_args.learning_rate,
        "max length": data_args.max_seq_length,
        "seed": training_args.seed,
    }
    if training_args.prebatch_size:
        hyperparameters["pre-batch queue"] = training_args.prebatch_size
    trainer.model_card_info = ModelCardInfo(
        method="SimCSE" if data_args.mode == "unsup" else "Supervised SimCSE",
        hard_negatives=data_args.mode == "sup" and len(collator.columns) == 3,
        model_name=os.path.basename(os.path.normpath(training_args.output_dir)),
        base_model=hub_id_or_none(model_args.model_name_or_path),
        augmentation=views,
        training_data=data_args.dataset_name or os.path.basename(data_args.train_file),
        hyperparameters=hyperparameters,
        eval_results=eval_results,
    )
    trainer.create_model_card()
    if training_args.push_to_hub:
        try:
            trainer.push_to_hub(commit_message="End of training")
        except Exception as error:  # the local checkpoint is complete: say so rather than lose the run
            logger.error(
                "Pushing to the Hub failed (%s: %s). The checkpoint in %s is complete; push it later with "
                "`hf upload` or trainer.push_to_hub().",
                type(error).__name__,
                error,
                training_args.output_dir,
            )
            sys.exit(1)
    if not trainer.is_world_process_zero():
        return
    if reference is not None:
        verify_reload(training_args.output_dir, tokenizer, *reference)
    print(loading_instructions(training_args.output_dir))


if __name__ == "__main__":
    main()
