"""Reading a training corpus (text/csv/json files or a Hub dataset) and tokenizing it with `datasets`."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from itertools import chain

from datasets import Dataset, DatasetDict, load_dataset

__all__ = ["load_corpus", "tokenize_corpus", "EmptyCorpusError"]

logger = logging.getLogger(__name__)

_EXTENSION_BUILDERS = {"txt": "text", "text": "text", "csv": "csv", "tsv": "csv", "json": "json", "jsonl": "json"}


class EmptyCorpusError(ValueError):
    """The corpus holds no non-empty text."""


def load_corpus(
    train_files: str | Sequence[str] | None = None,
    dataset_name: str | None = None,
    dataset_config_name: str | None = None,
    split: str = "train",
    cache_dir: str | None = None,
) -> Dataset:
    """One split of a corpus: local text (one sentence or paragraph per line), csv or json files, or a Hub dataset.

    Raises a `ValueError` naming the problem when neither or both sources are given, or a file is missing.
    """
    if (train_files is None) == (dataset_name is None):
        raise ValueError("Give exactly one corpus: --train_file PATH (text/csv/json) or --dataset_name NAME.")
    if dataset_name is not None:
        return load_dataset(dataset_name, dataset_config_name, split=split, cache_dir=cache_dir)
    files = [train_files] if isinstance(train_files, (str, os.PathLike)) else list(train_files)
    missing = [str(path) for path in files if not os.path.isfile(path)]
    if missing:
        raise ValueError(f"Training file(s) not found: {', '.join(missing)}.")
    extensions = {_extension(path) for path in files}
    unknown = extensions - set(_EXTENSION_BUILDERS)
    if unknown:
        raise ValueError(f"Unsupported corpus file type(s) {sorted(unknown)}: use .txt, .csv/.tsv or .json/.jsonl.")
    builders = {_EXTENSION_BUILDERS[extension] for extension in extensions}
    if len(builders) > 1:
        raise ValueError(f"Mixed corpus file types {sorted(extensions)}: give files of one type.")
    builder = builders.pop()
    kwargs = {"delimiter": "\t"} if extensions == {"tsv"} else {}
    corpus = load_dataset(builder, data_files={split: [str(path) for path in files]}, cache_dir=cache_dir, **kwargs)
    return corpus[split]


def _extension(path) -> str:
    name = str(path).lower()
    if name.endswith(".gz"):
        name = name[:-3]
    return name.rsplit(".", 1)[-1] if "." in os.path.basename(name) else "txt"


def tokenize_corpus(
    corpus: Dataset | DatasetDict,
    tokenizer,
    max_seq_length: int = 32,
    text_column: str | None = None,
    line_by_line: bool = True,
    num_proc: int | None = None,
) -> Dataset:
    """Drop empty lines (counted and logged), then tokenize with `datasets.map` into an ``input_ids`` column.

    With ``line_by_line`` each non-empty line is one example, truncated to ``max_seq_length`` tokens. Without it the
    text is concatenated and cut into blocks of ``max_seq_length`` tokens (each with the tokenizer's special tokens),
    as run_mlm.py does for documents.

    Raises `EmptyCorpusError` when nothing is left.
    """
    if isinstance(corpus, DatasetDict):
        corpus = corpus["train"]
    text_column = text_column or ("text" if "text" in corpus.column_names else corpus.column_names[0])
    if text_column not in corpus.column_names:
        raise ValueError(f"Text column {text_column!r} not in the corpus columns {corpus.column_names}.")
    total = len(corpus)
    corpus = corpus.filter(
        lambda batch: [isinstance(text, str) and bool(text.strip()) for text in batch[text_column]],
        batched=True,
        num_proc=num_proc,
        desc="Skipping empty lines",
    )
    skipped = total - len(corpus)
    if skipped:
        logger.warning("Skipped %d empty line(s) of %d in the corpus.", skipped, total)
    if len(corpus) == 0:
        raise EmptyCorpusError(
            f"The corpus has no text: all {total} line(s) of column {text_column!r} are empty. Check --train_file "
            "(one sentence per line for text files) or --text_column."
        )
    if line_by_line:
        return corpus.map(
            lambda batch: {
                "input_ids": tokenizer(batch[text_column], truncation=True, max_length=max_seq_length)["input_ids"]
            },
            batched=True,
            remove_columns=corpus.column_names,
            num_proc=num_proc,
            desc="Tokenizing",
        )
    prefix, suffix = special_token_frame(tokenizer)
    block = max_seq_length - len(prefix) - len(suffix)
    if block < 1:
        raise ValueError(f"max_seq_length={max_seq_length} leaves no room for text between the special tokens.")

    def to_blocks(batch):
        pieces = tokenizer(batch[text_column], add_special_tokens=False)["input_ids"]
        stream = list(chain.from_iterable(pieces))
        return {"input_ids": [prefix + stream[start : start + block] + suffix for start in range(0, len(stream), block)]}

    return corpus.map(
        to_blocks, batched=True, remove_columns=corpus.column_names, num_proc=num_proc, desc="Tokenizing into blocks"
    )


def special_token_frame(tokenizer) -> tuple[list[int], list[int]]:
    """The special tokens a tokenizer puts before and after one sentence ([CLS] ... [SEP], <s> ... </s>)."""
    probe = "hello"
    content = tokenizer(probe, add_special_tokens=False)["input_ids"]
    framed = tokenizer(probe)["input_ids"]
    for start in range(len(framed) - len(content) + 1):
        if framed[start : start + len(content)] == content:
            return framed[:start], framed[start + len(content) :]
    raise ValueError(f"Cannot tell where {type(tokenizer).__name__} puts its special tokens.")
