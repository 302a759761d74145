from __future__ import annotations

import gc
import importlib
import os
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import torch
from transformers import AutoTokenizer, BertConfig

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Tests run as on a CPU without bf16 matrix instructions, whatever the machine (an AMD EPYC with AVX-512 BF16 one day,
# a Xeon with AMX the next): the device-aware precision default is then float32 (`models.precision.cpu_bf16_units`
# reads this cap, and so does oneDNN), so float32 figures do not depend on the machine, in subprocesses too; the bf16
# tests (tests/training/test_bf16.py) ask for bf16 explicitly or patch the detection.
os.environ.setdefault("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_VNNI")

REPO_ROOT = Path(__file__).resolve().parents[1]
DEMO_TOKENIZER = REPO_ROOT / "examples" / "demo" / "tokenizer"
# The demo's data (examples/demo/data) and small slices of public data sets in their own layouts (tests/fixtures);
# the suite reads nothing outside the repository (tests/fixtures/README.md says where each slice comes from).
DEMO_DATA = REPO_ROOT / "examples" / "demo" / "data"
TEST_DATA = Path(__file__).resolve().parent / "fixtures"
CHECKPOINTS_0_1 = TEST_DATA / "checkpoints_0_1"  # saved by contrastive_hf 0.1, with their expected embeddings
CHECKPOINTS_0_2 = TEST_DATA / "checkpoints_0_2"  # saved by 0.2 before issues 22-26, with their expected embeddings


@pytest.fixture
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture
def tokenizer():
    """A fresh copy of the demo's WordPiece tokenizer (tests may add tokens to it)."""
    return AutoTokenizer.from_pretrained(DEMO_TOKENIZER)


def tiny_bert_config(vocab_size: int = 8192, **overrides) -> BertConfig:
    """A 2-layer, hidden-32 BERT config: fast enough for every test."""
    values = dict(
        vocab_size=vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=37,
        max_position_embeddings=64,
    )
    values.update(overrides)
    return BertConfig(**values)


def run_bounded(command: list[str], timeout: float | None, **popen_kwargs) -> subprocess.CompletedProcess:
    """Run ``command`` with its output captured; with a ``timeout`` in seconds, a command still going then (a hang)
    is killed with every process it started and fails the test."""
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    with subprocess.Popen(command, **pipes, **popen_kwargs) as process:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            launcher = psutil.Process(process.pid)
            for child in launcher.children(recursive=True):  # torch.distributed.run's workers: sessions of their own
                child.kill()
            launcher.kill()
            stdout, stderr = process.communicate()
            script = Path(next((str(part) for part in command if str(part).endswith(".py")), str(command[0]))).name
            message = f"{script} still running after {timeout} s:\n{stdout[-3000:]}{stderr[-3000:]}"
            raise AssertionError(message) from None
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def example_script(name: str):
    """``examples/<name>.py`` as a module, to call its ``main(argv)`` (or read its argument dataclasses) in this
    process: no second interpreter start-up, the same code path as the command."""
    if name not in sys.modules:
        sys.path.insert(0, str(REPO_ROOT / "examples"))
        try:
            importlib.import_module(name)
        finally:
            sys.path.remove(str(REPO_ROOT / "examples"))
    return sys.modules[name]


def usage_error(name: str, argv: list[str], capsys) -> str:
    """What ``examples/<name>.py`` prints on stderr when ``argv`` is refused as a usage mistake: ``main(argv)``, in
    this process, exits with status 2, as the command does."""
    capsys.readouterr()  # what came before
    with pytest.raises(SystemExit) as exit_:
        example_script(name).main(argv)
    assert exit_.value.code == 2
    return capsys.readouterr().err


def free_port() -> int:
    """A TCP port free on this machine now, for a process group of its own (tests may run beside other launches)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(autouse=True)
def _seed_and_one_thread():
    """Seeded, and on one torch thread: tiny models run faster on one thread than on two contended ones."""
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def assert_grad_cache_matches_one_pass(model, inputs: dict, chunk_size: int = 4) -> None:
    """GradCache's chunked step leaves the gradients of one forward and backward pass over the whole batch."""
    from contrastive_hf.training.grad_cache import grad_cache_step

    model.zero_grad()
    model(**inputs).loss.backward()
    full = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    grad_cache_step(model, model, inputs, chunk_size=chunk_size)
    for name, parameter in model.named_parameters():
        if name in full:
            torch.testing.assert_close(parameter.grad, full[name], atol=1e-5, rtol=1e-4, msg=name)


@pytest.fixture(scope="session")
def zero_launches(tmp_path_factory):
    """The one 2-process launch every DDP and DeepSpeed ZeRO scenario of the suite runs in, launched when a test first
    asks for it (`helpers/zero_launches.py`); the modules that ask share one pytest-xdist worker (their
    ``xdist_group`` is ``"zero"``), so that it runs once."""
    from helpers.zero_launches import ZeroLaunches

    return ZeroLaunches(tmp_path_factory)


class _NoLaunch(subprocess.Popen):
    def __init__(self, args, *more, **kwargs):
        raise AssertionError(
            f"A test of the quick tier launched a process ({args!r}): run the script in the test process "
            "(helpers/in_process.py), or move the test to tests/integration/ (or mark it slow)."
        )


@pytest.fixture(autouse=True)
def _quick_tests_launch_no_process(request, monkeypatch):
    """`make test-fast` launches no process: a test not marked slow that starts one fails, naming it."""
    if request.node.get_closest_marker("slow") is None:
        monkeypatch.setattr(subprocess, "Popen", _NoLaunch)


def pytest_collection_finish(session):
    """What the imports and the collection made
    (millions of objects: torch, transformers, every test module) moves out of the garbage collector's reach
    (`gc.freeze`): transformers' Trainer collects garbage at the start of every `train` (accelerate's
    `free_memory`), which otherwise walks all of it, most of a second each time in a test process, about a third of
    the quick tests' CPU time."""
    gc.collect()
    gc.freeze()


def pytest_runtest_setup(item):
    """In a pytest-xdist worker under ``--dist loadgroup`` (`make test`), pytest-xdist names each test of an
    ``xdist_group`` by its group (a ``@<group>`` suffix of its node id, which its scheduler groups by): such a test
    fails before its fixtures run when it was not named so. Nothing else would fail: the groups' tests spread over
    the workers, and each worker runs the launches a group shares (the data ledger's, the ZeRO ones), doubling the
    suite's time (pytest 9.2 with pytest-xdist 3.8, pytest-dev/pytest-xdist#1386)."""
    if getattr(item.config.option, "loadgroup", False) and item.get_closest_marker("xdist_group"):
        if "@" not in item.nodeid:
            pytest.fail(
                f"pytest-xdist's --dist loadgroup did not group {item.nodeid}: this pytest and pytest-xdist do not "
                "work together (pytest-dev/pytest-xdist#1386), and the launches a group shares would run on every "
                'worker. Install the versions setup.py\'s dev extra allows (pip install -e ".[dev]").',
                pytrace=False,
            )


INTEGRATION = Path(__file__).resolve().parent / "integration"
GPU = Path(__file__).resolve().parent / "gpu"


def pytest_collection_modifyitems(config, items):
    """Every test in tests/integration/ is slow: it launches processes (example scripts, 2-process and DeepSpeed
    runs, fresh interpreters, benchmark smoke runs) or runs for long. `make test` runs them, `make test-fast` does
    not (``-m "not slow"``). Every test in tests/gpu/ needs a CUDA device (marker ``gpu``) and is skipped without
    one: `make gpu-check` runs them on a GPU machine (its dry run, with ``CONTRASTIVE_HF_TEST_DEVICE=cpu``, on the
    CPU). (A conftest.py of its own there would shadow this one's names: the test folders are not packages.)"""
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device (make gpu-check runs it on one)")
    gpu_tests_on_cpu = os.environ.get("CONTRASTIVE_HF_TEST_DEVICE") == "cpu"  # gpu-check's dry run
    for item in items:
        parents = Path(item.fspath).resolve().parents
        if INTEGRATION in parents:
            item.add_marker(pytest.mark.slow)
        if GPU in parents:
            item.add_marker(pytest.mark.gpu)
            if not torch.cuda.is_available() and not gpu_tests_on_cpu:
                item.add_marker(skip_gpu)
