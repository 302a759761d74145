#!/usr/bin/env python
"""CLEAR: pre-train or continue pre-training a sentence encoder with MLM + a contrastive loss on augmented views.

Runs as ``python examples/run_clear.py ...`` or ``accelerate launch examples/run_clear.py ...``; flags or a single
JSON file (``python examples/run_clear.py examples/demo/clear_demo.json``). Flag names follow run_mlm.py where they
overlap, and every TrainingArguments flag works.

    python examples/run_clear.py --model_name_or_path bert-base-uncased --dataset_name wikitext \
        --dataset_config_name wikitext-103-raw-v1 --augmentations del_word --output_dir clear-bert
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass, field

from transformers import AutoTokenizer, HfArgumentParser

from contrastive_hf import ContrastiveForPreTraining
from contrastive_hf.commands.loading import (
    built_whole,
    hub_id_or_none,
    load_pretraining_model,
    loading_instructions,
    verify_reload,
    whole_parameters,
)
from contrastive_hf.commands.scripts import parse_arguments, setup_logging
from contrastive_hf.data.augmentations import AUGMENTATION_NAMES, add_del_token, needs_del_token
from contrastive_hf.data.collators import ContrastiveDataCollator
from contrastive_hf.data.corpus import first_examples, load_corpus, prepare_streaming, tokenize_corpus
from contrastive_hf.evaluation import evaluate_sts, read_stsbenchmark
from contrastive_hf.hub.adapters import add_adapter, lora_config, merge_and_save
from contrastive_hf.hub.model_card import ModelCardInfo
from contrastive_hf.training.trainer import ContrastiveTrainer
from contrastive_hf.training.training_args import ContrastiveTrainingArguments

logger = logging.getLogger(__name__)


@dataclass
class ModelArguments:
    model_name_or_path: str | None = field(
        default=None,
        metadata={
            "help": "A pretrained encoder (Hub id or folder) or a contrastive_hf checkpoint to continue from. "
            "Leave unset to train from scratch with --config_name."
        },
    )
    config_name: str | None = field(
        default=None, metadata={"help": "Encoder config (Hub id, folder or config.json) for training from scratch."}
    )
    tokenizer_name: str | None = field(
        default=None, metadata={"help": "Tokenizer, when it differs from --model_name_or_path."}
    )
    cache_dir: str | None = field(default=None, metadata={"help": "Where Hub downloads are cached."})
    pooler_type: str = field(
        default="cls", metadata={"help": "cls, cls_before_pooler, mean, max, avg_first_last or avg_top2."}
    )
    projection_type: str = field(default="mlp", metadata={"help": "none, linear or mlp."})
    projection_dim: int | None = field(default=None, metadata={"help": "Projection output size (default: hidden)."})
    projection_at_inference: bool = field(
        default=False, metadata={"help": "Keep the projection head in the embeddings at inference."}
    )
    temperature: float = field(default=0.05, metadata={"help": "Temperature of the contrastive loss."})
    contrastive_loss: str = field(
        default="nt_xent",
        metadata={"help": "nt_xent (CLEAR: 2N views) or info_nce (SimCSE; needed for --prebatch_size)."},
    )
    mlm_weight: float = field(default=1.0, metadata={"help": "Weight of L_MLM (0 turns MLM off)."})
    cl_weight: float = field(default=1.0, metadata={"help": "Weight of L_CL."})
    sub_batch_size: int | None = field(
        default=None,
        metadata={
            "help": "Encode views sorted by length, this many at a time, without their padding (0: one padded pass; "
            "default: ContrastiveConfig's, 16)."
        },
    )
    lora_r: int = field(default=0, metadata={"help": "Train a LoRA adapter of this rank on the encoder (0: off)."})
    lora_alpha: int | None = field(default=None, metadata={"help": "LoRA alpha (default: 2 * lora_r)."})
    lora_dropout: float = field(default=0.0, metadata={"help": "Dropout on the LoRA path."})
    lora_target_modules: str | None = field(
        default=None, metadata={"help": "Comma-separated module names (default: peft's for the encoder type)."}
    )
    lora_modules_to_save: str | None = field(
        default=None, metadata={"help": "Comma-separated modules trained in full beside the adapter, e.g. projection."}
    )


@dataclass
class DataArguments:
    dataset_name: str | None = field(default=None, metadata={"help": "A Hub dataset to train on."})
    dataset_config_name: str | None = field(default=None, metadata={"help": "Its configuration name."})
    train_file: str | None = field(
        default=None, metadata={"help": "A local corpus: .txt (one sentence per line), .csv/.tsv or .json/.jsonl."}
    )
    text_column: str | None = field(default=None, metadata={"help": "The text column (default: 'text' or the first)."})
    max_seq_length: int = field(default=32, metadata={"help": "Maximum tokens per sentence after tokenization."})
    line_by_line: bool = field(
        default=True,
        metadata={"help": "Each non-empty line is one example; --line_by_line False packs text into blocks."},
    )
    split_sentences: bool = field(
        default=False,
        metadata={"help": "For a paragraph per line: split each line into sentences, one example each."},
    )
    max_train_samples: int | None = field(default=None, metadata={"help": "Truncate the corpus (for quick runs)."})
    preprocessing_num_workers: int | None = field(default=None, metadata={"help": "Processes for tokenization."})
    augmentations: str = field(
        default="del_word",
        metadata={
            "help": f"How the two views are made: {', '.join(AUGMENTATION_NAMES)}; '+' composes in order as CLEAR "
            "names it (subs+del_span), ',' mixes: each view draws one (del_word,reorder)."
        },
    )
    del_word_probability: float = field(default=0.7, metadata={"help": "CLEAR's word deletion ratio."})
    synonyms_file: str | None = field(
        default=None,
        metadata={
            "help": "JSON synonym table (word -> list of synonyms) for 'subs'; without it, synonyms are the nearest "
            "whole-word neighbours in the encoder's input embeddings."
        },
    )
    streaming: bool = field(
        default=False,
        metadata={"help": "Read and tokenize the corpus on the fly (needs --max_steps); each process its own shards."},
    )
    mlm_probability: float = field(default=0.15, metadata={"help": "Fraction of tokens masked for MLM."})
    stsb_dev_file: str | None = field(
        default=None,
        metadata={
            "help": "STS Benchmark sts-dev.csv, scored at the end of training, and every --eval_steps with "
            "--eval_strategy steps (eval_stsb_spearman; --metric_for_best_model eval_stsb_spearman "
            "--load_best_model_at_end keeps the best checkpoint, as SimCSE does)."
        },
    )


def build_model(model_args: ModelArguments, tokenizer) -> ContrastiveForPreTraining:
    overrides = {
        "pooler_type": model_args.pooler_type,
        "projection_type": model_args.projection_type,
        "projection_dim": model_args.projection_dim,
        "projection_at_inference": model_args.projection_at_inference,
        "temperature": model_args.temperature,
        "contrastive_loss": model_args.contrastive_loss,
        "mlm_weight": model_args.mlm_weight,
        "cl_weight": model_args.cl_weight,
    }
    if model_args.sub_batch_size is not None:
        overrides["sub_batch_size"] = model_args.sub_batch_size
    return load_pretraining_model(
        model_args.model_name_or_path, model_args.config_name, tokenizer, model_args.cache_dir, **overrides
    )


def main():
    parser = HfArgumentParser((ModelArguments, DataArguments, ContrastiveTrainingArguments))
    model_args, data_args, training_args = parse_arguments(parser)
    setup_logging(training_args, logger)

    tokenizer_name = model_args.tokenizer_name or model_args.model_name_or_path
    if tokenizer_name is None:
        raise ValueError("Give --tokenizer_name (or --model_name_or_path, whose tokenizer is then used).")
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_name, cache_dir=model_args.cache_dir)
    if needs_del_token(data_args.augmentations):
        add_del_token(tokenizer)  # before a from-scratch model is sized to the vocabulary
    with built_whole(training_args):
        model = build_model(model_args, tokenizer)
        if needs_del_token(data_args.augmentations):
            add_del_token(tokenizer, model)  # resizes a pretrained encoder's embeddings for the new token
    if model_args.lora_r:
        model = add_adapter(
            model,
            lora_config(
                model,
                r=model_args.lora_r,
                alpha=model_args.lora_alpha,
                dropout=model_args.lora_dropout,
                target_modules=_split(model_args.lora_target_modules),
                modules_to_save=_split(model_args.lora_modules_to_save),
            ),
        )
        model.print_trainable_parameters()

    collator = ContrastiveDataCollator(
        tokenizer,
        augmentation=data_args.augmentations,
        mlm=model.config.mlm_weight > 0,
        mlm_probability=data_args.mlm_probability,
        del_word_probability=data_args.del_word_probability,
        synonyms=data_args.synonyms_file or model,  # used by 'subs' only
        max_length=data_args.max_seq_length,
        seed=training_args.seed,
    )

    with training_args.main_process_first(desc="corpus tokenization"):
        corpus = load_corpus(
            data_args.train_file,
            data_args.dataset_name,
            data_args.dataset_config_name,
            cache_dir=model_args.cache_dir,
            streaming=data_args.streaming,
        )
        train_dataset = tokenize_corpus(
            corpus,
            tokenizer,
            max_seq_length=data_args.max_seq_length,
            text_column=data_args.text_column,
            line_by_line=data_args.line_by_line,
            split_sentences=data_args.split_sentences,
            num_proc=data_args.preprocessing_num_workers,
        )
    if data_args.streaming:
        prepare_streaming(train_dataset, training_args)
    train_dataset = first_examples(train_dataset, data_args.max_train_samples)

    eval_dataset = None  # STS-B dev during training, scored by ContrastiveTrainer.evaluate
    if training_args.eval_strategy != "no":
        if not data_args.stsb_dev_file:
            raise ValueError("--eval_strategy scores STS-B dev during training: give --stsb_dev_file (sts-dev.csv).")
        eval_dataset = {"stsb": read_stsbenchmark(data_args.stsb_dev_file)}

    trainer = ContrastiveTrainer(
        model=model,
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        data_collator=collator,
        processing_class=tokenizer,
    )
    train_result = trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    # With --push_to_hub, the push waits until the card is written (below), so a failed push cannot lose the run.
    trainer.save_model(_internal_call=True)
    metrics = train_result.metrics
    if not data_args.streaming:
        metrics["train_samples"] = len(train_dataset)
    trainer.log_metrics("train", metrics)
    trainer.save_metrics("train", metrics)
    trainer.save_state()

    eval_results, reference = {}, None
    if data_args.stsb_dev_file:  # on every process: under DeepSpeed ZeRO-3 each forward gathers parameter shards
        stsb = read_stsbenchmark(data_args.stsb_dev_file)
        scores = evaluate_sts(trainer.model, stsb, tokenizer=tokenizer)
        eval_results["stsb_dev"] = {"spearman": scores["spearman"]}
        trainer.log_metrics("eval", {"stsb_spearman": scores["spearman"], "stsb_pearson": scores["pearson"]})
        trainer.save_metrics(
            "eval", {"eval_stsb_spearman": scores["spearman"], "eval_stsb_pearson": scores["pearson"]}
        )
        # embeddings at the end of training, to check the saved checkpoint against
        reference = (stsb.sentences1[:32], trainer.model.contrastive.encode(stsb.sentences1[:32], tokenizer=tokenizer))

    trainer.model_card_info = ModelCardInfo(
        method="SimCSE" if data_args.augmentations == "dropout" and model.config.mlm_weight == 0 else "CLEAR",
        model_name=os.path.basename(os.path.normpath(training_args.output_dir)),
        base_model=hub_id_or_none(model_args.model_name_or_path),
        augmentation=data_args.augmentations,
        training_data=data_args.dataset_name or os.path.basename(data_args.train_file),
        hyperparameters={
            "steps": trainer.state.global_step,
            "batch size": training_args.per_device_train_batch_size * training_args.world_size,
            "learning rate": training_args.learning_rate,
            "max length": data_args.max_seq_length,
            "seed": training_args.seed,
        },
        eval_results=eval_results,
        adapter=_describe_adapter(trainer.model),
    )
    trainer.create_model_card()
    if training_args.push_to_hub:
        try:
            trainer.push_to_hub(commit_message="End of training")
        except Exception as error:  # the local checkpoint is complete: say so rather than lose the run
            logger.error(
                "Pushing to the Hub failed (%s: %s). The checkpoint in %s is complete and unchanged; push it later "
                "with `huggingface-cli upload` or trainer.push_to_hub().",
                type(error).__name__,
                error,
                training_args.output_dir,
            )
            sys.exit(1)
    loadable_dir = training_args.output_dir
    if model_args.lora_r:  # the adapter stays in output_dir; a merged full checkpoint goes beside it
        loadable_dir = training_args.output_dir.rstrip("/") + "-merged"
        with whole_parameters(trainer.model):
            if trainer.is_world_process_zero():
                merge_and_save(trainer.model, loadable_dir, tokenizer)
        logger.info("LoRA adapter saved in %s; merged checkpoint in %s.", training_args.output_dir, loadable_dir)
    if not trainer.is_world_process_zero():
        return
    if reference is not None:
        verify_reload(loadable_dir, tokenizer, *reference)
    print(loading_instructions(loadable_dir))


def _describe_adapter(model) -> str | None:
    config = getattr(model, "peft_config", {}).get("default")
    if config is None:
        return None
    targets = ", ".join(sorted(config.target_modules))
    return f"{config.peft_type.value} adapter (r={config.r}, alpha={config.lora_alpha}) on {targets}"


def _split(names: str | None) -> list[str] | None:
    return [name.strip() for name in names.split(",") if name.strip()] if names else None


if __name__ == "__main__":
    main()
