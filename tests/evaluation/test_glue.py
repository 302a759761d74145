"""GLUE by fine-tuning (`contrastive_hf.evaluation.glue`): GLUE's files and the Hub's copy, CLEAR's metrics against
scikit-learn and scipy, RoBERTa's selection over seeds, both heads, and ``contrastive-hf evaluate --tasks glue``.

The SST-2, MRPC and STS-B samples of tests/fixtures/glue are in GLUE's own layout (tests/fixtures/README.md); the
other tasks' files and the Hub-shaped copies are written here, a few rows each.
"""

from __future__ import annotations

import filecmp
import json
import math

import numpy as np
import pytest
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef
from transformers import BertModel

from contrastive_hf import ContrastiveConfig, ContrastiveModel
from contrastive_hf.commands.cli import main
from contrastive_hf.evaluation import run_evaluation
from contrastive_hf.evaluation.glue import (
    GlueArguments,
    build_classifier,
    evaluate_glue,
    glue_card_results,
    summarise_runs,
)
from contrastive_hf.evaluation.glue_data import GLUE_HUB_DATASET, load_glue_task, read_glue_file
from contrastive_hf.evaluation.glue_tasks import (
    GLUE_GROUP,
    GLUE_TASKS,
    accuracy,
    binary_f1,
    matthews_correlation,
    split_metrics,
)
from contrastive_hf.evaluation.suite import parse_tasks
from contrastive_hf.hub.model_card import ModelCardInfo, render_model_card

from conftest import REPO_ROOT, TEST_DATA, tiny_bert_config
from helpers.in_process import run_script

GLUE_SAMPLES = TEST_DATA / "glue"
# A quick recipe for the tiny model: one epoch on 16 examples, one seed, one configuration.
QUICK = dict(learning_rates=(1e-3,), train_batch_sizes=(8,), seeds=(0,), num_train_epochs=1, max_train_samples=16)

# A few rows of each task not shipped, in GLUE's headers (rows: texts, then the label as GLUE writes it).
OTHER_TASKS = {
    "CoLA": (None, [("gj04", "1", "", "Our friends won't buy this analysis."),
                    ("gj04", "0", "*", "They drank the pub.")]),
    "QQP": (
        "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate",
        [("1", "2", "3", "How do I learn Python?", "What is the best way to learn Python?", "1"),
         ("4", "5", "6", "Why is the sky blue?", "How do magnets work?", "0")],
    ),
    "QNLI": (
        "index\tquestion\tsentence\tlabel",
        [("0", "When did the war end?", "The war ended in 1945.", "entailment"),
         ("1", "Who wrote it?", "The river is long.", "not_entailment")],
    ),
    "RTE": (
        "index\tsentence1\tsentence2\tlabel",
        [("0", "A dog barks loudly.", "An animal makes noise.", "entailment"),
         ("1", "A cat sleeps.", "The cat is running.", "not_entailment")],
    ),
    "WNLI": (
        "index\tsentence1\tsentence2\tlabel",
        [("0", "The trophy didn't fit in the case because it was big.", "The trophy was big.", "1"),
         ("1", "The trophy didn't fit in the case because it was small.", "The trophy was small.", "0")],
    ),
}  # fmt: skip
MNLI_HEADER = (
    "index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\tsentence1_parse\t"
    "sentence2_parse\tsentence1\tsentence2\tlabel1\tgold_label"
)
MNLI_ROWS = [
    ("A man plays a guitar.", "A person makes music.", "entailment"),
    ("A man plays a guitar.", "Nobody is playing.", "contradiction"),
    ("A man plays a guitar.", "The man is famous.", "neutral"),
]


def write_tsv(path, header, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ([header] if header else []) + ["\t".join(row) for row in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def mnli_row(index, premise, hypothesis, label):
    return (str(index), "1", f"{index}e", "fiction", "(x)", "(y)", "(X)", "(Y)", premise, hypothesis, label, label)


def write_other_tasks(root):
    """CoLA, QQP, QNLI, RTE, WNLI and MNLI in GLUE's layout under ``root`` (rows repeated to 8 per file)."""
    for name, (header, rows) in OTHER_TASKS.items():
        for split in ("train", "dev"):
            write_tsv(root / name / f"{split}.tsv", header, rows * 4)
    mnli = [mnli_row(i, *row) for i, row in enumerate(MNLI_ROWS * 3)]
    for file in ("train.tsv", "dev_matched.tsv", "dev_mismatched.tsv"):
        write_tsv(root / "MNLI" / file, MNLI_HEADER, mnli)


def write_hub_copy(root, data: dict):
    """A local folder shaped like the Hub's nyu-mll/glue: <config>/<split>-00000-of-00001.parquet per split, listed
    in the README's ``configs`` (what load_dataset reads on the Hub too), with an ``idx`` column as the Hub has."""
    configs = []
    for config, splits in data.items():
        configs.append(f"- config_name: {config}\n  data_files:")
        for split, dataset in splits.items():
            dataset.add_column("idx", list(range(len(dataset)))).to_parquet(
                str(root / config / f"{split}-00000-of-00001.parquet")
            )
            configs.append(f"  - split: {split}\n    path: {config}/{split}-*")
    (root / "README.md").write_text("---\nconfigs:\n" + "\n".join(configs) + "\n---\n", encoding="utf-8")
    return str(root)


def hub_copy_of(root, data_dirs: dict):
    """The Hub-shaped copy of the tasks of ``data_dirs`` (task -> folder of its GLUE files)."""
    splits = {}
    for name, data_dir in data_dirs.items():
        task, local = GLUE_TASKS[name], load_glue_task(name, data_dir)
        splits[task.config] = {"train": local.train, **{s: local.dev[k] for s, _, k in task.dev_splits}}
    return write_hub_copy(root, splits)


@pytest.fixture
def tiny_checkpoint(tmp_path, tokenizer):
    model = ContrastiveModel(
        ContrastiveConfig(encoder=tiny_bert_config(vocab_size=len(tokenizer)), pooler_type="mean")
    )
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    return str(tmp_path / "model")


# Data ---------------------------------------------------------------------------------------------------------------


def test_shipped_samples_are_what_the_arranging_script_writes_from_the_senteval_samples(tmp_path):
    """tests/fixtures/glue is benchmarks/glue_data.py's output, byte for byte, from the SentEval-layout samples (the
    first rows of the same public files)."""
    argv = ["--output", tmp_path, "--senteval-dir", TEST_DATA / "senteval", "--stsb-dir",
            TEST_DATA / "sts" / "stsbenchmark", "--max-train-rows", "48", "--max-dev-rows", "30"]  # fmt: skip
    run_script(REPO_ROOT / "benchmarks" / "glue_data.py", argv)  # in this process, as the command runs it
    files = [
        "README.md",
        *(f"{task}/{split}.tsv" for task in ("SST-2", "MRPC", "STS-B") for split in ("train", "dev")),
    ]
    match, mismatch, errors = filecmp.cmpfiles(GLUE_SAMPLES, tmp_path, files, shallow=False)
    assert (mismatch, errors) == ([], [])


def test_glue_files_read_as_the_hub_has_them():
    sst2 = load_glue_task("SST-2", TEST_DATA)  # found under tests/fixtures/glue/
    assert sst2.source == str(GLUE_SAMPLES / "SST-2") and sst2.hub_dataset is None
    assert (len(sst2.train), len(sst2.dev["dev"])) == (48, 30)
    assert sst2.train[0] == {"sentence": "hide new secretions from the parental units ", "label": 0}
    assert sst2.train.features["label"].names == ["negative", "positive"]
    first_senteval_line = (TEST_DATA / "senteval" / "SST" / "Binary" / "sentiment-dev").read_text().splitlines()[0]
    assert "\t".join([sst2.dev["dev"][0]["sentence"], str(sst2.dev["dev"][0]["label"])]) == first_senteval_line

    mrpc = load_glue_task("MRPC", GLUE_SAMPLES)
    msr = (TEST_DATA / "senteval" / "MRPC" / "msr_paraphrase_train.txt").read_text(encoding="utf-8-sig").splitlines()
    quality, _, _, first, second = msr[1].split("\t")
    assert mrpc.train[0] == {"sentence1": first, "sentence2": second, "label": int(quality)}
    assert mrpc.train["label"] == [int(line[0]) for line in msr[1:49]]

    stsb = load_glue_task("STS-B", GLUE_SAMPLES)
    assert stsb.train[0] == {"sentence1": "A plane is taking off.", "sentence2": "An air plane is taking off.",
                             "label": 5.0}  # fmt: skip
    assert stsb.dev["dev"].features["label"].dtype == "float32"


def test_every_task_reads_in_glue_layout_under_glue_data(tmp_path):
    write_other_tasks(tmp_path / "glue_data")
    cola = load_glue_task("CoLA", tmp_path)  # no header; label in the second column, sentence in the fourth
    assert cola.train[:2] == {
        "sentence": ["Our friends won't buy this analysis.", "They drank the pub."],
        "label": [1, 0],
    }
    mnli = load_glue_task("MNLI", tmp_path)
    assert set(mnli.dev) == {"matched", "mismatched"}
    names = GLUE_TASKS["MNLI"].labels  # the Hub's order: entailment, neutral, contradiction
    assert mnli.train["label"][:3] == [names.index("entailment"), names.index("contradiction"), names.index("neutral")]
    assert mnli.train.column_names == ["premise", "hypothesis", "label"]
    assert load_glue_task("QNLI", tmp_path).train["label"][:2] == [0, 1]  # entailment, not_entailment
    assert load_glue_task("RTE", tmp_path).train.column_names == ["sentence1", "sentence2", "label"]
    assert load_glue_task("WNLI", tmp_path).train["label"][:2] == [1, 0]
    qqp_file = tmp_path / "glue_data" / "QQP" / "train.tsv"
    qqp_file.write_text(qqp_file.read_text() + "7\t8\t9\ta question cut short\n")  # QQP's broken rows are skipped
    assert len(load_glue_task("QQP", tmp_path).train) == 8


def test_bad_glue_files_are_named_with_the_line(tmp_path):
    root = tmp_path / "GLUE"
    write_tsv(root / "MRPC" / "train.tsv", "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String", [("1", "a", "b", "x", "y")])
    with pytest.raises(FileNotFoundError, match=r"GLUE MRPC: .*MRPC lacks dev.tsv \(it holds train.tsv\)"):
        load_glue_task("MRPC", tmp_path)
    write_tsv(root / "MRPC" / "dev.tsv", "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String", [("2", "a", "b", "x", "y")])
    with pytest.raises(ValueError, match=r"dev.tsv:2: MRPC label '2' is not one of 0, 1"):
        load_glue_task("MRPC", tmp_path)
    write_tsv(root / "MRPC" / "dev.tsv", "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String", [("1", "a", "b", "x")])
    with pytest.raises(ValueError, match=r"dev.tsv:2: 4 tab-separated field\(s\), expected at least 5"):
        load_glue_task("MRPC", tmp_path)
    for split in ("train", "dev"):
        write_tsv(root / "STS-B" / f"{split}.tsv", "sentence1\tsentence2\tlabel", [("a", "b", "3.0")])
    with pytest.raises(ValueError, match=r"train.tsv:1: the header has no column 'score'"):
        load_glue_task("STS-B", tmp_path)
    write_tsv(root / "RTE" / "train.tsv", "index\tsentence1\tsentence2\tlabel", [("0", "a", "b", "maybe")])
    with pytest.raises(ValueError, match=r"train.tsv:2: RTE label 'maybe' is not one of entailment, not_entailment"):
        read_glue_file("RTE", root / "RTE" / "train.tsv")


def test_a_task_without_files_and_without_the_hub_says_what_was_tried(tmp_path):
    (tmp_path / "SST-2").mkdir()  # a folder without train.tsv is not the task's
    with pytest.raises(FileNotFoundError) as error:
        load_glue_task("SST-2", tmp_path, hub_dataset=str(tmp_path / "no-such-copy"))
    message = str(error.value)
    assert "no folder holding train.tsv at" in message and str(tmp_path / "glue_data" / "SST-2") in message
    assert "loading it from the Hub failed" in message and "--data-dir" in message


def test_the_hub_path_gives_what_glue_files_give(tmp_path):
    """load_dataset on a Hub-shaped copy (the path every online run takes) gives the files' columns, labels and
    splits, MNLI's two dev splits included."""
    write_other_tasks(tmp_path / "files")
    hub = hub_copy_of(tmp_path / "hub", {"SST-2": GLUE_SAMPLES, "MRPC": GLUE_SAMPLES, "STS-B": GLUE_SAMPLES})
    for name in ("SST-2", "MRPC", "STS-B"):
        from_files, from_hub = load_glue_task(name, GLUE_SAMPLES), load_glue_task(name, hub_dataset=hub)
        assert from_hub.hub_dataset == hub and from_hub.source == f"{hub} ({GLUE_TASKS[name].config})"
        assert from_hub.train.to_dict() == from_files.train.to_dict()
        assert from_hub.dev["dev"].to_dict() == from_files.dev["dev"].to_dict()
        assert from_hub.train.features["label"] == from_files.train.features["label"]
    mnli_files = load_glue_task("MNLI", tmp_path / "files")
    mnli_hub = load_glue_task("MNLI", hub_dataset=hub_copy_of(tmp_path / "mnli", {"MNLI": tmp_path / "files"}))
    for key in ("matched", "mismatched"):  # validation_matched, validation_mismatched on the Hub
        assert mnli_hub.dev[key].to_dict() == mnli_files.dev[key].to_dict()
    assert GLUE_HUB_DATASET == "nyu-mll/glue" and GlueArguments().hub_dataset == GLUE_HUB_DATASET


# Metrics ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("classes", [2, 3])
def test_metrics_match_scikit_learn_and_scipy(classes):
    generator = np.random.default_rng(classes)
    references = generator.integers(0, classes, 200)
    predictions = np.where(generator.random(200) < 0.7, references, generator.integers(0, classes, 200))
    assert accuracy(predictions, references) == pytest.approx(100 * accuracy_score(references, predictions))
    assert matthews_correlation(predictions, references) == pytest.approx(
        100 * matthews_corrcoef(references, predictions)
    )
    if classes == 2:
        assert binary_f1(predictions, references) == pytest.approx(100 * f1_score(references, predictions))
    for degenerate in (np.zeros(200, dtype=int), references):  # one predicted class; all right
        assert matthews_correlation(degenerate, references) == pytest.approx(
            100 * matthews_corrcoef(references, degenerate)
        )
    assert binary_f1(np.zeros(5), np.zeros(5)) == 100 * f1_score(np.zeros(5), np.zeros(5), zero_division=0.0)


def test_task_figures_are_clears_from_logits():
    generator = np.random.default_rng(0)
    logits, labels = generator.normal(size=(50, 2)), generator.integers(0, 2, 50)
    predicted = logits.argmax(axis=1)
    mrpc = split_metrics("MRPC", logits, labels)
    assert mrpc == pytest.approx(
        {"accuracy": 100 * accuracy_score(labels, predicted), "f1": 100 * f1_score(labels, predicted)}
    )
    cola = split_metrics("CoLA", logits, labels)
    assert cola == pytest.approx({"matthews_correlation": 100 * matthews_corrcoef(labels, predicted)})
    scores, gold = generator.normal(size=(50, 1)), generator.uniform(0, 5, 50)
    stsb = split_metrics("STS-B", scores, gold)
    assert stsb == pytest.approx(
        {"pearson": 100 * pearsonr(scores[:, 0], gold)[0], "spearman": 100 * spearmanr(scores[:, 0], gold)[0]}
    )


def run(rate, size, seed, score, **figures):
    return {
        "learning_rate": rate,
        "batch_size": size,
        "seed": seed,
        "score": score,
        "figures": figures or {"a": score},
    }


def test_the_configuration_with_the_best_median_is_reported_with_its_spread():
    runs = [run(1e-5, 16, seed, score) for seed, score in enumerate([80.0, 90.0, 70.0])]  # median 80
    runs += [run(2e-5, 16, seed, score) for seed, score in enumerate([60.0, 85.0, 84.0])]  # median 84: chosen
    runs += [run(3e-5, 16, seed, score) for seed, score in enumerate([84.0, 84.0, 10.0])]  # median 84 too: later
    summary = summarise_runs(runs)
    assert (summary["score"], summary["learning_rate"], summary["batch_size"]) == (84.0, 2e-5, 16)
    assert summary["spread"]["scores"] == [60.0, 85.0, 84.0]
    assert (summary["spread"]["min"], summary["spread"]["max"]) == (60.0, 85.0)
    assert summary["spread"]["std"] == pytest.approx(float(np.std([60, 85, 84], ddof=1)))
    assert [entry["median"] for entry in summary["grid"]] == [80.0, 84.0, 84.0]
    two = summarise_runs(
        [run(1e-5, 32, 0, 70.0, accuracy=60.0, f1=80.0), run(1e-5, 32, 1, 90.0, accuracy=86.0, f1=94.0)]
    )
    assert two["score"] == 80.0 and two["figures"] == {"accuracy": 73.0, "f1": 87.0}  # medians of each figure


# Heads --------------------------------------------------------------------------------------------------------------


def test_the_two_heads(tiny_checkpoint, tmp_path, tokenizer):
    encoder_head = build_classifier(tiny_checkpoint, "MRPC", "encoder")
    assert type(encoder_head).__name__ == "BertForSequenceClassification"
    assert encoder_head.config.id2label == {0: "not_equivalent", 1: "equivalent"}
    embedding_head = build_classifier(tiny_checkpoint, "STS-B", "embedding")
    assert type(embedding_head).__name__ == "ContrastiveForSequenceClassification"
    assert embedding_head.config.num_labels == 1 and embedding_head.config.pooler_type == "mean"
    # a sentence-transformers folder: pooled as its Pooling module says ([CLS] token, no pooler layer)
    folder = tmp_path / "st"
    BertModel(tiny_bert_config(vocab_size=len(tokenizer))).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    (folder / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]))  # fmt: skip
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 32,
                                                                  "pooling_mode_cls_token": True}))  # fmt: skip
    assert build_classifier(folder, "SST-2", "embedding").config.pooler_type == "cls_before_pooler"
    modules = json.loads((folder / "modules.json").read_text())
    (folder / "modules.json").write_text(json.dumps([*modules, {"idx": 2, "path": "2_Dense", "type": "x.Dense"}]))
    with pytest.raises(ValueError, match=r"Dense module\(s\) \(2_Dense\).*--glue-head encoder"):
        build_classifier(folder, "SST-2", "embedding")


@pytest.mark.slow  # fine-tunes on the shipped samples: 20 s of CPU
def test_fine_tuning_on_the_shipped_samples(tiny_checkpoint):
    arguments = GlueArguments(**{**QUICK, "seeds": (0, 1), "num_train_epochs": 2})
    glue = evaluate_glue(tiny_checkpoint, ["SST-2", "MRPC", "STS-B"], GLUE_SAMPLES, arguments, report=None)
    assert glue["head"] == "encoder" and glue["avg"]["tasks"] == ["SST-2", "MRPC", "STS-B"]
    assert glue["avg"]["score"] == pytest.approx(np.mean([glue["tasks"][t]["score"] for t in glue["avg"]["tasks"]]))
    names = {"SST-2": {"accuracy"}, "MRPC": {"accuracy", "f1"}, "STS-B": {"pearson", "spearman"}}
    for task, result in glue["tasks"].items():
        assert result["data"] == {"source": str(GLUE_SAMPLES / task), "hub_dataset": None, "train": 48, "dev": 30,
                                  "train_used": 16, "dev_used": 30}  # fmt: skip
        assert [(r["seed"], r["steps"], len(r["epochs"])) for r in result["runs"]] == [(0, 4, 2), (1, 4, 2)]
        for one in result["runs"]:
            assert set(one["figures"]) == names[task] and math.isfinite(one["training_loss"])
            assert one["score"] == pytest.approx(np.mean(list(one["figures"].values())))
            assert one["score"] == max(epoch["score"] for epoch in one["epochs"])  # the best epoch is kept
        assert result["score"] == pytest.approx(np.median(result["spread"]["scores"]))
    # the seed draws the head and the order: another seed trains otherwise, the same seed the same
    seeds = glue["tasks"]["MRPC"]["runs"]
    assert seeds[0]["training_loss"] != seeds[1]["training_loss"]
    again = evaluate_glue(tiny_checkpoint, ["MRPC"], GLUE_SAMPLES, GlueArguments(**QUICK), report=None)
    first = evaluate_glue(tiny_checkpoint, ["MRPC"], GLUE_SAMPLES, GlueArguments(**QUICK), report=None)
    for key in ("training_loss", "epochs"):
        assert first["tasks"]["MRPC"]["runs"][0][key] == again["tasks"]["MRPC"]["runs"][0][key]


def test_the_embedding_head_fine_tunes_a_regression_on_the_sentence_embedding(tiny_checkpoint):
    glue = evaluate_glue(
        tiny_checkpoint, ["STS-B"], GLUE_SAMPLES, GlueArguments(head="embedding", **QUICK), report=None
    )
    (run,) = glue["tasks"]["STS-B"]["runs"]
    assert glue["head"] == "embedding" and glue["arguments"]["head"] == "embedding"
    assert set(run["figures"]) == {"pearson", "spearman"} and math.isfinite(run["training_loss"])
    assert run["steps"] == 2 and -100 <= glue["avg"]["score"] <= 100


# Commands and results -----------------------------------------------------------------------------------------------


def test_task_names():
    assert parse_tasks("glue") == [f"GLUE/{name}" for name in GLUE_GROUP]
    assert parse_tasks("glue/sst2,GLUE-SST-2,glue:mrpc,glue_stsb,cola,MNLI,wnli") == [
        "GLUE/SST-2", "GLUE/MRPC", "GLUE/STS-B", "GLUE/CoLA", "GLUE/MNLI", "GLUE/WNLI"
    ]  # fmt: skip
    assert parse_tasks("SST2,MRPC,stsb") == ["SST2", "MRPC", "STS-B"]  # the embedding tasks keep their names
    with pytest.raises(ValueError, match="glue/sst2"):
        parse_tasks("glu")
    with pytest.raises(ValueError, match="pass its folder or Hub id"):
        run_evaluation(ContrastiveModel(ContrastiveConfig(encoder=tiny_bert_config())), tasks="glue/sst2")
    with pytest.raises(ValueError, match="Unknown GLUE head 'cls'"):
        GlueArguments(head="cls")
    with pytest.raises(ValueError, match="at least one value of seeds"):
        GlueArguments(seeds=())


@pytest.mark.slow  # fine-tunes on every GLUE task: most of a minute of CPU
def test_evaluate_runs_all_of_glue_through_the_hub_loading_code(tiny_checkpoint, tmp_path, capsys):
    """`--tasks glue` with no --data-dir: every task through load_dataset, here of a local Hub-shaped copy."""
    write_other_tasks(tmp_path / "files")
    shipped = {name: GLUE_SAMPLES if name in ("SST-2", "MRPC", "STS-B") else tmp_path / "files" for name in GLUE_GROUP}
    hub = hub_copy_of(tmp_path / "hub", shipped)
    output = tmp_path / "glue.json"
    arguments = ["evaluate", tiny_checkpoint, "--tasks", "glue", "--glue-dataset", hub, "--output", str(output)]
    arguments += ["--learning-rates", "1e-3", "--train-batch-sizes", "8", "--seeds", "0", "--num-train-epochs", "1"]
    assert main([*arguments, "--max_train_samples", "16", "--no-progress"]) == 0
    printed = capsys.readouterr().out
    results = json.loads(output.read_text())
    glue = results["glue"]
    assert list(glue["tasks"]) == list(GLUE_GROUP) and glue["avg"]["tasks"] == list(GLUE_GROUP)
    assert glue["arguments"]["max_train_samples"] == 16 and glue["arguments"]["learning_rates"] == [1e-3]
    for name, result in glue["tasks"].items():
        assert result["data"]["hub_dataset"] == hub and result["data"]["source"].endswith(
            f"({GLUE_TASKS[name].config})"
        )
        assert f"GLUE {name} " in printed
    assert set(glue["tasks"]["MNLI"]["figures"]) == {"accuracy_matched", "accuracy_mismatched"}
    assert "GLUE avg (8)" in printed
    assert main(["plot", str(output), "--output-dir", str(tmp_path / "pictures")]) == 0
    assert (tmp_path / "pictures" / "glue.png").stat().st_size > 0
    assert not (tmp_path / "pictures" / "alignment_uniformity.png").exists()  # no alignment figures in this file


def glue_result(name, figures, hub_dataset="nyu-mll/glue"):
    return {"score": float(np.mean(list(figures.values()))), "figures": figures,
            "data": {"hub_dataset": hub_dataset, "source": "x"}}  # fmt: skip


def test_glue_figures_go_to_the_model_cards_model_index():
    glue = {
        "tasks": {
            "MRPC": glue_result("MRPC", {"accuracy": 84.0, "f1": 88.0}),
            "MNLI": glue_result("MNLI", {"accuracy_matched": 80.0, "accuracy_mismatched": 81.0}),
            "STS-B": glue_result("STS-B", {"pearson": 85.0, "spearman": 84.5}, hub_dataset=None),  # local files
            "CoLA": glue_result("CoLA", {"matthews_correlation": 55.55}, hub_dataset="/data/glue-copy"),
        },
        "avg": {"score": 76.0},
    }
    entries = glue_card_results(glue)
    assert entries["glue_mnli_matched"] == {"accuracy": 80.0, "dataset": "nyu-mll/glue"}
    assert entries["glue_stsb"] == {"pearson": 85.0, "spearman": 84.5} and entries["avg_glue"] == {"score": 76.0}
    assert "dataset" not in entries["glue_cola"]  # a local copy of the Hub dataset is local files
    model = ContrastiveModel(ContrastiveConfig(encoder=tiny_bert_config(vocab_size=50)))
    info = ModelCardInfo(method="SimCSE", model_name="m", base_model=None, augmentation="dropout", training_data="x",
                         hyperparameters={}, eval_results=entries)  # fmt: skip
    card = render_model_card(model, info)
    results = {(r.dataset_config, r.dataset_split, r.metric_type): r for r in card.data.eval_results}
    assert len(results) == 7  # avg_glue goes to the table only
    matched = results[("mnli", "validation_matched", "accuracy")]
    assert (matched.dataset_type, matched.dataset_name, matched.metric_value) == ("nyu-mll/glue", "GLUE MNLI", 0.8)
    assert results[("mrpc", "validation", "f1")].metric_value == 0.88
    stsb = results[("stsb", "validation", "spearmanr")]
    assert (stsb.dataset_type, stsb.dataset_name, stsb.task_type) == ("glue-stsb", "GLUE STSB (local files)",
                                                                      "text-classification")  # fmt: skip
    assert results[("cola", "validation", "matthews_correlation")].metric_value == 0.5555
    assert "| avg_glue | score x 100 | 76.00 |" in card.text and "| glue_mrpc | f1 x 100 | 88.00 |" in card.text
