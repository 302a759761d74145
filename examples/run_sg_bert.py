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

from transformers import HfArgumentParser

from contrastive_hf.commands.arguments import parse_arguments
from contrastive_hf.commands.errors import exit_on_usage_error
from contrastive_hf.commands.logs import run_training, setup_logging
from contrastive_hf.commands.run_end import finish_sentence_encoder_run
from contrastive_hf.hub.model_card import card_info_from_trainer
from contrastive_hf.recipes import sg_bert
from contrastive_hf.recipes.sg_bert.run import ARGUMENTS, build, logger
from contrastive_hf.recipes.sg_bert.trainer import SelfGuidedTrainer


@exit_on_usage_error
def main(argv: list[str] | None = None) -> None:
    arguments = parse_arguments(HfArgumentParser(ARGUMENTS), argv, defaults=sg_bert.DEFAULTS)
    training_args = arguments[-1]
    setup_logging(training_args, logger, summary=True)
    run = build(arguments)  # the tokenizer, self-guided model, sentences, collator and STS-B dev set

    trainer = SelfGuidedTrainer(
        model=run.model,
        args=training_args,
        train_dataset=run.train_dataset,
        eval_dataset=run.eval_dataset,
        data_collator=run.data_collator,
        processing_class=run.tokenizer,
    )
    train_result = run_training(trainer)
    card_info = card_info_from_trainer(trainer, **run.card)
    # the saved checkpoint holds BERT_T alone: the tuned encoder, whose [CLS] is the embedding
    finish_sentence_encoder_run(
        trainer, train_result, run.tokenizer, card_info, stsb=run.stsb, sts_before=run.sts_before, **run.train_counts
    )


if __name__ == "__main__":
    main()
