"""Tokenizing a corpus (`reading`) with `datasets`: ``input_ids`` and ``example_index`` examples for the collators.

A map-style corpus is tokenized once with ``datasets.map(batched=True, num_proc=...)`` and cached; a streamed one
lazily, as it is read. Paragraph corpora (a paragraph per line) can be used a line per example
(``line_by_line=True``), a sentence per example (``split_sentences=True``, `split_into_sentences`), or packed into
blocks of ``max_seq_length`` tokens as transformers' run_mlm.py does (``line_by_line=False``). An example's
``example_index`` is its row's number or its streamed line's identity (`reading`), mixed with the sentence's number
when lines are split, or a hash of (line, offset) for packed blocks.
"""

from __future__ import annotations

import itertools
import logging
import re

import numpy as np
from datasets import Dataset, DatasetDict, IterableDataset

from .reading import EmptyCorpusError, resolve_text_column
from .seeding import EXAMPLE_INDEX_COLUMN, combine

__all__ = ["tokenize_corpus", "split_into_sentences", "special_token_frame"]

logger = logging.getLogger(__name__)


class _EmptyLineCounter:
    """Filter for streamed corpora: counts the empty lines it drops, logging at 1, 10, 100... of them."""

    def __init__(self, text_column: str):
        self.text_column = text_column
        self.skipped = 0
        self.seen = 0

    def __call__(self, batch):
        keep = [isinstance(text, str) and bool(text.strip()) for text in batch[self.text_column]]
        for kept in keep:
            self.seen += 1
            if not kept:
                self.skipped += 1
                if self.skipped in (1, 10, 100) or self.skipped % 1000 == 0:
                    logger.warning("Skipped %d empty line(s) of %d so far in the corpus.", self.skipped, self.seen)
        return keep


def tokenize_corpus(
    corpus: Dataset | DatasetDict | IterableDataset,
    tokenizer,
    max_seq_length: int = 32,
    text_column: str | None = None,
    line_by_line: bool = True,
    num_proc: int | None = None,
    split_sentences: bool = False,
) -> Dataset | IterableDataset:
    """Drop empty lines (counted and logged), then tokenize into ``input_ids`` and ``example_index`` columns.

    A map-style corpus is tokenized with `datasets.map` (cached, ``num_proc`` processes); a streamed one lazily, as
    it is read. With ``line_by_line`` each non-empty line is one example, truncated to ``max_seq_length`` tokens;
    with ``split_sentences`` too, each sentence of a line is one (`split_into_sentences`, for paragraph corpora).
    Without ``line_by_line`` the text is concatenated and cut into blocks of ``max_seq_length`` tokens (each with the
    tokenizer's special tokens), as run_mlm.py does for documents.

    Raises `EmptyCorpusError` when a map-style corpus has no text left.
    """
    corpus, text_column, streaming, has_index = resolve_text_column(corpus, text_column)
    columns = corpus.column_names
    if streaming:
        corpus = corpus.filter(_EmptyLineCounter(text_column), batched=True)
        map_kwargs = {}
    else:
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
                f"The corpus has no text: all {total} line(s) of column {text_column!r} are empty. Check "
                "--train_file (one sentence per line for text files) or --text_column."
            )
        map_kwargs = {"num_proc": num_proc}
    # map-style rows are numbered here; streamed lines keep the identity their reader gave them (if any)
    number_rows = not streaming and not has_index

    def identities(batch, indices) -> list[int] | None:
        if has_index:
            return list(batch[EXAMPLE_INDEX_COLUMN])
        return list(indices) if number_rows else None

    if line_by_line:

        def tokenize(batch, indices):
            texts, ids = batch[text_column], identities(batch, indices)
            if split_sentences:  # one example per sentence; its identity: (line, sentence number)
                sentences = [split_into_sentences(text) for text in texts]
                texts = [sentence for line in sentences for sentence in line]
                if ids is not None:
                    lines = np.repeat(np.asarray(ids, dtype=np.int64), [len(line) for line in sentences])
                    numbers = np.concatenate([np.arange(len(line)) for line in sentences] or [np.zeros(0)])
                    ids = combine(lines.astype(np.uint64), numbers.astype(np.int64)).view(np.int64).tolist()
            encoded = {"input_ids": tokenizer(texts, truncation=True, max_length=max_seq_length)["input_ids"]}
            if ids is not None:
                encoded[EXAMPLE_INDEX_COLUMN] = ids
            return encoded

        return corpus.map(
            tokenize,
            batched=True,
            with_indices=True,
            remove_columns=columns,
            **map_kwargs,
            **({} if streaming else {"desc": "Tokenizing"}),
        )

    prefix, suffix = special_token_frame(tokenizer)
    block = max_seq_length - len(prefix) - len(suffix)
    if block < 1:
        raise ValueError(f"max_seq_length={max_seq_length} leaves no room for text between the special tokens.")

    def to_blocks(batch, indices):
        pieces = tokenizer(batch[text_column], add_special_tokens=False)["input_ids"]
        stream = list(itertools.chain.from_iterable(pieces))
        starts = range(0, len(stream), block)
        blocks = {"input_ids": [prefix + stream[start : start + block] + suffix for start in starts]}
        lines = identities(batch, indices)
        if lines is not None:
            # a block's identity: the line its first token comes from and that token's offset in the line
            line_ends = np.cumsum([len(piece) for piece in pieces])
            first = np.asarray(list(starts), dtype=np.int64)
            line = np.searchsorted(line_ends, first, side="right")
            offset = first - (line_ends[line] - np.asarray([len(pieces[i]) for i in line], dtype=np.int64))
            line_identity = np.asarray(lines, dtype=np.int64)[line].astype(np.uint64)
            blocks[EXAMPLE_INDEX_COLUMN] = combine(line_identity, offset).view(np.int64).tolist()
        return blocks

    return corpus.map(
        to_blocks,
        batched=True,
        with_indices=True,
        remove_columns=columns,
        **map_kwargs,
        **({} if streaming else {"desc": "Tokenizing into blocks"}),
    )


# A sentence ends at . ! or ? (and any closing quotes or brackets) followed by space and a capital, digit or opening
# quote: "Mr. Smith" is split wrongly, "D.C. in 1990" is not split. Split the corpus beforehand for better sentences.
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9])")


def split_into_sentences(text: str) -> list[str]:
    """The sentences of a paragraph, by a simple punctuation rule (no model, no download); empty ones dropped."""
    sentences, start = [], 0
    for match in _SENTENCE_END.finditer(text):
        sentences.append(text[start : match.start() + len(match.group(0).rstrip())].strip())
        start = match.end()
    sentences.append(text[start:].strip())
    return [sentence for sentence in sentences if sentence]


def special_token_frame(tokenizer) -> tuple[list[int], list[int]]:
    """The special tokens a tokenizer puts before and after one sentence ([CLS] ... [SEP], <s> ... </s>)."""
    probe = "hello"
    content = tokenizer(probe, add_special_tokens=False)["input_ids"]
    framed = tokenizer(probe)["input_ids"]
    for start in range(len(framed) - len(content) + 1):
        if framed[start : start + len(content)] == content:
            return framed[:start], framed[start + len(content) :]
    raise ValueError(f"Cannot tell where {type(tokenizer).__name__} puts its special tokens.")
