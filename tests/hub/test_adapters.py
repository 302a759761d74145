from __future__ import annotations

import copy
import dataclasses
import json
import os

import numpy as np
import pytest
import torch
from datasets import Dataset
from peft import PeftModel
from safetensors import safe_open
from sentence_transformers import SentenceTransformer

from contrastive_hf import ContrastiveConfig, ContrastiveForPreTraining, ContrastiveModel, DualEncoderModel
from contrastive_hf.data.collators import ContrastiveDataCollator
from contrastive_hf.hub.adapters import (
    adapter_base_name,
    adapter_weight_deltas,
    add_adapter,
    base_model_settings,
    lora_config,
    merge_and_save,
)
from contrastive_hf.hub.model_card import card_info_from_trainer, render_model_card
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


# ---- adapter folders that peft loads by themselves, and cards that name the right folder ----


def adapted_and_saved(model, folder, tokenizer):
    """``model`` with a LoRA adapter whose B factors are non-zero (a trained adapter changes the embeddings), saved
    in ``folder``."""
    adapted = add_adapter(model, lora_config(model, r=4))
    torch.manual_seed(0)
    with torch.no_grad():
        for name, parameter in adapted.named_parameters():
            if "lora_B" in name or "modules_to_save" in name:
                parameter.normal_(std=0.5)
    adapted.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return adapted


@pytest.fixture
def plain_bert(tokenizer, tmp_path, monkeypatch):
    """A pretrained BERT (no contrastive_hf configuration) in ``models/bert`` under the working directory."""
    from transformers import BertModel

    monkeypatch.chdir(tmp_path)
    BertModel(tiny_bert_config(vocab_size=len(tokenizer))).save_pretrained(tmp_path / "models" / "bert")
    return tmp_path / "models" / "bert"


def test_an_adapter_folder_names_its_base_portably_and_autopeftmodel_loads_it(tokenizer, plain_bert, tmp_path):
    from peft import AutoPeftModel

    # a projection kept at inference is new on the base: it is trained and saved with the adapter
    model = ContrastiveForPreTraining.from_encoder_pretrained(
        str(plain_bert), pooler_type="mean", projection_type="mlp", projection_at_inference=True
    )
    adapted = adapted_and_saved(model, tmp_path / "adapter", tokenizer)
    saved = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert saved["base_model_name_or_path"] == os.path.join("models", "bert")  # relative: no local absolute path
    assert saved["modules_to_save"] == ["projection"]

    settings = base_model_settings(model.config)
    assert settings["pooler_type"] == "mean" and settings["projection_at_inference"] is True
    loaded = AutoPeftModel.from_pretrained(str(tmp_path / "adapter"), import_allowlist=["contrastive_hf"], **settings)
    assert isinstance(loaded, PeftModel) and isinstance(loaded.get_base_model(), ContrastiveForPreTraining)
    sentences = ["a man is playing a guitar", "the cat sat"]
    trained = adapted.encode(sentences, tokenizer=tokenizer)
    base = ContrastiveModel.from_encoder_pretrained(str(plain_bert), pooler_type="mean").encode(
        sentences, tokenizer=tokenizer
    )
    assert trained.shape != base.shape or not np.allclose(trained, base, atol=1e-3), "the adapter changed nothing"
    np.testing.assert_allclose(loaded.encode(sentences, tokenizer=tokenizer), trained, atol=1e-5)


def test_a_dual_encoder_adapter_loads_through_autopeftmodel(tokenizer, plain_bert, tmp_path):
    from peft import AutoPeftModel

    model = DualEncoderModel.from_encoder_pretrained(str(plain_bert), pooler_type="mean", projection_dim=8)
    adapted = adapted_and_saved(model, tmp_path / "adapter", tokenizer)
    saved = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert saved["base_model_name_or_path"] == os.path.join("models", "bert")
    assert set(saved["modules_to_save"]) == {"query_projection", "passage_projection"}
    loaded = AutoPeftModel.from_pretrained(
        str(tmp_path / "adapter"), import_allowlist=["contrastive_hf"], **base_model_settings(model.config)
    )
    queries = ["who wrote hamlet?", "where is paris?"]
    np.testing.assert_allclose(
        loaded.encode_query(queries, tokenizer=tokenizer),
        adapted.encode_query(queries, tokenizer=tokenizer),
        atol=1e-5,
    )


@pytest.mark.parametrize(
    ("model_class", "module_of_0_1"),
    [
        (ContrastiveForPreTraining, "contrastive_hf.modeling_contrastive"),
        (ContrastiveModel, "contrastive_hf.modeling_contrastive"),
        (DualEncoderModel, "contrastive_hf.modeling_dual_encoder"),
    ],
)
def test_an_adapter_of_0_1_naming_its_module_of_then_loads_through_autopeftmodel(
    model_class, module_of_0_1, tokenizer, plain_bert, tmp_path
):
    from peft import AutoPeftModel

    model = model_class.from_encoder_pretrained(str(plain_bert), pooler_type="mean")
    adapted = adapted_and_saved(model, tmp_path / "adapter", tokenizer)
    config_file = tmp_path / "adapter" / "adapter_config.json"
    saved = json.loads(config_file.read_text())
    assert saved["auto_mapping"] == {
        "base_model_class": model_class.__name__,
        "parent_library": model_class.__module__,
    }
    saved["auto_mapping"]["parent_library"] = module_of_0_1  # as 0.1's adapters name the class
    config_file.write_text(json.dumps(saved))
    loaded = AutoPeftModel.from_pretrained(
        str(tmp_path / "adapter"), import_allowlist=["contrastive_hf"], **base_model_settings(model.config)
    )
    assert type(loaded.get_base_model()) is model_class
    np.testing.assert_allclose(
        loaded.encode_query(SENTENCES[:2], tokenizer=tokenizer),
        adapted.encode_query(SENTENCES[:2], tokenizer=tokenizer),
        atol=1e-5,
    )


def test_the_card_peft_writes_beside_an_adapter_names_a_hub_base_and_no_local_folder(tokenizer, plain_bert, tmp_path):
    from huggingface_hub import ModelCard

    local = ContrastiveForPreTraining.from_encoder_pretrained(str(plain_bert), pooler_type="mean")
    assert local.config._name_or_path == str(plain_bert)  # absolute: what peft would write as base_model
    adapted_and_saved(local, tmp_path / "adapter", tokenizer)
    text = (tmp_path / "adapter" / "README.md").read_text()
    assert str(tmp_path) not in text and "base_model" not in text
    assert ModelCard.load(tmp_path / "adapter" / "README.md").data.library_name == "peft"  # peft's card otherwise

    hub = ContrastiveForPreTraining.from_encoder_pretrained(str(plain_bert), pooler_type="mean")
    hub.config._name_or_path = "google-bert/bert-base-uncased"  # as loaded from the Hub
    adapted_and_saved(hub, tmp_path / "hub-adapter", tokenizer)
    card = ModelCard.load(tmp_path / "hub-adapter" / "README.md")
    assert card.data.base_model == "google-bert/bert-base-uncased"
    assert "base_model:adapter:google-bert/bert-base-uncased" in card.data.tags


@pytest.mark.parametrize(
    ("given", "recorded"),
    [
        ("sentence-transformers/all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"),  # a Hub id, as it is
        ("models/bert", os.path.join("models", "bert")),  # inside the working directory: relative to it
        ("ABSOLUTE", os.path.join("models", "bert")),  # an absolute path inside it: the same relative name
        ("OUTSIDE", "elsewhere"),  # outside it: the folder's name
        (None, None),  # built from scratch: no base
    ],
)
def test_adapter_base_name_is_never_a_local_absolute_path(given, recorded, tmp_path, monkeypatch):
    (tmp_path / "work" / "models" / "bert").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    given = {"ABSOLUTE": str(tmp_path / "work" / "models" / "bert"), "OUTSIDE": str(tmp_path / "elsewhere")}.get(
        given, given
    )
    assert adapter_base_name(given) == recorded


def test_the_card_of_an_adapter_loads_the_adapter_with_peft_and_names_the_merged_folder_elsewhere(
    tokenizer, plain_bert, tmp_path
):
    model = ContrastiveForPreTraining.from_encoder_pretrained(str(plain_bert), pooler_type="mean")
    adapted = adapted_and_saved(model, tmp_path / "adapter", tokenizer)
    trainer = ContrastiveTrainer(
        model=adapted,
        args=ContrastiveTrainingArguments(output_dir=str(tmp_path / "lora-run"), report_to="none", use_cpu=True),
        data_collator=ContrastiveDataCollator(tokenizer, augmentation="dropout", mlm=False),
    )
    info = card_info_from_trainer(trainer, training_data="wiki.txt")
    assert info.adapter.startswith("LORA adapter (r=4, alpha=8) on query, value")
    assert (info.adapter_base, info.adapter_class) == (os.path.join("models", "bert"), "ContrastiveForPreTraining")
    card = render_model_card(adapted, info).content
    assert str(tmp_path) not in card  # no local absolute path
    assert 'AutoPeftModel.from_pretrained(\n    "lora-run", import_allowlist=["contrastive_hf"]' in card
    assert "a local folder, named relative to the folder the training run started in" in card
    for line in (
        'SentenceTransformer("lora-run-merged")',
        'ContrastiveModel.from_pretrained("lora-run-merged")',
        'AutoModel.from_pretrained("lora-run-merged")',
    ):
        assert line in card
    assert 'SentenceTransformer("lora-run")' not in card and 'ContrastiveModel.from_pretrained("lora-run")' not in card

    # pushed to the Hub: the merged model's Hub id, and how to upload it there
    pushed = render_model_card(adapted, dataclasses.replace(info, repo_id="me/lora-run")).content
    assert 'SentenceTransformer("me/lora-run-merged")' in pushed
    assert "`hf upload me/lora-run-merged lora-run-merged`" in pushed


def test_sg_bert_regularization_counts_the_adapter_delta(tokenizer):
    from contrastive_hf.recipes.sg_bert.losses import parameter_distance

    model = ContrastiveModel(ContrastiveConfig(encoder=tiny_bert_config(vocab_size=len(tokenizer)), pooler_type="cls"))
    frozen = copy.deepcopy(model.encoder).requires_grad_(False)
    adapted = add_adapter(model, lora_config(model, r=4))
    assert float(parameter_distance(frozen, adapted.encoder)) == 0.0  # B starts at zero: BERT_T is BERT_F
    with torch.no_grad():
        for name, parameter in adapted.named_parameters():
            if "lora_B" in name:
                parameter.fill_(0.01)
    expected = sum(float(delta.pow(2).sum()) for delta in adapter_weight_deltas(adapted))
    distance = parameter_distance(frozen, adapted.encoder)
    assert expected > 0 and float(distance) == pytest.approx(expected, rel=1e-5)
    distance.backward()
    assert all(p.grad is not None for name, p in adapted.named_parameters() if "lora_A" in name)
