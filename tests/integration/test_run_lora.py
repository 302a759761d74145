"""End to end: a LoRA run through a script other than run_clear.py (run_simcse.py, as a command): the adapter in
``output_dir`` names its base portably and loads by itself through peft's ``AutoPeftModel``, the merged model in
``<output_dir>-merged`` gives the same embeddings through sentence-transformers, the card's loading lines name
each folder for what loads it, and no byte the run saved (adapter, checkpoints, merged model) holds a local absolute
path."""

from __future__ import annotations

import json
import sys

import numpy as np
from peft import AutoPeftModel
from sentence_transformers import SentenceTransformer
from transformers import AutoTokenizer, BertForMaskedLM

from contrastive_hf import ContrastiveModel
from contrastive_hf.hub.adapters import base_model_settings

from conftest import DEMO_DATA, DEMO_TOKENIZER, REPO_ROOT, TEST_DATA, tiny_bert_config
from helpers.in_process import run_script
from helpers.saved_files import assert_holds_none, every_file, local_paths

RUN_TIMEOUT = 300  # seconds: a hang fails the test


def test_run_simcse_trains_a_lora_adapter_that_peft_loads_and_a_merged_model_beside_it(tmp_path, monkeypatch):
    tokenizer = AutoTokenizer.from_pretrained(DEMO_TOKENIZER)
    BertForMaskedLM(tiny_bert_config(vocab_size=len(tokenizer))).save_pretrained(tmp_path / "base")
    tokenizer.save_pretrained(tmp_path / "base")
    # absolute paths given, as a user may give them: none may reach a saved file
    command = [
        sys.executable, str(REPO_ROOT / "examples" / "run_simcse.py"),
        "--mode", "unsup", "--model_name_or_path", str(tmp_path / "base"), "--pooler_type", "mean",
        "--train_file", str(DEMO_DATA / "wiki1m_sample.txt"), "--max_train_samples", "48",
        "--stsb_dev_file", str(TEST_DATA / "sts" / "stsbenchmark" / "sts-dev.csv"),
        "--lora_r", "4", "--max_steps", "3", "--per_device_train_batch_size", "16", "--learning_rate", "1e-2",
        "--report_to", "none", "--save_strategy", "steps", "--save_steps", "2", "--use_cpu", "true",
        "--disable_tqdm", "true", "--output_dir", str(tmp_path / "lora-run"),
    ]  # fmt: skip
    result = run_script(command[1], command[2:], cwd=tmp_path, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    adapter_dir, merged_dir = tmp_path / "lora-run", tmp_path / "lora-run-merged"
    assert "Training a LoRA adapter" in result.stdout + result.stderr
    assert f"SentenceTransformer reload of {merged_dir} on cpu gives the trained embeddings" in result.stdout

    # the adapter alone, naming its base relative to the folder the run started in; no byte of any file the run
    # wrote (the adapter and its card, each checkpoint's adapter, card, trainer state and arguments, the merged
    # model) holds the base's folder, the output folder or the working folder (all under tmp_path)
    assert not (adapter_dir / "model.safetensors").exists()
    adapter_config = json.loads((adapter_dir / "adapter_config.json").read_text())
    assert adapter_config["base_model_name_or_path"] == "base"
    assert {path.name for path in adapter_dir.glob("checkpoint-*")} == {"checkpoint-2", "checkpoint-3"}
    assert_holds_none(every_file(adapter_dir, merged_dir), local_paths(tmp_path))

    # peft rebuilds the base from the adapter folder alone, run from the folder the training run started in (as the
    # card says), with the model options the run set (the card's line): the merged model's embeddings
    monkeypatch.chdir(tmp_path)
    settings = base_model_settings(ContrastiveModel.from_pretrained("lora-run-merged").config)
    loaded = AutoPeftModel.from_pretrained("lora-run", import_allowlist=["contrastive_hf"], **settings)
    sentences = ["A man is playing a guitar.", "A cat sleeps on the sofa."]
    merged = SentenceTransformer("lora-run-merged", device="cpu").encode(sentences)
    np.testing.assert_allclose(loaded.encode(sentences, tokenizer=tokenizer), merged, atol=1e-5, rtol=1e-5)
    base = ContrastiveModel.from_encoder_pretrained("base", pooler_type="mean").encode(sentences, tokenizer=tokenizer)
    assert not np.allclose(base, merged, atol=1e-4), "the adapter did not train"

    card = (adapter_dir / "README.md").read_text()
    assert 'AutoPeftModel.from_pretrained(\n    "lora-run", import_allowlist=["contrastive_hf"]' in card
    assert 'SentenceTransformer("lora-run-merged")' in card and 'SentenceTransformer("lora-run")' not in card
    assert (merged_dir / "modules.json").exists() and not (merged_dir / "adapter_config.json").exists()
