"""examples/run_sg_bert.py end to end on the shipped Wikipedia sentences."""

from __future__ import annotations

import json
import math
import sys

import torch
from transformers import AutoTokenizer, BertModel

import contrastive_hf  # noqa: F401  (registers the model type)
from contrastive_hf import ContrastiveModel
from contrastive_hf.evaluation import evaluate_sts, read_stsbenchmark

from conftest import DEMO_DATA, tiny_bert_config
from helpers.in_process import run_script


def test_run_sg_bert_trains_on_the_wikipedia_sentences_and_saves_a_contrastive_model(repo_root, tmp_path):
    tokenizer_dir = repo_root / "examples" / "demo" / "tokenizer"
    encoder_dir = tmp_path / "encoder"
    torch.manual_seed(0)
    BertModel(tiny_bert_config(vocab_size=8192)).save_pretrained(encoder_dir)  # a "pretrained" plain BERT
    command = [
        sys.executable, str(repo_root / "examples" / "run_sg_bert.py"),
        "--model_name_or_path", str(encoder_dir), "--tokenizer_name", str(tokenizer_dir),
        "--train_file", str(WIKI), "--max_train_samples", "64", "--loss", "base", "--projection_hidden_size", "32",
        "--stsb_dev_file", str(STSB_DEV), "--max_steps", "3", "--logging_steps", "1",
        "--report_to", "none", "--save_strategy", "no", "--use_cpu", "true", "--disable_tqdm", "true",
        "--output_dir", str(tmp_path / "out"),
    ]  # fmt: skip
    result = run_script(command[1], command[2:], cwd=tmp_path, check=False)
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-4000:]
    assert "STS-B dev Spearman before training" in log and "after training" in log
    state = json.loads((tmp_path / "out" / "trainer_state.json").read_text())
    assert state["global_step"] == 3
    logged = [entry for entry in state["log_history"] if "loss" in entry]
    assert all(math.isfinite(entry["cl_loss"]) and "regularization_loss" in entry for entry in logged)
    metrics = json.loads((tmp_path / "out" / "eval_results.json").read_text())
    assert {"eval_stsb_spearman_before", "eval_stsb_spearman"} <= set(metrics)
    model = ContrastiveModel.from_pretrained(tmp_path / "out")
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "out")
    scores = evaluate_sts(model, read_stsbenchmark(STSB_DEV), tokenizer=tokenizer)
    assert abs(scores["spearman"] - metrics["eval_stsb_spearman"]) < 1e-6  # the saved model is the one scored


WIKI = DEMO_DATA / "wiki1m_sample.txt"


STSB_DEV = DEMO_DATA / "sts-dev.csv"
