#!/usr/bin/env python
"""transformers' run_mlm.py, condensed, as the drop-in tests run it. This file (tests/scripts/run_mlm.py) is the
script with transformers alone (``AutoModelForMaskedLM``, ``DataCollatorForLanguageModeling``, ``Trainer``);
tests/scripts/run_mlm_contrastive.py is it with examples/drop_in/run_mlm.diff applied (ContrastiveTrainer dropped
in), byte for byte, as tests/integration/test_drop_in.py checks before running both.

It follows the structure and behaviour of run_mlm.py in transformers 5.24's examples (examples/pytorch/
language-modeling/, Apache-2.0, by the HuggingFace team), written for these tests rather than copied: argument
dataclasses and ``HfArgumentParser`` (which also takes one JSON file), ``load_dataset("text", ...)``, tokenization
with ``datasets.map``, line by line (``--line_by_line``) or, by default, every text concatenated and cut into
``max_seq_length`` windows (``group_texts``), the Trainer with run_mlm's metric functions
(``preprocess_logits_for_metrics`` takes the argmax of the first prediction, the logits; ``compute_metrics`` the
accuracy on the tokens whose label is not -100), train, save, evaluate (with the perplexity), and the model card with
``finetuned_from`` and ``tasks="fill-mask"``. Left out: Hub datasets, ``--config_overrides``, a validation split cut
from the training file, checkpoint detection, TPUs and telemetry. run_mlm.py loads its metric with
``evaluate.load("accuracy")``, which downloads the metric's script; the tests run offline, so the accuracy is
computed here as that metric computes it (the fraction of equal labels).
"""

from __future__ import annotations

import logging
import math
import os
import sys
from dataclasses import dataclass, field
from itertools import chain

import numpy as np
import transformers
from datasets import load_dataset
from transformers import (
    AutoConfig,
    AutoModelForMaskedLM,
    AutoTokenizer,
    DataCollatorForLanguageModeling,
    HfArgumentParser,
    Trainer,
    TrainingArguments,
    set_seed,
)

logger = logging.getLogger(__name__)


@dataclass
class ModelArguments:
    model_name_or_path: str | None = field(
        default=None, metadata={"help": "The checkpoint to start from; unset to train from scratch (--config_name)."}
    )
    config_name: str | None = field(default=None, metadata={"help": "Config name or path, if not the model's."})
    tokenizer_name: str | None = field(default=None, metadata={"help": "Tokenizer name or path, if not the model's."})
    cache_dir: str | None = field(default=None, metadata={"help": "Where Hub downloads are cached."})


@dataclass
class DataTrainingArguments:
    train_file: str | None = field(default=None, metadata={"help": "The training data (a text file)."})
    validation_file: str | None = field(default=None, metadata={"help": "Evaluation data (a text file)."})
    max_seq_length: int | None = field(default=None, metadata={"help": "Tokens per example after tokenization."})
    preprocessing_num_workers: int | None = field(default=None, metadata={"help": "Processes for preprocessing."})
    mlm_probability: float = field(default=0.15, metadata={"help": "Ratio of tokens to mask for the MLM loss."})
    line_by_line: bool = field(default=False, metadata={"help": "Each non-empty line is one example."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Truncate the training examples."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Truncate the evaluation examples."})


def main():
    parser = HfArgumentParser((ModelArguments, DataTrainingArguments, TrainingArguments))
    if len(sys.argv) == 2 and sys.argv[1].endswith(".json"):
        model_args, data_args, training_args = parser.parse_json_file(json_file=os.path.abspath(sys.argv[1]))
    else:
        model_args, data_args, training_args = parser.parse_args_into_dataclasses()

    logging.basicConfig(
        format="%(asctime)s - %(levelname)s - %(name)s - %(message)s",
        datefmt="%m/%d/%Y %H:%M:%S",
        handlers=[logging.StreamHandler(sys.stdout)],
    )
    log_level = training_args.get_process_log_level()
    logger.setLevel(log_level)
    transformers.utils.logging.set_verbosity(log_level)
    set_seed(training_args.seed)

    data_files = {"train": data_args.train_file}
    if data_args.validation_file is not None:
        data_files["validation"] = data_args.validation_file
    raw_datasets = load_dataset("text", data_files=data_files, cache_dir=model_args.cache_dir)

    config = AutoConfig.from_pretrained(model_args.config_name or model_args.model_name_or_path)
    tokenizer = AutoTokenizer.from_pretrained(model_args.tokenizer_name or model_args.model_name_or_path)
    if model_args.model_name_or_path:
        model = AutoModelForMaskedLM.from_pretrained(
            model_args.model_name_or_path,
            config=config,
            cache_dir=model_args.cache_dir,
        )
    else:
        logger.info("Training new model from scratch")
        model = AutoModelForMaskedLM.from_config(config)

    # We resize the embeddings only when necessary to avoid index errors.
    embedding_size = model.get_input_embeddings().weight.shape[0]
    if len(tokenizer) > embedding_size:
        model.resize_token_embeddings(len(tokenizer))

    column_names = raw_datasets["train"].column_names
    text_column_name = "text" if "text" in column_names else column_names[0]
    max_seq_length = min(data_args.max_seq_length or 1024, tokenizer.model_max_length)

    if data_args.line_by_line:

        def tokenize_function(examples):
            examples[text_column_name] = [line for line in examples[text_column_name] if line and not line.isspace()]
            return tokenizer(
                examples[text_column_name], truncation=True, max_length=max_seq_length, return_special_tokens_mask=True
            )

        with training_args.main_process_first(desc="dataset map tokenization"):
            tokenized_datasets = raw_datasets.map(
                tokenize_function,
                batched=True,
                num_proc=data_args.preprocessing_num_workers,
                remove_columns=[text_column_name],
                desc="Running tokenizer on dataset line_by_line",
            )
    else:

        def tokenize_function(examples):
            return tokenizer(examples[text_column_name], return_special_tokens_mask=True)

        def group_texts(examples):
            concatenated_examples = {k: list(chain(*examples[k])) for k in examples.keys()}
            total_length = len(concatenated_examples[list(examples.keys())[0]])
            total_length = (total_length // max_seq_length) * max_seq_length
            return {
                k: [t[i : i + max_seq_length] for i in range(0, total_length, max_seq_length)]
                for k, t in concatenated_examples.items()
            }

        with training_args.main_process_first(desc="dataset map tokenization"):
            tokenized_datasets = raw_datasets.map(
                tokenize_function,
                batched=True,
                num_proc=data_args.preprocessing_num_workers,
                remove_columns=column_names,
            )
            tokenized_datasets = tokenized_datasets.map(
                group_texts, batched=True, num_proc=data_args.preprocessing_num_workers
            )

    train_dataset = tokenized_datasets["train"]
    if data_args.max_train_samples is not None:
        train_dataset = train_dataset.select(range(min(len(train_dataset), data_args.max_train_samples)))

    eval_dataset = None
    if training_args.do_eval:
        eval_dataset = tokenized_datasets["validation"]
        if data_args.max_eval_samples is not None:
            eval_dataset = eval_dataset.select(range(min(len(eval_dataset), data_args.max_eval_samples)))

        def preprocess_logits_for_metrics(logits, labels):
            if isinstance(logits, tuple):  # a model may return more than its logits; they come first
                logits = logits[0]
            return logits.argmax(dim=-1)

        def compute_metrics(eval_preds):
            predictions, labels = eval_preds  # both (examples, length): the argmax of every token, its label
            labels, predictions = labels.reshape(-1), predictions.reshape(-1)
            scored = labels != -100
            return {"accuracy": float(np.mean(predictions[scored] == labels[scored]))}

    pad_to_multiple_of_8 = data_args.line_by_line and training_args.fp16
    data_collator = DataCollatorForLanguageModeling(
        tokenizer=tokenizer,
        mlm_probability=data_args.mlm_probability,
        pad_to_multiple_of=8 if pad_to_multiple_of_8 else None,
    )

    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=train_dataset if training_args.do_train else None,
        eval_dataset=eval_dataset,
        processing_class=tokenizer,
        data_collator=data_collator,
        compute_metrics=compute_metrics if training_args.do_eval else None,
        preprocess_logits_for_metrics=preprocess_logits_for_metrics if training_args.do_eval else None,
    )

    if training_args.do_train:
        train_result = trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
        trainer.save_model()  # Saves the tokenizer too for easy upload
        metrics = train_result.metrics
        metrics["train_samples"] = len(train_dataset)
        trainer.log_metrics("train", metrics)
        trainer.save_metrics("train", metrics)
        trainer.save_state()

    if training_args.do_eval:
        metrics = trainer.evaluate()
        metrics["eval_samples"] = len(eval_dataset)
        try:
            perplexity = math.exp(metrics["eval_loss"])
        except OverflowError:
            perplexity = float("inf")
        metrics["perplexity"] = perplexity
        trainer.log_metrics("eval", metrics)
        trainer.save_metrics("eval", metrics)

    kwargs = {"finetuned_from": model_args.model_name_or_path, "tasks": "fill-mask"}
    if training_args.push_to_hub:
        trainer.push_to_hub(**kwargs)
    else:
        trainer.create_model_card(**kwargs)


if __name__ == "__main__":
    main()
