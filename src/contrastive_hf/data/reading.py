"""Reading a training corpus: text/csv/json files or a Hub dataset, held map-style or streamed, each example with its
stable identity; and the rows training reads (`tokenizing` turns the text into token ids). Streaming text and the
parts of a training stream are `streams`.

Two ways to hold a corpus:

* **map-style** (`datasets.Dataset`, the default): loaded once, cached on disk and memory-mapped, so each process
  touches only the rows it samples.
* **streaming** (`datasets.IterableDataset`, ``streaming=True``): for corpora larger than memory or disk cache;
  read on the fly (`streams`: local text files by `text_stream`, a training stream split between its readers by
  `prepare_streaming`).

``example_index`` is each example's stable identity, from which the collators derive its random views (with the
seed, epoch and view): the row number of a map-style corpus (given when it is tokenized); a streamed line's is its
file and byte offset (`streams`).
"""

from __future__ import annotations

import codecs
import gzip
import logging
import os
from collections.abc import Sequence

from datasets import Dataset, DatasetDict, IterableDataset, IterableDatasetDict, load_dataset

from .corpus_files import EXTENSION_BUILDERS, extension, not_utf8_error
from .seeding import EXAMPLE_INDEX_COLUMN
from .streams import stream_passes, text_stream

__all__ = [
    "load_corpus",
    "EmptyCorpusError",
    "first_examples",
    "rows_holding_lines",
    "drop_incomplete_rows",
    "resolve_text_column",
]

logger = logging.getLogger(__name__)


class EmptyCorpusError(ValueError):
    """The corpus holds no non-empty text."""


def load_corpus(
    train_files: str | Sequence[str] | None = None,
    dataset_name: str | None = None,
    dataset_config_name: str | None = None,
    split: str = "train",
    cache_dir: str | None = None,
    streaming: bool = False,
    passes: int | None = 1,
    readers: int = 1,
) -> Dataset | IterableDataset:
    """One split of a corpus: local text (one sentence or paragraph per line, optionally ``.gz``), csv or json
    files, or a Hub dataset; a `datasets.IterableDataset` read on the fly when ``streaming``.

    ``passes`` (streaming only): how many times the stream is read, None for again and again (`stream_passes`, by
    one reader; a training stream is split between its readers by `prepare_streaming` instead). Each pass after the
    first gives the examples new identities (``example_index``, where the stream has one), hence new views.
    ``readers`` (streaming plain text): how many readers will share the stream in training (`stream_readers`), for
    `text_shards` to cut the lines into that many parts of equal line counts.

    Empty (0-byte) files are skipped and named in the log. Raises a `ValueError` naming the problem and the file when
    neither or both sources are given, a file is missing or not UTF-8 text (with the byte offset and line of the
    first bytes that are not), and `EmptyCorpusError` when every file is empty.
    """
    if (train_files is None) == (dataset_name is None):
        raise ValueError("Give exactly one corpus: --train_file PATH (text/csv/json) or --dataset_name NAME.")
    if dataset_name is not None:
        corpus = load_dataset(dataset_name, dataset_config_name, split=split, cache_dir=cache_dir, streaming=streaming)
        return _repeated(corpus, passes, streaming)
    files = [train_files] if isinstance(train_files, (str, os.PathLike)) else list(train_files)
    missing = [str(path) for path in files if not os.path.isfile(path)]
    if missing:
        raise ValueError(f"Training file(s) not found: {', '.join(missing)}.")
    empty = [path for path in files if os.path.getsize(path) == 0]
    if len(empty) == len(files):
        raise EmptyCorpusError(
            f"The training file(s) {', '.join(map(str, empty))} are empty (0 bytes), often the sign of an "
            "interrupted copy or download: write them again, or give other files with --train_file."
        )
    if empty:  # as empty lines are
        logger.warning("Skipped %d empty (0-byte) training file(s): %s.", len(empty), ", ".join(map(str, empty)))
        files = [path for path in files if path not in empty]
    extensions = {extension(path) for path in files}
    unknown = extensions - set(EXTENSION_BUILDERS)
    if unknown:
        raise ValueError(f"Unsupported corpus file type(s) {sorted(unknown)}: use .txt, .csv/.tsv or .json/.jsonl.")
    builders = {EXTENSION_BUILDERS[extension] for extension in extensions}
    if len(builders) > 1:
        raise ValueError(f"Mixed corpus file types {sorted(extensions)}: give files of one type.")
    builder = builders.pop()
    if streaming and builder == "text":
        return _repeated(text_stream(files, readers=readers), passes, streaming)
    if builder == "json" and not streaming:  # Arrow's JSON reader keeps bytes that are not UTF-8 and fails later
        for path in files:
            _check_utf8(str(path))
    kwargs = {"delimiter": "\t"} if extensions == {"tsv"} else {}
    try:
        corpus = load_dataset(
            builder,
            data_files={split: [str(path) for path in files]},
            cache_dir=cache_dir,
            streaming=streaming,
            **kwargs,
        )
    except Exception as error:
        if _caused_by(error, UnicodeDecodeError):  # datasets' message names no file
            for path in files:
                _check_utf8(str(path), cause=error)
        raise
    return _repeated(corpus[split], passes, streaming)


def _repeated(corpus, passes: int | None, streaming: bool):
    if not streaming or passes == 1:
        return corpus
    return stream_passes(corpus, passes)


def _caused_by(error: BaseException, kind: type[BaseException]) -> bool:
    while error is not None:
        if isinstance(error, kind):
            return True
        error = error.__cause__ or error.__context__
    return False


def _open_binary(path: str):
    return gzip.open(path, "rb") if path.lower().endswith(".gz") else open(path, "rb")


def _check_utf8(path: str, cause: BaseException | None = None) -> None:
    """Raise `not_utf8_error` at the first bytes of ``path`` (decompressed, for ``.gz``) that are not UTF-8."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    offset = lines = 0  # bytes and line breaks before this chunk
    with _open_binary(path) as handle:
        while True:
            chunk = handle.read(1 << 20)
            pending = decoder.getstate()[0]  # the start of a character cut by the previous chunk
            try:
                decoder.decode(chunk, final=not chunk)
            except UnicodeDecodeError as error:
                data = pending + chunk
                line = lines + data[: error.start].count(b"\n") + 1
                position = offset - len(pending) + error.start
                raise not_utf8_error(path, position, data[error.start : error.end], line) from cause or error
            if not chunk:
                return
            offset += len(chunk)
            lines += chunk.count(b"\n")


def first_examples(dataset: Dataset | IterableDataset, count: int | None):
    """The first ``count`` examples of a dataset, streamed or not (``--max_train_samples``); all of it for None."""
    if count is None:
        return dataset
    if isinstance(dataset, IterableDataset):
        return dataset.take(count)
    return dataset.select(range(min(count, len(dataset))))


def rows_holding_lines(corpus: Dataset | DatasetDict, count: int, text_column: str | None = None) -> Dataset:
    """The first rows of a map-style ``corpus`` that hold ``count`` non-empty lines of text (all of it when it holds
    fewer): what ``--max_train_samples`` keeps of a line-by-line corpus, cut before tokenizing so that the rest is
    never tokenized. Rows keep their numbers, so the examples and their views are those of the whole corpus."""
    corpus, text_column, _, _ = resolve_text_column(corpus, text_column)
    seen = 0
    for start in range(0, len(corpus), 1000):
        texts = corpus[start : start + 1000][text_column]
        for offset, text in enumerate(texts):
            seen += _has_text(text)
            if seen == count:
                return corpus.select(range(start + offset + 1))
    return corpus


def _has_text(value) -> bool:
    """Text, or a non-empty list of texts (a row's several hard negatives)."""
    if isinstance(value, list):
        return bool(value) and all(_has_text(item) for item in value)
    return isinstance(value, str) and bool(value.strip())


def drop_incomplete_rows(dataset, columns: Sequence[str | None], num_proc: int | None = None):
    """The rows of a `datasets.Dataset` with text in every one of ``columns`` (None entries are ignored), e.g. the
    (anchor, positive, hard negative) columns of pairs; how many were dropped is logged. Raises a `ValueError` when
    no row is left."""
    used = [column for column in columns if column is not None]
    total = len(dataset)
    dataset = dataset.filter(
        lambda batch: [all(_has_text(batch[column][row]) for column in used) for row in range(len(batch[used[0]]))],
        batched=True,
        num_proc=num_proc,
        desc="Dropping incomplete rows",
    )
    if len(dataset) < total:
        logger.warning(
            "Dropped %d of %d row(s) with an empty %s.", total - len(dataset), total, " or ".join(map(repr, used))
        )
    if len(dataset) == 0:
        raise ValueError(f"No row of the data set has text in every one of the columns {used}.")
    return dataset


def resolve_text_column(corpus, text_column: str | None):
    """``(split, text column, is streaming, has an example-index column)`` of a corpus or its ``train`` split.

    The text column defaults to ``text``, else the first column; a named column that is missing is an error.
    """
    if isinstance(corpus, (DatasetDict, IterableDatasetDict)):
        corpus = corpus["train"]
    streaming = isinstance(corpus, IterableDataset)
    columns = corpus.column_names
    if columns is not None:
        text_column = text_column or ("text" if "text" in columns else columns[0])
        if text_column not in columns:
            raise ValueError(f"Text column {text_column!r} not in the corpus columns {columns}.")
    else:
        text_column = text_column or "text"
    has_index = columns is not None and EXAMPLE_INDEX_COLUMN in columns
    return corpus, text_column, streaming, has_index
