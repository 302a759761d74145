#!/usr/bin/env python
"""CLEAR: pre-train or continue pre-training a sentence encoder with MLM + a contrastive loss on augmented views.

Runs as ``python examples/run_clear.py ...`` or ``accelerate launch examples/run_clear.py ...``; flags, or a JSON
file of the same keys followed by any flags that override it (``python examples/run_clear.py
examples/demo/clear_scratch.json --seed 1``). Flag names follow run_mlm.py where they overlap, and every
TrainingArguments flag works.

    python examples/run_clear.py --model_name_or_path bert-base-uncased --dataset_name wikitext \
        --dataset_config_name wikitext-103-raw-v1 --augmentations del_word --output_dir clear-bert
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import ClassVar

from transformers import HfArgumentParser

from contrastive_hf import ContrastiveForPreTraining
from contrastive_hf.commands.loading import built_whole, load_pretraining_model, with_lora_adapter
from contrastive_hf.commands.scripts import (
    AdapterArguments,
    ContrastiveModelArguments,
    CorpusArguments,
    EncoderArguments,
    exit_on_usage_error,
    finish_sentence_encoder_run,
    load_sentences,
    load_sts_dev,
    load_tokenizer,
    parse_arguments,
    run_training,
    setup_logging,
    training_data_name,
)
from contrastive_hf.data.augmentations import AUGMENTATION_NAMES, DEL_WORD_PROBABILITY, add_del_token, needs_del_token
from contrastive_hf.data.collators import ContrastiveDataCollator
from contrastive_hf.hub.model_card import card_info_from_trainer
from contrastive_hf.recipes import clear
from contrastive_hf.training.trainer import ContrastiveTrainer
from contrastive_hf.training.training_args import ContrastiveTrainingArguments

logger = logging.getLogger(__name__)


@dataclass
class ViewArguments:
    local_paths: ClassVar[tuple[str, ...]] = ("synonyms_file",)

    augmentations: str = field(
        default="del_word",
        metadata={
            "help": f"How the two views are made: {', '.join(AUGMENTATION_NAMES)}; '+' composes in order as CLEAR "
            "names it (subs+del_span), ',' mixes: each view draws one (del_word,reorder)."
        },
    )
    del_word_probability: float = field(
        default=DEL_WORD_PROBABILITY, metadata={"help": "CLEAR's word deletion ratio."}
    )
    synonyms_file: str | None = field(
        default=None,
        metadata={
            "help": "JSON synonym table (word -> list of synonyms) for 'subs'; without it, synonyms are the nearest "
            "whole-word neighbours in the encoder's input embeddings."
        },
    )
    line_by_line: bool = field(
        default=True,
        metadata={"help": "Each non-empty line is one example; --line_by_line False packs text into blocks."},
    )
    split_sentences: bool = field(
        default=False,
        metadata={"help": "For a paragraph per line: split each line into sentences, one example each."},
    )
    mlm_probability: float = field(default=0.15, metadata={"help": "Fraction of tokens masked for MLM."})
    mlm_on_views: bool = field(
        default=False,
        metadata={
            "help": "MLM on a masked copy of each view instead of the sentence; with --cl_weight 0, CLEAR's "
            "'Double MLM' control."
        },
    )


ARGUMENTS = (
    EncoderArguments,
    ContrastiveModelArguments,
    CorpusArguments,
    ViewArguments,
    AdapterArguments,
    ContrastiveTrainingArguments,
)


@exit_on_usage_error
def main(argv: list[str] | None = None) -> None:
    parser = HfArgumentParser(ARGUMENTS)
    arguments = parse_arguments(parser, argv, defaults=clear.DEFAULTS)
    encoder_args, model_args, data_args, view_args, adapter_args, training_args = arguments
    setup_logging(training_args, logger)

    tokenizer = load_tokenizer(encoder_args)
    if needs_del_token(view_args.augmentations):
        add_del_token(tokenizer)  # before a from-scratch model is sized to the vocabulary
    with built_whole(training_args):  # whole in each process, also under DeepSpeed ZeRO-3
        model: ContrastiveForPreTraining = load_pretraining_model(
            encoder_args.model_name_or_path,
            encoder_args.config_name,
            tokenizer,
            encoder_args.cache_dir,
            **model_args.config_overrides(),
        )
        if needs_del_token(view_args.augmentations):
            add_del_token(tokenizer, model)  # resizes a pretrained encoder's embeddings for the new token
    model = with_lora_adapter(model, adapter_args)

    collator = ContrastiveDataCollator(
        tokenizer,
        augmentation=view_args.augmentations,
        mlm=model.config.mlm_weight > 0,
        mlm_probability=view_args.mlm_probability,
        mlm_on_views=view_args.mlm_on_views,
        del_word_probability=view_args.del_word_probability,
        synonyms=view_args.synonyms_file or model,  # used by 'subs' only
        max_length=data_args.max_seq_length,
        seed=training_args.seed,
    )

    train_dataset = load_sentences(
        data_args,
        tokenizer,
        training_args,
        encoder_args.cache_dir,
        line_by_line=view_args.line_by_line,
        split_sentences=view_args.split_sentences,
    )
    stsb, before = load_sts_dev(data_args, training_args, model, tokenizer)

    trainer = ContrastiveTrainer(
        model=model,
        args=training_args,
        train_dataset=train_dataset,
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
        train_samples=None if data_args.streaming else len(train_dataset),
    )


if __name__ == "__main__":
    main()
