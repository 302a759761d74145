"""Alignment and uniformity on STS data against Wang & Isola's formulas written out in numpy."""

from __future__ import annotations

import numpy as np
import pytest

from contrastive_hf.evaluation import STSData, evaluate_alignment_uniformity, read_stsbenchmark
from contrastive_hf.evaluation.alignment import alignment_uniformity_from_vectors
from contrastive_hf.evaluation.encoders import SentenceEncoder


class RandomEncoder(SentenceEncoder):
    """A fixed random vector per distinct sentence."""

    def __init__(self, sentences):
        rng = np.random.default_rng(0)
        self.table = {s: rng.standard_normal(8) for s in dict.fromkeys(sentences)}

    def _encode_unique(self, sentences, batch_size, show_progress):
        return np.stack([self.table[s] for s in sentences])


def unit(rows) -> np.ndarray:
    rows = np.asarray(rows, dtype=np.float64)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def test_figures_follow_the_formulas_with_positives_above_four():
    data = STSData(["a", "b", "c", "a"], ["b", "d", "e", "c"], [4.2, 4.0, 5.0, 0.5])
    vectors = {s: v for s, v in zip("abcde", np.random.default_rng(1).standard_normal((5, 6)), strict=True)}
    result = alignment_uniformity_from_vectors(data, vectors)
    # positives: pairs 0 and 2 (pair 1 scores exactly 4.0: not a positive); l_align = E ||f(x) - f(y)||^2
    x, y = unit([vectors["a"], vectors["c"]]), unit([vectors["b"], vectors["e"]])
    assert result["alignment"] == pytest.approx(np.mean(np.sum((x - y) ** 2, axis=1)), rel=1e-5)
    # l_uniform = log E_{i<j} exp(-2 ||f(x_i) - f(x_j)||^2) over the five distinct sentences
    z = unit([vectors[s] for s in "abcde"])
    pairs = [np.exp(-2 * np.sum((z[i] - z[j]) ** 2)) for i in range(5) for j in range(i + 1, 5)]
    assert result["uniformity"] == pytest.approx(np.log(np.mean(pairs)), rel=1e-5)
    assert (result["positive_pairs"], result["sentences"]) == (2, 5)


def test_on_real_stsb_pairs(repo_root):
    lines = (repo_root / "examples" / "demo" / "data" / "sts-dev.csv").read_text().splitlines()[:200]
    data = read_stsbenchmark(repo_root / "examples" / "demo" / "data" / "sts-dev.csv")
    data = STSData(data.sentences1[:200], data.sentences2[:200], data.scores[:200])
    result = evaluate_alignment_uniformity(RandomEncoder(data.sentences1 + data.sentences2), data)
    assert result["positive_pairs"] == sum(float(line.split("\t")[4]) > 4.0 for line in lines) > 0
    # random directions: aligned no better than chance (E||x - y||^2 = 2 for independent unit vectors)
    assert 1.0 < result["alignment"] < 3.0 and result["uniformity"] < 0


def test_positive_pairs_are_simcse_s_on_stsb_dev(repo_root):
    # SimCSE (footnote 3): "STS-B pairs with a score higher than 4"; 56 dev pairs score exactly 4.0 and are not ones
    data = read_stsbenchmark(repo_root / "examples" / "demo" / "data" / "sts-dev.csv")
    vectors = RandomEncoder(data.sentences1 + data.sentences2).table
    assert alignment_uniformity_from_vectors(data, vectors)["positive_pairs"] == 208


def test_no_positive_pair_is_an_error():
    data = STSData(["a", "b"], ["c", "d"], [1.0, 4.0])
    with pytest.raises(ValueError, match="no positive pair"):
        evaluate_alignment_uniformity(RandomEncoder(["a", "b", "c", "d"]), data)
