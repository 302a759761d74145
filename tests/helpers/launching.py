"""Launching the example scripts in processes of their own: one process, 2 gloo processes (accelerate launch), and
DeepSpeed ZeRO on the CPU (the settings every launch here uses; the documentation's "training at scale" page
shows the same commands)."""

from __future__ import annotations

import json
import os
import sys

import torch
from transformers import AutoTokenizer

import contrastive_hf  # noqa: F401  (registers the model type)
from contrastive_hf import ContrastiveForPreTraining
from contrastive_hf.data.augmentations import add_del_token

from conftest import (
    DEMO_TOKENIZER,
    REPO_ROOT,
    free_port,
    run_bounded,
    tiny_bert_config,
)

# `accelerate launch`'s flags for 2 CPU processes: --multi_gpu starts them through torch.distributed.run, and the
# scripts' --use_cpu makes them gloo ranks
TWO_PROCESSES = ("--multi_gpu", "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
                 "--dynamo_backend", "no")  # fmt: skip


def two_processes() -> list[str]:
    """accelerate launch of 2 CPU processes (`TWO_PROCESSES`), on a port of their own."""
    return accelerate_launch(*TWO_PROCESSES, "--main_process_port", free_port())


def run_clear(repo_root, tmp_path, *extra, check=True, launcher=(), env=None, timeout=None):
    """Run examples/run_clear.py (`clear_arguments`): in this process (`in_process.run_script`) unless a ``launcher``
    or an environment of its own is given, else as a command; with a ``timeout`` in seconds, a command still going
    then (a hang) is killed with its processes and fails the test."""
    if not launcher and not env:
        from helpers.in_process import run_script

        result = run_script("run_clear", clear_arguments(repo_root, tmp_path, *extra), cwd=tmp_path, check=check)
        return result, tmp_path / "out"
    command = [
        *(launcher or [sys.executable]),
        str(repo_root / "examples" / "run_clear.py"),
        *clear_arguments(repo_root, tmp_path, *extra),
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", **(env or {})}
    result = run_bounded(command, timeout, env=env, cwd=tmp_path)
    if check:
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result, tmp_path / "out"


# Each 2-process run below is bounded by a timeout: a process left waiting for another in a collective fails the test
# instead of blocking the suite.
TWO_PROCESS_TIMEOUT = 240


NO_STS = ("--stsb_dev_file", "")


DS_CONFIGS = REPO_ROOT / "ds_configs"


MAX_STEPS = 3


# Dropout off: the views (word deletion) and MLM masks come from the seeded collator, so the runs compare exactly.
NO_DROPOUT = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}


# What CPU needs beyond the shipped configs. The run_clear helper passes --use_cpu true, with which accelerate
# ignores DeepSpeed and runs plain DDP, so turn it off; DeepSpeed then runs on its CPU accelerator, and gloo must be
# named: finding no GPU backend, accelerate would otherwise take each process for a run of its own (world size 1).
DEEPSPEED_ON_CPU = ("--use_cpu", "false", "--ddp_backend", "gloo")


CPU_ENV = {"DS_ACCELERATOR": "cpu", "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}


def accelerate_launch(*flags) -> list[str]:
    return [sys.executable, "-m", "accelerate.commands.launch", *map(str, flags)]


def deepspeed_flags(accelerate_yaml: str, deepspeed_json: str) -> tuple:
    """``accelerate launch --config_file ds_configs/<yaml>``'s flags as a GPU user types them, with 2 processes
    instead of the yaml's 8 GPUs; the yaml names its DeepSpeed JSON relative to the repository root and the launches
    run elsewhere, hence the absolute --deepspeed_config_file (the same file)."""
    return (
        "--config_file", DS_CONFIGS / accelerate_yaml,
        "--num_processes", 2,
        "--deepspeed_config_file", DS_CONFIGS / deepspeed_json,
    )  # fmt: skip


def deepspeed_launch(accelerate_yaml: str, deepspeed_json: str, *flags) -> list[str]:
    return accelerate_launch(*deepspeed_flags(accelerate_yaml, deepspeed_json), *flags)


def launch_jobs(launcher: list, jobs: list[dict], folder, timeout: float, env: dict | None = None):
    """``launcher`` (an `accelerate launch` command) running tests/scripts/run_jobs.py on ``jobs`` in ``folder``,
    where each job's log and status go; returns the finished launcher's process."""
    (folder / "jobs.json").write_text(json.dumps(jobs))
    command = [*launcher, REPO_ROOT / "tests" / "scripts" / "run_jobs.py", folder / "jobs.json", folder]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", **CPU_ENV, **(env or {})}
    return run_bounded([str(part) for part in command], timeout, env=env, cwd=folder)


def weights(directory) -> dict[str, torch.Tensor]:
    """Every weight a saved checkpoint holds, under the training model's names (the encoder is saved in its own
    architecture in model.safetensors, the heads beside it)."""
    return ContrastiveForPreTraining.from_pretrained(directory).state_dict()


def assert_same_weights(actual: dict, expected: dict, atol: float) -> None:
    assert actual.keys() == expected.keys()
    for name in expected:
        torch.testing.assert_close(actual[name], expected[name], rtol=0, atol=atol, msg=name)


def save_tiny_model(directory, **config):
    """A tiny ContrastiveForPreTraining (no dropout, ``config`` on top) and its tokenizer with [DEL], saved."""
    tokenizer = AutoTokenizer.from_pretrained(DEMO_TOKENIZER)
    add_del_token(tokenizer)
    torch.manual_seed(0)
    model = ContrastiveForPreTraining.from_config(tiny_bert_config(vocab_size=len(tokenizer), **NO_DROPOUT), **config)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def clear_arguments(repo_root, tmp_path, *extra) -> list[str]:
    """run_clear.py's command line after the script: a tiny BERT and 64 lines of Wikipedia (``extra`` flags
    override)."""
    encoder_config = tmp_path / "encoder.json"
    config = tiny_bert_config().to_dict()
    config["model_type"] = "bert"
    encoder_config.write_text(json.dumps(config))
    corpus = tmp_path / "corpus.txt"
    lines = (repo_root / "examples" / "demo" / "data" / "wiki1m_sample.txt").read_text().splitlines()[:64]
    corpus.write_text("\n".join(lines[:30] + ["", "   "] + lines[30:]) + "\n")  # two empty lines to skip
    return [
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
        "--output_dir", str(tmp_path / "out"),
        *extra,
    ]  # fmt: skip
