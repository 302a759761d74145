"""SentEval transfer: readers on the real MR, CR, SST and MRPC files and on malformed ones, SentEval's sample order,
both classifier protocols (SentEval's PyTorch classifier as SimCSE runs it, and its scikit-learn path) against slow
references written from SentEval's description, and the whole suite on a small SentEval-style folder."""

from __future__ import annotations

import copy
import hashlib
import shutil

import numpy as np
import pytest
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import f1_score
from sklearn.model_selection import StratifiedKFold
from threadpoolctl import threadpool_limits

from contrastive_hf.evaluation.encoders import SentenceEncoder
from contrastive_hf.evaluation.transfer import (
    INNER_KFOLD_GRID,
    KFOLD_GRID,
    WEIGHT_DECAY_GRID,
    SentEvalClassifierConfig,
    evaluate_transfer,
    inner_kfold_accuracy,
    kfold_accuracy,
    pair_features,
    split_accuracy,
    train_linear_classifiers,
)
from contrastive_hf.evaluation.transfer_data import (
    TRANSFER_TASKS,
    ClassificationData,
    PairClassificationData,
    load_transfer_task,
    read_binary_task,
    read_mrpc,
    read_sst2,
    read_trec,
    senteval_order,
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
def _one_thread():
    # the references fit many tiny models; threads only slow them down on shared cores
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with threadpool_limits(limits=1, user_api="blas"):
        yield
    torch.set_num_threads(threads)


def embed(sentences) -> np.ndarray:
    return np.stack([BagOfWordsEncoder.vector(s) for s in sentences]).astype(np.float32)


def overlapping_clusters(n: int, seed: int, classes: int = 2, scale: float = 2.0):
    """Classes with shifted means and heavy overlap, so that accuracy sits well below 100 and the penalty matters
    (for the PyTorch classifier's weight decay, at a small ``scale``: the weights must grow large to fit)."""
    rng = np.random.default_rng(seed)
    labels = np.arange(n) % classes
    features = (rng.standard_normal((n, 8)) + labels[:, None] * 0.4) * scale
    return features.astype(np.float32), labels


SMALL = 0.05  # the scale of features at which SentEval's weight decays make a difference


# ---- slow references written from SentEval's description ------------------------------------------------------


def reference_pytorch_classifier(x, y, n_classes, weight_decay, validation, tenacity=5, epoch_size=4, max_epoch=200):
    """SentEval's PyTorchClassifier with nhid 0, step by step: numpy and torch seeded with 1111, an nn.Linear,
    CrossEntropyLoss, torch.optim.Adam with the penalty as weight_decay; without validation data a 5% split (the first
    5% of a seeded permutation); each pass a new numpy permutation in batches of 64; validation accuracy every
    epoch_size passes, the best model kept, a stop at the (tenacity + 1)-th measurement without improvement (the count
    is never reset) or once more than max_epoch passes are done. Returns (predict, best accuracy, passes)."""
    np.random.seed(1111)
    torch.manual_seed(1111)
    model = torch.nn.Linear(x.shape[1], n_classes)
    optimizer = torch.optim.Adam(model.parameters(), weight_decay=weight_decay)
    if validation is None:
        permutation = np.random.permutation(len(x))
        cut = int(0.05 * len(x))
        validation = (x[permutation[:cut]], y[permutation[:cut]])
        x, y = x[permutation[cut:]], y[permutation[cut:]]
    inputs, targets = torch.tensor(x, dtype=torch.float32), torch.tensor(y)
    dev_inputs, dev_targets = torch.tensor(validation[0], dtype=torch.float32), torch.tensor(validation[1])
    passes, best_accuracy, misses, stop = 0, -1.0, 0, False
    while not stop and passes <= max_epoch:
        for _ in range(epoch_size):
            permutation = np.random.permutation(len(inputs))
            for start in range(0, len(inputs), 64):
                batch = torch.from_numpy(permutation[start : start + 64])
                loss = torch.nn.functional.cross_entropy(model(inputs[batch]), targets[batch])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        passes += epoch_size
        with torch.no_grad():
            accuracy = (model(dev_inputs).argmax(1) == dev_targets).float().mean().item()
        if accuracy > best_accuracy:
            best_accuracy, best_model = accuracy, copy.deepcopy(model)
        else:
            if misses >= tenacity:
                stop = True
            misses += 1

    def predict(features):
        with torch.no_grad():
            return best_model(torch.tensor(features, dtype=torch.float32)).argmax(1).numpy()

    return predict, best_accuracy, passes


def fit_logistic_regression(penalty, train, validation):
    return LogisticRegression(C=penalty, random_state=1111).fit(*train).predict


def fit_pytorch_classifier(penalty, train, validation):
    n_classes = 3 if max(train[1]) == 2 else 2
    return reference_pytorch_classifier(*train, n_classes, penalty, validation)[0]


def accuracy(predict, features, labels) -> float:
    return float(np.mean(predict(features) == labels))


def reference_cross_validation(fit, grid, features, labels, kfold):
    """Per penalty: mean accuracy over stratified shuffled folds (seed 1111), x 100, rounded to 2 decimals."""
    folds = list(StratifiedKFold(n_splits=kfold, shuffle=True, random_state=1111).split(features, labels))
    scores = []
    for penalty in grid:
        fold_scores = []
        for train, test in folds:
            predict = fit(penalty, (features[train], labels[train]), (features[test], labels[test]))
            fold_scores.append(accuracy(predict, features[test], labels[test]))
        scores.append(round(100 * np.mean(fold_scores), 2))
    return scores


def reference_inner_kfold(fit, grid, features, labels, kfold):
    results = []
    for train, test in StratifiedKFold(n_splits=kfold, shuffle=True, random_state=1111).split(features, labels):
        scores = reference_cross_validation(fit, grid, features[train], labels[train], kfold)
        predict = fit(grid[int(np.argmax(scores))], (features[train], labels[train]), None)
        results.append(round(100 * accuracy(predict, features[test], labels[test]), 2))
    return round(np.mean(results), 2)


def reference_kfold(fit, grid, train, test, kfold):
    scores = reference_cross_validation(fit, grid, *train, kfold)
    penalty = grid[int(np.argmax(scores))]
    predictions = fit(penalty, train, None)(test[0])
    return penalty, round(100 * np.mean(predictions == test[1]), 2), predictions, scores


def senteval_sorted_by_their_rule(samples, labels):
    """SentEval's own sort of a task: sorted(zip(token lists, labels), key=(number of tokens, label))."""
    ordered = sorted(zip([s.split() for s in samples], labels, strict=True), key=lambda z: (len(z[0]), z[1]))
    return [" ".join(tokens) for tokens, _ in ordered], [label for _, label in ordered]


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
    # tests/fixtures keeps them as senteval/MR and senteval/SST/Binary (SentEval: MR, SST/binary)
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


@pytest.mark.parametrize("split", ["train", "dev", "test"])
def test_an_empty_split_file_is_refused_naming_it(tmp_path, split):
    sst = tmp_path / "SST" / "binary"
    shutil.copytree(SENTEVAL / "SST" / "Binary", sst)
    (sst / f"sentiment-{split}").write_text("\n")  # an empty line: no row
    with pytest.raises(ValueError) as error:
        read_sst2(sst)
    assert str(error.value) == (
        f"{sst / f'sentiment-{split}'} has no rows (no 'sentence<TAB>label' line): SST-2's {split} split is empty. "
        "Copy the file again from SentEval's data."
    )


def test_a_training_split_of_one_class_is_warned_about_naming_task_and_split(caplog):
    splits = load_transfer_task(TEST_DATA, "SST2")
    train = splits["train"]
    one_class = [index for index, label in enumerate(train.labels) if label == 1]
    splits["train"] = ClassificationData([train.sentences[i] for i in one_class], [1] * len(one_class))
    with caplog.at_level("WARNING", logger="contrastive_hf.evaluation.transfer"):
        # SentEval's PyTorch classifier (the default protocol) trains on one class without a word of its own
        evaluate_transfer(BagOfWordsEncoder(), None, ["SST2"], datasets={"SST2": splits}, show_progress=False)
    assert (
        f"SST2: the train split holds one class only (label 1, {len(one_class)} examples): its classifier predicts "
        "that class for everything, and its accuracy is that class's share of the test data, whatever the "
        "embeddings. Check the task's files."
    ) in caplog.text

    caplog.clear()
    with caplog.at_level("WARNING", logger="contrastive_hf.evaluation.transfer"):
        evaluate_transfer(BagOfWordsEncoder(), TEST_DATA, ["SST2"], protocol="sklearn", show_progress=False)
    assert "one class only" not in caplog.text  # both classes: nothing to say


# ---- SentEval's sample order ------------------------------------------------------------------------------------


def test_senteval_order_is_by_word_count_then_label_ties_in_file_order():
    data = ClassificationData(["a b c", "a", "b c", "x", "y z", "q"], [0, 1, 0, 0, 1, 1])
    assert senteval_order(data) == [3, 1, 5, 2, 4, 0]  # (1, 0) x; (1, 1) a, q; (2, 0) b c; (2, 1) y z; (3, 0)
    pairs = PairClassificationData(["a b", "a", "a", "c d"], ["x", "y z", "y", "w"], [1, 0, 1, 0])
    assert senteval_order(pairs) == [2, 1, 3, 0]  # (1, 1, 1), (1, 2, 0), (2, 1, 0), (2, 1, 1)


def test_senteval_order_on_real_mr_matches_their_sort_of_the_raw_files():
    raw = {name: (SENTEVAL / "MR" / name).read_text(encoding="latin-1").splitlines() for name in ("rt-polarity.pos",)}
    raw["rt-polarity.neg"] = (SENTEVAL / "MR" / "rt-polarity.neg").read_text(encoding="latin-1").splitlines()
    samples = raw["rt-polarity.pos"] + raw["rt-polarity.neg"]
    labels = [1] * len(raw["rt-polarity.pos"]) + [0] * len(raw["rt-polarity.neg"])
    mr = read_binary_task(SENTEVAL / "MR", "MR")
    order = senteval_order(mr)
    assert ([mr.sentences[i] for i in order], [mr.labels[i] for i in order]) == senteval_sorted_by_their_rule(
        samples, labels
    )


# ---- the scikit-learn protocol against slow references ---------------------------------------------------------


def test_sklearn_inner_kfold_matches_the_reference():
    features, labels = overlapping_clusters(90, seed=1)
    result = inner_kfold_accuracy(features, labels, kfold=3, protocol="sklearn")
    assert result["accuracy"] == reference_inner_kfold(fit_logistic_regression, INNER_KFOLD_GRID, features, labels, 3)
    assert 50 < result["accuracy"] < 95


def test_sklearn_kfold_matches_the_reference_with_several_classes():
    train, test = overlapping_clusters(120, seed=2, classes=3), overlapping_clusters(60, seed=3, classes=3)
    result = kfold_accuracy(*train, *test, kfold=4, protocol="sklearn")
    penalty, expected, predictions, _ = reference_kfold(fit_logistic_regression, KFOLD_GRID, train, test, 4)
    assert (result["penalty"], result["accuracy"]) == (penalty, expected)
    np.testing.assert_array_equal(result["predictions"], predictions)


def test_sklearn_split_chooses_the_penalty_on_dev():
    train, dev, test = (overlapping_clusters(n, seed) for n, seed in ((80, 4), (40, 5), (40, 6)))
    dev_scores = [round(100 * accuracy(fit_logistic_regression(c, train, None), *dev), 2) for c in INNER_KFOLD_GRID]
    best = INNER_KFOLD_GRID[int(np.argmax(dev_scores))]
    result = split_accuracy(train, dev, test, protocol="sklearn")
    assert result["penalty"] == best
    assert result["accuracy"] == round(100 * accuracy(fit_logistic_regression(best, train, None), *test), 2)


# ---- SentEval's PyTorch classifier (the simcse protocol) against slow references ------------------------------


@pytest.mark.parametrize("with_validation_data", [True, False], ids=["validation-data", "5%-split"])
def test_pytorch_classifiers_side_by_side_equal_the_step_by_step_reference(with_validation_data):
    features, labels = overlapping_clusters(300, seed=7, classes=3, scale=SMALL)
    validation = overlapping_clusters(60, seed=8, classes=3, scale=SMALL) if with_validation_data else None
    grid = (1e-5, 1e-3, 1e-2, 1.0)
    trained = train_linear_classifiers(features, labels, 3, grid, validation)
    assert len(set(trained.epochs)) > 1  # the classifiers stop at different times
    for index, weight_decay in enumerate(grid):
        predict, best_accuracy, passes = reference_pytorch_classifier(features, labels, 3, weight_decay, validation)
        assert trained.epochs[index] == passes
        assert trained.validation_accuracy[index] == pytest.approx(best_accuracy)
        np.testing.assert_array_equal(trained.predict(features)[index], predict(features))


def test_pytorch_classifier_stops_at_the_tenacity_plus_first_measurement_without_improvement():
    # zero features and balanced classes: every classifier predicts one class for all, so every measurement is 50%
    # and none beats the first
    features, labels = np.zeros((40, 2), dtype=np.float32), np.array([0, 1] * 20)
    for tenacity, epoch_size in ((5, 4), (2, 3)):
        config = SentEvalClassifierConfig(tenacity=tenacity, epoch_size=epoch_size)
        trained = train_linear_classifiers(features, labels, 2, [1e-5, 1e-2], (features, labels), config=config)
        assert trained.validation_accuracy == [0.5, 0.5]
        assert trained.epochs == [(tenacity + 2) * epoch_size] * 2
        assert (
            reference_pytorch_classifier(
                features, labels, 2, 1e-5, (features, labels), tenacity=tenacity, epoch_size=epoch_size
            )[2]
            == (tenacity + 2) * epoch_size
        )
    # without a stop, training runs while the passes done are at most max_epoch: 4, 8, then 12 > 8
    config = SentEvalClassifierConfig(tenacity=1000, epoch_size=4, max_epoch=8)
    assert train_linear_classifiers(features, labels, 2, [1e-5], (features, labels), config=config).epochs == [12]


def test_pytorch_kfold_chooses_the_weight_decay_as_the_reference():
    train = overlapping_clusters(150, seed=9, classes=3, scale=SMALL)
    test = overlapping_clusters(60, seed=10, classes=3, scale=SMALL)
    result = kfold_accuracy(*train, *test, kfold=3)  # the default protocol: simcse
    penalty, expected, predictions, scores = reference_kfold(fit_pytorch_classifier, WEIGHT_DECAY_GRID, train, test, 3)
    assert len(set(scores)) > 1  # the grid matters on these data
    assert (result["penalty"], result["dev_accuracy"], result["accuracy"]) == (penalty, max(scores), expected)
    np.testing.assert_array_equal(result["predictions"], predictions)


@pytest.mark.slow  # inner k-fold of the PyTorch classifier: 2 s of CPU
def test_pytorch_inner_kfold_and_split_match_the_reference():
    features, labels = overlapping_clusters(90, seed=11, scale=SMALL)
    result = inner_kfold_accuracy(features, labels, kfold=3, protocol="simcse")
    assert result["accuracy"] == reference_inner_kfold(fit_pytorch_classifier, WEIGHT_DECAY_GRID, features, labels, 3)

    train, dev, test = (overlapping_clusters(n, seed, scale=SMALL) for n, seed in ((120, 12), (40, 13), (60, 14)))
    dev_scores = [round(100 * accuracy(fit_pytorch_classifier(c, train, dev), *dev), 2) for c in WEIGHT_DECAY_GRID]
    best = WEIGHT_DECAY_GRID[int(np.argmax(dev_scores))]
    result = split_accuracy(train, dev, test)
    assert (result["penalty"], result["dev_accuracy"]) == (best, max(dev_scores))
    assert result["accuracy"] == round(100 * accuracy(fit_pytorch_classifier(best, train, dev), *test), 2)


def test_pytorch_classifier_refuses_a_validation_split_that_holds_nothing():
    features, labels = overlapping_clusters(19, seed=15)
    with pytest.raises(ValueError, match="19 training samples leave none for the 5% validation split"):
        train_linear_classifiers(features, labels, 2, WEIGHT_DECAY_GRID)


def test_an_unknown_protocol_is_refused_naming_the_choices():
    features, labels = overlapping_clusters(40, seed=16)
    with pytest.raises(ValueError, match=r"Unknown transfer protocol 'pytorch': choose simcse .* or sklearn"):
        inner_kfold_accuracy(features, labels, kfold=2, protocol="pytorch")


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


@pytest.mark.slow  # every transfer task with scikit-learn: 5 s of CPU
def test_sklearn_suite_runs_every_task_in_senteval_s_order_and_matches_the_references(small_senteval_dir):
    results = evaluate_transfer(
        BagOfWordsEncoder(), small_senteval_dir, kfold=3, protocol="sklearn", show_progress=False
    )
    assert list(results["tasks"]) == list(TRANSFER_TASKS) and results["protocol"] == "sklearn"
    for task, scores in results["tasks"].items():
        assert 0 <= scores["accuracy"] <= 100, task

    # MR's folds are drawn from SentEval's order (their sort of the raw files), not from the file order
    root = small_senteval_dir / "downstream"
    positive = (root / "MR" / "rt-polarity.pos").read_text(encoding="latin-1").splitlines()
    negative = (root / "MR" / "rt-polarity.neg").read_text(encoding="latin-1").splitlines()
    labels = [1] * len(positive) + [0] * len(negative)
    sentences, sorted_labels = senteval_sorted_by_their_rule(positive + negative, labels)
    expected = reference_inner_kfold(
        fit_logistic_regression, INNER_KFOLD_GRID, embed(sentences), np.array(sorted_labels), 3
    )
    in_file_order = reference_inner_kfold(
        fit_logistic_regression,
        INNER_KFOLD_GRID,
        embed([" ".join(s.split()) for s in positive + negative]),
        np.array(labels),
        3,
    )
    assert results["tasks"]["MR"]["accuracy"] == expected != in_file_order

    mrpc = read_mrpc(root / "MRPC")
    train, test = (mrpc[name] for name in ("train", "test"))
    order = {name: senteval_order(mrpc[name]) for name in ("train", "test")}
    features, labels = {}, {}
    for name, data in (("train", train), ("test", test)):
        first = embed([data.sentences1[i] for i in order[name]])
        second = embed([data.sentences2[i] for i in order[name]])
        features[name] = np.concatenate([np.abs(first - second), first * second], 1)
        labels[name] = np.array([data.labels[i] for i in order[name]])
    _, accuracy_, predictions, _ = reference_kfold(
        fit_logistic_regression,
        KFOLD_GRID,
        (features["train"], labels["train"]),
        (features["test"], labels["test"]),
        3,
    )
    assert results["tasks"]["MRPC"]["accuracy"] == accuracy_
    assert results["tasks"]["MRPC"]["f1"] == round(100 * f1_score(labels["test"], predictions), 2)

    accuracies = [scores["accuracy"] for scores in results["tasks"].values()]
    assert results["avg"] == {"accuracy": round(np.mean(accuracies), 2), "tasks": list(TRANSFER_TASKS)}
    # TREC's classes are named by their own words here: a linear classifier separates them
    assert results["tasks"]["TREC"]["accuracy"] == 100.0


@pytest.mark.slow  # every transfer task: 3 s of CPU
def test_simcse_protocol_is_the_default_and_runs_every_task(small_senteval_dir):
    results = evaluate_transfer(BagOfWordsEncoder(), small_senteval_dir, kfold=3, show_progress=False)
    assert results["protocol"] == "simcse" and results["classifier"]["tenacity"] == 5
    assert list(results["tasks"]) == list(TRANSFER_TASKS)
    assert all(
        scores["penalty" if task in ("SST2", "TREC", "MRPC") else "penalties"]
        for task, scores in results["tasks"].items()
    )
    assert results["tasks"]["SST2"]["penalty"] in WEIGHT_DECAY_GRID
    # (TREC stays at chance here: 36 questions give 1 Adam step of lr 1e-3 per pass; SentEval's classifier needs data)

    mr = read_binary_task(small_senteval_dir / "downstream" / "MR", "MR")
    order = senteval_order(mr)
    features, labels = embed([mr.sentences[i] for i in order]), np.array([mr.labels[i] for i in order])
    expected = reference_inner_kfold(fit_pytorch_classifier, WEIGHT_DECAY_GRID, features, labels, 3)
    assert results["tasks"]["MR"]["accuracy"] == expected
