"""End to end: examples/run_clear.py from raw text to a saved, evaluated, loadable checkpoint."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from transformers import AutoTokenizer

import contrastive_hf  # noqa: F401  (registers the model type)

from conftest import tiny_bert_config


def run_clear(repo_root, tmp_path, *extra, check=True, launcher=(), env=None):
    encoder_config = tmp_path / "encoder.json"
    config = tiny_bert_config().to_dict()
    config["model_type"] = "bert"
    encoder_config.write_text(json.dumps(config))
    corpus = tmp_path / "corpus.txt"
    lines = (repo_root / "examples" / "demo" / "data" / "wiki1m_sample.txt").read_text().splitlines()[:64]
    corpus.write_text("\n".join(lines[:30] + ["", "   "] + lines[30:]) + "\n")  # two empty lines to skip
    output_dir = tmp_path / "out"
    command = [
        *(launcher or [sys.executable]),
        str(repo_root / "examples" / "run_clear.py"),
        "--config_name", str(encoder_config),
        "--tokenizer_name", str(repo_root / "examples" / "demo" / "tokenizer"),
        "--train_file", str(corpus),
        "--stsb_dev_file", str(repo_root / "examples" / "demo" / "data" / "sts-dev.csv"),
        "--max_steps", "3",
        "--logging_steps", "1",
        "--per_device_train_batch_size", "16",
        "--max_seq_length", "24",
        "--report_to", "none",
        "--save_strategy", "no",
        "--use_cpu", "true",
        "--output_dir", str(output_dir),
        *extra,
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", **(env or {})}
    result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path)
    if check:
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result, output_dir


def test_run_clear_trains_evaluates_saves_and_loads(repo_root, tmp_path):
    result, output_dir = run_clear(repo_root, tmp_path)
    log = result.stdout + result.stderr
    assert "Skipped 2 empty line(s)" in log
    assert "AutoModel.from_pretrained(" in log  # the printed loading lines

    metrics = json.loads((output_dir / "eval_results.json").read_text())
    assert -100 <= metrics["eval_stsb_spearman"] <= 100
    history = json.loads((output_dir / "trainer_state.json").read_text())["log_history"]
    assert any("mlm_loss" in entry and "cl_loss" in entry for entry in history)

    tokenizer = AutoTokenizer.from_pretrained(output_dir)
    assert "[DEL]" in tokenizer.get_vocab()
    model = contrastive_hf.ContrastiveModel.from_pretrained(output_dir).eval()
    batch = tokenizer(["a man is playing a guitar .", "the cat sat"], padding=True, return_tensors="pt")
    with torch.no_grad():
        pooler_output = model(**batch).pooler_output
    torch.testing.assert_close(
        pooler_output,
        model.encode(["a man is playing a guitar .", "the cat sat"], tokenizer=tokenizer, convert_to_tensor=True),
    )
    assert "SentenceTransformer reload of" in log  # the script compared the embeddings through both loaders

    card = (output_dir / "README.md").read_text()
    assert "CLEAR" in card and "del_word" in card and "STS Benchmark" in card
    assert str(tmp_path) not in card  # no local paths in the card


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--pooler_type", "bogus"], "Unknown pooler_type 'bogus'"),
        (["--temperature", "0"], "temperature must be > 0"),
        (["--augmentations", "shuffle"], "Unknown augmentation 'shuffle'"),
    ],
)
def test_bad_flags_fail_with_a_message_that_names_the_fix(repo_root, tmp_path, flags, message):
    result, _ = run_clear(repo_root, tmp_path, *flags, check=False)
    assert result.returncode != 0
    assert message in result.stderr


def test_empty_corpus_is_a_clear_error(repo_root, tmp_path):
    corpus = tmp_path / "empty.txt"
    corpus.write_text("\n  \n\n")
    result, _ = run_clear(repo_root, tmp_path, "--train_file", str(corpus), check=False)
    assert result.returncode != 0
    assert "The corpus has no text" in result.stderr


def test_run_clear_under_accelerate_launch_with_two_processes(repo_root, tmp_path):
    # accelerate starts CPU processes through torch.distributed.run with --multi_gpu; --use_cpu makes them gloo ranks
    launcher = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2"]
    launcher += ["--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"]
    result, output_dir = run_clear(repo_root, tmp_path, launcher=launcher)
    state = json.loads((output_dir / "trainer_state.json").read_text())
    assert state["global_step"] == 3
    assert any("cl_loss" in entry for entry in state["log_history"])
    card = (output_dir / "README.md").read_text()
    assert "batch size 32" in card  # 16 per device x 2 processes
    assert "gathered across the 2 processes" in card
    assert isinstance(contrastive_hf.ContrastiveModel.from_pretrained(output_dir), contrastive_hf.ContrastiveModel)


def test_run_clear_trains_a_lora_adapter_and_exports_a_merged_checkpoint(repo_root, tmp_path):
    from transformers import BertForMaskedLM

    base_dir = tmp_path / "base"
    BertForMaskedLM(tiny_bert_config()).save_pretrained(base_dir)
    AutoTokenizer.from_pretrained(repo_root / "examples" / "demo" / "tokenizer").save_pretrained(base_dir)
    result, output_dir = run_clear(
        repo_root, tmp_path, "--model_name_or_path", str(base_dir), "--lora_r", "4", "--pooler_type", "mean"
    )
    assert (output_dir / "adapter_config.json").exists() and (output_dir / "adapter_model.safetensors").exists()
    assert not (output_dir / "model.safetensors").exists()
    card = (output_dir / "README.md").read_text()
    assert "LORA adapter (r=4, alpha=8) on query, value" in card and "PeftModel.from_pretrained" in card
    merged = tmp_path / "out-merged"
    assert isinstance(contrastive_hf.ContrastiveModel.from_pretrained(merged), contrastive_hf.ContrastiveModel)
    assert "SentenceTransformer reload of" in result.stdout + result.stderr  # the script compared the embeddings
