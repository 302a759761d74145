"""STS readers (on slices of the real files in tests/fixtures and on malformed ones), scoring, aggregation, the
`evaluate` module and the fast encoding path against `ContrastiveModel.encode`."""

from __future__ import annotations

import hashlib
import shutil

import evaluate
import numpy as np
import pytest
import torch
from scipy.stats import pearsonr, spearmanr

from contrastive_hf import ContrastiveConfig, ContrastiveModel
from contrastive_hf.evaluation import STSData, evaluate_sts, evaluate_sts_suite, read_stsbenchmark
from contrastive_hf.evaluation.encoders import ModelEncoder, SentenceEncoder
from contrastive_hf.evaluation.sts import (
    STS_YEAR_SUBSETS,
    load_sts_task,
    read_sick,
    read_sts_subset,
    read_sts_year,
    sts_correlations,
)
from contrastive_hf.metrics import STS_CORRELATION_PATH

from conftest import TEST_DATA, tiny_bert_config

STS = TEST_DATA / "sts"


class BagOfWordsEncoder(SentenceEncoder):
    """Sum of a fixed pseudo-random vector per word: a deterministic encoder whose cosine tracks word overlap.
    Counts what it is asked to encode."""

    name = "bag-of-words"

    def __init__(self):
        self.encoded: list[str] = []

    @staticmethod
    def word_vector(word: str) -> np.ndarray:
        seed = int(hashlib.md5(word.lower().encode()).hexdigest()[:8], 16)
        return np.random.default_rng(seed).standard_normal(64)

    def _encode_unique(self, sentences, batch_size, show_progress):
        self.encoded += sentences
        return np.stack([sum(self.word_vector(w) for w in s.split()) + 1e-3 for s in sentences])


def reference_spearman(data: STSData) -> float:
    """Spearman x 100 of the bag-of-words cosines, computed independently of the package."""
    encoder = BagOfWordsEncoder()
    # float32 embeddings, as every encoder returns them
    a = np.stack([sum(encoder.word_vector(w) for w in s.split()) + 1e-3 for s in data.sentences1]).astype(np.float32)
    b = np.stack([sum(encoder.word_vector(w) for w in s.split()) + 1e-3 for s in data.sentences2]).astype(np.float32)
    a, b = a.astype(np.float64), b.astype(np.float64)
    cosine = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    return spearmanr(cosine, data.scores).statistic * 100


# ---- readers on the real files ---------------------------------------------------------------------------------


def test_reads_the_stsb_dev_file_with_extra_columns_and_quotes(repo_root):
    data = read_stsbenchmark(repo_root / "examples" / "demo" / "data" / "sts-dev.csv")
    assert len(data) == 1500
    assert data.scores[0] == 5.0
    assert data.sentences1[0] == "A man with a hard hat is dancing."
    # row 1479 carries two source columns after sentence2
    assert data.sentences2[1478] == "High court checks President's recess appointment power"


def test_reads_every_stsb_split_from_its_folder():
    sizes = {split: len(read_stsbenchmark(STS / "stsbenchmark", split=split)) for split in ("train", "dev", "test")}
    assert sizes == {"train": 50, "dev": 40, "test": 120}  # the slices' sizes (tests/fixtures/README.md)


def test_reads_sts12_in_senteval_layout_in_senteval_order():
    subsets = read_sts_year(STS / "STS12-en-test", "STS12")
    assert list(subsets) == list(STS_YEAR_SUBSETS["STS12"])
    assert {name: len(data) for name, data in subsets.items()} == {
        "MSRpar": 40,
        "MSRvid": 40,
        "SMTeuroparl": 40,
        "surprise.OnWN": 40,
        "surprise.SMTnews": 40,
    }
    # the year's own STS.gs.ALL.txt is the concatenation of the subsets' gold files in that order
    all_gold = [float(line) for line in (STS / "STS12-en-test" / "STS.gs.ALL.txt").read_text().split()]
    assert [score for data in subsets.values() for score in data.scores] == all_gold
    # SentEval normalises whitespace as it tokenizes
    assert subsets["MSRpar"].sentences1[0].startswith("the problem likely will mean corrective changes")
    assert all("  " not in s for data in subsets.values() for s in data.sentences1 + data.sentences2)


def test_finds_task_folders_under_a_data_directory_ignoring_letter_case():
    # tests/fixtures keeps them as sts/STS12-en-test, sts/stsbenchmark and sts/sick (SentEval: STS/..., SICK/)
    assert len(load_sts_task(TEST_DATA, "STS12")) == 5
    assert len(load_sts_task(TEST_DATA, "STS-B", stsb_split="dev")["dev"]) == 40
    assert len(load_sts_task(TEST_DATA, "SICK-R", sick_split="trial")["trial"]) == 120


def test_reads_sick_by_its_header():
    data = read_sick(STS / "sick", split="train")
    assert len(data) == 50
    trial = read_sick(STS / "sick" / "SICK_trial.txt")
    assert trial.sentences1[0] == "The young boys are playing outdoors and the man is smiling nearby"
    assert trial.scores[:2] == [3.6, 3.4]


# ---- missing and malformed files ---------------------------------------------------------------------------------


def test_a_missing_task_folder_lists_where_it_was_looked_for(tmp_path):
    with pytest.raises(FileNotFoundError) as error:
        load_sts_task(tmp_path, "STS13")
    message = str(error.value)
    assert str(tmp_path / "STS" / "STS13-en-test") in message and str(tmp_path / "STS13-en-test") in message
    assert "STS.input.<subset>.txt" in message and "FNWN, headlines, OnWN" in message


def test_missing_subset_files_are_named(tmp_path):
    folder = tmp_path / "STS13-en-test"
    folder.mkdir()
    (folder / "STS.input.FNWN.txt").write_text("a\tb\n")
    (folder / "STS.gs.FNWN.txt").write_text("1.0\n")
    with pytest.raises(FileNotFoundError, match=r"lacks STS.input.headlines.txt, STS.gs.headlines.txt"):
        read_sts_year(folder, "STS13")


def test_missing_stsb_file_says_what_was_expected(tmp_path):
    with pytest.raises(FileNotFoundError, match="sts-dev.csv"):
        read_stsbenchmark(tmp_path / "missing.csv")


def test_short_stsb_row_names_the_line(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("a\tb\tc\n")
    with pytest.raises(ValueError, match="bad.csv:1"):
        read_stsbenchmark(path)


def test_bad_stsb_score_names_file_and_line(tmp_path):
    path = tmp_path / "sts-test.csv"
    path.write_text("g\tf\t2012\t1\t4.0\ta b\tc d\ng\tf\t2012\t2\tfive\ta b\tc d\n")
    with pytest.raises(ValueError, match=r"sts-test.csv:2: score 'five' is not a number"):
        read_stsbenchmark(path)


def write_subset(folder, inputs: str, gold: str, name: str = "MSRpar"):
    folder.mkdir(exist_ok=True)
    (folder / f"STS.input.{name}.txt").write_text(inputs)
    (folder / f"STS.gs.{name}.txt").write_text(gold)
    return folder / f"STS.input.{name}.txt", folder / f"STS.gs.{name}.txt"


def test_empty_gold_lines_are_unscored_pairs_and_skipped(tmp_path):
    inputs, gold = write_subset(tmp_path / "y", "a  b\tc d\ne f\tg h\ni j\tk l\n", "1.5\n\n4.0\n")
    data = read_sts_subset(inputs, gold)
    assert data.sentences1 == ["a b", "i j"] and data.scores == [1.5, 4.0]


def test_bad_gold_score_names_file_and_line(tmp_path):
    inputs, gold = write_subset(tmp_path / "y", "a\tb\nc\td\n", "1.0\nhigh\n")
    with pytest.raises(ValueError, match=r"STS.gs.MSRpar.txt:2: gold score 'high' is not a number"):
        read_sts_subset(inputs, gold)


def test_mismatched_line_counts_name_both_files(tmp_path):
    inputs, gold = write_subset(tmp_path / "y", "a\tb\nc\td\ne\tf\n", "1.0\n2.0\n")
    with pytest.raises(ValueError, match=r"STS.input.MSRpar.txt has 3 lines but .*STS.gs.MSRpar.txt has 2"):
        read_sts_subset(inputs, gold)


def test_missing_second_sentence_names_the_line(tmp_path):
    inputs, gold = write_subset(tmp_path / "y", "a\tb\nonly one sentence\n", "1.0\n2.0\n")
    with pytest.raises(ValueError, match=r"STS.input.MSRpar.txt:2: expected two tab-separated sentences"):
        read_sts_subset(inputs, gold)


def test_sick_missing_column_and_bad_score(tmp_path):
    path = tmp_path / "SICK_test_annotated.txt"
    path.write_text("pair_ID\tsentence_A\tsentence_B\tentailment_judgment\n1\ta\tb\tNEUTRAL\n")
    with pytest.raises(ValueError, match=r"SICK_test_annotated.txt:1: the header lacks column\(s\) relatedness_score"):
        read_sick(tmp_path)
    path.write_text("pair_ID\tsentence_A\tsentence_B\trelatedness_score\n1\ta\tb\t4.5\n2\tc\td\tn/a\n")
    with pytest.raises(ValueError, match=r"SICK_test_annotated.txt:3: relatedness_score 'n/a' is not a number"):
        read_sick(tmp_path)


# ---- scoring ------------------------------------------------------------------------------------------------------


def test_spearman_is_computed_on_cosine_similarities():
    # cosine(a_i, b_i) = cos(angle_i); angles shrink as gold grows, so the ranking is perfect
    gold = [0.5, 2.0, 3.5, 1.0, 4.5]
    vectors = {}
    for index, g in enumerate(gold):
        angle = torch.tensor(3.0 - g * 0.6)
        vectors[f"a{index}"] = torch.tensor([1.0, 0.0]) * (index + 1)  # lengths must not matter
        vectors[f"b{index}"] = torch.stack([torch.cos(angle), torch.sin(angle)])

    class Lookup:
        def encode(self, sentences):
            return torch.stack([vectors[s] for s in sentences])

    first, second = [f"a{i}" for i in range(5)], [f"b{i}" for i in range(5)]
    assert evaluate_sts(Lookup(), STSData(first, second, gold))["spearman"] == pytest.approx(100.0)
    assert evaluate_sts(Lookup(), STSData(first, second, [-g for g in gold]))["spearman"] == pytest.approx(-100.0)


def test_the_shipped_evaluate_module_loads_offline_and_matches_scipy():
    rng = np.random.default_rng(0)
    predictions, references = rng.random(50), rng.random(50) * 5
    metric = evaluate.load(STS_CORRELATION_PATH)
    result = metric.compute(predictions=predictions, references=references)
    assert result["spearman"] == pytest.approx(spearmanr(predictions, references).statistic * 100)
    assert result["pearson"] == pytest.approx(pearsonr(predictions, references).statistic * 100)
    assert sts_correlations(predictions, references) == pytest.approx(result)
    # a collapsed model (every similarity equal) has no correlation: 0, as SentEval reports it
    assert metric.compute(predictions=[0.3] * 4, references=[1, 2, 3, 4]) == {"spearman": 0.0, "pearson": 0.0}


@pytest.fixture
def small_sts_dir(tmp_path):
    """SentEval's layout (STS/STS12-en-test, STS/STSBenchmark, SICK) holding the slices of tests/fixtures; SICK's trial
    slice stands in for its test split."""
    root = tmp_path / "downstream"
    shutil.copytree(STS / "STS12-en-test", root / "STS" / "STS12-en-test")
    (root / "STS" / "STSBenchmark").mkdir()
    shutil.copy(STS / "stsbenchmark" / "sts-test.csv", root / "STS" / "STSBenchmark" / "sts-test.csv")
    (root / "SICK").mkdir()
    shutil.copy(STS / "sick" / "SICK_trial.txt", root / "SICK" / "SICK_test_annotated.txt")
    return tmp_path


@pytest.mark.slow  # every STS task encoded and scored twice: 2 s of CPU
def test_suite_scores_each_task_and_the_all_setting_against_an_independent_reference(small_sts_dir):
    encoder = BagOfWordsEncoder()
    results = evaluate_sts_suite(encoder, small_sts_dir, tasks=["STS12", "STS-B", "SICK-R"], show_progress=False)
    sts12 = read_sts_year(small_sts_dir / "downstream" / "STS" / "STS12-en-test", "STS12")
    # "all": one Spearman over the concatenated subsets (SimCSE)
    assert results["tasks"]["STS12"]["spearman"] == pytest.approx(
        reference_spearman(STSData.concatenate(list(sts12.values())))
    )
    for name, data in sts12.items():
        assert results["tasks"]["STS12"]["subsets"][name]["spearman"] == pytest.approx(reference_spearman(data))
    # SentEval's weighted mean of the subsets, by pairs
    per_subset = [reference_spearman(data) for data in sts12.values()]
    weighted = np.average(per_subset, weights=[len(d) for d in sts12.values()])
    assert results["tasks"]["STS12"]["aggregates"]["wmean"]["spearman"] == pytest.approx(weighted)
    stsb = read_stsbenchmark(small_sts_dir / "downstream" / "STS" / "STSBenchmark" / "sts-test.csv")
    assert results["tasks"]["STS-B"]["spearman"] == pytest.approx(reference_spearman(stsb))
    assert results["tasks"]["STS-B"]["split"] == "test" and results["tasks"]["SICK-R"]["pairs"] == 120
    spearmans = [results["tasks"][task]["spearman"] for task in ("STS12", "STS-B", "SICK-R")]
    assert results["avg"] == {"spearman": pytest.approx(np.mean(spearmans)), "tasks": ["STS12", "STS-B", "SICK-R"]}
    assert results["tasks"]["STS-B"]["spearman"] > 0  # word overlap goes with similarity on real data
    # every distinct sentence of the suite was encoded exactly once
    assert len(encoder.encoded) == len(set(encoder.encoded))

    wmean = evaluate_sts_suite(encoder, small_sts_dir, tasks=["STS12"], aggregation="wmean", show_progress=False)
    assert wmean["tasks"]["STS12"]["spearman"] == pytest.approx(weighted)


def test_suite_reads_every_file_before_encoding(small_sts_dir):
    shutil.rmtree(small_sts_dir / "downstream" / "SICK")
    encoder = BagOfWordsEncoder()
    with pytest.raises(FileNotFoundError, match="SICK-R"):
        evaluate_sts_suite(encoder, small_sts_dir, tasks=["STS12", "SICK-R"], show_progress=False)
    assert encoder.encoded == []


# ---- the encoding path ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("pooler_type", ["mean", "cls"])
def test_fast_encoding_matches_contrastive_model_encode(tokenizer, pooler_type):
    config = ContrastiveConfig(encoder=tiny_bert_config(vocab_size=len(tokenizer)), pooler_type=pooler_type)
    model = ContrastiveModel(config).train()  # encoding must switch to eval mode and back
    sentences = [
        "a man is playing a guitar .",
        "the cat",
        "a much longer sentence about the history of south australia and its position",
        "the cat",  # a duplicate
        "",
    ]
    fast = ModelEncoder(model, tokenizer).encode(sentences, batch_size=2)
    reference = model.encode(sentences, tokenizer=tokenizer, batch_size=1, max_length=None)  # one at a time
    assert model.training
    np.testing.assert_allclose(fast, reference, atol=1e-5)
    assert fast.shape == (5, 32)
