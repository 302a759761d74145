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

from transformers import HfArgumentParser

from contrastive_hf.commands.loading import built_whole, with_lora_adapter
from contrastive_hf.commands.scripts import (
    AdapterArguments,
    CorpusArguments,
    EncoderArguments,
    UsageError,
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
from contrastive_hf.hub.model_card import card_info_from_trainer
from contrastive_hf.recipes import sg_bert
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
class SelfGuidedArguments:
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


@exit_on_usage_error
def main(argv: list[str] | None = None) -> None:
    parser = HfArgumentParser(
        (EncoderArguments, SelfGuidedArguments, CorpusArguments, AdapterArguments, SelfGuidedTrainingArguments)
    )
    encoder_args, sg_args, data_args, adapter_args, training_args = parse_arguments(
        parser, argv, defaults=sg_bert.DEFAULTS
    )
    setup_logging(training_args, logger, summary=True)
    if encoder_args.model_name_or_path is None:
        raise UsageError("SG-BERT tunes a pretrained encoder: give --model_name_or_path (a Hub id or folder).")

    tokenizer = load_tokenizer(encoder_args)
    with built_whole(training_args):  # whole in each process, also under DeepSpeed ZeRO-3
        model = SelfGuidedModel.from_encoder_pretrained(
            encoder_args.model_name_or_path,
            pooler_type=sg_args.pooler_type,
            loss=sg_args.loss,
            temperature=sg_args.temperature,
            regularization_weight=sg_args.regularization_weight,
            projection_hidden_size=sg_args.projection_hidden_size,
            layer_pooling=sg_args.layer_pooling,
            freeze_embeddings=sg_args.freeze_embeddings,
        )
    # the adapter goes on BERT_T alone (what is trained and saved); BERT_F, already copied, stays the frozen base
    model.contrastive = with_lora_adapter(model.contrastive, adapter_args)

    train_dataset = load_sentences(data_args, tokenizer, training_args, encoder_args.cache_dir)
    stsb, before = load_sts_dev(data_args, training_args, model, tokenizer)

    trainer = SelfGuidedTrainer(
        model=model,
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset={"stsb": stsb} if training_args.eval_strategy != "no" else None,
        data_collator=SelfGuidedCollator(tokenizer, max_length=data_args.max_seq_length),
        processing_class=tokenizer,
    )
    train_result = run_training(trainer)
    config = model.self_guided_config
    card_info = card_info_from_trainer(
        trainer,
        hyperparameters={"loss": config.loss},
        training_data=training_data_name(data_args),
        objective=f"L_{config.loss} + {config.regularization_weight} x ||BERT_F - BERT_T||^2 (tau "
        f"{config.temperature})",
    )
    # the saved checkpoint holds BERT_T alone: the tuned encoder, whose [CLS] is the embedding
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
