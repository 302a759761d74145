#!/usr/bin/env python
"""DPR dual encoders: train a question encoder and a passage encoder on (question, positive passage[, hard
negative]) pairs with in-batch negatives, optional hard negatives and DensePhrases' pre-batch negatives
(``--prebatch_size``), then score retrieval (recall@k, MRR) on held-out pairs.

Runs as ``python examples/run_dpr.py ...`` or ``accelerate launch examples/run_dpr.py ...``; flags or a single JSON
file. Every TrainingArguments flag works. Offline, on NLI triples (premise -> entailment as question -> passage, the
contradiction as hard negative), from all-MiniLM-L6-v2:

    python examples/run_dpr.py --model_name_or_path path/to/all-MiniLM-L6-v2 \
        --train_file ../shared/data/nli/snli_triples.csv \
        --query_column sent0 --positive_column sent1 --hard_negative_column hard_neg \
        --pooler_type mean --similarity cosine --eval_size 500 --evaluate_before_training \
        --max_steps 100 --per_device_train_batch_size 32 --learning_rate 2e-5 --output_dir outputs/dpr-snli

Natural Questions from the Hub (question, Wikipedia passage pairs):

    accelerate launch examples/run_dpr.py --model_name_or_path bert-base-uncased \
        --dataset_name sentence-transformers/natural-questions --query_column query --positive_column answer \
        --eval_size 2000 --per_device_train_batch_size 128 --learning_rate 2e-5 --num_train_epochs 40 \
        --prebatch_size 2 --bf16 --output_dir outputs/dpr-nq
"""

from __future__ import annotations

from transformers import HfArgumentParser

from contrastive_hf.commands.arguments import parse_arguments
from contrastive_hf.commands.errors import exit_on_usage_error
from contrastive_hf.commands.logs import run_training, setup_logging
from contrastive_hf.commands.reload_check import loading_instructions
from contrastive_hf.commands.run_end import log_before_after, publish, save_merged_model, save_trained_model
from contrastive_hf.recipes import dpr
from contrastive_hf.recipes.dpr.run import ARGUMENTS, build, logger
from contrastive_hf.training.trainer import ContrastiveTrainer


@exit_on_usage_error
def main(argv: list[str] | None = None) -> None:
    arguments = parse_arguments(HfArgumentParser(ARGUMENTS), argv, defaults=dpr.DEFAULTS)
    model_args, data_args, adapter_args, training_args = arguments
    setup_logging(training_args, logger, summary=True)
    run = build(arguments)  # the tokenizer, dual encoder, pairs, collator and held-out retrieval evaluation

    trainer = ContrastiveTrainer(
        model=run.model,
        args=training_args,
        train_dataset=run.train_dataset,
        eval_dataset=run.eval_dataset,  # the held-out retrieval, with --eval_strategy or --eval_on_start
        data_collator=run.data_collator,
        processing_class=run.tokenizer,
    )
    # Scored on every process (each computes the same figures; the main one writes and prints them): under DeepSpeed
    # ZeRO-3 a forward pass needs every process's shards. Before training on the device training will use.
    before = None
    if run.score is not None and data_args.evaluate_before_training:
        run.model.to(training_args.device)
        before = run.score(trainer.model)

    train_result = run_training(trainer)
    save_trained_model(trainer, train_result, train_pairs=len(run.train_dataset))
    if run.score is not None:
        log_before_after(trainer, run.score(trainer.model), before)
    publish(trainer)
    loadable_dir = save_merged_model(trainer, run.tokenizer)  # with --lora_r: the adapter merged, beside output_dir
    if trainer.is_world_process_zero():
        print(loading_instructions(loadable_dir, dual_encoder=True))


if __name__ == "__main__":
    main()
