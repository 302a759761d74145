"""SentEval transfer: readers on the real MR, CR, SST and MRPC files and on malformed ones, the three classifier
protocols against slow references written from SentEval's description, and the whole suite on a small SentEval-style
folder."""

from __future__ import annotations

import hashlib
import shutil

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import f1_score
from sklearn.model_selection import StratifiedKFold
from threadpoolctl import threadpool_limits

from contrastive_hf.evaluation.encoders import SentenceEncoder
from contrastive_hf.evaluation.transfer import (
    INNER_KFOLD_GRID,
    KFOLD_GRID,
    TRANSFER_TASKS,
    evaluate_transfer,
    inner_kfold_accuracy,
    kfold_accuracy,
    load_transfer_task,
    pair_features,
    read_binary_task,
    read_mrpc,
    read_sst2,
    read_trec,
    split_accuracy,
)

from conftest import TEST_DATA

SENTEVAL = TEST_DATA / "senteval"


class BagOfWordsEncoder(SentenceEncoder):
    """Mean of a fixed pseudo-random vector per word: deterministic, and sentiment words carry signal."""

    name = "bag-of-words"

    @staticmethod
    def vector(sentence: str) -> np.ndarray:
        words = sentence.split() or [""]
        vectors = []
        for word in words:
            seed = int(hashlib.md5(word.encode()).hexdigest()[:8], 16)
            vectors.append(np.random.default_rng(seed).standard_normal(32))
        return np.mean(vectors, axis=0)

    def _encode_unique(self, sentences, batch_size, show_progress):
        return np.stack([self.vector(s) for s in sentences])


@pytest.fixture(autouse=True)
def _one_blas_thread():
    # the references fit many tiny models; threaded BLAS only slows them down on shared cores
    with threadpool_limits(limits=1, user_api="blas"):
        yield


def embed(sentences) -> np.ndarray:
    return np.stack([BagOfWordsEncoder.vector(s) for s in sentences]).astype(np.float32)


def fit(penalty, features, labels):
    return LogisticRegression(C=penalty, random_state=1111, max_iter=1000).fit(features, labels)


def reference_cross_validation(features, labels, penalty, kfold, seed=1111):
    """Mean accuracy (%) over stratified shuffled folds, the slow obvious way."""
    folds = StratifiedKFold(n_splits=kfold, shuffle=True, random_state=seed).split(features, labels)
    return 100 * np.mean([fit(penalty, features[a], labels[a]).score(features[b], labels[b]) for a, b in folds])


def reference_best_penalty(features, labels, grid, kfold):
    scores = [round(reference_cross_validation(features, labels, c, kfold), 2) for c in grid]
    return grid[int(np.argmax(scores))]


def reference_inner_kfold(features, labels, kfold):
    accuracies = []
    for train, test in StratifiedKFold(n_splits=kfold, shuffle=True, random_state=1111).split(features, labels):
        penalty = reference_best_penalty(features[train], labels[train], INNER_KFOLD_GRID, kfold)
        accuracies.append(100 * fit(penalty, features[train], labels[train]).score(features[test], labels[test]))
    return np.mean(accuracies)


def reference_kfold(train_x, train_y, test_x, test_y, kfold):
    penalty = reference_best_penalty(train_x, train_y, KFOLD_GRID, kfold)
    predictions = fit(penalty, train_x, train_y).predict(test_x)
    return 100 * np.mean(predictions == test_y), predictions


def overlapping_clusters(n: int, seed: int, classes: int = 2):
    """Classes with shifted means and heavy overlap, so that accuracy sits well below 100 and C matters."""
    rng = np.random.default_rng(seed)
    labels = np.arange(n) % classes
    features = rng.standard_normal((n, 8)) * 2.0 + labels[:, None] * 0.8
    return features, labels


# ---- readers on the real files ---------------------------------------------------------------------------------


def test_reads_mr_and_cr_one_file_per_class():
    # the slices hold 32 positive and 28 negative lines (tests/fixtures/README.md)
    mr = read_binary_task(SENTEVAL / "MR", "MR")
    assert len(mr) == 60 and mr.labels.count(1) == 32 and mr.labels[:32] == [1] * 32
    assert mr.sentences[0].startswith("the rock is destined to be the 21st century 's new")
    cr = read_binary_task(SENTEVAL / "CR", "CR")
    assert len(cr) == 60 and cr.labels.count(1) == 32
    assert cr.sentences[32 + 9] == ""  # empty lines stay, as SentEval keeps them (line 769 of custrev.neg)


def test_reads_sst2_splits():
    splits = read_sst2(SENTEVAL / "SST" / "Binary")
    assert {name: len(data) for name, data in splits.items()} == {"train": 60, "dev": 30, "test": 30}
    assert splits["dev"].sentences[0] == "it 's a charming and often affecting journey ."
    assert splits["dev"].labels[:2] == [1, 0]


def test_reads_mrpc_pairs_without_the_header():
    splits = read_mrpc(SENTEVAL / "MRPC")
    assert (len(splits["train"]), len(splits["test"])) == (60, 30)
    assert splits["train"].labels[:2] == [1, 0]
    assert splits["train"].sentences1[0].startswith("Amrozi accused his brother")


def test_finds_task_folders_under_a_data_directory():
    # tests/data keeps them as senteval/MR and senteval/SST/Binary (SentEval: MR, SST/binary)
    assert len(load_transfer_task(TEST_DATA, "MR")) == 60
    assert len(load_transfer_task(TEST_DATA, "SST2")["test"]) == 30


def test_a_missing_task_lists_where_it_was_looked_for(tmp_path):
    with pytest.raises(FileNotFoundError) as error:
        load_transfer_task(tmp_path, "SUBJ")
    assert str(tmp_path / "SUBJ") in str(error.value) and "subj.objective and subj.subjective" in str(error.value)


def test_malformed_files_name_file_and_line(tmp_path):
    sst = tmp_path / "SST" / "binary"
    sst.mkdir(parents=True)
    for name in ("sentiment-train", "sentiment-dev"):
        (sst / name).write_text("good film\t1\nbad film\t0\n")
    (sst / "sentiment-test").write_text("good film\t1\nbad film\tpositive\n")
    with pytest.raises(ValueError, match=r"sentiment-test:2: label 'positive' is not one of 0, 1"):
        read_sst2(sst)

    mrpc = tmp_path / "MRPC"
    mrpc.mkdir()
    header = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
    (mrpc / "msr_paraphrase_train.txt").write_text(header + "1\t1\t2\ta b\tc d\n0\t3\t4\tonly one sentence\n")
    (mrpc / "msr_paraphrase_test.txt").write_text(header + "1\t1\t2\ta b\tc d\n")
    with pytest.raises(ValueError, match=r"msr_paraphrase_train.txt:3: expected 5 tab-separated columns"):
        read_mrpc(mrpc)

    trec = tmp_path / "TREC"
    trec.mkdir()
    (trec / "train_5500.label").write_text("DESC:manner How did serfdom develop ?\nWHAT:def What is a fish ?\n")
    (trec / "TREC_10.label").write_text("NUM:date When was it ?\n")
    with pytest.raises(ValueError, match=r"train_5500.label:2: expected 'COARSE:fine question'"):
        read_trec(trec)


# ---- the classifier protocols against slow references ---------------------------------------------------------------


def test_inner_kfold_matches_the_reference():
    features, labels = overlapping_clusters(90, seed=1)
    result = inner_kfold_accuracy(features, labels, kfold=3)
    assert result["accuracy"] == pytest.approx(reference_inner_kfold(features, labels, kfold=3))
    assert 50 < result["accuracy"] < 95


def test_kfold_matches_the_reference_with_several_classes():
    train_x, train_y = overlapping_clusters(120, seed=2, classes=3)
    test_x, test_y = overlapping_clusters(60, seed=3, classes=3)
    result = kfold_accuracy(train_x, train_y, test_x, test_y, kfold=4)
    accuracy, predictions = reference_kfold(train_x, train_y, test_x, test_y, kfold=4)
    assert result["accuracy"] == pytest.approx(accuracy)
    np.testing.assert_array_equal(result["predictions"], predictions)


def test_split_chooses_the_penalty_on_dev():
    train, dev, test = (overlapping_clusters(n, seed) for n, seed in ((80, 4), (40, 5), (40, 6)))
    dev_scores = [round(100 * fit(c, *train).score(*dev), 2) for c in INNER_KFOLD_GRID]
    best = INNER_KFOLD_GRID[int(np.argmax(dev_scores))]
    result = split_accuracy(train, dev, test)
    assert result["penalty"] == best
    assert result["accuracy"] == pytest.approx(100 * fit(best, *train).score(*test))


def test_pair_features_are_senteval_s():
    u, v = np.array([[1.0, -2.0]]), np.array([[3.0, 0.5]])
    np.testing.assert_allclose(pair_features(u, v), [[2.0, 2.5, 3.0, -1.0]])


# ---- the whole suite on a small SentEval-style folder -------------------------------------------------------------


@pytest.fixture
def small_senteval_dir(tmp_path):
    """SentEval's data/downstream layout: the slices of the real MR, CR, SST-2 and MRPC; tiny SUBJ, MPQA and TREC."""
    root = tmp_path / "downstream"
    shutil.copytree(SENTEVAL, root)
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta"]
    for task, names in {"SUBJ": ("subj.objective", "subj.subjective"), "MPQA": ("mpqa.pos", "mpqa.neg")}.items():
        (root / task).mkdir()
        for offset, name in enumerate(names):
            sentences = [f"{words[(i + offset * 3) % 6]} {words[(i * 5 + offset) % 6]} word{i}" for i in range(24)]
            (root / task / name).write_text("\n".join(sentences) + "\n")
    (root / "TREC").mkdir()
    classes = ["ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM"]
    for name, count in (("train_5500.label", 6), ("TREC_10.label", 2)):
        lines = [
            f"{c}:fine {words[k]} question {i} about {c.lower()} ?"
            for k, c in enumerate(classes)
            for i in range(count)
        ]
        (root / "TREC" / name).write_text("\n".join(lines) + "\n")
    return tmp_path


def test_suite_runs_every_task_and_matches_the_references(small_senteval_dir):
    results = evaluate_transfer(BagOfWordsEncoder(), small_senteval_dir, kfold=3, show_progress=False)
    assert list(results["tasks"]) == list(TRANSFER_TASKS)
    for task, scores in results["tasks"].items():
        assert 0 <= scores["accuracy"] <= 100, task

    mr = read_binary_task(small_senteval_dir / "downstream" / "MR", "MR")
    expected = reference_inner_kfold(embed(mr.sentences), np.array(mr.labels), kfold=3)
    assert results["tasks"]["MR"]["accuracy"] == pytest.approx(expected)

    mrpc = read_mrpc(small_senteval_dir / "downstream" / "MRPC")
    train, test = mrpc["train"], mrpc["test"]
    features = [
        np.concatenate(
            [np.abs(embed(d.sentences1) - embed(d.sentences2)), embed(d.sentences1) * embed(d.sentences2)], 1
        )
        for d in (train, test)
    ]
    accuracy, predictions = reference_kfold(features[0], np.array(train.labels), features[1], np.array(test.labels), 3)
    assert results["tasks"]["MRPC"]["accuracy"] == pytest.approx(accuracy)
    assert results["tasks"]["MRPC"]["f1"] == pytest.approx(100 * f1_score(test.labels, predictions))

    accuracies = [scores["accuracy"] for scores in results["tasks"].values()]
    assert results["avg"] == {"accuracy": pytest.approx(np.mean(accuracies)), "tasks": list(TRANSFER_TASKS)}
    # TREC's classes are named by their own words here: a linear classifier separates them
    assert results["tasks"]["TREC"]["accuracy"] == 100.0
