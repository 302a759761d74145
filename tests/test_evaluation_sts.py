from __future__ import annotations

import pytest
import torch

from contrastive_hf.evaluation import STSData, evaluate_sts, read_stsbenchmark


def test_reads_the_stsb_dev_file_with_extra_columns_and_quotes(repo_root):
    data = read_stsbenchmark(repo_root / "examples" / "demo" / "data" / "sts-dev.csv")
    assert len(data) == 1500
    assert data.scores[0] == 5.0
    assert data.sentences1[0] == "A man with a hard hat is dancing."
    # row 1479 carries two source columns after sentence2
    assert data.sentences2[1478] == "High court checks President's recess appointment power"


def test_missing_file_says_what_was_expected(tmp_path):
    with pytest.raises(FileNotFoundError, match="sts-dev.csv"):
        read_stsbenchmark(tmp_path / "missing.csv")


def test_short_row_names_the_line(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("a\tb\tc\n")
    with pytest.raises(ValueError, match="bad.csv:1"):
        read_stsbenchmark(path)


class LookupEncoder:
    """A stand-in model: each sentence maps to a fixed vector."""

    def __init__(self, vectors):
        self.vectors = vectors

    def encode(self, sentences, tokenizer=None, batch_size=64, max_length=None):
        return torch.stack([self.vectors[s] for s in sentences])


def test_spearman_is_computed_on_cosine_similarities():
    # cosine(a_i, b_i) = cos(angle_i); angles shrink as gold grows, so the ranking is perfect
    gold = [0.5, 2.0, 3.5, 1.0, 4.5]
    angles = [3.0 - g * 0.6 for g in gold]
    vectors, first, second = {}, [], []
    for index, angle in enumerate(angles):
        vectors[f"a{index}"] = torch.tensor([1.0, 0.0])
        vectors[f"b{index}"] = torch.tensor([torch.cos(torch.tensor(angle)), torch.sin(torch.tensor(angle))])
        first.append(f"a{index}")
        second.append(f"b{index}")
    scores = evaluate_sts(LookupEncoder(vectors), STSData(first, second, gold))
    assert scores["spearman"] == pytest.approx(100.0)
    reversed_scores = evaluate_sts(LookupEncoder(vectors), STSData(first, second, [-g for g in gold]))
    assert reversed_scores["spearman"] == pytest.approx(-100.0)
