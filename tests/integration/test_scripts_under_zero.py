"""Every example script under DeepSpeed ZeRO-2 and ZeRO-3 on 2 processes, as a GPU user launches it
(`accelerate launch --config_file ds_configs/accelerate_zero3.yaml`; here DeepSpeed's CPU accelerator with gloo),
from a saved checkpoint and from a plain encoder or an encoder config: each trains, evaluates on every process, saves
and passes its own reload check.

Under ZeRO-3 run_dpr, run_sg_bert and run_multitask could not start (transformers initialised a model's weights
inside DeepSpeed's ``zero.Init``, on parameters already partitioned: ``IndexError: index 0 is out of bounds``, issue
31), and run_dpr scored retrieval on process 0 alone, whose forward passes wait forever for the other processes'
shards (issue 30). One launch per ZeRO stage runs every script (tests/scripts/run_jobs.py), so that DeepSpeed starts
twice, not 24 times.
"""

from __future__ import annotations

import json
import os
import re
import shlex

import pytest
import torch
from transformers import AutoTokenizer, BertModel

from conftest import (
    DEMO_DATA,
    DEMO_TOKENIZER,
    REPO_ROOT,
    TEST_DATA,
    example_script,
    free_port,
    run_bounded,
    tiny_bert_config,
)
from helpers.builders import write_snli_sample
from helpers.launching import CPU_ENV, DEEPSPEED_ON_CPU, accelerate_launch, save_tiny_model
from helpers.saved_files import assert_holds_none, every_file, local_paths

# its module-scoped launches run once, on one pytest-xdist worker (make test: --dist loadgroup)
pytestmark = pytest.mark.xdist_group("scripts_under_zero")

STAGES = {"zero2": ("accelerate_zero2.yaml", "zero2.json"), "zero3": ("accelerate_zero3.yaml", "zero3.json")}
SCRIPTS = ("run_clear", "run_simcse", "run_declutr", "run_sg_bert", "run_dpr", "run_multitask")
STARTS = ("checkpoint", "scratch")  # a contrastive_hf checkpoint; an encoder config, or a plain pretrained encoder
# Every job shares the launch's DeepSpeed configuration, whose "auto" values the first run fills: the same batch,
# accumulation and clipping for all.
COMMON = (
    "--max_steps", "2", "--logging_steps", "1", "--per_device_train_batch_size", "4", "--report_to", "none",
    "--save_strategy", "no", "--disable_tqdm", "true", *DEEPSPEED_ON_CPU,
)  # fmt: skip


def _starts(folder) -> dict[str, dict[str, list[str]]]:
    """The model flags of each start, per script family."""
    tokenizer = AutoTokenizer.from_pretrained(DEMO_TOKENIZER)
    checkpoint = str(save_tiny_model(folder / "checkpoint"))  # with [DEL] in its tokenizer
    plain = folder / "plain_bert"
    torch.manual_seed(0)
    BertModel(tiny_bert_config(vocab_size=len(tokenizer))).save_pretrained(plain)
    tokenizer.save_pretrained(plain)
    encoder_config = folder / "encoder.json"
    encoder_config.write_text(json.dumps({**tiny_bert_config().to_dict(), "model_type": "bert"}))
    from_config = ["--config_name", str(encoder_config), "--tokenizer_name", str(DEMO_TOKENIZER)]
    return {
        "checkpoint": {"any": ["--model_name_or_path", checkpoint]},
        # SG-BERT and the multitask recipe tune a pretrained encoder: a plain BERT folder, not a config
        "scratch": {"any": from_config, "pretrained": ["--model_name_or_path", str(plain)]},
    }


def _script_flags(folder) -> dict[str, list[str]]:
    wiki = str(DEMO_DATA / "wiki1m_sample.txt")
    pairs = folder / "pairs.csv"
    write_snli_sample(pairs)
    return {
        "run_clear": ["--train_file", wiki, "--max_train_samples", "64", "--max_seq_length", "24",
                      "--stsb_dev_file", str(DEMO_DATA / "sts-dev.csv")],
        "run_simcse": ["--mode", "unsup", "--train_file", wiki, "--max_train_samples", "64",
                       "--max_seq_length", "24"],
        "run_declutr": ["--train_file", str(DEMO_DATA / "enwiki_paragraphs_sample.txt"), "--max_train_samples", "64",
                        "--span_words", "16", "--max_seq_length", "48"],
        "run_sg_bert": ["--train_file", wiki, "--max_train_samples", "64", "--loss", "base",
                        "--projection_hidden_size", "32", "--regularization_weight", "0"],
        "run_dpr": ["--train_file", str(pairs), "--eval_size", "8", "--max_query_length", "32",
                    "--max_passage_length", "32"],
        "run_multitask": ["--sst_dir", str(TEST_DATA / "senteval" / "SST" / "Binary"),
                          "--mrpc_dir", str(TEST_DATA / "senteval" / "MRPC"),
                          "--stsb_dir", str(TEST_DATA / "sts" / "stsbenchmark"),
                          "--max_train_samples", "16", "--max_eval_samples", "8", "--max_seq_length", "32"],
    }  # fmt: skip


def _jobs(folder) -> list[dict]:
    starts, flags = _starts(folder), _script_flags(folder)
    jobs = []
    for script in SCRIPTS:
        for start in STARTS:
            model = starts[start].get("pretrained" if script in ("run_sg_bert", "run_multitask") else "any")
            model = model or starts[start]["any"]
            name = f"{script}-{start}"
            argv = [*model, *flags[script], *COMMON, "--output_dir", str(folder / name)]
            if script == "run_clear" and start == "checkpoint":  # DeepSpeed's checkpoints too, for the path scan
                argv += ["--save_strategy", "steps", "--save_steps", "1"]
            jobs.append({"name": name, "script": f"examples/{script}.py", "argv": argv})
    return jobs


@pytest.fixture(scope="module", params=list(STAGES))
def launch(request, tmp_path_factory):
    """One launch of every job under a ZeRO stage: ``(stage, folder, finished process)``."""
    folder = tmp_path_factory.mktemp(request.param)
    jobs = _jobs(folder)
    (folder / "jobs.json").write_text(json.dumps(jobs))
    accelerate_yaml, deepspeed_json = STAGES[request.param]
    command = accelerate_launch(
        "--config_file", REPO_ROOT / "ds_configs" / accelerate_yaml,
        "--num_processes", 2,
        "--deepspeed_config_file", REPO_ROOT / "ds_configs" / deepspeed_json,
        "--main_process_port", free_port(),
        REPO_ROOT / "tests" / "scripts" / "run_jobs.py", folder / "jobs.json", folder,
    )  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", **CPU_ENV}
    result = run_bounded(command, 900, env=env, cwd=folder)
    return request.param, folder, result


def _log(folder, name: str, rank: int = 0) -> str:
    path = folder / f"{name}.rank{rank}.log"
    return path.read_text() if path.exists() else "(no log)"


@pytest.mark.parametrize("script", SCRIPTS)
@pytest.mark.parametrize("start", STARTS)
def test_every_script_trains_evaluates_and_reloads_under_zero(launch, script, start):
    stage, folder, result = launch
    name = f"{script}-{start}"
    log = _log(folder, name)
    other = _log(folder, name, rank=1)
    assert (folder / name / "trainer_state.json").exists(), (
        f"{name} under {stage} did not finish:\n{log[-4000:]}\n{other[-2000:]}\n{result.stderr[-2000:]}"
    )
    state = json.loads((folder / name / "trainer_state.json").read_text())
    assert state["global_step"] == 2
    if script in ("run_clear", "run_simcse", "run_declutr", "run_sg_bert", "run_multitask"):
        assert "gives the trained embeddings" in log  # the script's own reload check, on process 0
    if script == "run_dpr":  # retrieval scored on every process after training (both print nothing else)
        metrics = json.loads((folder / name / "eval_results.json").read_text())
        assert metrics["eval_queries"] == 8 and 0 < metrics["eval_mrr"] <= 1, metrics
    if script == "run_clear":
        assert "STS-B dev Spearman before training" in log


def test_the_launch_ended_well(launch):
    stage, folder, result = launch
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


def _documented_bf16_command() -> list[str]:
    """The ZeRO-2 command of docs/guides/scale.md that passes --bf16, as words (its line continuations joined)."""
    page = (REPO_ROOT / "docs" / "guides" / "scale.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```bash\n(.*?)^```", page, flags=re.MULTILINE | re.DOTALL)
    (block,) = [block for block in blocks if "accelerate_zero2.yaml" in block and "--bf16" in block]
    return shlex.split(block.replace("\\\n", " "))


def test_the_documented_bf16_command_under_zero2(tmp_path):
    """`accelerate launch --config_file ds_configs/accelerate_zero2.yaml examples/run_clear.py ... --bf16` as the
    training-at-scale guide writes it, with a local tiny model and corpus for the Hub's, DeepSpeed on its CPU
    accelerator as a GPU runs it: it was refused on both processes (``ds bf16.enabled=False vs hf bf16=True``, issue
    31: DeepSpeed's "auto" took the launcher's mixed precision, none)."""
    words = _documented_bf16_command()
    assert words[:3] == [".venv/bin/accelerate", "launch", "--config_file"] and "--bf16" in words
    hub_flags = {"--model_name_or_path": 1, "--dataset_name": 1, "--dataset_config_name": 1, "--save_steps": 1}
    kept, index = [], 2  # after ".venv/bin/accelerate launch"
    while index < len(words):
        if words[index] in hub_flags:
            index += 1 + hub_flags[words[index]]
            continue
        kept.append(words[index])
        index += 1
    script = kept.index("examples/run_clear.py")
    launch_flags, script_flags = kept[:script], kept[script + 1 :]
    checkpoint = save_tiny_model(tmp_path / "tiny")
    command = accelerate_launch(  # from the repository root, as the guide says (its files name ds_configs/...)
        *launch_flags,
        "--num_processes", 2, "--main_process_port", free_port(),
        REPO_ROOT / "examples" / "run_clear.py", *script_flags,
        "--model_name_or_path", checkpoint, "--train_file", DEMO_DATA / "wiki1m_sample.txt",
        "--max_train_samples", "64", "--max_steps", "2", "--per_device_train_batch_size", "4", "--save_strategy", "no",
        "--report_to", "none", *DEEPSPEED_ON_CPU, "--output_dir", tmp_path / "out",
    )  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", **CPU_ENV}
    result = run_bounded([str(part) for part in command], 600, env=env, cwd=REPO_ROOT)
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-4000:]
    assert "Training runs in bf16 autocast: --bf16 true was given" in log
    assert "gives the trained embeddings" in log


def test_no_file_any_run_wrote_holds_a_local_path(launch):
    """Every byte of every output folder (models, cards, trainer states, training arguments, DeepSpeed's own
    checkpoint files) is free of the absolute paths of the run: its folders, the repository, the environment."""
    stage, folder, _ = launch
    outputs = [folder / job["name"] for job in json.loads((folder / "jobs.json").read_text())]
    files = every_file(*outputs)
    assert any("global_step" in name for name in files)  # DeepSpeed's checkpoint was written and is scanned
    assert_holds_none(files, local_paths(folder))


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_script_trains_with_gradient_checkpointing(script, tmp_path):
    """``--gradient_checkpointing true`` (one process, no DeepSpeed): transformers' Trainer enables it on each
    script's model with the options of its version (5.24: ``every_n_layers``, ``offload``, which SG-BERT's model
    refused with a TypeError), and each script trains and saves (tests/recipes/test_sg_bert.py checks which layers
    recompute)."""
    model = _starts(tmp_path)["scratch"]
    model = model["pretrained"] if script in ("run_sg_bert", "run_multitask") else model["any"]
    argv = [
        *model, *_script_flags(tmp_path)[script], "--gradient_checkpointing", "true",
        "--max_steps", "1", "--per_device_train_batch_size", "4", "--report_to", "none", "--save_strategy", "no",
        "--disable_tqdm", "true", "--use_cpu", "true", "--output_dir", str(tmp_path / "out"),
    ]  # fmt: skip
    example_script(script).main(argv)
    assert (tmp_path / "out" / "config.json").is_file()
