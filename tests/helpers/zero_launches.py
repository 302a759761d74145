"""The suite's 2-process engine runs, DDP and DeepSpeed ZeRO-1/2/3 (DeepSpeed on its CPU accelerator with gloo, as a
GPU runs it), in one `accelerate launch` of 2 processes (tests/scripts/run_jobs.py): every scenario that needs one
of these engines runs there, one after the other, so that torch, transformers and DeepSpeed start once.

Each job runs under the environment `accelerate launch` gives the processes of its engine's command
(`ENGINE_FLAGS`; computed by accelerate's own code, `accelerate_environment`), and each job's
`TrainingArguments` builds Accelerate's state (and its DeepSpeed plugin) from it: the launch itself is
ZeRO-2's, a ZeRO-3 job gets what `--config_file ds_configs/accelerate_zero3.yaml` sets (its DeepSpeed file, ZeRO-3's
``zero.Init``), a DDP job what ``--multi_gpu`` sets (no DeepSpeed). A job names its own DeepSpeed file in ``env``
when it needs another than its engine's. The scenarios, by the test module that checks them:

- tests/integration/test_scripts_under_zero.py: every example script under ZeRO-2 and ZeRO-3, from a checkpoint and
  from scratch, and the training-at-scale guide's bf16 command under ZeRO-2;
- tests/integration/test_deepspeed.py: CLEAR from one saved checkpoint under DDP, ZeRO-2 and ZeRO-3 (compared),
  ZeRO-3 with a checkpoint every 2 steps (resumed there on "two machines": launches of their own), a LoRA adapter
  merged under ZeRO-3, a decoder (a tiny Qwen2 with a Qwen2 tokenizer) instruction-tuned with LoRA in bf16 with E5's
  settings (``DECODER_JOB``) and LLM2Vec's MNTP (``MNTP_JOB``), and GradCache under DDP and ZeRO-1, 2 and 3
  (tests/scripts/train_engines.py, ``ENGINE_RUNS``);
- tests/integration/test_grad_cache_uneven_processes.py: GradCache on uneven last batches under the same engines
  (``UNEVEN_RUNS``);
- tests/integration/test_zero_checkpoints.py: checkpoints of every head kept at inference under ZeRO-1, 2 and 3, in
  bf16 and float32, and a ZeRO-3 configuration that cannot save whole, refused before training (last: it stops).

`ZeroLaunches.run(engine)` launches on the first request of the test session and returns the engine's `ZeroLaunch`:
the folder holding its jobs' inputs and outputs (``<folder>/<job>/``) and logs (``<folder>/<job>.rank<R>.log``), and
the launch's own result.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoTokenizer, BertModel

from conftest import DEMO_DATA, DEMO_TOKENIZER, REPO_ROOT, TEST_DATA, free_port, tiny_bert_config
from helpers.builders import write_snli_sample
from helpers.decoders import save_tiny_qwen2
from helpers.launching import (
    DEEPSPEED_ON_CPU,
    DS_CONFIGS,
    MAX_STEPS,
    TWO_PROCESSES,
    accelerate_launch,
    clear_arguments,
    deepspeed_flags,
    launch_jobs,
    save_tiny_model,
)

# The `accelerate launch` flags of each engine's command on 2 processes
ENGINE_FLAGS = {
    "ddp": TWO_PROCESSES,
    "zero2": deepspeed_flags("accelerate_zero2.yaml", "zero2.json"),
    "zero3": deepspeed_flags("accelerate_zero3.yaml", "zero3.json"),
}
STAGES = ("zero2", "zero3")
LAUNCHED_AS = "zero2"  # the launch's own command; every other engine's jobs get their command's environment
LAUNCH_TIMEOUT = 900  # seconds for all the jobs of the launch (160 to 190 s in the suite on 2 cores): a hang fails

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
# docs/guides/scale.md's bf16 command under ZeRO-2 (test_scripts_under_zero.py)
DOCUMENTED_JOB = "documented_bf16"

# --- GradCache under DDP and ZeRO-1, 2 and 3 (test_deepspeed.py), every part of the objective -----------------------
# MLM (the checkpoint's mlm_weight 1), negatives gathered from both processes, the pre-batch queue (InfoNCE), and 2
# accumulated micro-batches per step, so that both micro-batch kinds are covered (the first accumulates only; the
# second's last chunk is DeepSpeed's boundary). Each process's micro-batch of 8 sentences is encoded in chunks of 3,
# 3 and 2.
GRAD_CACHE_JOB = "grad_cache_engines"
GRAD_CACHE_STEP = {
    "per_device_train_batch_size": 8,
    "gradient_accumulation_steps": 2,
    "max_steps": MAX_STEPS,
    "learning_rate": 1e-3,
    "prebatch_size": 1,
}
ENGINE_RUNS = {
    "ddp_unchunked": GRAD_CACHE_STEP,
    "ddp": {**GRAD_CACHE_STEP, "grad_cache_chunk_size": 3},
    "zero1": {**GRAD_CACHE_STEP, "grad_cache_chunk_size": 3, "deepspeed": str(DS_CONFIGS / "zero2.json"),
              "zero_stage": 1},
    "zero2": {**GRAD_CACHE_STEP, "grad_cache_chunk_size": 3, "deepspeed": str(DS_CONFIGS / "zero2.json")},
    "zero3": {**GRAD_CACHE_STEP, "grad_cache_chunk_size": 3, "deepspeed": str(DS_CONFIGS / "zero3.json")},
}  # fmt: skip

# --- GradCache on uneven per-process batches (test_grad_cache_uneven_processes.py) ----------------------------------
UNEVEN_JOB = "grad_cache_uneven"
UNEVEN_SENTENCES = 17  # in batches of 5 per process: step 2 is 5 + 2 sentences
UNEVEN_LEARNING_RATE = 0.01
UNEVEN = {
    "per_device_train_batch_size": 5,
    "num_train_epochs": 1,
    "accelerator_config": {"even_batches": False},
    "optim": "sgd",
    "learning_rate": UNEVEN_LEARNING_RATE,
    "lr_scheduler_type": "constant",
    "max_grad_norm": 0.0,
}
UNEVEN_RUNS = {
    "ddp_unchunked": UNEVEN,
    "ddp": {**UNEVEN, "grad_cache_chunk_size": 3},
    "zero3": {**UNEVEN, "grad_cache_chunk_size": 3, "deepspeed": str(DS_CONFIGS / "zero3.json")},
    "zero2": {**UNEVEN, "grad_cache_chunk_size": 3, "deepspeed": str(DS_CONFIGS / "zero2.json")},
    "zero1": {**UNEVEN, "grad_cache_chunk_size": 3, "deepspeed": str(DS_CONFIGS / "zero2.json"), "zero_stage": 1},
}


@dataclass
class ZeroLaunch:
    """One engine's jobs of the launch."""

    engine: str
    folder: Path  # the engine's jobs' folders and logs
    result: object  # the launch's CompletedProcess

    def jobs(self) -> list[str]:
        every = json.loads((self.folder.parent / "jobs.json").read_text())
        return [job["name"].split("/", 1)[1] for job in every if job["name"].startswith(f"{self.engine}/")]

    def output(self, job: str) -> Path:
        """Where ``job`` saved its model (``--output_dir``)."""
        return self.folder / job / "out"

    def log(self, job: str, rank: int = 0) -> str:
        path = self.folder / f"{job}.rank{rank}.log"
        return path.read_text() if path.exists() else "(no log)"

    def status(self, job: str) -> int | None:
        path = self.folder.parent / "statuses.rank0.json"
        return json.loads(path.read_text()).get(f"{self.engine}/{job}") if path.exists() else None

    def failure(self, job: str) -> str:
        """What to show when ``job`` did not end as expected: its logs and the launcher's output."""
        return (
            f"{job} under {self.engine} (exit status {self.status(job)}):\n{self.log(job)[-4000:]}\n"
            f"--- process 1:\n{self.log(job, rank=1)[-2000:]}\n--- launcher:\n{self.result.stderr[-2000:]}"
        )


class ZeroLaunches:
    """The launch, run on the first request and kept for the session."""

    def __init__(self, tmp_path_factory):
        self.tmp_path_factory = tmp_path_factory
        self.launched: tuple[Path, object] | None = None

    def run(self, engine: str) -> ZeroLaunch:
        if self.launched is None:
            folder = self.tmp_path_factory.mktemp("engines")
            self.launched = folder, _launch(folder, _jobs(folder))
        folder, result = self.launched
        return ZeroLaunch(engine, folder / engine, result)


def accelerate_environment(*flags) -> dict[str, str]:
    """The ``ACCELERATE_*`` variables `accelerate launch <flags> script.py` gives its processes, as accelerate's own
    launcher computes them (`launch_command`: its checks of the flags and config file, then the DeepSpeed or
    multi-GPU environment)."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_deepspeed_cmd_env, prepare_multi_gpu_env

    args, defaults, mixed_precision_from_config = _validate_launch_command(
        launch_command_parser().parse_args([*map(str, flags), "script.py"])
    )
    if args.use_deepspeed:
        fields = list(defaults.deepspeed_config) if defaults else []
        fields += ["mixed_precision"] if mixed_precision_from_config else []
        args.deepspeed_fields_from_accelerate_config = ",".join(fields)
        _, environment = prepare_deepspeed_cmd_env(args)
    else:
        environment = prepare_multi_gpu_env(args)
    return {name: value for name, value in environment.items() if name.startswith("ACCELERATE_")}


def job_environment(*flags) -> dict[str, str | None]:
    """What a job of the launch sets (a value) and removes (None) so that its environment is the one
    `accelerate launch <flags>` would give it."""
    launched, wanted = accelerate_environment(*ENGINE_FLAGS[LAUNCHED_AS]), accelerate_environment(*flags)
    return {**dict.fromkeys(launched.keys() - wanted.keys()), **wanted}


def _launch(folder: Path, jobs: list[dict]) -> object:
    launcher = accelerate_launch(*ENGINE_FLAGS[LAUNCHED_AS], "--main_process_port", free_port())
    return launch_jobs(launcher, jobs, folder, LAUNCH_TIMEOUT)


def _jobs(folder: Path) -> list[dict]:
    """Every job of the launch, by engine (DDP first, ZeRO-3 last: its last job stops the run on purpose), each named
    ``<engine>/<job>`` and run in ``folder/<engine>/<job>``."""
    jobs = []
    for engine, builder in (("ddp", _ddp_jobs), ("zero2", _stage_jobs), ("zero3", _stage_jobs)):
        (folder / engine).mkdir()
        environment = job_environment(*ENGINE_FLAGS[engine])
        for job in builder(engine, folder / engine):
            jobs.append({**job, "name": f"{engine}/{job['name']}", "env": {**environment, **job["env"]}})
    return jobs


def _stage_jobs(stage: str, folder: Path) -> list[dict]:
    jobs = [*_script_jobs(folder), *_deepspeed_jobs(stage, folder), *_checkpoint_jobs(stage, folder)]
    if stage == "zero2":
        jobs.append(_documented_bf16_job(folder))
    if stage == "zero3":
        jobs.append(_not_gathered_job(folder))
    return jobs


def _job(name: str, script: str, argv: list, env: dict | None = None, status: int = 0) -> dict:
    return {"name": name, "script": script, "argv": [str(part) for part in argv], "env": env or {}, "status": status}


def _run_clear_job(folder: Path, name: str, *extra, env=None, status=0, deepspeed=True) -> dict:
    """run_clear.py on `clear_arguments`' tiny BERT and corpus (in ``folder/name``), into ``folder/name/out``; on
    DeepSpeed's CPU accelerator (`DEEPSPEED_ON_CPU`) unless ``deepspeed`` is False (gloo DDP: ``--use_cpu``)."""
    (folder / name).mkdir()
    argv = [*clear_arguments(REPO_ROOT, folder / name, *extra), *(DEEPSPEED_ON_CPU if deepspeed else ())]
    return _job(name, "examples/run_clear.py", argv, env, status)


def _ddp_jobs(engine: str, folder: Path) -> list[dict]:
    """CLEAR from the checkpoint the ZeRO runs start from (test_deepspeed.py's reference), and GradCache under every
    engine, one tests/scripts/train_engines.py run each (the DDP runs, then ZeRO-1, 2 and 3, each setting its own
    DeepSpeed environment)."""
    initial = save_tiny_model(folder / "initial", pooler_type="mean")
    start = ["--model_name_or_path", initial, "--tokenizer_name", initial, *TRAINING, *NO_STS_EVAL]
    wiki = (DEMO_DATA / "wiki1m_sample.txt").read_text()
    uneven_corpus = "\n".join(wiki.splitlines()[:UNEVEN_SENTENCES]) + "\n"
    return [
        _run_clear_job(folder, "reference", *start, deepspeed=False),
        _engines_job(folder, GRAD_CACHE_JOB, ENGINE_RUNS, wiki[:20000]),
        _engines_job(folder, UNEVEN_JOB, UNEVEN_RUNS, uneven_corpus),
    ]


def _engines_job(folder: Path, name: str, runs: dict, corpus: str) -> dict:
    """tests/scripts/train_engines.py: every run of ``runs`` from one tiny model (``folder/name/initial``, InfoNCE) on
    ``corpus``, each into ``folder/name/out/<run>``."""
    (folder / name).mkdir()
    model_dir = save_tiny_model(folder / name / "initial", pooler_type="mean", contrastive_loss="info_nce")
    (folder / name / "corpus.txt").write_text(corpus)
    (folder / name / "runs.json").write_text(json.dumps(runs))
    return _job(name, "tests/scripts/train_engines.py", [
        "--model_dir", model_dir, "--train_file", folder / name / "corpus.txt", "--runs", folder / name / "runs.json",
        "--output_dir", folder / name / "out",
    ])  # fmt: skip


def documented_bf16_command() -> list[str]:
    """The ZeRO-2 command of docs/guides/scale.md that passes --bf16, as words (its line continuations joined)."""
    page = (REPO_ROOT / "docs" / "guides" / "scale.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```bash\n(.*?)^```", page, flags=re.MULTILINE | re.DOTALL)
    (block,) = [block for block in blocks if "accelerate_zero2.yaml" in block and "--bf16" in block]
    return shlex.split(block.replace("\\\n", " "))


def _documented_bf16_job(folder: Path) -> dict:
    """The guide's bf16 command under ZeRO-2, as it writes it, with a local tiny model and corpus for the Hub's: its
    launch flags give the job its environment (2 processes; the guide runs from the repository root, where its
    relative paths point), its script flags are the job's."""
    words = documented_bf16_command()
    hub_flags = {"--model_name_or_path": 1, "--dataset_name": 1, "--dataset_config_name": 1, "--save_steps": 1}
    kept, index = [], 2  # after ".venv/bin/accelerate launch"
    while index < len(words):
        if words[index] in hub_flags:
            index += 1 + hub_flags[words[index]]
            continue
        kept.append(words[index])
        index += 1
    script = kept.index("examples/run_clear.py")
    launch_flags = [REPO_ROOT / word if word.startswith("ds_configs/") else word for word in kept[:script]]
    env = {
        name: str(REPO_ROOT / value) if value and value.startswith("ds_configs/") else value
        for name, value in job_environment(*launch_flags, "--num_processes", 2).items()
    }
    (folder / DOCUMENTED_JOB).mkdir()
    checkpoint = save_tiny_model(folder / DOCUMENTED_JOB / "tiny")
    return _job(DOCUMENTED_JOB, "examples/run_clear.py", [
        *kept[script + 1 :],
        "--model_name_or_path", checkpoint, "--train_file", DEMO_DATA / "wiki1m_sample.txt",
        "--max_train_samples", "64", "--max_steps", "2", "--per_device_train_batch_size", "4", "--save_strategy", "no",
        "--report_to", "none", *DEEPSPEED_ON_CPU, "--output_dir", folder / DOCUMENTED_JOB / "out",
    ], env)  # fmt: skip


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
    """CLEAR from the checkpoint the DDP reference starts from (the same `save_tiny_model`, seed 0)."""
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
