"""CLEAR's script (``examples/run_clear.py``, ``python -m contrastive_hf.recipes clear``): its arguments (the views'
flags beside the shared ones) and `build`: the tokenizer (with CLEAR's [DEL] token when an augmentation needs it), the
model, the sentences, the collator that augments them into two views (and an MLM copy) and the STS-B dev set."""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from typing import ClassVar

from ...commands.arguments import (
    AdapterArguments,
    ContrastiveModelArguments,
    CorpusArguments,
    EncoderArguments,
    augmentation_arguments,
)
from ...commands.errors import UsageError, as_usage_error
from ...commands.loaders import load_sentences, load_tokenizer
from ...commands.loading import load_pretraining_model, with_lora_adapter
from ...commands.zero3 import built_whole
from ...data.augmentations import add_del_token, augmentation_help, check_augmentation, needs_del_token
from ...data.collators import ContrastiveDataCollator
from ...models.modeling_contrastive_pretraining import ContrastiveForPreTraining
from ...training.trainer import ContrastiveTrainer
from ...training.training_args import ContrastiveTrainingArguments
from .. import SentenceEncoderRun, sentence_encoder_run

__all__ = ["DEFAULTS", "ViewArguments", "AugmentationArguments", "ARGUMENTS", "build"]

logger = logging.getLogger(__name__)
# CLEAR's settings are the library's defaults (`ContrastiveConfig`'s, and the view flags'): nothing to set.
DEFAULTS: dict = {}
TRAINER_CLASS = ContrastiveTrainer


@dataclass
class ViewArguments:
    local_paths: ClassVar[tuple[str, ...]] = ("synonyms_file",)

    # its help is rewritten when parsing (REGISTRY_OPTIONS): the augmentations registered then
    augmentations: str = field(default="del_word", metadata={"help": augmentation_help()})
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
    mask_token: str | None = field(
        default=None,
        metadata={
            "help": "The token masked tokens become, one of the tokenizer's (default: its mask token). Decoder "
            "tokenizers have none: LLM2Vec masks with '_'. A decoder's MLM is masked next-token prediction: each "
            "masked token is predicted from the position before it, by the decoder's own language-model head."
        },
    )
    mlm_on_views: bool = field(
        default=False,
        metadata={
            "help": "MLM on a masked copy of each view instead of the sentence; with --cl_weight 0, CLEAR's "
            "'Double MLM' control."
        },
    )

    def __post_init__(self):
        # against the registry as it is now: one usage line naming the registered names, before any model loads
        try:
            check_augmentation(self.augmentations)
        except ValueError as error:
            raise UsageError(str(error)) from None


# the registered augmentations' hyper-parameters, one flag each (--del_word_probability, --span_ratio...)
AugmentationArguments = augmentation_arguments()

ARGUMENTS = (
    EncoderArguments,
    ContrastiveModelArguments,
    CorpusArguments,
    ViewArguments,
    AugmentationArguments,
    AdapterArguments,
    ContrastiveTrainingArguments,
)


def build(arguments: tuple) -> SentenceEncoderRun:
    """The tokenizer, the model (a LoRA adapter when asked), the sentences, the views' collator and the STS-B dev set
    of ``arguments`` (parsed `ARGUMENTS`)."""
    encoder_args, model_args, data_args, view_args, augmentation_args, adapter_args, training_args = arguments
    tokenizer = load_tokenizer(encoder_args)
    if needs_del_token(view_args.augmentations):
        add_del_token(tokenizer)  # before a from-scratch model is sized to the vocabulary
    with built_whole(training_args):  # whole in each process, also under DeepSpeed ZeRO-3
        model: ContrastiveForPreTraining = load_pretraining_model(
            encoder_args.model_name_or_path,
            encoder_args.config_name,
            tokenizer,
            encoder_args.cache_dir,
            encoder_args.loading(adapter_args, training_args),
            **model_args.config_overrides(),
        )
        if needs_del_token(view_args.augmentations):
            add_del_token(tokenizer, model)  # resizes a pretrained encoder's embeddings for the new token
    model = with_lora_adapter(model, adapter_args)

    with as_usage_error():  # the settings it refuses: MLM with a tokenizer that has no mask token, a ratio...
        collator = ContrastiveDataCollator(
            tokenizer,
            augmentation=view_args.augmentations,
            mlm=model.config.mlm_weight > 0,
            mlm_probability=view_args.mlm_probability,
            mask_token=view_args.mask_token,
            masked_next_token=model.predicts_next_token,
            mlm_on_views=view_args.mlm_on_views,
            view_settings=asdict(augmentation_args),
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
    return sentence_encoder_run(
        model, tokenizer, train_dataset, collator, data_args, training_args,
        train_counts={"train_samples": None if data_args.streaming else len(train_dataset)},
    )  # fmt: skip
