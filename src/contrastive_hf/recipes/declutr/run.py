"""DeCLUTR's script (``examples/run_declutr.py``, ``python -m contrastive_hf.recipes declutr``): its defaults, its
arguments (the spans' flags beside the shared ones) and `build`: the tokenizer, the model, the tokenized documents (or
a stream of them), the collator that samples span views of each document and the STS-B dev set."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from ...commands.arguments import AdapterArguments, ContrastiveModelArguments, CorpusArguments, EncoderArguments
from ...commands.errors import UsageError
from ...commands.loaders import load_tokenizer
from ...commands.loading import load_pretraining_model, with_lora_adapter
from ...commands.zero3 import built_whole
from ...data.reading import first_examples, load_corpus
from ...data.streams import prepare_streaming, stream_readers
from ...models.modeling_contrastive_pretraining import ContrastiveForPreTraining
from ...training.trainer import ContrastiveTrainer
from ...training.training_args import ContrastiveTrainingArguments
from .. import SentenceEncoderRun, sentence_encoder_run
from .data import SPAN_MASK_PROBABILITY, SPAN_VIEWS, SPAN_WORDS, SpanViewCollator, tokenize_documents

__all__ = ["DEFAULTS", "SpanArguments", "ARGUMENTS", "build"]

logger = logging.getLogger(__name__)

# The recipe's model and data defaults (its span flags default to SPAN_*): DeCLUTR mean-pools the token embeddings,
# and its three-view batches (a hard negative span) need InfoNCE; spans of 32 words fit in 128 tokens.
DEFAULTS = {"pooler_type": "mean", "contrastive_loss": "info_nce", "max_seq_length": 128}
TRAINER_CLASS = ContrastiveTrainer


@dataclass
class SpanArguments:
    span_view: str = field(default="neighbouring_slice", metadata={"help": f"One of {', '.join(SPAN_VIEWS)}."})
    span_words: int = field(default=SPAN_WORDS, metadata={"help": "Words per span."})
    mask_probability: float = field(
        default=SPAN_MASK_PROBABILITY, metadata={"help": "Tokens masked in each copy of a slice view."}
    )
    hard_negatives: bool = field(
        default=False, metadata={"help": "Add a third span of the same document as the anchor's hard negative."}
    )
    mlm_probability: float = field(default=0.15, metadata={"help": "Fraction of anchor tokens masked for MLM."})


ARGUMENTS = (
    EncoderArguments,
    ContrastiveModelArguments,
    CorpusArguments,
    SpanArguments,
    AdapterArguments,
    ContrastiveTrainingArguments,
)


def build(arguments: tuple) -> SentenceEncoderRun:
    """The tokenizer, the model (a LoRA adapter when asked), the documents, the span views' collator and the STS-B
    dev set of ``arguments`` (parsed `ARGUMENTS`)."""
    encoder_args, model_args, data_args, span_args, adapter_args, training_args = arguments
    if span_args.hard_negatives and model_args.contrastive_loss != "info_nce":
        raise UsageError("--hard_negatives gives three views per document: use --contrastive_loss info_nce.")
    tokenizer = load_tokenizer(encoder_args)
    with built_whole(training_args):  # whole in each process, also under DeepSpeed ZeRO-3
        model: ContrastiveForPreTraining = load_pretraining_model(
            encoder_args.model_name_or_path,
            encoder_args.config_name,
            tokenizer,
            encoder_args.cache_dir,
            encoder_args.loading(adapter_args, training_args),
            **model_args.config_overrides(),
        )
    model = with_lora_adapter(model, adapter_args)

    with training_args.main_process_first(desc="document tokenization"):
        corpus = load_corpus(
            data_args.train_file,
            data_args.dataset_name,
            data_args.dataset_config_name,
            cache_dir=encoder_args.cache_dir,
            streaming=data_args.streaming,
            readers=stream_readers(training_args),
        )
        if not data_args.streaming:  # a stream is cut by prepare_streaming, after the short documents are dropped
            corpus = first_examples(corpus, data_args.max_train_samples)
        documents = tokenize_documents(
            corpus,
            tokenizer,
            view=span_args.span_view,
            span_words=span_args.span_words,
            hard_negatives=span_args.hard_negatives,
            text_column=data_args.text_column,
            num_proc=data_args.preprocessing_num_workers,
        )
    if data_args.streaming:
        documents = prepare_streaming(documents, training_args, data_args.max_train_samples, data_args.train_file)

    positions = getattr(model.config.encoder, "max_position_embeddings", None) or data_args.max_seq_length
    collator = SpanViewCollator(
        tokenizer,
        view=span_args.span_view,
        span_words=span_args.span_words,
        mask_probability=span_args.mask_probability,
        hard_negatives=span_args.hard_negatives,
        mlm=model.config.mlm_weight > 0,
        mlm_probability=span_args.mlm_probability,
        max_length=min(data_args.max_seq_length, positions),
        seed=training_args.seed,
    )
    return sentence_encoder_run(
        model, tokenizer, documents, collator, data_args, training_args,
        train_counts={"train_documents": None if data_args.streaming else len(documents)},
    )  # fmt: skip
