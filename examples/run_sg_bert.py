#!/usr/bin/env python
"""SG-BERT: self-guided contrastive learning of a sentence encoder's [CLS] (Kim, Yoo & Lee, ACL 2021).

A frozen copy of the encoder (BERT_F) gives the views, its every layer max-pooled; the tuned encoder's (BERT_T)
last-layer [CLS] learns to match them (`contrastive_hf.recipes.sg_bert`). Only BERT_T is saved, as a contrastive_hf
checkpoint. STS-B dev is scored before and after training with ``--stsb_dev_file``.

Runs as ``python examples/run_sg_bert.py ...`` or ``accelerate launch examples/run_sg_bert.py ...``; flags or a
single JSON file. Every TrainingArguments flag works; the defaults are the paper's (batch 16, learning rate 5e-5,
AdamW betas (0.9, 0.9), 10% warm-up, tau 0.01, lambda 0.1, --loss opt3 = SG-OPT):

    python examples/run_sg_bert.py --model_name_or_path bert-base-uncased \
        --train_file examples/demo/data/wiki1m_sample.txt --stsb_dev_file examples/demo/data/sts-dev.csv \
        --num_train_epochs 1 --output_dir outputs/sg-bert
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from transformers import AutoTokenizer, HfArgumentParser

from contrastive_hf.commands.loading import loading_instructions, verify_reload
from contrastive_hf.commands.scripts import parse_arguments, setup_logging
from contrastive_hf.data.corpus import first_examples, load_corpus, prepare_streaming, tokenize_corpus
from contrastive_hf.evaluation import evaluate_sts, read_stsbenchmark
from contrastive_hf.recipes.sg_bert import (
    LAYER_POOLINGS,
    SELF_GUIDED_LOSSES,
    SelfGuidedCollator,
    SelfGuidedConfig,
    SelfGuidedModel,
    SelfGuidedTrainer,
    SelfGuidedTrainingArguments,
)

logger = logging.getLogger(__name__)
_DEFAULTS = SelfGuidedConfig()  # the paper's values, in one place


@dataclass
class ModelArguments:
    model_name_or_path: str = field(
        metadata={"help": "The pretrained encoder BERT_F copies (Hub id or folder), or a contrastive_hf checkpoint."}
    )
    tokenizer_name: str | None = field(default=None, metadata={"help": "Tokenizer, if not the model's."})
    pooler_type: str = field(
        default="cls_before_pooler", metadata={"help": "BERT_T's sentence vector: the last layer's [CLS] (paper)."}
    )
    loss: str = field(default=_DEFAULTS.loss, metadata={"help": f"One of {', '.join(SELF_GUIDED_LOSSES)}."})
    temperature: float = field(default=_DEFAULTS.temperature, metadata={"help": "tau of the loss."})
    regularization_weight: float = field(
        default=_DEFAULTS.regularization_weight, metadata={"help": "lambda of ||BERT_F - BERT_T||^2 (0: off)."}
    )
    projection_hidden_size: int = field(
        default=_DEFAULTS.projection_hidden_size, metadata={"help": "Width of the projection head f's two layers."}
    )
    layer_pooling: str = field(
        default=_DEFAULTS.layer_pooling, metadata={"help": f"How a layer of BERT_F becomes a view: {LAYER_POOLINGS}."}
    )
    freeze_embeddings: bool = field(
        default=_DEFAULTS.freeze_embeddings, metadata={"help": "Keep BERT_T's embedding layer frozen."}
    )
    cache_dir: str | None = field(default=None, metadata={"help": "Where Hub downloads are cached."})


@dataclass
class DataArguments:
    train_file: str | None = field(
        default=None, metadata={"help": "Sentences: .txt (one per line), .csv/.tsv or .json/.jsonl."}
    )
    dataset_name: str | None = field(default=None, metadata={"help": "A Hub dataset to train on."})
    dataset_config_name: str | None = field(default=None, metadata={"help": "Its configuration name."})
    text_column: str | None = field(default=None, metadata={"help": "The text column (default: 'text' or the first)."})
    max_seq_length: int = field(default=64, metadata={"help": "Maximum tokens per sentence."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Use only the first N sentences."})
    streaming: bool = field(
        default=False, metadata={"help": "Read the corpus on the fly (needs --max_steps); each process its shards."}
    )
    preprocessing_num_workers: int | None = field(default=None, metadata={"help": "Processes for tokenization."})
    stsb_dev_file: str | None = field(
        default=None,
        metadata={
            "help": "STS Benchmark sts-dev.csv: scored before and after training (and every --eval_steps with "
            "--eval_strategy steps)."
        },
    )


def main():
    parser = HfArgumentParser((ModelArguments, DataArguments, SelfGuidedTrainingArguments))
    model_args, data_args, training_args = parse_arguments(parser)
    setup_logging(training_args, logger)
    if data_args.streaming and training_args.max_steps <= 0:
        raise ValueError("--streaming reads a corpus of unknown length: give --max_steps.")

    tokenizer = AutoTokenizer.from_pretrained(
        model_args.tokenizer_name or model_args.model_name_or_path, cache_dir=model_args.cache_dir
    )
    model = SelfGuidedModel.from_encoder_pretrained(
        model_args.model_name_or_path,
        pooler_type=model_args.pooler_type,
        loss=model_args.loss,
        temperature=model_args.temperature,
        regularization_weight=model_args.regularization_weight,
        projection_hidden_size=model_args.projection_hidden_size,
        layer_pooling=model_args.layer_pooling,
        freeze_embeddings=model_args.freeze_embeddings,
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
            num_proc=data_args.preprocessing_num_workers,
        )
    if data_args.streaming:
        prepare_streaming(train_dataset, training_args)
    train_dataset = first_examples(train_dataset, data_args.max_train_samples)

    stsb = read_stsbenchmark(data_args.stsb_dev_file) if data_args.stsb_dev_file else None
    if training_args.eval_strategy != "no" and stsb is None:
        raise ValueError("--eval_strategy scores STS-B dev during training: give --stsb_dev_file (sts-dev.csv).")
    before = None
    if stsb is not None and training_args.should_save:
        before = evaluate_sts(model, stsb, tokenizer=tokenizer)
        print(f"STS-B dev Spearman before training: {before['spearman']:.2f}")

    trainer = SelfGuidedTrainer(
        model=model,
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset={"stsb": stsb} if training_args.eval_strategy != "no" else None,
        data_collator=SelfGuidedCollator(tokenizer, max_length=data_args.max_seq_length),
        processing_class=tokenizer,
    )
    train_result = trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    trainer.save_model()  # BERT_T alone, as a ContrastiveModel checkpoint
    metrics = train_result.metrics
    if not data_args.streaming:
        metrics["train_samples"] = len(train_dataset)
    trainer.log_metrics("train", metrics)
    trainer.save_metrics("train", metrics)
    trainer.save_state()
    if not trainer.is_world_process_zero():
        return

    if before is not None:
        after = evaluate_sts(trainer.model, stsb, tokenizer=tokenizer)
        print(f"STS-B dev Spearman before training: {before['spearman']:.2f}, after training: {after['spearman']:.2f}")
        scores = {
            "eval_stsb_spearman_before": before["spearman"],
            "eval_stsb_pearson_before": before["pearson"],
            "eval_stsb_spearman": after["spearman"],
            "eval_stsb_pearson": after["pearson"],
        }
        trainer.log_metrics("eval", scores)
        trainer.save_metrics("eval", scores)

    # The saved checkpoint must give the trained embeddings through AutoModel.
    sentences = stsb.sentences1[:32] if stsb is not None else ["A man is playing a guitar.", "A cat sleeps."]
    verify_reload(
        training_args.output_dir,
        tokenizer,
        sentences,
        trainer.model.contrastive.encode(sentences, tokenizer=tokenizer),
    )
    print("The saved checkpoint holds BERT_T alone (the tuned encoder; its [CLS] is the embedding).")
    print(loading_instructions(training_args.output_dir))


if __name__ == "__main__":
    main()
