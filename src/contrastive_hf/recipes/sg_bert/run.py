"""SG-BERT's script (``examples/run_sg_bert.py``, ``python -m contrastive_hf.recipes sg_bert``): its arguments (the
self-guided flags, defaulting to `SelfGuidedConfig`'s values) and `build`: the tokenizer, the self-guided model around
a pretrained encoder, the sentences, the collator and the STS-B dev set."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from ...commands.arguments import AdapterArguments, CorpusArguments, EncoderArguments
from ...commands.errors import UsageError
from ...commands.loaders import load_sentences, load_tokenizer
from ...commands.loading import with_lora_adapter
from ...commands.zero3 import built_whole
from .. import SentenceEncoderRun, sentence_encoder_run
from .data import SelfGuidedCollator
from .losses import LAYER_POOLINGS, SELF_GUIDED_LOSSES
from .modeling import SelfGuidedConfig, SelfGuidedModel
from .trainer import SelfGuidedTrainer, SelfGuidedTrainingArguments

__all__ = ["DEFAULTS", "SelfGuidedArguments", "ARGUMENTS", "build"]

logger = logging.getLogger(__name__)
_DEFAULTS = SelfGuidedConfig()  # the paper's values, in one place
# The paper's sentences are cut at 64 tokens (the other flags default to SelfGuidedConfig's values).
DEFAULTS = {"max_seq_length": 64}
# It saves BERT_T alone: the tuned encoder, whose [CLS] is the embedding.
TRAINER_CLASS = SelfGuidedTrainer


@dataclass
class SelfGuidedArguments:
    pooler_type: str = field(
        default="cls_before_pooler", metadata={"help": "BERT_T's sentence vector: the last layer's [CLS] (paper)."}
    )
    loss: str = field(
        default=_DEFAULTS.loss,
        metadata={"help": f"One of {', '.join(SELF_GUIDED_LOSSES)}, or a registered in-batch loss (e.g. info_nce)."},
    )
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


ARGUMENTS = (EncoderArguments, SelfGuidedArguments, CorpusArguments, AdapterArguments, SelfGuidedTrainingArguments)


def build(arguments: tuple) -> SentenceEncoderRun:
    """The tokenizer, the self-guided model (BERT_T with a LoRA adapter when asked), the sentences, the collator and
    the STS-B dev set of ``arguments`` (parsed `ARGUMENTS`)."""
    encoder_args, sg_args, data_args, adapter_args, training_args = arguments
    if encoder_args.model_name_or_path is None:
        raise UsageError("SG-BERT tunes a pretrained encoder: give --model_name_or_path (a Hub id or folder).")

    tokenizer = load_tokenizer(encoder_args)
    with built_whole(training_args):  # whole in each process, also under DeepSpeed ZeRO-3
        model = SelfGuidedModel.from_encoder_pretrained(
            encoder_args.model_name_or_path,
            pooler_type=sg_args.pooler_type,
            loading=encoder_args.loading(adapter_args, training_args),
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
    config = model.self_guided_config
    card = dict(
        hyperparameters={"loss": config.loss},
        objective=f"L_{config.loss} + {config.regularization_weight} x ||BERT_F - BERT_T||^2 (tau "
        f"{config.temperature})",
    )
    collator = SelfGuidedCollator(tokenizer, max_length=data_args.max_seq_length)
    return sentence_encoder_run(
        model, tokenizer, train_dataset, collator, data_args, training_args, card=card,
        train_counts={"train_samples": None if data_args.streaming else len(train_dataset)},
    )  # fmt: skip
