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

from transformers import HfArgumentParser

from contrastive_hf.commands.arguments import parse_arguments
from contrastive_hf.commands.errors import exit_on_usage_error
from contrastive_hf.commands.logs import run_training, setup_logging
from contrastive_hf.commands.run_end import finish_sentence_encoder_run
from contrastive_hf.hub.model_card import card_info_from_trainer
from contrastive_hf.recipes import clear
from contrastive_hf.recipes.clear.run import ARGUMENTS, build, logger
from contrastive_hf.training.trainer import ContrastiveTrainer


@exit_on_usage_error
def main(argv: list[str] | None = None) -> None:
    arguments = parse_arguments(HfArgumentParser(ARGUMENTS), argv, defaults=clear.DEFAULTS)
    training_args = arguments[-1]
    setup_logging(training_args, logger)
    run = build(arguments)  # the tokenizer, model, sentences, views' collator and STS-B dev set

    trainer = ContrastiveTrainer(
        model=run.model,
        args=training_args,
        train_dataset=run.train_dataset,
        eval_dataset=run.eval_dataset,
        data_collator=run.data_collator,
        processing_class=run.tokenizer,
    )
    train_result = run_training(trainer)
    card_info = card_info_from_trainer(trainer, **run.card)
    # save, STS-B dev before/after, card, push, LoRA merge, reload check
    finish_sentence_encoder_run(
        trainer, train_result, run.tokenizer, card_info, stsb=run.stsb, sts_before=run.sts_before, **run.train_counts
    )


if __name__ == "__main__":
    main()
