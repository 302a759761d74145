"""Corpus loading (text/csv/json files) and tokenization with `datasets`, all from local temporary files."""

from __future__ import annotations

import json
import logging

import pytest
from datasets import Dataset, DatasetDict

from contrastive_hf.data import EmptyCorpusError, load_corpus, tokenize_corpus

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
    with caplog.at_level(logging.WARNING, logger="contrastive_hf.data"):
        tokenized = tokenize_corpus(corpus, tokenizer, max_seq_length=16)
    skipped = len(LINES) - len(NON_EMPTY)
    records = [record for record in caplog.records if record.name == "contrastive_hf.data"]
    assert len(records) == 1
    assert records[0].levelno == logging.WARNING
    assert f"Skipped {skipped} empty line(s) of {len(LINES)}" in records[0].getMessage()
    assert tokenized.column_names == ["input_ids"]
    assert len(tokenized) == len(NON_EMPTY)
    expected = [tokenizer(line, truncation=True, max_length=16)["input_ids"] for line in NON_EMPTY]
    assert tokenized["input_ids"] == expected
    assert all(len(ids) <= 16 for ids in tokenized["input_ids"])
    assert max(len(ids) for ids in tokenized["input_ids"]) == 16  # the long line was truncated


def test_no_warning_without_empty_lines(tmp_path, cache_dir, tokenizer, caplog):
    path = _write_text(tmp_path / "clean.txt", NON_EMPTY)
    with caplog.at_level(logging.WARNING, logger="contrastive_hf.data"):
        tokenized = tokenize_corpus(load_corpus(path, cache_dir=cache_dir), tokenizer)
    assert not [record for record in caplog.records if record.name == "contrastive_hf.data"]
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
    with caplog.at_level(logging.WARNING, logger="contrastive_hf.data"):
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
    assert tokenized.column_names == ["input_ids"]
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
    with caplog.at_level(logging.WARNING, logger="contrastive_hf.data"):
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
