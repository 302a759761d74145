from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer, BertConfig

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO_ROOT = Path(__file__).resolve().parents[1]
DEMO_TOKENIZER = REPO_ROOT / "examples" / "demo" / "tokenizer"
# The demo's data (examples/demo/data) and small slices of public data sets in their own layouts (tests/data); the
# suite reads nothing outside the repository (tests/data/README.md says where each slice comes from).
DEMO_DATA = REPO_ROOT / "examples" / "demo" / "data"
TEST_DATA = Path(__file__).resolve().parent / "data"


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
