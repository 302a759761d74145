"""A training corpus, read (`reading`: files, the Hub; `streams`: streams with per-process shards) and tokenized
(`tokenizing`): every name of them, importable from here as before."""

from __future__ import annotations

from .reading import (
    EmptyCorpusError,
    drop_incomplete_rows,
    first_examples,
    load_corpus,
    resolve_text_column,
    rows_holding_lines,
)
from .seeding import EXAMPLE_INDEX_COLUMN
from .streams import (
    SHARDS_PER_FILE,
    data_counts_logger,
    prepare_streaming,
    stream_passes,
    stream_readers,
    text_shards,
    text_stream,
)
from .tokenizing import special_token_frame, split_into_sentences, tokenize_corpus

__all__ = [
    "drop_incomplete_rows",
    "first_examples",
    "rows_holding_lines",
    "load_corpus",
    "tokenize_corpus",
    "text_stream",
    "text_shards",
    "split_into_sentences",
    "prepare_streaming",
    "stream_passes",
    "stream_readers",
    "special_token_frame",
    "resolve_text_column",
    "EmptyCorpusError",
    "EXAMPLE_INDEX_COLUMN",
    "data_counts_logger",
    "SHARDS_PER_FILE",
]
