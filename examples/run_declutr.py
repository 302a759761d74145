#!/usr/bin/env python
"""DeCLUTR-style span views: train a sentence encoder on positives sampled as spans of the same document.

Slice views (two differently masked copies of a span), neighbour views (two adjacent spans) or neighbouring slice
views (both), optionally with a third span of the same document as a hard negative; see
`contrastive_hf.recipes.declutr`. Documents too short for the views are skipped and counted in the log.

Runs as ``python examples/run_declutr.py ...`` or ``accelerate launch examples/run_declutr.py ...``; flags or a
single JSON file. Every TrainingArguments flag works. A small run on the shipped Wikipedia sample, from scratch:

    python examples/run_declutr.py --config_name examples/demo/encoder_config.json \
        --tokenizer_name examples/demo/tokenizer --train_file examples/demo/data/enwiki_paragraphs_sample.txt \
        --span_view neighbouring_slice --hard_negatives --span_words 32 --max_steps 200 \
        --per_device_train_batch_size 32 --learning_rate 5e-4 --stsb_dev_file examples/demo/data/sts-dev.csv \
        --output_dir outputs/declutr-demo

For corpora larger than memory add ``--streaming --max_steps N`` (each process then reads only its own shards).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from transformers import AutoTokenizer, HfArgumentParser

from contrastive_hf import ContrastiveForPreTraining
from contrastive_hf.commands.loading import built_whole, load_pretraining_model, loading_instructions
from contrastive_hf.commands.scripts import parse_arguments, setup_logging
from contrastive_hf.data.corpus import first_examples, load_corpus, prepare_streaming
from contrastive_hf.evaluation import evaluate_sts, read_stsbenchmark
from contrastive_hf.recipes.declutr import SPAN_VIEWS, SPAN_WORDS, SpanViewCollator, tokenize_documents
from contrastive_hf.training.trainer import ContrastiveTrainer
from contrastive_hf.training.training_args import ContrastiveTrainingArguments

logger = logging.getLogger(__name__)


@dataclass
class ModelArguments:
    model_name_or_path: str | None = field(
        default=None,
        metadata={"help": "A pretrained encoder or contrastive_hf checkpoint; unset to train from --config_name."},
    )
    config_name: str | None = field(default=None, metadata={"help": "Encoder config for training from scratch."})
    tokenizer_name: str | None = field(default=None, metadata={"help": "Tokenizer, if not the model's."})
    cache_dir: str | None = field(default=None, metadata={"help": "Where Hub downloads are cached."})
    pooler_type: str = field(default="mean", metadata={"help": "DeCLUTR mean-pools the token embeddings."})
    projection_type: str = field(default="mlp", metadata={"help": "none, linear or mlp."})
    temperature: float = field(default=0.05, metadata={"help": "Temperature of the contrastive loss."})
    contrastive_loss: str = field(
        default="info_nce", metadata={"help": "info_nce (needed for --hard_negatives) or nt_xent."}
    )
    hard_negative_weight: float = field(default=0.0, metadata={"help": "Added to each hard negative's logit."})
    mlm_weight: float = field(default=1.0, metadata={"help": "Weight of MLM on the anchor spans (0: off)."})
    cl_weight: float = field(default=1.0, metadata={"help": "Weight of the contrastive loss."})


@dataclass
class DataArguments:
    train_file: str | None = field(
        default=None, metadata={"help": "Documents, one per line: .txt or .txt.gz (or .csv/.json with --text_column)."}
    )
    dataset_name: str | None = field(default=None, metadata={"help": "A Hub dataset of documents."})
    dataset_config_name: str | None = field(default=None, metadata={"help": "Its configuration name."})
    text_column: str | None = field(default=None, metadata={"help": "The text column (default: 'text' or the first)."})
    streaming: bool = field(
        default=False, metadata={"help": "Read the corpus on the fly (needs --max_steps); each process its shards."}
    )
    span_view: str = field(default="neighbouring_slice", metadata={"help": f"One of {', '.join(SPAN_VIEWS)}."})
    span_words: int = field(default=SPAN_WORDS, metadata={"help": "Words per span."})
    mask_probability: float = field(default=0.15, metadata={"help": "Tokens masked in each copy of a slice view."})
    hard_negatives: bool = field(
        default=False, metadata={"help": "Add a third span of the same document as the anchor's hard negative."}
    )
    max_seq_length: int = field(default=128, metadata={"help": "Most tokens per span, special tokens included."})
    mlm_probability: float = field(default=0.15, metadata={"help": "Fraction of anchor tokens masked for MLM."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Use only the first N documents."})
    preprocessing_num_workers: int | None = field(default=None, metadata={"help": "Processes for tokenization."})
    stsb_dev_file: str | None = field(default=None, metadata={"help": "STS-B sts-dev.csv, scored after training."})


def build_model(model_args: ModelArguments, tokenizer) -> ContrastiveForPreTraining:
    overrides = {
        "pooler_type": model_args.pooler_type,
        "projection_type": model_args.projection_type,
        "temperature": model_args.temperature,
        "contrastive_loss": model_args.contrastive_loss,
        "hard_negative_weight": model_args.hard_negative_weight,
        "mlm_weight": model_args.mlm_weight,
        "cl_weight": model_args.cl_weight,
    }
    return load_pretraining_model(
        model_args.model_name_or_path, model_args.config_name, tokenizer, model_args.cache_dir, **overrides
    )


def main():
    parser = HfArgumentParser((ModelArguments, DataArguments, ContrastiveTrainingArguments))
    model_args, data_args, training_args = parse_arguments(parser)
    setup_logging(training_args, logger)

    if data_args.hard_negatives and model_args.contrastive_loss != "info_nce":
        raise ValueError("--hard_negatives gives three views per document: use --contrastive_loss info_nce.")
    if data_args.streaming and training_args.max_steps <= 0:
        raise ValueError("--streaming reads a corpus of unknown length: give --max_steps.")
    tokenizer_name = model_args.tokenizer_name or model_args.model_name_or_path
    if tokenizer_name is None:
        raise ValueError("Give --tokenizer_name (or --model_name_or_path, whose tokenizer is then used).")
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_name, cache_dir=model_args.cache_dir)
    with built_whole(training_args):  # whole in each process, also under DeepSpeed ZeRO-3
        model = build_model(model_args, tokenizer)

    with training_args.main_process_first(desc="document tokenization"):
        corpus = load_corpus(
            data_args.train_file,
            data_args.dataset_name,
            data_args.dataset_config_name,
            cache_dir=model_args.cache_dir,
            streaming=data_args.streaming,
        )
        corpus = first_examples(corpus, data_args.max_train_samples)
        documents = tokenize_documents(
            corpus,
            tokenizer,
            view=data_args.span_view,
            span_words=data_args.span_words,
            hard_negatives=data_args.hard_negatives,
            text_column=data_args.text_column,
            num_proc=data_args.preprocessing_num_workers,
        )
    if data_args.streaming:
        prepare_streaming(documents, training_args)

    positions = getattr(model.config.encoder, "max_position_embeddings", None) or data_args.max_seq_length
    collator = SpanViewCollator(
        tokenizer,
        view=data_args.span_view,
        span_words=data_args.span_words,
        mask_probability=data_args.mask_probability,
        hard_negatives=data_args.hard_negatives,
        mlm=model.config.mlm_weight > 0,
        mlm_probability=data_args.mlm_probability,
        max_length=min(data_args.max_seq_length, positions),
        seed=training_args.seed,
    )
    trainer = ContrastiveTrainer(
        model=model,
        args=training_args,
        train_dataset=documents,
        data_collator=collator,
        processing_class=tokenizer,
    )
    train_result = trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    trainer.save_model()
    metrics = train_result.metrics
    if not data_args.streaming:
        metrics["train_documents"] = len(documents)
    trainer.log_metrics("train", metrics)
    trainer.save_metrics("train", metrics)
    trainer.save_state()

    if data_args.stsb_dev_file:  # on every process: under ZeRO-3 each forward pass needs all of them
        scores = evaluate_sts(trainer.model, read_stsbenchmark(data_args.stsb_dev_file), tokenizer=tokenizer)
        trainer.log_metrics("eval", {"stsb_spearman": scores["spearman"], "stsb_pearson": scores["pearson"]})
        trainer.save_metrics(
            "eval", {"eval_stsb_spearman": scores["spearman"], "eval_stsb_pearson": scores["pearson"]}
        )
    if trainer.is_world_process_zero():
        print(loading_instructions(training_args.output_dir))


if __name__ == "__main__":
    main()
