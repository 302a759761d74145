"""Every benchmark's smoke run (a tiny configuration on the repository's own samples), so that none breaks unseen.

Each script under benchmarks/ runs as a user runs it, in a process of its own, with its smoke flag (all of them in one
launch: each forked from an interpreter that imported torch and transformers once); the figures mean nothing, the
test checks that every part ran to its end. The full runs and their figures are in docs/benchmarks.md.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO_ROOT

# the smoke runs' one launch runs once, on one pytest-xdist worker (make test: --dist loadgroup)
pytestmark = pytest.mark.xdist_group("benchmarks")

BENCHMARKS = REPO_ROOT / "benchmarks"
SAMPLES = REPO_ROOT / "examples" / "demo" / "data"
# Modules the scripts import, not benchmarks of their own.
HELPERS = {"data_files.py", "machine_info.py", "parity.py", "preloaded.py"}

# script: (arguments, text its output must hold at the end of every part)
SMOKE_RUNS = {
    "bench_training.py": (
        ["--smoke", "--precisions", "fp32", "bf16"],
        ["peak of one core", "parity (dropout off)", "sub_batch=auto bf16", "by wall time", "% of peak"],
    ),
    "bench_training.py --tiny-overhead": (
        ["--smoke", "--tiny-overhead"],
        ["model: tiny BERT (num_hidden_layers 2", "parity (dropout off)", "sub_batch=auto fp32", "/ loop fp32"],
    ),
    "bench_collator.py": (["--smoke"], ["speed-up:", "whole collator call"]),
    "bench_encode.py": (["--smoke"], ["peak of one core", "contrastive_hf bf16 sub_batch=auto", "/ ST bf16", "cos"]),
    "bench_dpr.py": (
        ["--smoke", "--sub-batch-sizes", "0", "auto", "4"],
        ["parity (dropout off), two towers: sub_batch_size   auto (packed)", "shared encoder sub_batch_size=4"],
    ),
    "bench_loading.py": (["--smoke"], ["| current |", "identical (float32)", "loaded: all-MiniLM-L6-v2"]),
    "bench_evaluation.py": (["--smoke"], ["ratio st-distinct / contrastive_hf", "STS-B:"]),
    "bench_distributed.py": (["--smoke"], ["gather of negatives, per step", "2 processes (gather off) vs 1"]),
    "bench_grad_cache.py": (["--smoke"], ["| 8 | 4 |", "| 8 | none |", "plot:"]),
    "bench_gpu.py --check_flops": (
        ["--check_flops", "--corpus_file", str(SAMPLES / "wiki1m_sample.txt")],
        ["sub_batch_size=packed forward+backward", "largest difference 0.00%: OK"],
    ),
    "bench_decoder.py --check_flops": (["--check_flops"], ["decoder + LoRA forward+backward", "OK"]),
    "gpu_check.py": (
        ["--dry-run"],
        [
            "environment passed, gpu_tests passed, demo_fp32 passed, demo_bf16 passed, recipes passed, "
            "zero2_bf16 passed, zero3_bf16 passed, bench passed, decoder passed"
        ],
    ),
    "setting_walk.py": (  # a number's walk, with one of run_clear.py's flags (the pooler's walk: below)
        ["--setting", "span_ratio", "--value", "0.0917", "--augmentations", "del_span"],
        ["augmentations.py  Augmentation.from_settings", "augmentations.py  SpanDeletion.spans", "1 files: "],
    ),
    "setting_walk.py --from-pretrained": (
        ["--from-pretrained", "--value", "cls"],
        ["from_encoder_pretrained", "poolers.py  SentencePooler.__init__", "files: "],
    ),
    "reproduce.py": (["all", "--smoke", "--jobs", "1"], ["### CLEAR from scratch", "### SG-BERT from"]),
    "reproduce.py clear-table": (
        ["clear-table", "--smoke"],
        ["clear-table start: GLUE avg", "clear-table double_mlm_seed0:", "| Double MLM", "| MLM + del_word 0.7 | 0 |"],
    ),
    "glue_data.py": (
        [
            "--senteval-dir",
            str(REPO_ROOT / "tests" / "fixtures" / "senteval"),
            "--stsb-dir",
            str(REPO_ROOT / "tests" / "fixtures" / "sts" / "stsbenchmark"),
        ],
        ["SST-2/train.tsv: 60 rows", "STS-B/dev.tsv: 40 rows", "MRPC's dev.tsv is the MSR test set"],
    ),
}


# A benchmark whose smoke run is a step of another's: gpu_check.py's dry run runs bench_gpu.py on the CPU, a tiny
# model and the shipped paragraphs, and its log must hold this output of it.
SMOKED_WITHIN = {
    "bench_gpu.py": (
        "gpu_check.py",
        [
            "sub_batch_size packed (packed) vs padded",
            "minimal-loop-simcse",
            "contrastive_hf-clear sub_batch_size=packed",
        ],
    ),
    "bench_decoder.py": (
        "gpu_check.py",
        [
            "same initial model: max |embedding difference| contrastive_hf vs sentence-transformers 0.0e+00",
            "contrastive_hf / sentence-transformers throughput",
        ],
    ),
}


def test_every_benchmark_has_a_smoke_run():
    scripts = {path.name for path in BENCHMARKS.glob("*.py")} - HELPERS
    assert scripts == {name.split()[0] for name in SMOKE_RUNS} | set(SMOKED_WITHIN)


@pytest.fixture(scope="module")
def smoke_runs(tmp_path_factory) -> dict[str, tuple[dict, Path]]:
    """Every smoke run, each in its own folder, in one launch: tests/scripts/run_blocks.py imports torch,
    transformers and the other libraries once and forks a fresh child per benchmark, which runs it as
    ``python benchmarks/<script> ...`` would (its arguments, its folder, its own process). ``{name: (its result:
    exit status and output, its folder)}``."""
    root = tmp_path_factory.mktemp("smoke")
    scripts, folders = [], {}
    for index, (name, (arguments, _)) in enumerate(SMOKE_RUNS.items()):
        folder = root / f"{index:02d}-{name.split()[0].removesuffix('.py')}"
        folder.mkdir()
        if name == "bench_grad_cache.py":
            arguments = [*arguments, "--plot", str(folder / "grad_cache.png")]
        if name == "glue_data.py":
            arguments = [*arguments, "--output", str(folder / "glue_data")]
        if name == "gpu_check.py":
            arguments = [*arguments, "--out", str(folder / "gpu-check")]
        scripts.append({"script": str(BENCHMARKS / name.split()[0]), "argv": arguments, "cwd": str(folder)})
        folders[name] = folder
    (root / "scripts.json").write_text(json.dumps(scripts))
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT / "src"), os.environ.get("PYTHONPATH")])),
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "OMP_NUM_THREADS": "1",
        "TQDM_DISABLE": "1",
    }
    runner = REPO_ROOT / "tests" / "scripts" / "run_blocks.py"
    command = [sys.executable, str(runner), str(root / "scripts.json"), str(root), str(root / "results.json")]
    launch = subprocess.run(command, capture_output=True, text=True, env=environment, cwd=root, timeout=3600)
    assert launch.returncode == 0, (launch.stdout + launch.stderr)[-4000:]
    results = json.loads((root / "results.json").read_text())
    return {name: (result, folders[name]) for name, result in zip(SMOKE_RUNS, results, strict=True)}


@pytest.mark.parametrize("name", list(SMOKE_RUNS))
def test_benchmark_smoke_run(name, smoke_runs):
    _, expected = SMOKE_RUNS[name]
    result, folder = smoke_runs[name]
    output = result["output"]
    assert result["status"] == 0, output[-4000:]
    for text in expected:
        assert text in output, f"{text!r} missing from the output of {name}:\n{output[-4000:]}"
    for inner, (outer, texts) in SMOKED_WITHIN.items():
        if outer == name:
            log = (folder / "gpu-check" / "gpu_check.log").read_text()
            for text in texts:
                assert text in log, f"{text!r} missing from the output of {inner} within {name}:\n{log[-4000:]}"


def test_gpu_check_tells_a_step_its_budget_cut_short_from_one_that_failed(tmp_path, monkeypatch):
    """A step still running when the check's --budget runs out is "out of time" (what ran is kept, the check exits 0
    for it); one still running at its own limit failed."""
    spec = importlib.util.spec_from_file_location("gpu_check", BENCHMARKS / "gpu_check.py")
    gpu_check = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "gpu_check", gpu_check)  # its dataclasses look their module up
    spec.loader.exec_module(gpu_check)

    def still_running(command, timeout, **_):
        raise subprocess.TimeoutExpired(command, timeout, output=b"step output", stderr=b"")

    monkeypatch.setattr(gpu_check.subprocess, "run", still_running)
    check = gpu_check.Check(tmp_path, budget=60, dry_run=False)
    cut_short = check.run("zero3_bf16", ["true"], limit=150)
    timed_out = check.run("recipes", ["true"], limit=30)
    assert (cut_short.status, timed_out.status) == ("out of time", "failed")
    assert "the check's --budget ran out" in cut_short.detail and "budget" not in timed_out.detail
    assert [step["status"] for step in json.loads((tmp_path / "gpu_check.json").read_text())["steps"]] == [
        "out of time",
        "failed",
    ]


def test_gpu_check_only_runs_the_steps_named_and_records_the_others_as_skipped(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("gpu_check", BENCHMARKS / "gpu_check.py")
    gpu_check = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "gpu_check", gpu_check)
    spec.loader.exec_module(gpu_check)
    check = gpu_check.Check(tmp_path, budget=60, dry_run=False, only=["decoder"])
    skipped = check.run("recipes", [sys.executable, "-c", "raise SystemExit(1)"], limit=30)
    ran = check.run("decoder", [sys.executable, "-c", "print('ran')"], limit=30)
    assert (skipped.status, skipped.detail, ran.status, ran.output.strip()) == (
        "skipped",
        "not in --only",
        "passed",
        "ran",
    )


def test_a_preloaded_command_runs_as_python_c_would_and_is_killed_at_its_time_limit(tmp_path, monkeypatch):
    """gpu_check's dry run forks its Python steps from a preloaded interpreter (`preloaded.run_python`): a ``-c``
    command gets its arguments, output and exit status; one still running at its limit is killed and said to be."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import preloaded

    monkeypatch.setattr(preloaded, "PRELOAD", [])  # a fork server that imports nothing: the same path, in a second
    monkeypatch.setattr(preloaded, "_context", None)
    log = tmp_path / "out.log"
    code = "import sys; print('argv', sys.argv[1:]); sys.exit(3)"
    assert preloaded.run_python([sys.executable, "-c", code, "a", "b"], log, dict(os.environ), tmp_path) == 3
    assert log.read_text() == "argv ['a', 'b']\n"
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    with pytest.raises(subprocess.TimeoutExpired):
        preloaded.run_python(sleeper, tmp_path / "sleep.log", dict(os.environ), tmp_path, timeout=1)
