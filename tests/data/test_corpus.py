"""Corpus loading (text/csv/json files, map-style or streamed) and tokenization with `datasets`; byte-range shards
and per-process reading; training on a stream."""

from __future__ import annotations

import gzip
import itertools
import json
import logging
from collections import Counter
from types import SimpleNamespace

import pytest
import torch
from accelerate.data_loader import prepare_data_loader
from datasets import Dataset, DatasetDict, IterableDataset
from torch.utils.data import DataLoader

import contrastive_hf.data.streams as streams_module
from contrastive_hf import ContrastiveConfig, ContrastiveForPreTraining
from contrastive_hf.data.augmentations import add_del_token
from contrastive_hf.data.collators import ContrastiveDataCollator
from contrastive_hf.data.reading import EmptyCorpusError, load_corpus
from contrastive_hf.data.streams import SHARDS_PER_FILE, prepare_streaming, stream_passes, text_shards, text_stream
from contrastive_hf.data.tokenizing import split_into_sentences, tokenize_corpus
from contrastive_hf.training.trainer import ContrastiveTrainer
from contrastive_hf.training.training_args import ContrastiveTrainingArguments

from conftest import TEST_DATA, tiny_bert_config

# the loggers of reading (files), of streams (empty lines of a stream, parts without a line) and of tokenizing (empty
# lines dropped)
READING, STREAMS = "contrastive_hf.data.reading", "contrastive_hf.data.streams"
TOKENIZING = "contrastive_hf.data.tokenizing"
WIKIPEDIA_GZ = TEST_DATA / "corpus" / "enwiki_paragraphs.txt.gz"  # 30 Wikipedia paragraphs, gzipped

LINES = [
    "the first sentence of the corpus",
    "",
    "   ",
    "a second, rather longer sentence about contrastive learning of sentence representations",
    "\t",
    "third",
    "",
    "the fourth and last line",
]
NON_EMPTY = [line for line in LINES if line.strip()]


def _write_text(path, lines):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def cache_dir(tmp_path):
    return str(tmp_path / "hf_cache")


# ----------------------------------------------------------------------------------------------------
# load_corpus
# ----------------------------------------------------------------------------------------------------


def test_text_file_skips_empty_lines_and_logs(tmp_path, cache_dir, tokenizer, caplog):
    path = _write_text(tmp_path / "corpus.txt", LINES)
    corpus = load_corpus(str(path), cache_dir=cache_dir)
    assert corpus["text"] == LINES  # the text builder keeps every line; tokenize_corpus drops the empty ones
    with caplog.at_level(logging.WARNING, logger=TOKENIZING):
        tokenized = tokenize_corpus(corpus, tokenizer, max_seq_length=16)
    skipped = len(LINES) - len(NON_EMPTY)
    records = [record for record in caplog.records if record.name == TOKENIZING]
    assert len(records) == 1
    assert records[0].levelno == logging.WARNING
    assert f"Skipped {skipped} empty line(s) of {len(LINES)}" in records[0].getMessage()
    assert tokenized.column_names == ["input_ids", "example_index"]
    assert tokenized["example_index"] == list(range(len(NON_EMPTY)))  # each example's identity for its views
    assert len(tokenized) == len(NON_EMPTY)
    expected = [tokenizer(line, truncation=True, max_length=16)["input_ids"] for line in NON_EMPTY]
    assert tokenized["input_ids"] == expected
    assert all(len(ids) <= 16 for ids in tokenized["input_ids"])
    assert max(len(ids) for ids in tokenized["input_ids"]) == 16  # the long line was truncated


def test_no_warning_without_empty_lines(tmp_path, cache_dir, tokenizer, caplog):
    path = _write_text(tmp_path / "clean.txt", NON_EMPTY)
    with caplog.at_level(logging.WARNING, logger=TOKENIZING):
        tokenized = tokenize_corpus(load_corpus(path, cache_dir=cache_dir), tokenizer)
    assert not [record for record in caplog.records if record.name == TOKENIZING]
    assert len(tokenized) == len(NON_EMPTY)


def test_all_empty_corpus_raises(tmp_path, cache_dir, tokenizer):
    path = _write_text(tmp_path / "empty.txt", ["", "   ", "\t", ""])
    corpus = load_corpus(str(path), cache_dir=cache_dir)
    with pytest.raises(EmptyCorpusError) as error:
        tokenize_corpus(corpus, tokenizer)
    assert isinstance(error.value, ValueError)
    message = str(error.value)
    assert "no text" in message
    assert f"all {len(corpus)} line(s)" in message
    assert "'text'" in message and "--text_column" in message


def test_missing_file_raises_naming_the_path(tmp_path, cache_dir):
    present = _write_text(tmp_path / "present.txt", NON_EMPTY)
    missing = tmp_path / "does_not_exist.txt"
    with pytest.raises(ValueError, match="not found") as error:
        load_corpus([str(present), str(missing)], cache_dir=cache_dir)
    assert str(missing) in str(error.value)
    assert str(present) not in str(error.value)


@pytest.mark.parametrize("streaming", [False, True], ids=["map", "streaming"])
@pytest.mark.parametrize("name", ["corpus.txt", "corpus.csv", "corpus.jsonl"])
def test_an_empty_file_is_named_and_skipped_or_refused_when_alone(tmp_path, cache_dir, caplog, name, streaming):
    empty = tmp_path / name
    empty.write_bytes(b"")
    with pytest.raises(EmptyCorpusError, match="empty \\(0 bytes\\)") as error:
        load_corpus(str(empty), cache_dir=cache_dir, streaming=streaming)
    assert str(empty) in str(error.value) and "--train_file" in str(error.value)

    present = tmp_path / f"present{name[6:]}"
    present.write_text({"corpus.txt": "one\n", "corpus.csv": "text\none\n", "corpus.jsonl": '{"text": "one"}\n'}[name])
    with caplog.at_level(logging.WARNING, logger=READING):
        corpus = load_corpus([str(present), str(empty)], cache_dir=cache_dir, streaming=streaming)
    assert [row["text"] for row in corpus] == ["one"]
    assert f"Skipped 1 empty (0-byte) training file(s): {empty}." in caplog.text


def _latin1_in_the_middle(path, header=b"", line=lambda text: text):
    """A corpus over 1 MiB of UTF-8 text with one Latin-1 line; the Latin-1 byte's offset and line number. The first
    line is padded so that a two-byte character straddles the 1 MiB reads of the scan."""
    body = b"".join(line(f"caf\u00e9 number {i}".encode()) + b"\n" for i in range(60_000))
    unpadded = header + line(b"") + b"\n" + body
    padding = 2**20 - 1 - unpadded.rindex("\u00e9".encode(), 0, 2**20)
    before = header + line(b"x" * padding) + b"\n" + body
    assert before[2**20 - 1 : 2**20 + 1] == "\u00e9".encode()
    bad = line("caf\u00e9 au lait".encode("latin-1"))
    path.write_bytes(before + bad + b"\n" + line(b"the end") + b"\n")
    return len(before) + bad.index(b"\xe9"), before.count(b"\n") + 1


@pytest.mark.parametrize(
    "name, header, line",
    [
        ("corpus.txt", b"", lambda text: text),
        ("corpus.csv", b"text\n", lambda text: text),
        ("corpus.jsonl", b"", lambda text: b'{"text": "' + text + b'"}'),
    ],
    ids=["text", "csv", "json"],
)
def test_a_file_that_is_not_utf8_is_named_with_the_byte_and_line(tmp_path, cache_dir, name, header, line):
    path = tmp_path / name
    offset, line_number = _latin1_in_the_middle(path, header, line)
    assert offset > 2**20  # past the first read of the scan
    with pytest.raises(ValueError) as error:
        load_corpus(str(path), cache_dir=cache_dir)
    message = str(error.value)
    assert f"{path} is not UTF-8 text: the bytes b'\\xe9' at byte {offset} (line {line_number})" in message
    assert "iconv" in message


@pytest.mark.slow  # a stream read to its bad byte: 4 s of CPU
def test_a_streamed_text_file_that_is_not_utf8_is_named_with_the_byte(tmp_path):
    path = tmp_path / "corpus.txt"
    offset, _ = _latin1_in_the_middle(path)
    with pytest.raises(ValueError, match=f"{path} is not UTF-8 text: the bytes b'\\\\xe9' at byte {offset} "):
        list(load_corpus(str(path), streaming=True))  # read in byte ranges: the offset is the file's
    compressed = tmp_path / "corpus.txt.gz"
    compressed.write_bytes(gzip.compress(path.read_bytes()))
    with pytest.raises(ValueError, match=f"at byte {offset} of the decompressed text"):
        list(load_corpus(str(compressed), streaming=True))


def test_both_or_neither_source_raises(tmp_path, cache_dir):
    path = _write_text(tmp_path / "corpus.txt", NON_EMPTY)
    with pytest.raises(ValueError, match="exactly one"):
        load_corpus(cache_dir=cache_dir)
    with pytest.raises(ValueError, match="exactly one"):
        load_corpus(str(path), dataset_name="some/dataset", cache_dir=cache_dir)


def test_several_text_files_are_concatenated(tmp_path, cache_dir):
    first = _write_text(tmp_path / "a.txt", ["one", "two"])
    second = _write_text(tmp_path / "b.txt", ["three"])
    corpus = load_corpus([first, second], cache_dir=cache_dir)
    assert sorted(corpus["text"]) == ["one", "three", "two"]


def test_unsupported_and_mixed_file_types_raise(tmp_path, cache_dir):
    odd = tmp_path / "corpus.parquetx"
    odd.write_text("x\n")
    with pytest.raises(ValueError, match="Unsupported"):
        load_corpus(str(odd), cache_dir=cache_dir)
    text = _write_text(tmp_path / "a.txt", ["one"])
    table = tmp_path / "b.csv"
    table.write_text("text\ntwo\n")
    with pytest.raises(ValueError, match="Mixed"):
        load_corpus([str(text), str(table)], cache_dir=cache_dir)


def test_csv_with_text_column(tmp_path, cache_dir, tokenizer, caplog):
    path = tmp_path / "corpus.csv"
    path.write_text('id,text\n1,hello world\n2,\n3,"second line, with a comma"\n', encoding="utf-8")
    corpus = load_corpus(str(path), cache_dir=cache_dir)
    assert set(corpus.column_names) == {"id", "text"}
    with caplog.at_level(logging.WARNING, logger=TOKENIZING):
        tokenized = tokenize_corpus(corpus, tokenizer)  # "text" is picked without being named
    assert "Skipped 1 empty line(s) of 3" in caplog.text
    assert tokenized["input_ids"] == [
        tokenizer("hello world")["input_ids"],
        tokenizer("second line, with a comma")["input_ids"],
    ]


def test_tsv_uses_tab_delimiter(tmp_path, cache_dir, tokenizer):
    path = tmp_path / "corpus.tsv"
    path.write_text("label\tsentence\n0\tfirst, with comma\n1\tsecond\n", encoding="utf-8")
    corpus = load_corpus(str(path), cache_dir=cache_dir)
    assert corpus["sentence"] == ["first, with comma", "second"]
    tokenized = tokenize_corpus(corpus, tokenizer, text_column="sentence")
    assert tokenized["input_ids"][0] == tokenizer("first, with comma")["input_ids"]


def test_jsonl_with_named_text_column(tmp_path, cache_dir, tokenizer):
    rows = [
        {"label": 1, "sentence": "json lines work"},
        {"label": 0, "sentence": "   "},
        {"label": 1, "sentence": "another one"},
    ]
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    corpus = load_corpus(str(path), cache_dir=cache_dir)
    tokenized = tokenize_corpus(corpus, tokenizer, text_column="sentence")
    assert tokenized.column_names == ["input_ids", "example_index"]
    assert tokenized["input_ids"] == [tokenizer("json lines work")["input_ids"], tokenizer("another one")["input_ids"]]


def test_jsonl_text_column_picked_by_name(tmp_path, cache_dir, tokenizer):
    path = tmp_path / "corpus.jsonl"
    path.write_text(
        json.dumps({"id": "a", "text": "by name"}) + "\n" + json.dumps({"id": "b", "text": "second"}) + "\n",
        encoding="utf-8",
    )
    tokenized = tokenize_corpus(load_corpus(str(path), cache_dir=cache_dir), tokenizer)
    assert tokenized["input_ids"] == [tokenizer("by name")["input_ids"], tokenizer("second")["input_ids"]]


def test_missing_text_column_raises(tmp_path, cache_dir, tokenizer):
    path = tmp_path / "corpus.csv"
    path.write_text("id,text\n1,hello\n", encoding="utf-8")
    corpus = load_corpus(str(path), cache_dir=cache_dir)
    with pytest.raises(ValueError, match="'sentence'") as error:
        tokenize_corpus(corpus, tokenizer, text_column="sentence")
    assert "text" in str(error.value) and "id" in str(error.value)


def test_dataset_dict_uses_train_split(tokenizer):
    corpus = DatasetDict(
        {"train": Dataset.from_dict({"text": ["train sentence"]}), "test": Dataset.from_dict({"text": ["no"]})}
    )
    tokenized = tokenize_corpus(corpus, tokenizer)
    assert tokenized["input_ids"] == [tokenizer("train sentence")["input_ids"]]


def test_non_string_values_are_skipped(tokenizer, caplog):
    corpus = Dataset.from_dict({"text": ["kept", None, "also kept"]})
    with caplog.at_level(logging.WARNING, logger=TOKENIZING):
        tokenized = tokenize_corpus(corpus, tokenizer)
    assert len(tokenized) == 2
    assert "Skipped 1 empty line(s) of 3" in caplog.text


# ----------------------------------------------------------------------------------------------------
# line_by_line=False: packed blocks
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("max_seq_length", [8, 13])
def test_blocks_pack_all_tokens_in_order(tmp_path, cache_dir, tokenizer, max_seq_length):
    lines = [f"line number {i} talks about {'contrastive ' * (i % 3)}sentence embeddings" for i in range(30)]
    lines[4] = ""
    path = _write_text(tmp_path / "doc.txt", lines)
    corpus = load_corpus(str(path), cache_dir=cache_dir)
    try:
        blocks = tokenize_corpus(corpus, tokenizer, max_seq_length=max_seq_length, line_by_line=False)
    except AttributeError as error:
        pytest.fail(
            "SRC BUG (data.py, tokenize_corpus.to_blocks): tokenizer.build_inputs_with_special_tokens does not exist "
            f"on transformers 5 tokenizers-backend tokenizers ({type(tokenizer).__name__}), so "
            f"line_by_line=False always fails: {error!r}"
        )
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    ids = blocks["input_ids"]
    assert len(ids) > 1
    for block in ids:
        assert block[0] == cls and block[-1] == sep
        assert 3 <= len(block) <= max_seq_length
        assert cls not in block[1:-1] and sep not in block[1:-1]
    assert all(len(block) == max_seq_length for block in ids[:-1])  # only the tail block is short
    stream = []
    for line in lines:
        if line.strip():
            stream.extend(tokenizer(line, add_special_tokens=False)["input_ids"])
    packed = [token for block in ids for token in block[1:-1]]
    assert packed == stream
    assert len(set(blocks["example_index"])) == len(ids)  # every block its own identity


# ----------------------------------------------------------------------------------------------------
# Streaming: byte-range shards, each process reading its own
# ----------------------------------------------------------------------------------------------------


def _big_text(tmp_path, count=600):
    """A text file of ``count`` lines (every 7th empty), about 40 KB: enough for several 4 KB shards."""
    lines = ["" if i % 7 == 3 else f"line {i} says something about sentence embeddings {'x' * (i % 50)}" for i in
             range(count)]  # fmt: skip
    path = tmp_path / "big.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    offsets, position = [], 0
    for line in lines:
        offsets.append(position)
        position += len(line.encode()) + 1
    return path, lines, offsets


def test_text_stream_shards_are_byte_ranges_covering_every_line_once(tmp_path, caplog):
    path, lines, offsets = _big_text(tmp_path)
    stream = text_stream(str(path))
    assert isinstance(stream, IterableDataset)
    assert 4 < stream.n_shards <= 64
    with caplog.at_level(logging.WARNING, logger=STREAMS):
        rows = list(stream)
    expected = [(line, offset) for line, offset in zip(lines, offsets, strict=True) if line]
    assert [(row["text"], row["example_index"]) for row in rows] == expected  # in order, each once
    skipped = sum(int(record.getMessage().split()[1]) for record in caplog.records if "Skipped" in record.getMessage())
    assert skipped == lines.count("")
    # the shards, read separately, partition the lines
    parts = [list(stream.shard(num_shards=stream.n_shards, index=i)) for i in range(stream.n_shards)]
    assert sum(len(part) for part in parts) == len(expected)
    assert sorted(row["example_index"] for part in parts for row in part) == [offset for _, offset in expected]


def test_each_process_reads_only_its_own_shards(tmp_path, monkeypatch):
    path, lines, _ = _big_text(tmp_path)
    opened = []
    original = streams_module._read_text_shards

    def recording(shards):
        opened.append(list(shards))
        yield from original(shards)

    monkeypatch.setattr(streams_module, "_read_text_shards", recording)
    stream = text_stream(str(path))
    size = path.stat().st_size
    seen, ranges = [], []
    for rank in range(2):
        opened.clear()
        # what accelerate does for each process when prepare_streaming set dispatch_batches=False
        loader = prepare_data_loader(
            DataLoader(stream, batch_size=8, collate_fn=lambda rows: rows),
            num_processes=2,
            process_index=rank,
            put_on_device=False,
            dispatch_batches=False,
        )
        seen.append([row["text"] for batch in loader for row in batch])
        read = [(start, end) for call in opened for (_, _, start, end) in call]
        ranges.append(set(read))
        assert sum(end - start for start, end in read) < 0.6 * size  # about half the file, never all of it
    assert not ranges[0] & ranges[1]
    assert sorted(ranges[0] | ranges[1]) == [(s, e) for (_, _, s, e) in text_shards(str(path))]
    assert not set(seen[0]) & set(seen[1])
    assert sorted(seen[0] + seen[1]) == sorted(line for line in lines if line)


def test_consecutive_blocks_of_shards_hold_about_as_many_bytes_whatever_the_file_sizes(tmp_path):
    """accelerate gives each process a block of consecutive shards: the ranges are of one size across the files, so
    that a small file beside a big one does not become one process's whole share (which it would read again and
    again)."""
    big = _write_text(tmp_path / "big.txt", [f"sentence {i} about contrastive learning" for i in range(50_000)])
    small = _write_text(tmp_path / "small.txt", [f"line {i} of the small file" for i in range(10_000)])
    assert big.stat().st_size > 7 * small.stat().st_size > 7 * SHARDS_PER_FILE * 4096  # 2.1 MB beside 280 KB
    shards = text_shards([str(big), str(small)])
    stream = text_stream([str(big), str(small)])
    assert stream.n_shards == len(shards)
    ranges = [end - start for _, _, start, end in shards]
    assert max(ranges) < 2 * min(ranges)
    for processes in (2, 3, 8):
        counts = [stream.shard(num_shards=processes, index=index).n_shards for index in range(processes)]
        starts = [sum(counts[:index]) for index in range(processes + 1)]
        shares = [sum(ranges[starts[index] : starts[index + 1]]) for index in range(processes)]
        assert max(shares) - min(shares) <= max(ranges), (processes, shares)


def test_an_endless_text_stream_gives_each_pass_new_identities(tmp_path):
    path = _write_text(tmp_path / "corpus.txt", LINES)
    rows = list(itertools.islice(stream_passes(text_stream(str(path)), None), 3 * len(NON_EMPTY)))
    passes = [rows[i : i + len(NON_EMPTY)] for i in range(0, len(rows), len(NON_EMPTY))]
    assert all([row["text"] for row in part] == NON_EMPTY for part in passes)  # the same lines, in order, each pass
    identities = [[row["example_index"] for row in part] for part in passes]
    assert identities[0] == [row["example_index"] for row in text_stream(str(path))]  # the first: file and offset
    assert len({index for part in identities for index in part}) == len(rows)  # each pass: new ones
    assert [row["example_index"] for row in stream_passes(text_stream(str(path)), 3)] == sum(identities, [])
    assert [row["example_index"] for row in load_corpus(str(path), streaming=True, passes=3)] == sum(identities, [])


def _pass_counts(caplog) -> list[int]:
    """The example counts of the passes logged so far ("Read pass 1 of ...: 2,497 examples.")."""
    messages = [record.getMessage() for record in caplog.records if record.name == "contrastive_hf.data_counts"]
    return [int(message.rsplit(": ", 1)[1].split()[0].replace(",", "")) for message in messages]


@pytest.mark.parametrize("processes", [1, 2, pytest.param(3, marks=pytest.mark.slow)])  # 3: 2 s of CPU
def test_each_pass_of_an_endless_stream_reads_every_line_of_every_shard_once(tmp_path, caplog, processes):
    """The reported defect: read endlessly, a stream of many byte ranges cycled through the lines of its first range
    (54 of 5,000 distinct lines). Each reader (a process) now reads its whole part before reading it again,
    reshuffled each pass, and the readers' parts cover the corpus."""
    path, lines, _ = _big_text(tmp_path, count=2000)
    non_empty = [line for line in lines if line]
    stream = text_stream(str(path))
    assert stream.n_shards > 8
    endless = stream_passes(stream, None, processes=processes, seed=7)
    assert endless.n_shards == processes
    passes_seen, per_process = [], []
    with caplog.at_level(logging.INFO, logger="contrastive_hf.data_counts"):
        for process in range(processes):
            reader = endless.shard(num_shards=processes, index=process) if processes > 1 else endless
            caplog.clear()
            passes_seen.append(
                list(itertools.islice(reader, 2 * len(non_empty) + 1))
            )  # 2 passes of any part, and more
            counts = set(_pass_counts(caplog))  # logged at the end of each pass read whole: the part's length
            assert len(counts) == 1
            per_process.append(counts.pop())
    assert sum(per_process) == len(non_empty)  # the parts: the corpus, split
    parts = []
    for rows, count in zip(passes_seen, per_process, strict=True):
        first, second = rows[:count], rows[count : 2 * count]
        assert len({row["text"] for row in first}) == count  # every line of the part once
        assert {row["text"] for row in second} == {row["text"] for row in first}  # the same part again
        assert [row["text"] for row in second] != [row["text"] for row in first]  # reshuffled
        assert not {row["example_index"] for row in first} & {row["example_index"] for row in second}  # new views
        parts.append({row["text"] for row in first})
    assert sorted(text for part in parts for text in part) == sorted(non_empty)  # disjoint, and every line


def test_shards_without_a_line_end_the_stream_instead_of_spinning(tmp_path, caplog):
    path = tmp_path / "one_line.txt"
    path.write_text(" ".join(["word"] * 2000) + "\n")  # 10 KB: two byte ranges, the line starts in the first
    stream = stream_passes(text_stream(str(path)), None, processes=2, shard_names=text_shards(str(path)))
    assert stream.n_shards == 2
    assert len(list(itertools.islice(stream.shard(num_shards=2, index=0), 5))) == 5  # one line, read endlessly
    with caplog.at_level(logging.WARNING, logger=STREAMS):
        assert list(stream.shard(num_shards=2, index=1)) == []
    expected = "no example for process 1 of 2 (shards 1-1 of the stream's 2: one_line.txt bytes 5000-10000)"
    assert expected in caplog.text
    caplog.clear()  # cut by lines for its 2 readers, the part without a line says why
    args = _streaming_args(world_size=2)
    stream = prepare_streaming(text_stream(str(path), readers=2), args, train_files=str(path))
    with caplog.at_level(logging.WARNING, logger=STREAMS):
        assert list(stream.shard(num_shards=2, index=1)) == []
    assert "for process 1 of 2 (no line: the stream's 1 line(s) are fewer than its 2 readers)." in caplog.text
    with pytest.raises(ValueError, match="passes must be >= 1"):
        stream_passes(text_stream(str(path)), passes=0)


def _streaming_args(world_size=4, max_steps=10, dispatch_batches=None, workers=0):
    config = SimpleNamespace(dispatch_batches=dispatch_batches)
    return SimpleNamespace(
        world_size=world_size, max_steps=max_steps, accelerator_config=config, dataloader_num_workers=workers
    )


def _first_pass(reader) -> list[str]:
    """The lines a reader of an endless stream of distinct lines reads before it reads one again: its first pass."""
    seen = []
    for row in reader:
        if row["text"] in seen:
            return seen
        seen.append(row["text"])
    return seen


def test_prepare_streaming_sets_each_process_to_its_part_of_an_endless_stream(tmp_path):
    path, lines, _ = _big_text(tmp_path)
    non_empty = [line for line in lines if line]
    stream = text_stream(str(path))
    args = _streaming_args(world_size=2)
    endless = prepare_streaming(stream, args)
    assert args.accelerator_config.dispatch_batches is False
    assert endless.n_shards == 2  # a part per process, each a block of the byte ranges
    parts = [_first_pass(endless.shard(num_shards=2, index=rank)) for rank in range(2)]
    assert not set(parts[0]) & set(parts[1])
    assert sorted(parts[0] + parts[1]) == sorted(non_empty)
    first = prepare_streaming(stream, _streaming_args(world_size=1), max_examples=5)  # --max_train_samples
    rows = [row["text"] for row in itertools.islice(first, 15)]
    assert [set(rows[i : i + 5]) for i in (0, 5, 10)] == [set(non_empty[:5])] * 3  # the first 5, again and again
    with pytest.raises(ValueError, match="dispatch_batches"):
        prepare_streaming(stream, _streaming_args(dispatch_batches=True))
    with pytest.raises(ValueError, match="give --max_steps N"):
        prepare_streaming(stream, _streaming_args(max_steps=-1))


def _mixed_text(tmp_path) -> tuple[list[str], list[str]]:
    """Two files of lines of very different lengths, with blank lines of every kind (spaces, tabs, a Unicode space,
    an ASCII separator), Windows line ends in the first and no last line end in the second; and their lines read as
    examples, in order."""
    lines = []
    for i in range(1300):
        blank = ["", "  \t", "\u3000\u00a0", "\x1c"][i % 4] if i % 9 == 4 else None
        lines.append(blank if blank is not None else f"line{i} " + "word " * [1, 3, 40, 7, 200][i % 5])
    first = tmp_path / "first.txt"
    first.write_bytes("\r\n".join(lines[:900]).encode() + b"\r\n")
    second = tmp_path / "second.txt"
    second.write_bytes("\n".join(lines[900:]).encode())
    files = [str(first), str(second)]
    return files, [row["text"] for row in text_stream(files)]


@pytest.mark.parametrize("readers", [2, 3, 4, 7])
def test_a_stream_cut_for_its_readers_gives_each_as_many_lines(tmp_path, readers):
    files, examples = _mixed_text(tmp_path)
    stream = text_stream(files, readers=readers)
    parts = [[row["text"] for row in stream.shard(num_shards=readers, index=reader)] for reader in range(readers)]
    assert [text for part in parts for text in part] == examples  # every line once, in order
    sizes = [len(part) for part in parts]
    assert sizes == [len(examples) // readers + (reader < len(examples) % readers) for reader in range(readers)]
    first = 0
    for (start, end), size in zip(streams_module._text_parts(files, readers), sizes, strict=True):
        assert (start, end) == (first, first + size)
        first = end
    assert stream.n_shards % readers == 0  # blocks of one width: datasets' contiguous shards are the parts
    # the byte ranges as for one reader, when the stream is not cut for several
    assert text_shards(files) == text_shards(files, readers=1) != text_shards(files, readers=readers)


@pytest.mark.parametrize("processes", [2, 3])
def test_a_global_pass_in_lockstep_reads_every_line_once(tmp_path, caplog, processes):
    """The reported defect: 2 processes streaming a 1,200-line file in lockstep reached 1,194 lines in one global
    pass (20,000 lines: 19,940): their parts were blocks of byte ranges, of different numbers of lines, so a process
    of fewer lines began its next pass while another had lines of its first left, and they drifted apart pass after
    pass. Cut for its readers, each part holds as many lines (one more in the first ones): the first
    ``ceil(lines / processes)`` examples of every process, read in lockstep, hold every line, fewer than
    ``processes`` of them twice, and so does every later global pass."""
    path, lines, _ = _big_text(tmp_path, count=1400)  # lines of 45 to 94 characters, every 7th empty
    non_empty = [line for line in lines if line]
    args = _streaming_args(world_size=processes)
    stream = text_stream(str(path), readers=streams_module.stream_readers(args))
    with caplog.at_level(logging.INFO, logger="contrastive_hf.data_counts"):
        endless = prepare_streaming(stream, args, train_files=str(path))
        per_process = -(-len(non_empty) // processes)
        read = [list(itertools.islice(endless.shard(num_shards=processes, index=rank), 3 * per_process))
                for rank in range(processes)]  # fmt: skip
    for global_pass in range(3):
        seen = Counter(row["text"] for rows in read for row in rows[global_pass * per_process :][:per_process])
        assert set(seen) == set(non_empty), global_pass
        assert sum(seen.values()) - len(non_empty) < processes
    messages = [record.getMessage() for record in caplog.records]
    sizes = " or ".join(f"{size:,}" for size in sorted({len(non_empty) // processes, per_process}))
    assert messages[0] == (
        f"Streaming {len(non_empty):,} lines in {processes} parts of {sizes} lines, one per reader ({processes} "
        "processes): a global pass, one pass of every part in lockstep, reads each line once."
    )
    assert f"Read pass 1 of process 1 of {processes} (lines {per_process + 1:,}-" in " ".join(messages)


@pytest.mark.parametrize(("processes", "workers"), [(1, 2), (2, 2)])
def test_dataloader_workers_each_read_their_whole_part_of_the_stream(tmp_path, processes, workers):
    """The reported defect: with --dataloader_num_workers 2, each worker read about half of its part per pass (5,000
    lines, 1 process, 320 steps of 16: 1,056 never seen), while the log reported whole passes: the part a worker
    reads is a `datasets.IterableDataset`, which datasets split again by the worker's id. Each worker (a reader of
    its own part) now reads its part whole, pass after pass, and the parts cover the corpus."""
    path, lines, _ = _big_text(tmp_path, count=1400)
    non_empty = [line for line in lines if line]
    args = _streaming_args(world_size=processes, workers=workers)
    readers = streams_module.stream_readers(args)
    endless = prepare_streaming(text_stream(str(path), readers=readers), args, train_files=str(path))
    part = -(-len(non_empty) // readers)
    first_passes = []
    for rank in range(processes):
        loader = prepare_data_loader(  # as accelerate gives each process its dataloader, here with workers
            DataLoader(endless, batch_size=8, num_workers=workers, collate_fn=lambda rows: [r["text"] for r in rows]),
            num_processes=processes,
            process_index=rank,
            put_on_device=False,
            dispatch_batches=False,
        )
        batches = list(itertools.islice(loader, workers * (2 * part // 8 + 1)))
        for worker in range(workers):  # the dataloader takes a batch from each worker in turn
            texts = [text for batch in batches[worker::workers] for text in batch]
            size = len(non_empty) // readers + (rank * workers + worker < len(non_empty) % readers)
            first, second = texts[:size], texts[size : 2 * size]
            assert len(set(first)) == size, (rank, worker)  # every line of the part once
            assert set(second) == set(first) and second != first  # then the part again, reshuffled
            first_passes.append(first)
    assert sorted(text for first in first_passes for text in first) == sorted(non_empty)


def test_a_corpus_with_fewer_shards_than_processes_is_an_error_naming_its_files(tmp_path):
    small = _write_text(tmp_path / "small.txt", NON_EMPTY * 40)  # about 4 KB: one byte range
    gz = tmp_path / "corpus.txt.gz"
    with gzip.open(gz, "wt", encoding="utf-8") as handle:
        handle.write("one\ntwo\n")
    for files, described in [(small, f"small.txt: {small.stat().st_size:,} bytes in 1 shard(s)"),
                             (gz, f"corpus.txt.gz: {gz.stat().st_size:,} bytes in 1 shard(s)")]:  # fmt: skip
        with pytest.raises(ValueError) as error:
            prepare_streaming(load_corpus(str(files), streaming=True), _streaming_args(2), train_files=str(files))
        message = str(error.value)
        assert f"1 shard(s) ({described}), fewer than the 2 processes" in message
        assert "one of 8 KB or more has enough for 2 processes" in message  # what to do
        assert "at least 2 files, or train without --streaming" in message


def test_streamed_gzip_corpus_real_wikipedia(tokenizer):
    stream = load_corpus(str(WIKIPEDIA_GZ), streaming=True)
    assert stream.n_shards == 1  # gzip cannot be read from the middle
    first = list(stream.take(3))
    with gzip.open(WIKIPEDIA_GZ, "rt", encoding="utf-8") as handle:
        expected = [next(handle).rstrip("\n") for _ in range(3)]
    assert [row["text"] for row in first] == expected
    assert first[0]["example_index"] == 0 and first[1]["example_index"] == len(expected[0].encode()) + 1
    blocks = list(tokenize_corpus(stream, tokenizer, max_seq_length=64, line_by_line=False).take(5))
    assert all(len(block["input_ids"]) == 64 for block in blocks)
    assert all(block["input_ids"][0] == tokenizer.cls_token_id for block in blocks)
    assert len({block["example_index"] for block in blocks}) == 5


def test_streamed_tokenization_matches_map_style(tmp_path, tokenizer):
    path, lines, offsets = _big_text(tmp_path, count=120)
    stream = tokenize_corpus(load_corpus(str(path), streaming=True), tokenizer, max_seq_length=12)
    mapped = tokenize_corpus(load_corpus(str(path)), tokenizer, max_seq_length=12)
    rows = list(stream)
    assert [row["input_ids"] for row in rows] == mapped["input_ids"]
    assert [row["example_index"] for row in rows] == [o for line, o in zip(lines, offsets, strict=True) if line]
    packed = list(tokenize_corpus(load_corpus(str(path), streaming=True), tokenizer, 12, line_by_line=False))
    mapped_blocks = tokenize_corpus(load_corpus(str(path)), tokenizer, 12, line_by_line=False)
    assert [row["input_ids"] for row in packed] == mapped_blocks["input_ids"]
    assert len(packed) > len(rows)  # lines were packed across, not truncated


def test_streamed_csv_and_its_empty_lines(tmp_path, tokenizer, caplog):
    path = tmp_path / "corpus.csv"
    path.write_text('text\nhello world\n""\nsecond line\n', encoding="utf-8")
    stream = load_corpus(str(path), streaming=True)
    assert isinstance(stream, IterableDataset)
    with caplog.at_level(logging.WARNING, logger=TOKENIZING):
        rows = list(tokenize_corpus(stream, tokenizer))
    assert [row["input_ids"] for row in rows] == [tokenizer("hello world")["input_ids"],
                                                   tokenizer("second line")["input_ids"]]  # fmt: skip
    assert "Skipped 1 empty line(s) of 2 so far" in caplog.text


class _RecordingCollator(ContrastiveDataCollator):
    """Records the example identities and views of every batch it builds."""

    batches: list

    def __call__(self, features):
        batch = super().__call__(features)
        self.batches.append(([feature["example_index"] for feature in features], batch["input_ids"].clone()))
        return batch


def _train_on_an_endless_stream(path, tokenizer, output_dir, resume_from_checkpoint=None):
    torch.manual_seed(0)
    model = ContrastiveForPreTraining(ContrastiveConfig(encoder=tiny_bert_config(vocab_size=len(tokenizer))))
    args = ContrastiveTrainingArguments(
        output_dir=str(output_dir), per_device_train_batch_size=8, max_steps=8, learning_rate=1e-3,
        logging_steps=1, save_strategy="steps", save_steps=5, report_to="none", disable_tqdm=True, use_cpu=True,
    )  # fmt: skip
    stream = tokenize_corpus(load_corpus(str(path), streaming=True), tokenizer, max_seq_length=16)
    collator = _RecordingCollator(tokenizer, augmentation="del_span", seed=0)
    collator.batches = []
    trainer = ContrastiveTrainer(
        model=model,
        args=args,
        train_dataset=prepare_streaming(stream, args),
        data_collator=collator,
        processing_class=tokenizer,
    )
    trainer.train(resume_from_checkpoint=resume_from_checkpoint)
    weights = {name: value.detach().clone() for name, value in trainer.model.state_dict().items()}
    return trainer, collator.batches, weights


@pytest.mark.slow  # a run on a stream and its resume: 2 s of CPU
def test_contrastive_trainer_trains_on_an_endless_stream_and_resumes_exactly(tmp_path, tokenizer):
    path, _, _ = _big_text(tmp_path, count=30)  # 25 lines: a pass is 3 batches of 8 and one line
    add_del_token(tokenizer)
    trainer, batches, weights = _train_on_an_endless_stream(path, tokenizer, tmp_path / "out")
    assert trainer.state.global_step == 8
    assert trainer.data_collator.epoch == 0  # one endless epoch of the Trainer, 2.5 passes of the stream
    assert all(torch.isfinite(torch.tensor(e["loss"])) for e in trainer.state.log_history if "loss" in e)
    read = [index for indices, _ in batches[:8] for index in indices]  # (accelerate builds one batch ahead)
    assert len(read) == 64 and len(set(read)) == 64  # a line read again is a new example: new views
    first_pass = read[:25]
    assert [index >> 44 for index in first_pass] == [0] * 25  # file 0 and byte offsets, then hashed identities

    _, resumed_batches, resumed_weights = _train_on_an_endless_stream(
        path, tokenizer, tmp_path / "out", resume_from_checkpoint=str(tmp_path / "out" / "checkpoint-5")
    )
    # the resumed run reads (and skips) the first 5 batches, then trains on the last 3: all as the uninterrupted run
    for (indices, views), (resumed_indices, resumed_views) in zip(batches[:8], resumed_batches[:8], strict=True):
        assert indices == resumed_indices
        assert torch.equal(views, resumed_views)
    for name, value in weights.items():
        torch.testing.assert_close(resumed_weights[name], value, rtol=0, atol=1e-6, msg=name)


# ----------------------------------------------------------------------------------------------------
# Paragraph corpora: a sentence per example
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("paragraph", "sentences"),
    [
        ("He was born in 1990. He plays basketball! Does he? yes.", ["He was born in 1990.", "He plays basketball!",
                                                                     "Does he? yes."]),
        ('She said "Go." Then she left.', ['She said "Go."', "Then she left."]),
        ("Born in Washington, D.C. in 1965, he moved. In 1988 he started.", ["Born in Washington, D.C. in 1965, he "
                                                                             "moved.", "In 1988 he started."]),
        ("No full stop at the end", ["No full stop at the end"]),
        ("  ", []),
    ],
)  # fmt: skip
def test_split_into_sentences(paragraph, sentences):
    assert split_into_sentences(paragraph) == sentences


@pytest.mark.parametrize("streaming", [False, True])
def test_a_sentence_per_example_from_real_paragraphs(tokenizer, tmp_path, streaming):
    with gzip.open(WIKIPEDIA_GZ, "rt", encoding="utf-8") as handle:
        paragraphs = [next(handle).rstrip("\n") for _ in range(30)]
    path = tmp_path / "paragraphs.txt"
    path.write_text("\n".join(paragraphs) + "\n", encoding="utf-8")
    expected = [sentence for paragraph in paragraphs for sentence in split_into_sentences(paragraph)]
    assert len(expected) > 2 * len(paragraphs)
    tokenized = tokenize_corpus(load_corpus(str(path), streaming=streaming), tokenizer, 64, split_sentences=True)
    rows = list(tokenized)
    assert [row["input_ids"] for row in rows] == [
        tokenizer(sentence, truncation=True, max_length=64)["input_ids"] for sentence in expected
    ]
    assert len({row["example_index"] for row in rows}) == len(expected)
