from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from datasets import Dataset
from peft import PeftModel
from safetensors import safe_open
from sentence_transformers import SentenceTransformer

from contrastive_hf import ContrastiveConfig, ContrastiveForPreTraining, ContrastiveModel
from contrastive_hf.data.collators import ContrastiveDataCollator
from contrastive_hf.hub.adapters import add_adapter, lora_config, merge_and_save
from contrastive_hf.training.trainer import ContrastiveTrainer
from contrastive_hf.training.training_args import ContrastiveTrainingArguments

from conftest import tiny_bert_config

SENTENCES = ["the cat sat on the mat", "a man is playing a guitar", "the river flows into the sea"] * 6


def lora_trainer(tokenizer, tmp_path, base_dir):
    base = ContrastiveForPreTraining(
        ContrastiveConfig(encoder=tiny_bert_config(vocab_size=len(tokenizer)), pooler_type="mean", mlm_weight=0.0)
    )
    base.save_pretrained(base_dir)
    model = add_adapter(ContrastiveForPreTraining.from_pretrained(base_dir), lora_config(base, r=4))
    args = ContrastiveTrainingArguments(
        output_dir=str(tmp_path / "adapter"),
        per_device_train_batch_size=6,
        max_steps=3,
        learning_rate=1e-2,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
        use_cpu=True,
    )
    collator = ContrastiveDataCollator(tokenizer, augmentation="dropout", mlm=False, max_length=16, seed=0)
    dataset = Dataset.from_dict({"text": SENTENCES})
    return ContrastiveTrainer(model=model, args=args, train_dataset=dataset, data_collator=collator)


def test_lora_trains_only_the_adapter_and_merges_into_a_checkpoint_that_loads_everywhere(tokenizer, tmp_path):
    trainer = lora_trainer(tokenizer, tmp_path, tmp_path / "base")
    model = trainer.model
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    trainer.train()
    changed = {name for name, p in model.named_parameters() if not torch.equal(p, before[name])}
    assert changed, "training changed nothing"
    assert all("lora_" in name for name in changed), sorted(changed)
    assert {name for name, p in model.named_parameters() if p.requires_grad} >= changed

    trainer.save_model()
    adapter_dir = tmp_path / "adapter"
    adapter_config = json.loads((adapter_dir / "adapter_config.json").read_text())
    assert adapter_config["r"] == 4 and set(adapter_config["target_modules"]) == {"query", "value"}
    reloaded = PeftModel.from_pretrained(ContrastiveForPreTraining.from_pretrained(tmp_path / "base"), adapter_dir)

    sentences = ["a man is playing a guitar", "the cat sat"]
    with_adapter = reloaded.base_model.model.contrastive.encode(sentences, tokenizer=tokenizer)
    merged_dir = tmp_path / "merged"
    merge_and_save(reloaded, merged_dir, tokenizer)
    merged = ContrastiveModel.from_pretrained(merged_dir).encode(sentences, tokenizer=tokenizer)
    np.testing.assert_allclose(merged, with_adapter, atol=1e-5, rtol=1e-5)
    base = ContrastiveModel.from_pretrained(tmp_path / "base").encode(sentences, tokenizer=tokenizer)
    assert not np.allclose(base, merged, atol=1e-4), "the adapter had no effect"
    through_sentence_transformers = SentenceTransformer(str(merged_dir), device="cpu").encode(sentences)
    np.testing.assert_allclose(through_sentence_transformers, with_adapter, atol=1e-5, rtol=1e-5)
    with safe_open(merged_dir / "model.safetensors", framework="pt") as weights:
        assert not any("lora" in key for key in weights.keys())


def test_lora_needs_a_positive_rank_and_known_targets(tokenizer):
    model = ContrastiveForPreTraining(ContrastiveConfig(encoder=tiny_bert_config(vocab_size=len(tokenizer))))
    with pytest.raises(ValueError, match="rank"):
        lora_config(model, r=0)
    from transformers import DistilBertConfig

    distil = ContrastiveForPreTraining(
        ContrastiveConfig(
            encoder=DistilBertConfig(vocab_size=50, dim=32, n_layers=1, n_heads=2, hidden_dim=37),
            pooler_type="mean",
        )
    )
    with pytest.raises(ValueError, match="--lora_target_modules"):
        lora_config(distil, r=4)
    assert lora_config(distil, r=4, target_modules=["q_lin", "v_lin"]).target_modules == {"q_lin", "v_lin"}
