#!/usr/bin/env python
r"""The GPU check (`make gpu-check`): what a GPU run of the library does, on one H100 or H200, in about 9 minutes.

Steps, each in a process of its own with a time limit, each recorded (passed, failed, skipped; seconds; figures):

1. ``environment``: the GPU (name, compute capability, memory), driver, and the versions of Python, torch, CUDA,
   transformers, accelerate, DeepSpeed, peft, datasets, sentence-transformers;
2. ``gpu_tests``: ``pytest tests/gpu`` (marker ``gpu``): batches pinned by the real DataLoader, each packed kernel
   against the padded pass in bf16, a bf16 step of every path, GradCache and the queue, ``encode`` and STS
   evaluation on the GPU against the CPU;
3. ``demo_fp32`` and ``demo_bf16``: the demo's recipe (``examples/demo/clear_demo.json`` on all-MiniLM-L6-v2 when
   ``--minilm`` gives its folder; else ``clear_scratch.json``, the same recipe on an encoder built from scratch, since
   MiniLM's 90 MB of weights exceed what a call to the GPU machine carries), ``--bf16 false`` and ``true``: STS-B dev
   before and after, and the run's reload check;
4. ``recipes``: every example script (CLEAR, SimCSE unsupervised and supervised, DeCLUTR, SG-BERT, DPR, multitask)
   for ``--recipe_steps`` steps in the device's default precision, each ending with its own reload check, on a
   4-layer BERT built from scratch (SG-BERT and the multitask recipe from the same encoder saved as "pretrained"),
   and, on a tiny Qwen2, E5-style instruction tuning (``examples/llm/e5_instruct.json``: LoRA, last-token pooling)
   and LLM2Vec's masked next-token prediction (``run_llm2vec.py``: bidirectional, LoRA);
5. ``zero2_bf16`` and ``zero3_bf16``: CLEAR (an MLP kept at inference) and DPR under ``accelerate launch
   --config_file ds_configs/accelerate_zero{2,3}.yaml --num_processes 1 ... --bf16 true``: the float32 checkpoint
   written from DeepSpeed's master weights and its reload check;
6. ``bench``: a short `bench_gpu.py` (one round, bert-base shape, batch 256, length 128);
7. ``decoder``: `bench_decoder.py`, a decoder LLM as an embedder (a Qwen2-0.5B-shaped decoder from random weights,
   last-token pooling, LoRA on a bf16 base, batch 64 x length 256) against sentence-transformers' trainer.

``--only STEP ...`` runs the steps named (the others recorded as skipped).

Writes ``gpu_check.json`` (every step's outcome and figures) and ``gpu_check.log`` (every step's output) into
``--out``; exits 1 when a step failed. ``--dry-run`` runs every step on the CPU with tiny models and 2 steps (the gpu
tests on the CPU, their CUDA-only parts skipped; DeepSpeed on its CPU accelerator), each Python step forked from an
interpreter that imported torch, transformers and contrastive_hf once, as tests/integration/test_benchmarks.py does
in the suite:

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/gpu_check.py --dry-run --out /tmp/gpu-check

On the GPU machine (docs/benchmarks.md, "The GPU check", says how to prepare the wheels and the data it needs:
``make gpu-check-prep``, here): ``make gpu-check`` in a copy of the working tree with ``.gpu-wheels/`` and
``.bench_data/``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
DEMO = REPO_ROOT / "examples" / "demo"
FIXTURES = REPO_ROOT / "tests" / "fixtures"
STEPS = (
    "environment",
    "gpu_tests",
    "demo_fp32",
    "demo_bf16",
    "recipes",
    "zero2_bf16",
    "zero3_bf16",
    "bench",
    "decoder",
)
PACKAGES = ("torch", "transformers", "accelerate", "deepspeed", "peft", "datasets", "sentence-transformers")


@dataclass
class Step:
    name: str
    status: str = "not run"  # passed, failed, skipped
    seconds: float = 0.0
    figures: dict = field(default_factory=dict)
    detail: str = ""
    output: str = field(default="", repr=False)  # what it printed: in the log, not in the JSON


class Check:
    """Runs the steps within ``budget`` seconds in all, logging every step's output into one log."""

    # A dry run's steps run on the CPU, often beside other work (the test suite runs it under pytest-xdist): its
    # step limits are this many times the GPU's (a ZeRO-2 step took 65 s of its 150 on a quiet 2-core machine and ran
    # out of time beside the suite)
    DRY_RUN_SLACK = 4

    def __init__(self, out: Path, budget: float, dry_run: bool, only: list[str] | None = None):
        self.out, self.budget, self.dry_run, self.only = out, budget, dry_run, only
        self.start = time.monotonic()
        self.steps: list[Step] = []
        self.log = (out / "gpu_check.log").open("w")

    def left(self) -> float:
        return self.budget - (time.monotonic() - self.start)

    def run(self, name: str, command: list, limit: float, env: dict | None = None, cwd: Path = REPO_ROOT) -> Step:
        """Run ``command`` as step ``name`` with at most ``limit`` seconds (less when the budget is short)."""
        step = Step(name)
        self.steps.append(step)
        own_limit = limit * (self.DRY_RUN_SLACK if self.dry_run else 1)
        limit = min(own_limit, self.left())
        cut_short = limit < own_limit  # a timeout would then be the check's --budget, not the step's own limit
        if self.only and name not in self.only:
            step.status, step.detail = "skipped", "not in --only"
            self._write()
            return step
        if limit < 20:
            step.status, step.detail = "skipped", "out of time"
            self._write()
            return step
        began = time.monotonic()
        self.log.write(f"\n===== {name}: {' '.join(map(str, command))}\n")
        self.log.flush()
        environment = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", **(env or {})}
        command = [str(part) for part in command]
        try:
            if self.dry_run and command[0] == sys.executable:
                output, code = self._run_preloaded(command, environment, cwd, limit)
            else:
                result = subprocess.run(command, cwd=cwd, env=environment, capture_output=True, text=True,
                                        timeout=limit)  # fmt: skip
                output, code = result.stdout + result.stderr, result.returncode
        except subprocess.TimeoutExpired as timeout:
            output = "".join(
                part.decode(errors="replace") if isinstance(part, bytes) else part or ""
                for part in (timeout.stdout, timeout.stderr)
            )
            code, step.detail = None, f"still running after {limit:.0f} s"
            if cut_short:
                step.detail += f" (its own limit is {own_limit:.0f} s): the check's --budget ran out"
        self.log.write(output)
        self.log.flush()
        step.seconds = round(time.monotonic() - began, 1)
        step.status = "passed" if code == 0 else "out of time" if code is None and cut_short else "failed"
        if code not in (0, None):
            step.detail = f"exit status {code}: " + " | ".join(output.strip().splitlines()[-3:])[-600:]
        step.output = output
        self._write()
        return step

    def _run_preloaded(self, command: list[str], env: dict, cwd: Path, limit: float) -> tuple[str, int]:
        """A dry run's Python step, forked from an interpreter that imported torch, transformers and contrastive_hf
        once (`preloaded.run_python`): the command's arguments, environment, folder and exit status, without the
        imports' 10 s of CPU a step on a 2-core machine (the GPU check runs each step in a fresh interpreter)."""
        from preloaded import run_python

        log = self.out / "step.out"
        log.write_text("")
        try:
            code = run_python(command, log, env, cwd, timeout=limit)
        except subprocess.TimeoutExpired as timeout:
            timeout.stdout = log.read_text(errors="replace")
            raise
        else:
            return log.read_text(errors="replace"), code
        finally:
            log.unlink()

    def _write(self) -> None:
        summary = {
            "machine": platform.node(),
            "dry_run": self.dry_run,
            "date": time.strftime("%Y-%m-%d %H:%M:%S"),
            "seconds": round(time.monotonic() - self.start, 1),
            "steps": [{key: value for key, value in asdict(step).items() if key != "output"} for step in self.steps],
        }
        (self.out / "gpu_check.json").write_text(json.dumps(summary, indent=1))


def python(*arguments) -> list:
    return [sys.executable, *arguments]


def environment_step(check: Check) -> None:
    code = (
        "import json, platform, torch\nfrom importlib.metadata import version\n"
        f"names = {PACKAGES!r}\n"
        "info = {'python': platform.python_version(), 'cuda': torch.version.cuda,"
        " 'cuda_available': torch.cuda.is_available()}\n"
        "for name in names:\n"
        "    try:\n        info[name] = version(name)\n"
        "    except Exception as error:\n        info[name] = repr(error)\n"
        "if torch.cuda.is_available():\n"
        "    properties = torch.cuda.get_device_properties(0)\n"
        "    info.update(gpu=properties.name, capability='%d.%d' % (properties.major, properties.minor),"
        " memory_gib=round(properties.total_memory / 2**30, 1))\n"
        "import contrastive_hf\ninfo['contrastive_hf'] = contrastive_hf.__file__\n"
        "print('ENVIRONMENT ' + json.dumps(info))\n"
    )
    step = check.run("environment", python("-c", code), 120)
    match = re.search(r"^ENVIRONMENT (.*)$", step.output, re.MULTILINE)
    if match:
        step.figures = json.loads(match.group(1))
    try:
        smi = ["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm,memory.total", "--format=csv,noheader"]
        step.figures["nvidia_smi"] = subprocess.run(smi, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        step.figures["nvidia_smi"] = "not available"
    check._write()


def encoder_files(folder: Path, dry_run: bool) -> tuple[Path, Path]:
    """A BERT encoder config (4 layers, hidden 256; tiny for a dry run) sized to the demo's tokenizer, and that
    encoder saved with random weights and the tokenizer as a "pretrained" folder (for SG-BERT and multitask)."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    tokenizer = AutoTokenizer.from_pretrained(DEMO / "tokenizer")
    if dry_run:
        size = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    else:
        size = dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024)
    config = BertConfig(vocab_size=len(tokenizer), max_position_embeddings=512, **size)
    config_file = folder / "encoder_config.json"
    config_file.write_text(config.to_json_string())
    pretrained = folder / "pretrained_encoder"
    torch.manual_seed(0)
    BertModel(config).save_pretrained(pretrained)
    tokenizer.save_pretrained(pretrained)
    return config_file, pretrained


def decoder_folder(folder: Path) -> Path:
    """A tiny Qwen2 with a Qwen2 tokenizer, built in code as the suite builds it (tests/helpers/decoders.py), saved
    as a pretrained decoder's folder with its language-model head, as the Hub's are (for the decoder recipes)."""
    sys.path.insert(0, str(REPO_ROOT / "tests"))
    from helpers.decoders import save_tiny_qwen2

    return save_tiny_qwen2(folder / "pretrained_decoder", causal_lm=True)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def eval_figures(output_dir: Path) -> dict:
    path = output_dir / "eval_results.json"
    if not path.exists():
        return {}
    results = json.loads(path.read_text())
    return {name: round(value, 2) for name, value in results.items() if "stsb_spearman" in name or "mrr" in name}


def sts_dev(args) -> str:
    """STS-B dev: the demo's whole file (1,500 pairs); for a dry run the suite's 40-pair slice of it."""
    return str(FIXTURES / "sts" / "stsbenchmark" / "sts-dev.csv" if args.dry_run else DEMO / "data" / "sts-dev.csv")


def demo_steps(check: Check, args, work: Path) -> None:
    steps = ["--max_steps", "2", "--max_train_samples", "64", "--stsb_dev_file", sts_dev(args)] if args.dry_run else []
    for precision in ("fp32", "bf16"):
        output_dir = work / f"demo_{precision}"
        if args.minilm:
            start = [DEMO / "clear_demo.json", "--model_name_or_path", args.minilm]
        else:
            start = [DEMO / "clear_scratch.json"]
        command = python(REPO_ROOT / "examples" / "run_clear.py", *start, "--output_dir", output_dir, *steps)
        command += ["--bf16", str(precision == "bf16").lower(), *device_flags(args)]
        step = check.run(f"demo_{precision}", command, 150)
        step.figures = {**eval_figures(output_dir), "reloaded": "gives the trained embeddings" in step.output}


def device_flags(args) -> list[str]:
    return ["--use_cpu", "true"] if args.dry_run else []


def recipe_jobs(
    args, work: Path, config_file: Path, pretrained: Path, extra: list[str], decoder: Path | None = None
) -> list[dict]:
    """Every example script for a few steps, each into ``work/<name>``."""
    steps = "2" if args.dry_run else str(args.recipe_steps)
    batch = "4" if args.dry_run else "32"
    common = ["--max_steps", steps, "--per_device_train_batch_size", batch, "--logging_steps", "5",
              "--report_to", "none", "--save_strategy", "no", "--disable_tqdm", "true", *extra]  # fmt: skip
    scratch = ["--config_name", str(config_file), "--tokenizer_name", str(DEMO / "tokenizer")]
    wiki = str(DEMO / "data" / "wiki1m_sample.txt")
    nli = str(DEMO / "data" / "nli_sample.csv")
    recipes = {
        "clear": ("run_clear", [*scratch, "--train_file", wiki, "--max_train_samples", "2048",
                                "--stsb_dev_file", sts_dev(args), "--projection_at_inference",
                                "true"]),
        "simcse_unsup": ("run_simcse", [*scratch, "--mode", "unsup", "--train_file", wiki,
                                        "--max_train_samples", "2048"]),
        "simcse_sup": ("run_simcse", [*scratch, "--mode", "sup", "--train_file", nli]),
        "declutr": ("run_declutr", [*scratch, "--train_file", str(DEMO / "data" / "enwiki_paragraphs_sample.txt"),
                                    "--span_words", "16", "--max_seq_length", "64"]),
        "sg_bert": ("run_sg_bert", ["--model_name_or_path", str(pretrained), "--train_file", wiki,
                                    "--max_train_samples", "2048"]),
        "dpr": ("run_dpr", [*scratch, "--train_file", nli, "--eval_size", "32"]),
        "multitask": ("run_multitask", ["--model_name_or_path", str(pretrained),
                                        "--sst_dir", str(FIXTURES / "senteval" / "SST" / "Binary"),
                                        "--mrpc_dir", str(FIXTURES / "senteval" / "MRPC"),
                                        "--stsb_dir", str(FIXTURES / "sts" / "stsbenchmark"),
                                        "--max_seq_length", "64"]),
    }  # fmt: skip
    if decoder is not None:  # a decoder instruction-tuned with LoRA (docs/recipes/e5-instruct.md)
        recipes["e5_decoder"] = ("run_simcse", [str(REPO_ROOT / "examples" / "llm" / "e5_instruct.json"),
                                                "--model_name_or_path", str(decoder), "--train_file", nli,
                                                "--max_seq_length", "64", "--warmup_steps", "0"])  # fmt: skip
        # LLM2Vec's masked next-token prediction on the decoder made bidirectional (docs/recipes/llm2vec.md)
        recipes["llm2vec_decoder"] = ("run_llm2vec", ["--model_name_or_path", str(decoder), "--train_file", wiki,
                                                      "--max_seq_length", "64"])  # fmt: skip
    return [
        {"name": name, "script": f"examples/{script}.py", "argv": [*flags, *common, "--output_dir", str(work / name)]}
        for name, (script, flags) in recipes.items()
    ]


def jobs_step(check: Check, name: str, jobs: list[dict], work: Path, limit: float, launcher=None, env=None) -> Step:
    """The jobs in one process (tests/scripts/run_jobs.py), every job run whatever the others did."""
    folder = work / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "jobs.json").write_text(json.dumps(jobs))
    runner = [REPO_ROOT / "tests" / "scripts" / "run_jobs.py", folder / "jobs.json", folder, "--keep-going"]
    step = check.run(name, [*(launcher or [sys.executable]), *runner], limit, env=env)
    if step.status == "skipped":
        return step
    statuses_file = folder / "statuses.rank0.json"
    statuses = json.loads(statuses_file.read_text()) if statuses_file.exists() else {}
    for job in jobs:
        log_file = folder / f"{job['name']}.rank0.log"
        log = log_file.read_text() if log_file.exists() else ""
        check.log.write(f"\n----- {name} / {job['name']}\n{log}")
        output_dir = Path(job["argv"][job["argv"].index("--output_dir") + 1])
        step.figures[job["name"]] = {
            "status": {0: "passed", None: "not run"}.get(statuses.get(job["name"]), "failed"),
            "reloaded": "gives the trained embeddings" in log,
            **eval_figures(output_dir),
        }
    outcomes = {figures["status"] for figures in step.figures.values()}
    if "failed" in outcomes or ("not run" in outcomes and step.status != "out of time"):
        step.status = "failed"
    check._write()
    return step


def bench_figures(path: Path) -> dict:
    """The medians of `bench_gpu.py`'s table (seconds a step, MFU, ratio to sentence-transformers), by method."""
    if not path.exists():
        return {}
    table = json.loads(path.read_text()).get("table", [])
    return {"file": path.name, "table": table}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.environ.get("OUT") or "gpu-check", help="Where the JSON and log go.")
    parser.add_argument("--dry-run", action="store_true", help="On the CPU, tiny models, 2 steps each.")
    parser.add_argument("--budget", type=float, default=None,
                        help="Seconds for all steps (later ones skipped); 540, or 1100 for a dry run.")  # fmt: skip
    parser.add_argument("--minilm", default=None, help="all-MiniLM-L6-v2's folder, for the demo as README runs it.")
    parser.add_argument("--recipe_steps", type=int, default=20)
    parser.add_argument("--bench_data", default=str(REPO_ROOT / ".bench_data"), help="make gpu-check-prep's data.")
    parser.add_argument("--only", nargs="+", choices=STEPS, default=None, help="Run these steps, skip the others.")
    args = parser.parse_args()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    work = out / "runs"
    work.mkdir(exist_ok=True)
    check = Check(out, args.budget or (1100 if args.dry_run else 540), args.dry_run, args.only)
    cpu = {"CONTRASTIVE_HF_TEST_DEVICE": "cpu", "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
    env = cpu if args.dry_run else {}

    environment_step(check)
    pytest_step = check.run("gpu_tests", python("-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/gpu"), 150, env)
    pytest_step.figures = dict(re.findall(r"(\d+) (passed|failed|skipped|error)", pytest_step.output)[::-1])
    demo_steps(check, args, work)

    config_file, pretrained = encoder_files(work, args.dry_run)
    recipes = recipe_jobs(args, work, config_file, pretrained, device_flags(args), decoder_folder(work))
    jobs_step(check, "recipes", recipes, work, 180, env=env)

    for stage in (2, 3):
        jobs = [job for job in recipe_jobs(args, work / f"zero{stage}", config_file, pretrained, ["--bf16", "true"])
                if job["name"] in ("clear", "dpr")]  # fmt: skip
        launcher = python("-m", "accelerate.commands.launch", "--config_file",
                          REPO_ROOT / "ds_configs" / f"accelerate_zero{stage}.yaml", "--num_processes", "1",
                          "--main_process_port", str(free_port()))  # fmt: skip
        if args.dry_run:  # DeepSpeed on its CPU accelerator, as a GPU runs it (not --use_cpu)
            for job in jobs:
                job["argv"] += ["--use_cpu", "false", "--ddp_backend", "gloo"]
        jobs_step(check, f"zero{stage}_bf16", jobs, work, 150, launcher, {**env, "DS_ACCELERATOR": "cpu"} if
                  args.dry_run else None)  # fmt: skip

    bench = out / "bench_gpu.json"
    data = Path(args.bench_data)
    if args.dry_run:
        corpus = ["--device", "cpu", "--tiny", "--corpus_file", DEMO / "data" / "enwiki_paragraphs_sample.txt"]
    elif (data / "corpus").is_dir():
        corpus = ["--data_dir", data, "--tokenizer", data / "tokenizer", "--corpus", "enwiki", "--max_length", "128",
                  "--rounds", "1", "--steps", "10", "--warmup", "3"]  # fmt: skip
    else:
        corpus = ["--corpus_file", DEMO / "data" / "enwiki_paragraphs_sample.txt", "--tokenizer", DEMO / "tokenizer",
                  "--max_length", "128", "--rounds", "1", "--steps", "10", "--warmup", "3"]  # fmt: skip
    step = check.run("bench", python(REPO_ROOT / "benchmarks" / "bench_gpu.py", *corpus, "--json", bench), 240, env)
    step.figures = bench_figures(bench)

    decoder = out / "bench_decoder.json"
    if args.dry_run:
        corpus = ["--device", "cpu", "--tiny", "--corpus_file", DEMO / "data" / "enwiki_paragraphs_sample.txt"]
    elif (data / "corpus").is_dir():
        corpus = ["--data_dir", data, "--tokenizer", data / "tokenizer", "--corpus", "enwiki"]
    else:
        corpus = ["--corpus_file", DEMO / "data" / "enwiki_paragraphs_sample.txt", "--tokenizer", DEMO / "tokenizer"]
    command = python(REPO_ROOT / "benchmarks" / "bench_decoder.py", *corpus, "--json", decoder)
    step = check.run("decoder", command, 180, env)
    step.figures = bench_figures(decoder)

    check._write()
    failed = [step.name for step in check.steps if step.status == "failed"]
    print(f"GPU check: {', '.join(f'{step.name} {step.status}' for step in check.steps)}.")
    print(f"Results in {out / 'gpu_check.json'}, every step's output in {out / 'gpu_check.log'}.")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
