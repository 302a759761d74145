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

from transformers import HfArgumentParser

from contrastive_hf.commands.arguments import parse_arguments
from contrastive_hf.commands.errors import exit_on_usage_error
from contrastive_hf.commands.logs import run_training, setup_logging
from contrastive_hf.commands.run_end import finish_sentence_encoder_run
from contrastive_hf.hub.model_card import card_info_from_trainer
from contrastive_hf.recipes import declutr
from contrastive_hf.recipes.declutr.run import ARGUMENTS, build, logger
from contrastive_hf.training.trainer import ContrastiveTrainer


@exit_on_usage_error
def main(argv: list[str] | None = None) -> None:
    arguments = parse_arguments(HfArgumentParser(ARGUMENTS), argv, defaults=declutr.DEFAULTS)
    training_args = arguments[-1]
    setup_logging(training_args, logger)
    run = build(arguments)  # the tokenizer, model, documents, span views' collator and STS-B dev set

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
