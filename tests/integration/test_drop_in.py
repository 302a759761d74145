"""ContrastiveTrainer dropped into an existing HF script: tests/scripts/run_mlm_contrastive.py, a condensed
transformers run_mlm.py whose only changes are the model class, the collator and the Trainer/TrainingArguments."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import torch
from transformers import AutoTokenizer

import contrastive_hf

from conftest import REPO_ROOT, tiny_bert_config

SCRIPT = REPO_ROOT / "tests" / "scripts" / "run_mlm_contrastive.py"
SENTENCES = REPO_ROOT / "examples" / "demo" / "data" / "wiki1m_sample.txt"


def run_mlm(tmp_path, *extra: str):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**tiny_bert_config().to_dict(), "model_type": "bert"}))
    lines = SENTENCES.read_text(encoding="utf-8").splitlines()
    train_file, validation_file = tmp_path / "train.txt", tmp_path / "validation.txt"
    train_file.write_text("\n".join(lines[:256]) + "\n", encoding="utf-8")
    validation_file.write_text("\n".join(lines[256:288]) + "\n", encoding="utf-8")
    output_dir = tmp_path / "out"
    command = [
        sys.executable, str(SCRIPT),
        "--config_name", str(config),
        "--tokenizer_name", str(REPO_ROOT / "examples" / "demo" / "tokenizer"),
        "--train_file", str(train_file),
        "--validation_file", str(validation_file),
        "--max_seq_length", "32",
        "--do_train", "--do_eval",
        "--per_device_train_batch_size", "16",
        "--report_to", "none",
        "--save_strategy", "no",
        "--use_cpu", "true",
        "--output_dir", str(output_dir),
        *extra,
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return output_dir


def test_run_mlm_with_contrastive_trainer_trains_mlm_and_cl_and_saves_a_loadable_model(tmp_path):
    output_dir = run_mlm(
        tmp_path, "--line_by_line", "True", "--max_steps", "40", "--learning_rate", "1e-3", "--logging_steps", "5"
    )
    history = json.loads((output_dir / "trainer_state.json").read_text())["log_history"]
    logs = [entry for entry in history if "loss" in entry]
    assert len(logs) == 8
    assert all("mlm_loss" in entry and "cl_loss" in entry for entry in logs)  # both parts of the objective
    for name in ("loss", "mlm_loss"):
        first, last = [entry[name] for entry in logs[:2]], [entry[name] for entry in logs[-2:]]
        assert sum(last) < sum(first) - 0.2, (name, first, last)
    eval_loss = json.loads((output_dir / "eval_results.json").read_text())["eval_loss"]
    assert math.isfinite(eval_loss) and eval_loss > 0

    tokenizer = AutoTokenizer.from_pretrained(output_dir)
    assert "[DEL]" in tokenizer.get_vocab()  # the drop-in's one extra step, saved with the model
    pretraining = contrastive_hf.ContrastiveForPreTraining.from_pretrained(output_dir)
    assert pretraining.config.encoder.vocab_size == len(tokenizer)
    model = contrastive_hf.ContrastiveModel.from_pretrained(output_dir).eval()
    sentences = ["a man is playing a guitar .", "the cat sat"]
    embeddings = model.encode(sentences, tokenizer=tokenizer, convert_to_tensor=True)
    torch.testing.assert_close(
        embeddings, pretraining.contrastive.encode(sentences, tokenizer=tokenizer, convert_to_tensor=True)
    )
    assert embeddings.shape == (2, 32) and torch.isfinite(embeddings).all()


def test_run_mlms_packed_blocks_work_with_the_contrastive_collator(tmp_path):
    # run_mlm.py's default: texts concatenated and cut into max_seq_length blocks (group_texts)
    output_dir = run_mlm(tmp_path, "--line_by_line", "False", "--max_steps", "2", "--logging_steps", "1")
    history = json.loads((output_dir / "trainer_state.json").read_text())["log_history"]
    assert all(math.isfinite(entry["cl_loss"]) and math.isfinite(entry["mlm_loss"]) for entry in history[:2])
    assert json.loads((output_dir / "train_results.json").read_text())["train_samples"] > 0
