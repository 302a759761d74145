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

from transformers import HfArgumentParser

from contrastive_hf import ContrastiveForPreTraining
from contrastive_hf.commands.loading import built_whole, load_pretraining_model, with_lora_adapter
from contrastive_hf.commands.scripts import (
    AdapterArguments,
    ContrastiveModelArguments,
    CorpusArguments,
    EncoderArguments,
    UsageError,
    exit_on_usage_error,
    finish_sentence_encoder_run,
    load_sts_dev,
    load_tokenizer,
    parse_arguments,
    run_training,
    setup_logging,
    training_data_name,
)
from contrastive_hf.data.corpus import first_examples, load_corpus, prepare_streaming, stream_readers
from contrastive_hf.hub.model_card import card_info_from_trainer
from contrastive_hf.recipes import declutr
from contrastive_hf.recipes.declutr import (
    SPAN_MASK_PROBABILITY,
    SPAN_VIEWS,
    SPAN_WORDS,
    SpanViewCollator,
    tokenize_documents,
)
from contrastive_hf.training.trainer import ContrastiveTrainer
from contrastive_hf.training.training_args import ContrastiveTrainingArguments

logger = logging.getLogger(__name__)


@dataclass
class SpanArguments:
    span_view: str = field(default="neighbouring_slice", metadata={"help": f"One of {', '.join(SPAN_VIEWS)}."})
    span_words: int = field(default=SPAN_WORDS, metadata={"help": "Words per span."})
    mask_probability: float = field(
        default=SPAN_MASK_PROBABILITY, metadata={"help": "Tokens masked in each copy of a slice view."}
    )
    hard_negatives: bool = field(
        default=False, metadata={"help": "Add a third span of the same document as the anchor's hard negative."}
    )
    mlm_probability: float = field(default=0.15, metadata={"help": "Fraction of anchor tokens masked for MLM."})


@exit_on_usage_error
def main(argv: list[str] | None = None) -> None:
    parser = HfArgumentParser(
        (
            EncoderArguments,
            ContrastiveModelArguments,
            CorpusArguments,
            SpanArguments,
            AdapterArguments,
            ContrastiveTrainingArguments,
        )
    )
    encoder_args, model_args, data_args, span_args, adapter_args, training_args = parse_arguments(
        parser, argv, defaults=declutr.DEFAULTS
    )
    setup_logging(training_args, logger)

    if span_args.hard_negatives and model_args.contrastive_loss != "info_nce":
        raise UsageError("--hard_negatives gives three views per document: use --contrastive_loss info_nce.")
    tokenizer = load_tokenizer(encoder_args)
    with built_whole(training_args):  # whole in each process, also under DeepSpeed ZeRO-3
        model: ContrastiveForPreTraining = load_pretraining_model(
            encoder_args.model_name_or_path,
            encoder_args.config_name,
            tokenizer,
            encoder_args.cache_dir,
            **model_args.config_overrides(),
        )
    model = with_lora_adapter(model, adapter_args)

    with training_args.main_process_first(desc="document tokenization"):
        corpus = load_corpus(
            data_args.train_file,
            data_args.dataset_name,
            data_args.dataset_config_name,
            cache_dir=encoder_args.cache_dir,
            streaming=data_args.streaming,
            readers=stream_readers(training_args),
        )
        if not data_args.streaming:  # a stream is cut by prepare_streaming, after the short documents are dropped
            corpus = first_examples(corpus, data_args.max_train_samples)
        documents = tokenize_documents(
            corpus,
            tokenizer,
            view=span_args.span_view,
            span_words=span_args.span_words,
            hard_negatives=span_args.hard_negatives,
            text_column=data_args.text_column,
            num_proc=data_args.preprocessing_num_workers,
        )
    if data_args.streaming:
        documents = prepare_streaming(documents, training_args, data_args.max_train_samples, data_args.train_file)

    positions = getattr(model.config.encoder, "max_position_embeddings", None) or data_args.max_seq_length
    collator = SpanViewCollator(
        tokenizer,
        view=span_args.span_view,
        span_words=span_args.span_words,
        mask_probability=span_args.mask_probability,
        hard_negatives=span_args.hard_negatives,
        mlm=model.config.mlm_weight > 0,
        mlm_probability=span_args.mlm_probability,
        max_length=min(data_args.max_seq_length, positions),
        seed=training_args.seed,
    )
    stsb, before = load_sts_dev(data_args, training_args, model, tokenizer)
    trainer = ContrastiveTrainer(
        model=model,
        args=training_args,
        train_dataset=documents,
        eval_dataset={"stsb": stsb} if training_args.eval_strategy != "no" else None,
        data_collator=collator,
        processing_class=tokenizer,
    )
    train_result = run_training(trainer)
    card_info = card_info_from_trainer(trainer, training_data=training_data_name(data_args))
    finish_sentence_encoder_run(
        trainer,
        train_result,
        tokenizer,
        card_info,
        stsb=stsb,
        sts_before=before,
        train_documents=None if data_args.streaming else len(documents),
    )


if __name__ == "__main__":
    main()
