"""End to end: examples/run_dpr.py on SNLI-derived question/passage pairs, from raw CSV to a trained, evaluated,
saved and reloadable dual encoder; the --dataset_name path with column flags; errors that name the fix."""

from __future__ import annotations

import csv
import json
import sys

import pytest
from datasets import load_dataset
from transformers import AutoModel, AutoTokenizer

from contrastive_hf.evaluation.retrieval import build_retrieval_data, evaluate_retrieval
from contrastive_hf.models.modeling_dual_encoder import DualEncoderModel

from conftest import DEMO_DATA, usage_error
from helpers.builders import HELD_OUT, PAIRS, dpr_arguments, run_dpr_in_process, write_snli_sample
from helpers.in_process import run_script


def test_run_dpr_trains_on_snli_pairs_and_reports_retrieval_before_and_after(repo_root, tmp_path):
    pairs = tmp_path / "snli.csv"
    write_snli_sample(pairs)
    command = [
        sys.executable,
        str(repo_root / "examples" / "run_dpr.py"),
        *dpr_arguments(
            repo_root,
            tmp_path,
            "--eval_size", str(HELD_OUT),
            "--evaluate_before_training",
            "--prebatch_size", "2",
            "--retrieval_k", "1,10",
            data=("--train_file", str(pairs)),
        ),
    ]  # fmt: skip
    result = run_script(command[1], command[2:], cwd=tmp_path, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "SentenceTransformer(" in result.stdout and "model.encode_query(" in result.stdout  # how to load it
    assert "hard negatives from 'hard_neg'" in result.stdout and "100 held-out questions" in result.stdout
    output_dir = tmp_path / "out"

    metrics = json.loads((output_dir / "eval_results.json").read_text())
    for suffix in ("_before", ""):  # the scripts' one naming: eval_<metric>_before beside eval_<metric>
        assert 0.0 <= metrics[f"eval_recall@1{suffix}"] <= metrics[f"eval_recall@10{suffix}"] <= 1.0
        assert 0.0 < metrics[f"eval_mrr{suffix}"] <= 1.0
        assert metrics[f"eval_queries{suffix}"] == HELD_OUT
    history = json.loads((output_dir / "trainer_state.json").read_text())["log_history"]
    negatives = [entry["negatives_per_query"] for entry in history if "negatives_per_query" in entry]
    assert len(negatives) == 4 and negatives[0] <= 31 and negatives[-1] > negatives[0] + 16  # the queue fills
    assert json.loads((output_dir / "train_results.json").read_text())["train_pairs"] == PAIRS - HELD_OUT

    # the saved checkpoint is the model that was scored: the held-out slice is the first rows after a seeded shuffle
    model = AutoModel.from_pretrained(output_dir).eval()
    assert isinstance(model, DualEncoderModel) and not model.config.share_encoders
    held_out = load_dataset("csv", data_files=str(pairs), split="train").shuffle(seed=42).select(range(HELD_OUT))
    task = build_retrieval_data(held_out["sent0"], held_out["sent1"], held_out["hard_neg"])
    tokenizer = AutoTokenizer.from_pretrained(output_dir)
    again = evaluate_retrieval(model, task, tokenizer, k_values=(1, 10), query_max_length=32, passage_max_length=32)
    for key in ("recall@1", "recall@10", "mrr", "passages"):
        assert again[key] == pytest.approx(metrics["eval_" + key], abs=1e-6)


def test_dataset_name_with_column_flags_shared_encoders_and_pairs_only(repo_root, tmp_path):
    folder = tmp_path / "qa_pairs"
    folder.mkdir()
    write_snli_sample(folder / "train.csv", rows=120, names=("question", "answer"))
    output_dir = run_dpr_in_process(
        repo_root,
        tmp_path,
        "--query_column", "question",
        "--positive_column", "answer",
        "--share_encoders",
        "--similarity", "cosine",
        "--pooler_type", "mean",
        "--eval_size", "40",
        data=("--dataset_name", str(folder)),
    )  # fmt: skip
    model = DualEncoderModel.from_pretrained(output_dir)
    assert model.config.share_encoders and model.passage_encoder is None and model.config.temperature == 0.05
    metrics = json.loads((output_dir / "eval_results.json").read_text())
    assert metrics["eval_passages"] == 40 and "eval_mrr_before" not in metrics  # pairs only: no distractors


def test_an_eval_file_with_other_column_names_than_the_training_file(repo_root, tmp_path):
    """A mined training file (query, positive, negative_1, negative_2) evaluated on SNLI's own columns: the column
    flags name the training file's columns, and the evaluation file's are detected (sent0, sent1, hard_neg)."""
    with open(DEMO_DATA / "nli_sample.csv", newline="") as handle:
        sample = list(csv.DictReader(handle))[:160]
    mined = tmp_path / "mined.csv"
    with open(mined, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["query", "positive", "negative_1", "negative_2"])
        writer.writerows([row["sent0"], row["sent1"], row["hard_neg"], row["sent0"][::-1]] for row in sample[:120])
    held_out = tmp_path / "eval.csv"
    write_snli_sample(held_out, rows=PAIRS)
    output_dir = run_dpr_in_process(
        repo_root,
        tmp_path,
        "--query_column", "query",
        "--positive_column", "positive",
        "--hard_negative_column", "negative_1,negative_2",
        "--eval_file", str(held_out),
        data=("--train_file", str(mined)),
    )  # fmt: skip
    metrics = json.loads((output_dir / "eval_results.json").read_text())
    assert metrics["eval_queries"] == PAIRS and metrics["eval_passages"] > PAIRS  # positives and hard negatives
    assert json.loads((output_dir / "train_results.json").read_text())["train_pairs"] == 120


def test_held_out_retrieval_is_scored_during_training_and_keeps_the_best_checkpoint(repo_root, tmp_path):
    """--eval_strategy and --eval_on_start (the Trainer had no eval set: "evaluation requires an eval_dataset"): the
    held-out pairs are scored as after training, logged as eval_held_out_*, and --load_best_model_at_end picks by
    the figure the refusal of the default loss names (held_out_mrr)."""
    pairs = tmp_path / "snli.csv"
    write_snli_sample(pairs)
    output_dir = run_dpr_in_process(
        repo_root,
        tmp_path,
        "--eval_size", "16",
        "--eval_on_start", "true",
        "--eval_strategy", "steps", "--eval_steps", "2",
        "--save_strategy", "steps", "--save_steps", "2",
        "--load_best_model_at_end", "true", "--metric_for_best_model", "held_out_mrr",
        data=("--train_file", str(pairs)),
    )  # fmt: skip
    state = json.loads((output_dir / "trainer_state.json").read_text())
    scored = [entry["step"] for entry in state["log_history"] if "eval_held_out_mrr" in entry]
    assert scored == [0, 2, 4] and state["best_metric"] is not None
    after = json.loads((output_dir / "eval_results.json").read_text())
    at_end = next(
        entry for entry in reversed(state["log_history"]) if entry.get("step") == 4 and "eval_held_out_mrr" in entry
    )
    assert 0 <= at_end["eval_held_out_mrr"] <= 1 and "eval_mrr" in after


@pytest.mark.parametrize(
    "flags,message",
    [
        (("--query_column", "title"), "--query_column 'title' is not a column"),
        (("--eval_size", "300"), "leaves nothing to train on"),
        (("--eval_size", "0", "--eval_on_start", "true"), "score retrieval on held-out pairs during training"),
    ],
)
def test_bad_flags_fail_with_a_message_that_names_the_fix(repo_root, tmp_path, capsys, flags, message):
    """A usage mistake (a column the data lacks, nothing left to train on) ends the script with status 2 and one
    line naming it (`run_script`), no traceback."""
    pairs = tmp_path / "snli.csv"
    write_snli_sample(pairs)
    argv = dpr_arguments(repo_root, tmp_path, *flags, data=("--train_file", str(pairs)))
    assert message in usage_error("run_dpr", argv, capsys)
