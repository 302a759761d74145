"""The DeepSpeed ZeRO runs of the suite, one `accelerate launch` of 2 processes per stage (DeepSpeed on its CPU
accelerator with gloo, as a GPU runs it), each running every scenario that needs that stage one after the other
(tests/scripts/run_jobs.py): DeepSpeed's and torch's start-up is paid twice, not once per scenario.

Each job's `TrainingArguments` builds its own DeepSpeed plugin from the configuration file the environment names
(transformers resets Accelerate's state when the arguments are built), so the jobs of a launch may differ in batch
size, precision or ZeRO settings: a job names its own DeepSpeed file in ``env`` when it needs another than the
launch's. The scenarios, by the test module that checks them:

- tests/integration/test_scripts_under_zero.py: every example script, from a checkpoint and from scratch;
- tests/integration/test_deepspeed.py: CLEAR from one saved checkpoint under ZeRO-2 and ZeRO-3 (compared with DDP),
  ZeRO-3 with a checkpoint every 2 steps (resumed there on "two machines"), a LoRA adapter merged under ZeRO-3, and
  a decoder (a tiny Qwen2 with a Qwen2 tokenizer) instruction-tuned with LoRA in bf16 with E5's settings
  (``DECODER_JOB``);
- tests/integration/test_zero_checkpoints.py: checkpoints of every head kept at inference under ZeRO-1, 2 and 3, in
  bf16 and float32, and a ZeRO-3 configuration that cannot save whole, refused before training (last: it stops).

`ZeroLaunches.run(stage)` launches a stage once per test session and returns its `ZeroLaunch`: the folder holding
each job's output (``<folder>/<job>/``) and logs (``<folder>/<job>.rank<R>.log``), and the launch's own result.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoTokenizer, BertModel

from conftest import DEMO_DATA, DEMO_TOKENIZER, REPO_ROOT, TEST_DATA, free_port, run_bounded, tiny_bert_config
from helpers.builders import write_snli_sample
from helpers.decoders import save_tiny_qwen2
from helpers.launching import (
    CPU_ENV,
    DEEPSPEED_ON_CPU,
    DS_CONFIGS,
    MAX_STEPS,
    accelerate_launch,
    clear_arguments,
    save_tiny_model,
)

STAGES = {"zero2": ("accelerate_zero2.yaml", "zero2.json"), "zero3": ("accelerate_zero3.yaml", "zero3.json")}
LAUNCH_TIMEOUT = 1800  # seconds for all the jobs of one launch

# --- every example script, from a checkpoint and from scratch (test_scripts_under_zero.py) ---------------------------
SCRIPTS = ("run_clear", "run_simcse", "run_declutr", "run_sg_bert", "run_dpr", "run_multitask")
STARTS = ("checkpoint", "scratch")  # a contrastive_hf checkpoint; an encoder config, or a plain pretrained encoder
SCRIPT_COMMON = (
    "--max_steps", "2", "--logging_steps", "1", "--per_device_train_batch_size", "4", "--report_to", "none",
    "--save_strategy", "no", "--disable_tqdm", "true", *DEEPSPEED_ON_CPU,
)  # fmt: skip

# --- CLEAR from one saved checkpoint (test_deepspeed.py) -------------------------------------------------------------
# A learning rate large enough that 3 Adam steps move every weight by ~2e-3, far above the comparison tolerance.
TRAINING = ("--pooler_type", "mean", "--learning_rate", "1e-3", "--max_steps", str(MAX_STEPS))
NO_STS_EVAL = ("--stsb_dev_file", "")  # the final STS-B evaluation runs once, in the ZeRO-3 run

# --- checkpoints of every head (test_zero_checkpoints.py) ------------------------------------------------------------
CHECKPOINT_BATCH = 8  # per process
# name: (stage of the launch, DeepSpeed config, model flags, the Dense modules sentence-transformers gets)
CHECKPOINT_RUNS = {
    # the encoder's pooler layer (2_Dense, tanh), a 2-layer MLP kept at inference (3_Dense, 4_Dense), the MLM head and
    # the pre-batch queue (InfoNCE), in bf16
    "zero3_bf16_cls_mlp_mlm_queue": (
        "zero3", "zero3.json",
        ("--pooler_type", "cls", "--projection_type", "mlp", "--projection_at_inference", "true",
         "--contrastive_loss", "info_nce", "--prebatch_size", "1", "--bf16", "true"),
        3,
    ),
    "zero1_bf16_mean_linear": (
        "zero2", "zero1",  # zero2.json at stage 1 (`_deepspeed_file`)
        ("--pooler_type", "mean", "--projection_type", "linear", "--projection_at_inference", "true",
         "--bf16", "true"),
        1,
    ),
    # the [CLS] state as it is (no pooler layer in the encoder), no projection: Pooling only
    "zero3_cls_before_pooler_no_projection": (
        "zero3", "zero3.json",
        ("--pooler_type", "cls_before_pooler", "--projection_type", "none"),
        0,
    ),
    "zero2_bf16_cls_mlp_mlm_queue": (
        "zero2", "zero2.json",
        ("--pooler_type", "cls", "--projection_type", "mlp", "--projection_at_inference", "true",
         "--contrastive_loss", "info_nce", "--prebatch_size", "1", "--bf16", "true"),
        3,
    ),
}  # fmt: skip
# ZeRO-3 without stage3_gather_16bit_weights_on_model_save: refused before training, a usage error (exit status 2 on
# each process)
NOT_GATHERED = "zero3_not_gathered"
# A decoder instruction-tuned as docs/recipes/e5-instruct.md says, under ZeRO-3 in bf16
DECODER_JOB = "zero3_decoder_e5"
# LLM2Vec's masked next-token prediction (docs/recipes/llm2vec.md) on a decoder's causal-LM checkpoint, the same way
MNTP_JOB = "zero3_decoder_llm2vec"


@dataclass
class ZeroLaunch:
    stage: str
    folder: Path
    result: object  # the launch's CompletedProcess

    def output(self, job: str) -> Path:
        """Where ``job`` saved its model (``--output_dir``)."""
        return self.folder / job / "out"

    def log(self, job: str, rank: int = 0) -> str:
        path = self.folder / f"{job}.rank{rank}.log"
        return path.read_text() if path.exists() else "(no log)"

    def status(self, job: str) -> int | None:
        path = self.folder / "statuses.rank0.json"
        return json.loads(path.read_text()).get(job) if path.exists() else None

    def failure(self, job: str) -> str:
        """What to show when ``job`` did not end as expected: its logs and the launcher's output."""
        return (
            f"{job} under {self.stage} (exit status {self.status(job)}):\n{self.log(job)[-4000:]}\n"
            f"--- process 1:\n{self.log(job, rank=1)[-2000:]}\n--- launcher:\n{self.result.stderr[-2000:]}"
        )


class ZeroLaunches:
    """Each ZeRO stage's launch, run on first request and kept for the session."""

    def __init__(self, tmp_path_factory):
        self.tmp_path_factory = tmp_path_factory
        self.launches: dict[str, ZeroLaunch] = {}

    def run(self, stage: str) -> ZeroLaunch:
        if stage not in self.launches:
            folder = self.tmp_path_factory.mktemp(stage)
            self.launches[stage] = _launch(stage, folder, _jobs(stage, folder))
        return self.launches[stage]


def _launch(stage: str, folder: Path, jobs: list[dict]) -> ZeroLaunch:
    (folder / "jobs.json").write_text(json.dumps(jobs))
    accelerate_yaml, deepspeed_json = STAGES[stage]
    command = accelerate_launch(
        "--config_file", REPO_ROOT / "ds_configs" / accelerate_yaml,
        "--num_processes", 2,
        "--deepspeed_config_file", REPO_ROOT / "ds_configs" / deepspeed_json,
        "--main_process_port", free_port(),
        REPO_ROOT / "tests" / "scripts" / "run_jobs.py", folder / "jobs.json", folder,
    )  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", **CPU_ENV}
    return ZeroLaunch(stage, folder, run_bounded([str(part) for part in command], LAUNCH_TIMEOUT, env=env, cwd=folder))


def _jobs(stage: str, folder: Path) -> list[dict]:
    """Every job of ``stage``'s launch, the one expected to stop last."""
    jobs = [*_script_jobs(folder), *_deepspeed_jobs(stage, folder), *_checkpoint_jobs(stage, folder)]
    if stage == "zero3":
        jobs.append(_not_gathered_job(folder))
    return jobs


def _job(name: str, script: str, argv: list, env: dict | None = None, status: int = 0) -> dict:
    return {"name": name, "script": script, "argv": [str(part) for part in argv], "env": env or {}, "status": status}


def _run_clear_job(folder: Path, name: str, *extra, env=None, status=0) -> dict:
    """run_clear.py on `clear_arguments`' tiny BERT and corpus (in ``folder/name``), into ``folder/name/out``."""
    (folder / name).mkdir()
    return _job(name, "examples/run_clear.py", [*clear_arguments(REPO_ROOT, folder / name, *extra), *DEEPSPEED_ON_CPU],
                env, status)  # fmt: skip


def _deepspeed_file(name: str, folder: Path) -> Path:
    """A shipped DeepSpeed config by file name, or ``"zero1"``: zero2.json at stage 1 (optimizer states sharded)."""
    if name != "zero1":
        return DS_CONFIGS / name
    config = json.loads((DS_CONFIGS / "zero2.json").read_text())
    config["zero_optimization"]["stage"] = 1
    path = folder / "zero1.json"
    path.write_text(json.dumps(config))
    return path


def script_starts(folder: Path) -> dict[str, dict[str, list[str]]]:
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


def script_flags(folder: Path) -> dict[str, list[str]]:
    """Each example script's data flags on the shipped samples."""
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


def script_start_flags(starts: dict, script: str, start: str) -> list[str]:
    model = starts[start].get("pretrained" if script in ("run_sg_bert", "run_multitask") else "any")
    return model or starts[start]["any"]


def _script_jobs(folder: Path) -> list[dict]:
    """Every example script from each start, named ``<script>-<start>``, into ``folder/<name>/out``."""
    starts, flags = script_starts(folder), script_flags(folder)
    jobs = []
    for script in SCRIPTS:
        for start in STARTS:
            name = f"{script}-{start}"
            argv = [*script_start_flags(starts, script, start), *flags[script], *SCRIPT_COMMON,
                    "--output_dir", folder / name / "out"]  # fmt: skip
            if script == "run_clear" and start == "checkpoint":  # DeepSpeed's checkpoints too, for the path scan
                argv += ["--save_strategy", "steps", "--save_steps", "1"]
            jobs.append(_job(name, f"examples/{script}.py", argv))
    return jobs


def _deepspeed_jobs(stage: str, folder: Path) -> list[dict]:
    """CLEAR from the checkpoint test_deepspeed.py's DDP run starts from (the same `save_tiny_model`, seed 0)."""
    initial = save_tiny_model(folder / "initial", pooler_type="mean")
    start = ["--model_name_or_path", initial, "--tokenizer_name", initial, *TRAINING]
    if stage == "zero2":
        return [_run_clear_job(folder, "like_ddp", *start, *NO_STS_EVAL)]
    base = folder / "lora_base"
    from transformers import BertForMaskedLM

    decoder = save_tiny_qwen2(folder / "qwen2")
    (folder / DECODER_JOB).mkdir()
    e5 = _job(DECODER_JOB, "examples/run_simcse.py", [
        REPO_ROOT / "examples" / "llm" / "e5_instruct.json", "--model_name_or_path", decoder,
        "--train_file", DEMO_DATA / "nli_sample.csv", "--max_train_samples", "32", "--per_device_train_batch_size",
        "8", "--max_steps", "2", "--max_seq_length", "48", "--warmup_steps", "0", "--bf16", "true",
        "--output_dir", folder / DECODER_JOB / "out", *DEEPSPEED_ON_CPU,
    ])  # fmt: skip
    (folder / MNTP_JOB).mkdir()
    mntp = _job(MNTP_JOB, "examples/run_llm2vec.py", [
        "--model_name_or_path", save_tiny_qwen2(folder / "qwen2_lm", causal_lm=True),
        "--train_file", DEMO_DATA / "wiki1m_sample.txt", "--max_train_samples", "32", "--per_device_train_batch_size",
        "8", "--max_steps", "2", "--max_seq_length", "32", "--bf16", "true", "--output_dir", folder / MNTP_JOB / "out",
        *DEEPSPEED_ON_CPU,
    ])  # fmt: skip

    BertForMaskedLM(tiny_bert_config()).save_pretrained(base)
    AutoTokenizer.from_pretrained(DEMO_TOKENIZER).save_pretrained(base)
    return [
        # a checkpoint every 2 steps (at steps 2 and 3), the final STS-B evaluation
        _run_clear_job(folder, "zero3_run", *start, "--save_strategy", "steps", "--save_steps", "2"),
        _run_clear_job(folder, "lora", "--model_name_or_path", base, "--lora_r", "4", "--pooler_type", "mean"),
        e5,
        mntp,
    ]


def _checkpoint_jobs(stage: str, folder: Path) -> list[dict]:
    jobs = []
    for name, (run_stage, deepspeed_json, model_flags, _) in CHECKPOINT_RUNS.items():
        if run_stage != stage:
            continue
        env = {"ACCELERATE_DEEPSPEED_CONFIG_FILE": str(_deepspeed_file(deepspeed_json, folder))}
        jobs.append(_run_clear_job(
            folder, name, *model_flags, "--per_device_train_batch_size", CHECKPOINT_BATCH, "--stsb_dev_file", "",
            "--save_strategy", "steps",
            "--save_steps", MAX_STEPS,  # DeepSpeed's own checkpoint of the last step: the reference
            env=env,
        ))  # fmt: skip
    return jobs


def _not_gathered_job(folder: Path) -> dict:
    config = json.loads((DS_CONFIGS / "zero3.json").read_text())
    config["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] = False
    path = folder / "zero3_not_gathered.json"
    path.write_text(json.dumps(config))
    env = {"ACCELERATE_DEEPSPEED_CONFIG_FILE": str(path)}
    return _run_clear_job(folder, NOT_GATHERED, "--stsb_dev_file", "", env=env, status=2)
