"""Pushing to the Hub, end to end against a loopback server that speaks the Hub API (tests/fake_hub.py)."""

from __future__ import annotations

import json

import torch
from transformers import AutoModel

import contrastive_hf  # noqa: F401

from fake_hub import FakeHub
from test_run_clear import run_clear


def test_run_clear_pushes_model_tokenizer_code_sentence_transformers_files_and_card(repo_root, tmp_path):
    with FakeHub() as hub:
        env = {"HF_ENDPOINT": hub.endpoint, "HF_HUB_OFFLINE": "0", "HF_TOKEN": "hf_test_token_123"}
        result, output_dir = run_clear(
            repo_root, tmp_path, "--push_to_hub", "--hub_model_id", "tester/clear-tiny", env=env
        )
    files = hub.repos["tester/clear-tiny"]
    expected = {
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "modeling_contrastive.py",
        "configuration_contrastive.py",
        "losses.py",
        "sentence_transformers_files.py",
        "modules.json",
        "1_Pooling/config.json",
        "README.md",
    }
    assert expected <= set(files), sorted(files)
    assert not any(name.startswith("checkpoint-") for name in files)
    # what arrived is what was saved locally
    assert files["model.safetensors"] == (output_dir / "model.safetensors").read_bytes()
    card = files["README.md"].decode()
    assert "model-index" in card and "spearman_cosine" in card
    assert 'AutoModel.from_pretrained("tester/clear-tiny"' in card
    assert str(tmp_path) not in card and "hf_test_token_123" not in card
    assert json.loads(files["config.json"])["auto_map"]["AutoModel"] == "modeling_contrastive.ContrastiveModel"


def test_a_failed_push_leaves_the_checkpoint_intact_and_says_so(repo_root, tmp_path):
    with FakeHub(fail_commits=True) as hub:
        env = {"HF_ENDPOINT": hub.endpoint, "HF_HUB_OFFLINE": "0", "HF_TOKEN": "hf_test_token_123"}
        result, output_dir = run_clear(
            repo_root, tmp_path, "--push_to_hub", "--hub_model_id", "tester/clear-tiny", env=env, check=False
        )
    assert result.returncode == 1
    assert "Pushing to the Hub failed" in result.stderr + result.stdout
    assert "is complete and unchanged" in result.stderr + result.stdout
    model = AutoModel.from_pretrained(output_dir).eval()
    assert model(input_ids=torch.tensor([[2, 10, 11, 3]])).pooler_output.shape == (1, 32)
    assert (output_dir / "README.md").exists()
