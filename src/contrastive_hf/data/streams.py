"""Streaming a corpus's text: local text files (plain or ``.gz``) read on the fly, and a training stream split into one
part per reader, each read again and again (`reading.load_corpus` gives these streams for ``streaming=True``).

A stream (`datasets.IterableDataset`) is for corpora larger than memory or disk cache. Local text files (plain or
``.gz``) are read by `text_stream`, whose shards are byte ranges of the files (whole files for ``.gz``). A training
stream (`prepare_streaming`) is endless and split into one part per reader (each process times its dataloader
workers, `stream_readers`): each reader reads its own part of the shards whole, again and again (`stream_passes`),
reshuffled each pass from the seed, so that every pass of a reader sees each of its examples once, and ``max_steps``
sets the length of training. Plain-text files loaded for that many readers (``load_corpus(..., readers=)``) are cut
into parts of equal line counts, so that the readers, which train in lockstep, finish their passes together: a global
pass (one pass of every part) reads each line of the corpus once. The end of each pass is logged with its count of
examples.

``example_index``, each example's stable identity from which the collators derive its random views, is for a
streamed line its file and byte offset, mixed with the pass number after a reader's first pass, so that each pass
draws new views.
"""

from __future__ import annotations

import functools
import gzip
import itertools
import logging
import os
from collections import Counter
from collections.abc import Sequence

import numpy as np
from datasets import Features, IterableDataset, Value

from .corpus_files import EXTENSION_BUILDERS, extension, not_utf8_error
from .seeding import EXAMPLE_INDEX_COLUMN, combine

__all__ = [
    "text_stream",
    "text_shards",
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

# A streamed plain-text file is cut into about this many byte ranges (enough shards for many processes times
# dataloader workers; `text_shards`), each at least _MIN_SHARD_BYTES long.
SHARDS_PER_FILE = 64
_MIN_SHARD_BYTES = 1 << 12
_OFFSET_BITS = 44  # example_index of a streamed line: file number << 44 | byte offset (files up to 16 TiB)


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
                    raise not_utf8_error(path, position + error.start, bad) from error
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
    if any(EXTENSION_BUILDERS.get(extension(path)) != "text" for path in files):
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
    text = [path for path in files if EXTENSION_BUILDERS.get(extension(path)) == "text"]
    shards = Counter(path for path, *_ in text_shards(text)) if text else Counter()
    parts = [
        f"{os.path.basename(path)}: {os.path.getsize(path):,} bytes in {shards[path] or 1} shard(s)" for path in files
    ]
    return f" ({'; '.join(parts)})"
