"""examples/run_multitask.py launched: two processes match one process on the whole batch; with a LoRA adapter, no
byte of what it saves holds a local absolute path."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from contrastive_hf import ContrastiveConfig, ContrastiveForPreTraining, ContrastiveModel
from contrastive_hf.models.modeling_multitask import MultitaskModel

from conftest import DEMO_TOKENIZER, REPO_ROOT, TEST_DATA, tiny_bert_config
from helpers.builders import SNLI_TRIPLES
from helpers.in_process import run_script
from helpers.launching import two_processes
from helpers.saved_files import assert_holds_none, every_file, local_paths

# its module-scoped launches run once, on one pytest-xdist worker (make test: --dist loadgroup)
pytestmark = pytest.mark.xdist_group("run_multitask")

# ---- examples/run_multitask.py on the real data ----


@pytest.fixture(scope="module")
def pretrained_checkpoint(tmp_path_factory):
    """A contrastive_hf checkpoint without dropout (as run_clear.py writes one): CL, then multitask."""
    from transformers import AutoTokenizer

    folder = tmp_path_factory.mktemp("clear")
    tokenizer = AutoTokenizer.from_pretrained(DEMO_TOKENIZER)
    torch.manual_seed(0)
    encoder = tiny_bert_config(vocab_size=len(tokenizer), hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    ContrastiveForPreTraining(ContrastiveConfig(encoder=encoder, pooler_type="mean")).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def one_process_run(pretrained_checkpoint, tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("multitask")
    extra = ("--per_device_train_batch_size", "8", "--evaluate_test", "true")
    return run_multitask(tmp_path, pretrained_checkpoint, "one", *extra)


def test_run_multitask_trains_evaluates_and_saves_on_the_real_data(one_process_run):
    result, output_dir = one_process_run
    log = result.stdout + result.stderr
    assert "same head outputs" in log and "gives the trained embeddings" in log  # the script's reload checks
    assert "After training:\n  sst_loss" in result.stdout and "SentenceTransformer(" in result.stdout  # shared end
    metrics = json.loads((output_dir / "eval_results.json").read_text())
    keys = ("eval_sst_accuracy", "eval_mrpc_accuracy", "eval_mrpc_f1", "eval_stsb_spearman", "eval_pairs_accuracy")
    for key in (*keys, "eval_average"):
        assert key in metrics and f"{key}_before" not in metrics  # no --eval_on_start: no figures before training
    assert 0 <= metrics["eval_sst_accuracy"] <= 100 and -100 <= metrics["eval_stsb_spearman"] <= 100
    test = json.loads((output_dir / "test_results.json").read_text())
    assert {"test_sst_accuracy", "test_mrpc_f1", "test_stsb_spearman"} <= set(test)
    history = json.loads((output_dir / "trainer_state.json").read_text())["log_history"]
    assert any("pcgrad_conflict_fraction" in entry and "loss_mrpc" in entry for entry in history)
    assert isinstance(MultitaskModel.from_pretrained(output_dir), MultitaskModel)
    assert isinstance(ContrastiveModel.from_pretrained(output_dir / "sentence_encoder"), ContrastiveModel)


def run_multitask(tmp_path, model_dir, output_name, *extra, launcher=()):
    output_dir = tmp_path / output_name
    command = [
        *(launcher or [sys.executable]),
        str(REPO_ROOT / "examples" / "run_multitask.py"),
        "--model_name_or_path", str(model_dir),
        "--sst_dir", str(TEST_DATA / "senteval" / "SST" / "Binary"),
        "--mrpc_dir", str(TEST_DATA / "senteval" / "MRPC"),
        "--stsb_dir", str(TEST_DATA / "sts" / "stsbenchmark"),
        "--pairs_file", str(SNLI_TRIPLES), "--contrastive_loss", "info_nce",
        "--max_train_samples", "32", "--max_eval_samples", "24", "--max_seq_length", "32",
        "--max_steps", "3", "--logging_steps", "1",
        "--task_schedule", "super_batch", "--pcgrad", "true",
        "--mrpc_head", "uv_absdiff_product", "--stsb_head", "uv_absdiff", "--classifier_dropout", "0",
        "--optim", "sgd", "--learning_rate", "0.5", "--lr_scheduler_type", "constant",
        "--report_to", "none", "--save_strategy", "no", "--use_cpu", "true", "--disable_tqdm", "true",
        "--output_dir", str(output_dir),
        *extra,
    ]  # fmt: skip
    if launcher:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
        result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path)
    else:  # in this process: no second interpreter start-up
        result = run_script(command[1], command[2:], cwd=tmp_path, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result, output_dir


def test_run_multitask_with_two_processes_matches_one_process_on_the_whole_batch(
    pretrained_checkpoint, one_process_run, tmp_path
):
    """DDP + PCGrad: per-task gradients averaged over the 2 processes before the projection = 1 process, batch 8."""
    extra = ("--per_device_train_batch_size", "4")
    _, two_dir = run_multitask(tmp_path, pretrained_checkpoint, "two", *extra, launcher=two_processes())
    from safetensors.torch import load_file

    one = load_file(one_process_run[1] / "model.safetensors")
    two = load_file(two_dir / "model.safetensors")
    start = load_file(pretrained_checkpoint / "model.safetensors")
    assert one.keys() == two.keys()
    for name in one:
        torch.testing.assert_close(two[name], one[name], atol=1e-5, rtol=1e-4, msg=name)
    # the start checkpoint, MLM-trained, is saved as BertForMaskedLM: the encoder under "bert.", beside its head
    prefix = "contrastive.encoder."
    moved = [
        name
        for name in one
        if name.startswith(prefix) and not torch.allclose(one[name], start["bert." + name[len(prefix) :]])
    ]
    assert moved  # the encoder did train


def test_run_multitask_with_lora_saves_no_local_path_in_any_file(pretrained_checkpoint, tmp_path):
    """The adapter and heads in output_dir (peft writes a README.md beside each, naming its base), every checkpoint,
    the merged model: none names the base's folder (outside the working folder here), the output folder or the
    working folder."""
    checkpoints = ("--lora_r", "4", "--save_strategy", "steps", "--save_steps", "2")
    _, output_dir = run_multitask(
        tmp_path, pretrained_checkpoint, "lora", "--per_device_train_batch_size", "8", *checkpoints
    )
    assert (output_dir / "adapter_config.json").exists()
    assert {path.name for path in output_dir.glob("checkpoint-*")} == {"checkpoint-2", "checkpoint-3"}
    saved = every_file(output_dir, tmp_path / "lora-merged")
    assert_holds_none(saved, local_paths(pretrained_checkpoint, tmp_path))
