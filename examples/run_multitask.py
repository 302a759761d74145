#!/usr/bin/env python
"""Multitask fine-tuning of a sentence encoder on SST-2 (sentiment), MRPC (paraphrase) and STS-B (similarity).

One shared encoder, one head per task (`contrastive_hf.recipes.multitask`), the tasks' batches interleaved by
``--task_schedule`` and, with ``--pcgrad``, their gradients combined by PCGrad. ``--model_name_or_path`` is a plain
pretrained encoder, or a contrastive_hf checkpoint (the output of run_clear.py or run_simcse.py: "contrastive
learning, then multitask"), or a multitask checkpoint of this script to continue from.

Data in SentEval's layouts (the folder of each task; give the tasks to train on):

    python examples/run_multitask.py --model_name_or_path sentence-transformers/all-MiniLM-L6-v2 \
        --sst_dir SentEval/data/downstream/SST/binary --mrpc_dir SentEval/data/downstream/MRPC \
        --stsb_dir SentEval/data/downstream/STS/STSBenchmark --task_schedule super_batch --pcgrad \
        --output_dir outputs/multitask

Dev sets: SST-2's and STS-B's own; MRPC has none in SentEval's layout, so ``--mrpc_dev_fraction`` of its training
pairs (10%, the size of GLUE's MRPC dev set) are held out, with a fixed ``--split_seed``. ``--evaluate_test`` also
scores the test sets. The output folder holds the multitask model (`MultitaskModel.from_pretrained`) and, in
``sentence_encoder/``, the encoder alone as a contrastive_hf checkpoint (`AutoModel`, sentence-transformers).
With ``--lora_r`` the output folder holds a LoRA adapter on the encoder with the heads trained in full (it loads with
``PeftModel.from_pretrained(MultitaskModel.from_sentence_encoder(base, tasks), folder)``), and
``<output_dir>-merged`` the merged multitask model and its ``sentence_encoder/``.
"""

from __future__ import annotations

from transformers import HfArgumentParser

from contrastive_hf.commands.arguments import parse_arguments
from contrastive_hf.commands.errors import as_usage_error, exit_on_usage_error
from contrastive_hf.commands.logs import run_training, setup_logging
from contrastive_hf.commands.run_end import log_before_after, publish, save_merged_model, save_trained_model
from contrastive_hf.recipes import multitask
from contrastive_hf.recipes.multitask.run import (
    ARGUMENTS,
    build,
    check_and_describe_saved_models,
    dev_figures,
    dev_figures_before,
    logger,
)
from contrastive_hf.recipes.multitask.trainer import MultitaskTrainer


@exit_on_usage_error
def main(argv: list[str] | None = None) -> None:
    arguments = parse_arguments(HfArgumentParser(ARGUMENTS), argv, defaults=multitask.DEFAULTS)
    model_args, data_args, adapter_args, training_args = arguments
    setup_logging(training_args, logger)
    run = build(arguments)  # the tasks' data (train, dev, test), the tokenizer, the multitask model, the collator

    with as_usage_error():  # settings the trainer refuses (e.g. a --metric_for_best_model it does not log)
        trainer = MultitaskTrainer(
            model=run.model,
            args=training_args,
            train_dataset=run.train_dataset,
            eval_dataset=run.eval_dataset,
            data_collator=run.data_collator,
            processing_class=run.tokenizer,
        )
    train_result = run_training(trainer)
    save_trained_model(
        trainer, train_result, train_samples=sum(len(dataset) for dataset in run.train_dataset.values())
    )
    # the dev figures after training, beside those of --eval_on_start (logged at step 0) when it was given
    log_before_after(trainer, dev_figures(trainer.evaluate()), dev_figures_before(trainer))
    if data_args.evaluate_test:
        metrics = trainer.evaluate(run.test_dataset, metric_key_prefix="test")
        trainer.log_metrics("test", metrics)
        trainer.save_metrics("test", metrics)
    publish(trainer)  # the Trainer's card, with the evaluations; pushes with --push_to_hub
    # with --lora_r: the adapter and heads in output_dir, the merged multitask model beside it
    model_dir = save_merged_model(trainer, run.tokenizer)
    # reload the saved model, save its encoder alone in sentence_encoder/, check both against the trained model
    check_and_describe_saved_models(trainer, model_dir, run.tokenizer, run.eval_dataset)


if __name__ == "__main__":
    main()
