"""A model that trained its MLM head saves it with the encoder as the architecture's masked-LM model: transformers'
own loader (``AutoModelForMaskedLM``, the fill-mask pipeline) predicts with it, and every other loader takes the
same encoder as before; its evaluation returns the MLM logits transformers' masked-LM models return."""

from __future__ import annotations

import json
import logging

import pytest
import torch
import torch.nn.functional as F
from safetensors import safe_open
from transformers import AlbertConfig, AutoModel, AutoModelForMaskedLM, DistilBertConfig, RobertaConfig

from contrastive_hf import ContrastiveConfig, ContrastiveForPreTraining, ContrastiveModel
from contrastive_hf.models.checkpoint_names import HEADS_WEIGHTS_NAME

from conftest import tiny_bert_config

VOCAB = 100
ENCODERS = {
    "bert": tiny_bert_config(vocab_size=VOCAB),
    "roberta": RobertaConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37
    ),
    "distilbert": DistilBertConfig(vocab_size=VOCAB, dim=32, n_layers=2, n_heads=2, hidden_dim=37),
    "albert": AlbertConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        embedding_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=37,
    ),
}


def trained_head_model(encoder_config, **overrides) -> ContrastiveForPreTraining:
    """A pre-training model whose MLM head is unlike a fresh one (a fresh head's zero bias cannot tell)."""
    torch.manual_seed(0)
    model = ContrastiveForPreTraining(ContrastiveConfig(encoder=encoder_config, pooler_type="mean", **overrides))
    with torch.no_grad():
        for parameter in model.mlm_head.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.1)
    return model.eval()


def tokens(size=3, length=7):
    input_ids = torch.randint(5, VOCAB, (size, length), generator=torch.Generator().manual_seed(1))
    attention_mask = torch.ones_like(input_ids)
    attention_mask[-1, length - 2 :] = 0
    return input_ids, attention_mask


def head_weights(model: ContrastiveForPreTraining) -> dict[str, torch.Tensor]:
    return {name: tensor for name, tensor in model.state_dict().items() if name.startswith("mlm_head.")}


@pytest.mark.parametrize("architecture", list(ENCODERS))
def test_auto_model_for_masked_lm_predicts_with_the_trained_head(tmp_path, architecture):
    model = trained_head_model(ENCODERS[architecture])
    model.save_pretrained(tmp_path)
    masked_lm_name = type(AutoModelForMaskedLM.from_config(ENCODERS[architecture])).__name__
    assert json.loads((tmp_path / "config.json").read_text())["architectures"] == [masked_lm_name]
    masked_lm, loading = AutoModelForMaskedLM.from_pretrained(tmp_path, output_loading_info=True)
    assert not loading["missing_keys"] and not loading["mismatched_keys"]
    input_ids, attention_mask = tokens()
    with torch.no_grad():
        theirs = masked_lm.eval()(input_ids=input_ids, attention_mask=attention_mask).logits
        ours = model.mlm_logits(input_ids, attention_mask)
    real = attention_mask.bool()  # the tokens a label can name (padding is scored from a zero state when packed)
    torch.testing.assert_close(theirs[real], ours[real], rtol=0, atol=1e-5)

    # every other loader takes the same weights from the same file
    for name, tensor in head_weights(ContrastiveForPreTraining.from_pretrained(tmp_path)).items():
        torch.testing.assert_close(tensor, model.state_dict()[name], rtol=0, atol=0)
    encoder = AutoModel.from_pretrained(tmp_path)
    for name, tensor in model.contrastive.encoder.state_dict().items():
        torch.testing.assert_close(encoder.state_dict()[name], tensor, rtol=0, atol=0)


def test_the_head_is_saved_once_in_model_safetensors_under_bert_s_names(tmp_path):
    model = trained_head_model(ENCODERS["bert"])
    model.save_pretrained(tmp_path)
    with safe_open(tmp_path / "model.safetensors", framework="pt") as weights:
        names = set(weights.keys())
    head = {name for name in names if not name.startswith("bert.")}
    # what BertForMaskedLM.save_pretrained writes: the decoder, tied to the word embeddings, is not saved
    assert head == {
        "cls.predictions.bias",
        "cls.predictions.transform.dense.weight",
        "cls.predictions.transform.dense.bias",
        "cls.predictions.transform.LayerNorm.weight",
        "cls.predictions.transform.LayerNorm.bias",
    }
    assert "bert.pooler.dense.weight" in names  # the encoder whole, for AutoModel and sentence-transformers
    with safe_open(tmp_path / HEADS_WEIGHTS_NAME, framework="pt") as heads:
        assert not any(name.startswith("mlm_head.") for name in heads.keys())


def test_a_model_that_trained_no_mlm_saves_the_encoder_alone(tmp_path):
    """SimCSE (mlm_weight 0) never trains its MLM head: the checkpoint does not pass it for a fill-mask model."""
    model = trained_head_model(ENCODERS["bert"], mlm_weight=0.0)
    model.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["architectures"] == ["BertModel"]
    for name, tensor in head_weights(ContrastiveForPreTraining.from_pretrained(tmp_path)).items():
        torch.testing.assert_close(tensor, model.state_dict()[name], rtol=0, atol=0)


def test_loading_the_encoder_alone_reports_nothing_of_the_head(tmp_path, caplog):
    model = trained_head_model(ENCODERS["bert"])
    model.save_pretrained(tmp_path)
    with caplog.at_level(logging.WARNING):
        ContrastiveModel.from_pretrained(tmp_path)
        ContrastiveForPreTraining.from_pretrained(tmp_path)
    assert "LOAD REPORT" not in caplog.text and "cls.predictions" not in caplog.text
    with caplog.at_level(logging.WARNING):
        AutoModel.from_pretrained(tmp_path)  # transformers' own loader, as for bert-base-uncased: a report
    assert "cls.predictions" in caplog.text


@pytest.mark.parametrize("max_shard_size", ["5GB", "20KB"])
def test_a_trainer_resuming_loads_the_head_from_the_encoder_s_weights(tmp_path, max_shard_size):
    model = trained_head_model(ENCODERS["bert"])
    model.save_pretrained(tmp_path, max_shard_size=max_shard_size)
    resumed = ContrastiveForPreTraining(ContrastiveConfig(encoder=ENCODERS["bert"], pooler_type="mean"))
    resumed.load_saved_weights(tmp_path)  # what ContrastiveTrainer's resume and best-model loading call
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(resumed.state_dict()[name], tensor, rtol=0, atol=0)


@pytest.mark.parametrize("sub_batch_size", [0, "packed"])
def test_evaluation_returns_the_logits_of_every_token_and_the_training_loss(sub_batch_size):
    model = trained_head_model(ENCODERS["bert"], sub_batch_size=sub_batch_size)
    input_ids, attention_mask = tokens()
    labels = torch.full_like(input_ids, -100)
    labels[:, 2], labels[0, 4] = input_ids[:, 2], input_ids[0, 4]
    views = torch.stack([input_ids, input_ids], dim=1)
    batch = dict(input_ids=views, mlm_input_ids=input_ids, mlm_attention_mask=attention_mask, mlm_labels=labels)

    output = model(**batch)  # eval mode: the logits, as BertForMaskedLM returns them
    hidden = model.contrastive.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    head = model.mlm_head
    expected = F.linear(head.layer_norm(F.gelu(head.dense(hidden))), model.get_input_embeddings().weight, head.bias)
    assert output.logits.shape == (3, 7, VOCAB)
    real = attention_mask.bool()
    torch.testing.assert_close(output.logits[real], expected[real], rtol=1e-5, atol=1e-5)
    assert list(output.keys())[:2] == ["loss", "logits"]  # the Trainer reads the first prediction as the logits
    torch.testing.assert_close(output.mlm_loss, model.compute_mlm_loss(input_ids, attention_mask, labels))

    assert model(**batch, return_mlm_logits=False).logits is None
    assert model.train()(**batch).logits is None  # a training step scores the masked tokens only
