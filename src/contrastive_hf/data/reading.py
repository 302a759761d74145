"""Reading a training corpus: text/csv/json files or a Hub dataset, held map-style or streamed, each example with its
stable identity; and the rows and stream parts training reads (`tokenizing` turns the text into token ids).

Two ways to hold a corpus:

* **map-style** (`datasets.Dataset`, the default): loaded once, cached on disk and memory-mapped, so each process
  touches only the rows it samples.
* **streaming** (`datasets.IterableDataset`, ``streaming=True``): for corpora larger than memory or disk cache;
  read on the fly. Local text files (plain or ``.gz``) are read by `text_stream`, whose shards are byte ranges of
  the files (whole files for ``.gz``). A training stream (`prepare_streaming`) is endless and split into one part
  per reader (each process times its dataloader workers, `stream_readers`): each reader reads its own part of the
  shards whole, again and again (`stream_passes`), reshuffled each pass from the seed, so that every pass of a
  reader sees each of its examples once, and ``max_steps`` sets the length of training. Plain-text files loaded for
  that many readers (``load_corpus(..., readers=)``) are cut into parts of equal line counts, so that the readers,
  which train in lockstep, finish their passes together: a global pass (one pass of every part) reads each line of
  the corpus once. The end of each pass is logged with its count of examples.

``example_index`` is each example's stable identity, from which the collators derive its random views (with the
seed, epoch and view): the row number of a map-style corpus (given when it is tokenized), the file and byte offset of
a streamed line (mixed with the pass number after a reader's first pass, so that each pass draws new views).
"""

from __future__ import annotations

import codecs
import functools
import gzip
import itertools
import logging
import os
from collections import Counter
from collections.abc import Sequence

import numpy as np
from datasets import Dataset, DatasetDict, Features, IterableDataset, IterableDatasetDict, Value, load_dataset

from .seeding import EXAMPLE_INDEX_COLUMN, combine

__all__ = [
    "load_corpus",
    "EmptyCorpusError",
    "text_stream",
    "text_shards",
    "first_examples",
    "rows_holding_lines",
    "drop_incomplete_rows",
    "resolve_text_column",
    "prepare_streaming",
    "stream_readers",
    "stream_passes",
    "data_counts_logger",
    "SHARDS_PER_FILE",
]

logger = logging.getLogger(__name__)
# What reached training, counted: each stream pass (`stream_passes`) and each epoch of a map-style corpus
# (`ContrastiveTrainer`) say how many examples they held. The scripts show it at INFO on every process whatever the
# log level (`commands.logs.setup_logging`), so that a user sees lost data where a test cannot.
data_counts_logger = logging.getLogger("contrastive_hf.data_counts")

_EXTENSION_BUILDERS = {"txt": "text", "text": "text", "csv": "csv", "tsv": "csv", "json": "json", "jsonl": "json"}
# A streamed plain-text file is cut into about this many byte ranges (enough shards for many processes times
# dataloader workers; `text_shards`), each at least _MIN_SHARD_BYTES long.
SHARDS_PER_FILE = 64
_MIN_SHARD_BYTES = 1 << 12
_OFFSET_BITS = 44  # example_index of a streamed line: file number << 44 | byte offset (files up to 16 TiB)


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
    extensions = {_extension(path) for path in files}
    unknown = extensions - set(_EXTENSION_BUILDERS)
    if unknown:
        raise ValueError(f"Unsupported corpus file type(s) {sorted(unknown)}: use .txt, .csv/.tsv or .json/.jsonl.")
    builders = {_EXTENSION_BUILDERS[extension] for extension in extensions}
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
    """Raise `_not_utf8_error` at the first bytes of ``path`` (decompressed, for ``.gz``) that are not UTF-8."""
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
                raise _not_utf8_error(path, position, data[error.start : error.end], line) from cause or error
            if not chunk:
                return
            offset += len(chunk)
            lines += chunk.count(b"\n")


def _not_utf8_error(path: str, offset: int, undecodable: bytes, line: int | None = None) -> ValueError:
    name = os.path.basename(path)
    where = f"byte {offset}" + (f" (line {line})" if line is not None else "")
    if path.lower().endswith(".gz"):
        where += " of the decompressed text"
    return ValueError(
        f"{path} is not UTF-8 text: the bytes {undecodable!r} at {where} cannot be decoded. Convert the file to "
        f"UTF-8 and give the converted file (e.g. `iconv -f latin1 -t utf-8 {name} > utf8-{name}` for Latin-1 "
        "text)."
    )


def _extension(path) -> str:
    name = str(path).lower()
    if name.endswith(".gz"):
        name = name[:-3]
    return name.rsplit(".", 1)[-1] if "." in os.path.basename(name) else "txt"


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


# ----------------------------------------------------------------------------------------------------
# Streaming local text
# ----------------------------------------------------------------------------------------------------


def text_stream(
    files: str | Sequence[str], shards_per_file: int = SHARDS_PER_FILE, readers: int = 1
) -> IterableDataset:
    """A streamed text corpus (one example per non-empty line) with ``text`` and ``example_index`` columns, read once.

    Its shards are byte ranges of the files (`text_shards`: about ``shards_per_file`` per plain file, one per ``.gz``
    file, and with ``readers`` the lines cut into that many parts of equal line counts first), so
    ``dataset.shard(num_shards, index)`` and dataloader workers read disjoint parts of the corpus. A line belongs to
    the range holding its first byte. Empty lines are skipped and counted in the log, per shard. `stream_passes`
    reads it again and again (a training stream).
    """
    shards = text_shards(files, shards_per_file, readers)
    features = Features({"text": Value("string"), EXAMPLE_INDEX_COLUMN: Value("int64")})
    return IterableDataset.from_generator(_read_text_shards, features=features, gen_kwargs={"shards": shards})


def text_shards(
    files: str | Sequence[str], shards_per_file: int = SHARDS_PER_FILE, readers: int = 1
) -> list[tuple[str, int, int, int]]:
    """The shards of `text_stream`: ``(path, file number, first byte, end byte)``, end -1 for a whole ``.gz`` file.

    The plain files are cut into about ``shards_per_file`` byte ranges each, of one size across the files (a file
    gets its share of the ranges by its size, at least one, each range at least 4 KB), so that a block of
    consecutive shards (what accelerate gives each process) holds about as many bytes as any other block of as many
    shards, whatever the sizes of the files.

    With ``readers`` > 1 (the readers that will share a training stream, `stream_readers`), blocks of bytes are not
    enough: lines differ in length, and readers that train in lockstep but hold different numbers of lines drift
    apart, pass after pass (a reader of fewer lines starts its next pass while another has lines of its first left).
    The non-empty lines are then cut into ``readers`` parts of equal counts (the first ``lines % readers`` one line
    more), at line starts, and each part into the same number of byte ranges (about ``shards_per_file`` per file
    in all, padded with empty ranges), so that the block ``IterableDataset.shard(readers, reader)`` is the reader's
    part, and one pass of every part reads each line once. Counting the lines reads each file once
    (`_text_line_index`). A ``.gz`` file cannot be cut (gzip is read from its start): with one among the files the
    ranges are cut by bytes as for one reader.
    """
    files = [str(path) for path in ([files] if isinstance(files, (str, os.PathLike)) else files)]
    if readers > 1 and files and not any(path.lower().endswith(".gz") for path in files):
        return _balanced_text_cut(files, readers, shards_per_file)[0]
    sizes = {path: os.path.getsize(path) for path in files if not path.lower().endswith(".gz")}
    target = shards_per_file * len(sizes)  # ranges over all plain files
    shards = []
    for file_number, path in enumerate(files):
        if path not in sizes:
            shards.append((path, file_number, 0, -1))
            continue
        spans = [(path, file_number, 0, sizes[path])]
        shards.extend(_byte_ranges(spans, target, total=sum(sizes.values())))
    return shards


def _text_parts(files: str | Sequence[str], readers: int) -> list[tuple[int, int]] | None:
    """The lines of each reader's part of the `text_shards` cut for ``readers``: ``(first, end)`` line numbers
    (counting non-empty lines of all the files, from 0), or None when the files are not cut by lines (one reader,
    or a ``.gz`` among them)."""
    files = [str(path) for path in ([files] if isinstance(files, (str, os.PathLike)) else files)]
    if readers <= 1 or not files or any(path.lower().endswith(".gz") for path in files):
        return None
    return _balanced_text_cut(files, readers, SHARDS_PER_FILE)[1]


def _byte_ranges(spans, target: int, total: int) -> list[tuple[str, int, int, int]]:
    """``spans`` (``(path, file number, start, end)``) cut into byte ranges: each its share of ``target`` ranges by
    its length out of ``total`` bytes, at least one, each at least _MIN_SHARD_BYTES long."""
    ranges = []
    for path, file_number, start, end in spans:
        length = end - start
        count = max(1, min(round(length * target / max(total, 1)), length // _MIN_SHARD_BYTES))
        bounds = np.linspace(start, end, count + 1).astype(np.int64)
        ranges.extend(
            (path, file_number, int(first), int(last)) for first, last in zip(bounds[:-1], bounds[1:], strict=True)
        )
    return ranges


def _balanced_text_cut(files: list[str], readers: int, shards_per_file: int):
    """``(shards, parts)``: the plain ``files`` cut into ``readers`` parts of equal line counts, each the same
    number of byte ranges (`text_shards`), and each part's ``(first, end)`` line numbers."""
    stats = [os.stat(path) for path in files]
    sizes = [stat.st_size for stat in stats]
    indexes = [_text_line_index(path, stat.st_size, stat.st_mtime_ns) for path, stat in zip(files, stats, strict=True)]
    counts = [sum(lines for _, lines in index) for index in indexes]
    total = sum(counts)
    bounds = [reader * (total // readers) + min(reader, total % readers) for reader in range(readers + 1)]
    # where each part starts: (file number, byte offset); the first at the start of the corpus, the end (and a part
    # after the last line: fewer lines than readers) at its end
    end = (len(files) - 1, sizes[-1])
    starts = [(0, 0)] + [_line_start(files, indexes, counts, line) if line < total else end for line in bounds[1:-1]]
    starts.append(end)
    target = max(1, -(-shards_per_file * len(files) // readers))  # byte ranges per part
    parts = []
    for (first_file, first_byte), (last_file, end_byte) in zip(starts[:-1], starts[1:], strict=True):
        spans = [
            (files[number], number, first_byte if number == first_file else 0,
             end_byte if number == last_file else sizes[number])
            for number in range(first_file, last_file + 1)
        ]  # fmt: skip
        spans = [span for span in spans if span[3] > span[2]]
        ranges = _byte_ranges(spans, target, total=sum(end - start for _, _, start, end in spans))
        parts.append(ranges or [(files[last_file], last_file, end_byte, end_byte)])
    width = max(len(ranges) for ranges in parts)
    shards = []
    for ranges in parts:  # padded to one width, so that datasets' contiguous blocks are the parts
        path, number, _, end = ranges[-1]
        shards.extend(ranges + [(path, number, end, end)] * (width - len(ranges)))
    return shards, list(zip(bounds[:-1], bounds[1:], strict=True))


_INDEX_CHUNK_BYTES = 1 << 20


@functools.lru_cache(maxsize=64)
def _text_line_index(path: str, size: int, modified_ns: int) -> tuple[tuple[int, int], ...]:
    """The non-empty lines of a plain-text file, counted per block of about 1 MB ending at a line end:
    ``((block's first byte, its non-empty lines), ...)`` (cached by path, size and modification time)."""
    index = []
    with open(path, "rb") as handle:
        offset = 0
        while True:
            block = handle.read(_INDEX_CHUNK_BYTES)
            if not block:
                return tuple(index)
            if not block.endswith(b"\n"):
                block += handle.readline()
            index.append((offset, sum(map(_holds_text, block.split(b"\n")))))
            offset += len(block)


def _holds_text(line: bytes) -> bool:
    """Whether `_read_text_shards` reads ``line`` as an example (its text is not blank), decoding only a line whose
    first non-blank byte is not plainly a character."""
    stripped = line.strip()
    if not stripped:
        return False
    if stripped[0] < 0x80 and not 0x1C <= stripped[0] <= 0x1F:  # ASCII that str.strip keeps
        return True
    try:
        return bool(line.decode("utf-8").strip())
    except UnicodeDecodeError:
        return True  # read as text, where _read_text_shards names the file and offset


def _line_start(files, indexes, counts, line: int) -> tuple[int, int]:
    """``(file number, byte offset)`` of the start of non-empty line ``line`` (from 0, over all the files)."""
    number = 0
    while line >= counts[number]:
        line -= counts[number]
        number += 1
    blocks = indexes[number]
    position = 0
    while line >= blocks[position][1]:
        line -= blocks[position][1]
        position += 1
    offset = blocks[position][0]
    end = blocks[position + 1][0] if position + 1 < len(blocks) else None
    with open(files[number], "rb") as handle:
        handle.seek(offset)
        block = handle.read(None if end is None else end - offset)
    for text in block.split(b"\n"):
        if _holds_text(text):
            if line == 0:
                return number, offset
            line -= 1
        offset += len(text) + 1
    raise RuntimeError(f"{files[number]} changed while it was read: give a corpus that is not being written to.")


def _read_text_shards(shards):
    for path, file_number, start, end in shards:  # datasets calls this once per shard
        opener = gzip.open if path.lower().endswith(".gz") else open
        skipped = total = 0
        with opener(path, "rb") as handle:
            position = start
            if start > 0:  # the line holding byte start - 1 belongs to the previous range
                handle.seek(start - 1)
                position = start - 1 + len(handle.readline())
            while end < 0 or position < end:
                line = handle.readline()
                if not line:
                    break
                try:
                    text = line.decode("utf-8").rstrip("\r\n")
                except UnicodeDecodeError as error:
                    bad = line[error.start : error.end]
                    raise _not_utf8_error(path, position + error.start, bad) from error
                total += 1
                if text.strip():
                    yield {"text": text, EXAMPLE_INDEX_COLUMN: (file_number << _OFFSET_BITS) | position}
                else:
                    skipped += 1
                position += len(line)
        if skipped and (path, start) not in _EMPTY_LINES_REPORTED:  # once per range, not at every pass
            _EMPTY_LINES_REPORTED.add((path, start))
            logger.warning(
                "Skipped %d empty line(s) of %d in %s.", skipped, total, _describe([(path, file_number, start, end)])
            )


_EMPTY_LINES_REPORTED: set[tuple[str, int]] = set()


def _describe(shards) -> str:
    """``big.txt bytes 0-8192, small.txt.gz``: the shards' files and byte ranges, adjacent ranges merged."""
    merged = []
    for path, _, start, end in shards:
        if merged and merged[-1][0] == path and merged[-1][2] == start >= 0:
            merged[-1][2] = end
        else:
            merged.append([path, start, end])
    parts = [os.path.basename(path) + (f" bytes {start}-{end}" if end >= 0 else "") for path, start, end in merged]
    return ", ".join(parts) or "no shard"


def stream_readers(training_args) -> int:
    """How many readers share a training stream, each reading its own part (`stream_passes`): every process, times
    its dataloader workers (``--dataloader_num_workers``; a process without workers reads itself). Load plain-text
    files for them (``load_corpus(..., readers=stream_readers(training_args))``) so that their parts hold equal
    numbers of lines (`text_shards`)."""
    return training_args.world_size * _workers_per_process(training_args)


def _workers_per_process(training_args) -> int:
    return max(1, getattr(training_args, "dataloader_num_workers", 0) or 0)


def prepare_streaming(
    dataset: IterableDataset,
    training_args,
    max_examples: int | None = None,
    train_files: str | Sequence[str] | None = None,
) -> IterableDataset:
    """The stream to train on, endless, with ``training_args`` set up so that each process reads its own part.

    By default accelerate lets process 0 read every batch of an iterable dataset and send slices to the others;
    with ``dispatch_batches=False`` it gives each process ``dataset.shard(num_processes, process_index)`` instead.
    The returned stream (`stream_passes`) has one shard per reader (each process, times its dataloader workers), and
    each reader reads its part of ``dataset``'s shards whole, again and again, reshuffled each pass from the data
    seed: every pass of a reader sees each of its examples once, and the parts of all readers cover the corpus. The
    stream is endless, so that no process runs out before another, and ``max_steps`` sets the length of training.
    Plain-text ``train_files`` (the corpus files, read with ``load_corpus(..., readers=stream_readers(args))``) are
    cut into parts of equal line counts, and then one pass of every reader, in lockstep, reads each line once; the
    parts of other streams are blocks of whole shards (files), which may hold different numbers of examples. How the
    corpus is cut is logged once, and each pass of each reader with its count. ``max_examples``
    (``--max_train_samples``) keeps the first ones only (each reader its share). A process whose part holds no
    example at all is stopped, with every other one, by `ContrastiveTrainer`.

    Raises a `ValueError` without ``max_steps``, with ``dispatch_batches=True``, and when the dataset has fewer shards
    than processes (each would then read all of it; ``train_files`` are described in the error).
    """
    if getattr(training_args, "max_steps", 0) <= 0:
        raise ValueError(
            "--streaming trains on an endless stream (each process reads its shards again and again): give "
            "--max_steps N for the length of training."
        )
    world_size = training_args.world_size
    if world_size > 1 and dataset.n_shards < world_size:
        raise ValueError(
            f"The streamed corpus has {dataset.n_shards} shard(s){_describe_files(train_files)}, fewer than the "
            f"{world_size} processes, so every process would read all of it. A plain-text file is cut into byte "
            f"ranges of at least {_MIN_SHARD_BYTES // 1024} KB (so one of {world_size * _MIN_SHARD_BYTES // 1024} KB "
            f"or more has enough for {world_size} processes); a .gz, csv or json file is one shard. Give a larger "
            f"corpus or at least {world_size} files, or train without --streaming (a map-style corpus is "
            "memory-mapped, not held in memory)."
        )
    config = training_args.accelerator_config
    if getattr(config, "dispatch_batches", None):
        raise ValueError(
            "Streaming reads a shard per process, which accelerator_config.dispatch_batches=True prevents; "
            "leave dispatch_batches unset or false."
        )
    config.dispatch_batches = False
    if max_examples is not None:
        dataset = dataset.take(max_examples)
    workers = _workers_per_process(training_args)
    while workers > 1 and world_size * workers > dataset.n_shards:  # a worker without a shard would read nothing
        workers -= 1
    seed = getattr(training_args, "data_seed", None)
    seed = getattr(training_args, "seed", 0) if seed is None else seed
    readers = world_size * workers
    files = _plain_text_files(train_files)
    shards = text_shards(files, readers=readers) if files else None
    if shards is not None and len(shards) != dataset.n_shards:  # not read from these files as documented
        shards = None
    # the lines of each reader's part (not with --max_train_samples: each reader then reads the first of them only)
    part_lines = _text_parts(files, readers) if shards is not None and max_examples is None else None
    if getattr(training_args, "process_index", 0) == 0 and readers > 1:
        data_counts_logger.info(_describe_cut(dataset.n_shards, world_size, workers, part_lines))
    return stream_passes(
        dataset, None, processes=world_size, workers=workers, seed=seed, shard_names=shards, part_lines=part_lines
    )


def _plain_text_files(files) -> list[str] | None:
    """The non-empty plain-text training ``files`` (None for other files), which `text_stream` read."""
    if not files:
        return None
    files = [str(path) for path in ([files] if isinstance(files, (str, os.PathLike)) else files)]
    if any(_EXTENSION_BUILDERS.get(_extension(path)) != "text" for path in files):
        return None
    return [path for path in files if os.path.getsize(path) > 0]


def _describe_cut(shards: int, processes: int, workers: int, part_lines) -> str:
    """How a training stream is cut between its readers, for the log."""
    readers = processes * workers
    who = f"{processes} process{'es' if processes > 1 else ''}"
    who += f" x {workers} dataloader workers" if workers > 1 else ""
    if part_lines is None:
        return (
            f"Streaming in {readers} parts, one per reader ({who}), each a block of the stream's {shards} shards "
            "(files or byte ranges): each pass of a part reads each of its examples once; parts of different sizes "
            "end their passes at different steps."
        )
    sizes = sorted({end - first for first, end in part_lines})
    size = " or ".join(f"{lines:,}" for lines in sizes)
    return (
        f"Streaming {part_lines[-1][1]:,} lines in {readers} parts of {size} lines, one per reader ({who}): a global "
        "pass, one pass of every part in lockstep, reads each line once."
    )


def stream_passes(
    stream: IterableDataset,
    passes: int | None = None,
    processes: int = 1,
    workers: int = 1,
    seed: int | None = None,
    shuffle_buffer: int = 1000,
    shard_names: list | None = None,
    part_lines: Sequence[tuple[int, int]] | None = None,
) -> IterableDataset:
    """``stream`` read ``passes`` times (None: endlessly) by each of ``processes * workers`` readers, each reading its
    own part of the shards whole before it reads it again.

    The result has one shard per reader, so that accelerate's ``shard(processes, process_index)`` and the
    dataloader's workers give reader ``process * workers + worker`` its part: the contiguous block
    ``stream.shard(readers, reader)``, read whole wherever the reader runs (`_whole`: in a dataloader worker too).
    With a ``seed``, each pass is shuffled (`datasets.IterableDataset.shuffle`: the order of the part's shards and a
    buffer of ``shuffle_buffer`` examples) with the seed of its pass, so that the passes come in different orders and
    a resumed run reads what the uninterrupted one did. Each pass after the first gives the examples new identities
    (``example_index`` mixed with the pass number, where the stream has that column), hence new views. The end of
    each pass is logged with its count; a part without any example ends its reader's stream at once (logged) instead
    of being read forever. ``shard_names``: `text_shards`'s byte ranges of the stream's shards, and ``part_lines``
    the lines of each reader's part (`_text_parts`), named in those messages.
    """
    if passes is not None and passes < 1:
        raise ValueError(f"passes must be >= 1, or None to read the stream endlessly; got {passes}.")
    readers = processes * workers
    if readers > stream.n_shards:
        raise ValueError(f"{readers} readers need at least as many shards; the stream has {stream.n_shards}.")
    parts = [
        _StreamPart(stream, reader, readers, workers, passes, seed, shuffle_buffer, shard_names, part_lines)
        for reader in range(readers)
    ]
    return IterableDataset.from_generator(_read_passes, features=stream.features, gen_kwargs={"parts": parts})


class _StreamPart:
    """What one reader of `stream_passes` reads (an object, not a list, so that datasets does not split it)."""

    def __init__(self, stream, reader, readers, workers, passes, seed, shuffle_buffer, shard_names, part_lines):
        self.stream, self.reader, self.readers, self.workers = stream, reader, readers, workers
        self.passes, self.seed, self.shuffle_buffer = passes, seed, shuffle_buffer
        shards = stream.n_shards  # datasets' contiguous split: the first (shards % readers) parts hold one more
        self.first = reader * (shards // readers) + min(reader, shards % readers)
        self.last = self.first + shards // readers + (reader < shards % readers) - 1
        self.files = _describe(shard_names[self.first : self.last + 1]) if shard_names else None
        self.lines = None
        if part_lines:
            first, end = part_lines[reader]
            total = part_lines[-1][1]
            self.lines = f"lines {first + 1:,}-{end:,} of the stream's {total:,}"
            if first == end:  # fewer lines than readers: an empty byte range, not worth naming
                self.lines = f"no line: the stream's {total:,} line(s) are fewer than its {readers} readers"
                self.files = None

    def describe(self) -> str:
        """``process 1 of 2 (shards 32-62 of the stream's 63: corpus.txt bytes 81920-163840)``, ``process 0 of 2,
        dataloader worker 1 of 2 (lines 301-600 of the stream's 1,200: corpus.txt bytes 26000-52000)`` for a part cut
        by lines; ``the whole stream (corpus.txt)`` for a single reader."""
        files = f": {self.files}" if self.files else ""
        if self.readers == 1:
            return f"the whole stream{f' ({self.files})' if self.files else ''}"
        who = f"process {self.reader // self.workers} of {self.readers // self.workers}"
        if self.workers > 1:
            who += f", dataloader worker {self.reader % self.workers} of {self.workers}"
        where = self.lines or f"shards {self.first}-{self.last} of the stream's {self.stream.n_shards}"
        return f"{who} ({where}{files})"


def _read_passes(parts):
    for part in parts:
        stream = part.stream.shard(num_shards=part.readers, index=part.reader) if part.readers > 1 else part.stream
        if part.seed is not None:
            stream = stream.shuffle(seed=part.seed, buffer_size=part.shuffle_buffer)
        for pass_number in itertools.count() if part.passes is None else range(part.passes):
            stream.set_epoch(pass_number)
            count = 0
            for example in _whole(stream):
                count += 1
                if pass_number and EXAMPLE_INDEX_COLUMN in example:  # new identities each pass: new views
                    identity = combine(np.uint64(example[EXAMPLE_INDEX_COLUMN]), pass_number)
                    example = {**example, EXAMPLE_INDEX_COLUMN: int(identity.view(np.int64))}
                yield example
            if count == 0:
                logger.warning("The training stream holds no example for %s.", part.describe())
                return
            data_counts_logger.info("Read pass %d of %s: %s examples.", pass_number + 1, part.describe(), f"{count:,}")


_BATCH_READ = 256


def _whole(stream: IterableDataset):
    """Every example of ``stream``, in order, wherever this runs. Iterating a `datasets.IterableDataset` inside a
    dataloader worker (``for example in stream``) reads only the worker's share of its shards, as datasets splits a
    stream by `torch.utils.data.get_worker_info()`; but the stream a reader of `stream_passes` iterates is its own
    part already, chosen by the worker's shard of the outer stream. `IterableDataset.iter` reads every shard
    (`tests/data/test_corpus.py` holds this for the installed datasets)."""
    for batch in stream.iter(batch_size=_BATCH_READ):
        columns = list(batch)
        for values in zip(*batch.values(), strict=True):
            yield dict(zip(columns, values, strict=True))


def _describe_files(files) -> str:
    """`` (corpus.txt: 5,120 bytes in 1 shard(s))``: each file's size and shards, for errors; empty without files."""
    if not files:
        return ""
    files = [str(path) for path in ([files] if isinstance(files, (str, os.PathLike)) else files)]
    text = [path for path in files if _EXTENSION_BUILDERS.get(_extension(path)) == "text"]
    shards = Counter(path for path, *_ in text_shards(text)) if text else Counter()
    parts = [
        f"{os.path.basename(path)}: {os.path.getsize(path):,} bytes in {shards[path] or 1} shard(s)" for path in files
    ]
    return f" ({'; '.join(parts)})"
