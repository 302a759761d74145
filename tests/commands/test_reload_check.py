"""Where a script scores and checks its model: the STS-B score before training on the device training will use, and
the end-of-run reload check on the device the trained embeddings were computed on, with a tolerance that fits the
precision they were trained in (issue 30: a GPU run scored before training on the CPU, and its check re-encoded a
GPU-trained model on the CPU, where TF32 or bf16 alone break a 1e-5 tolerance)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

import contrastive_hf.evaluation
from contrastive_hf import ContrastiveConfig, ContrastiveModel
from contrastive_hf.commands.loaders import load_sts_dev
from contrastive_hf.commands.reload_check import ReloadReference, trained_embeddings, verify_reload

from conftest import DEMO_DATA, tiny_bert_config

SENTENCES = ["A man is playing a guitar.", "A cat sleeps on the sofa.", "Stocks fell sharply on Monday."]


def test_sts_before_training_is_scored_on_the_training_device(monkeypatch, tokenizer):
    scored_on = []

    def spy(model, stsb, tokenizer, prefix):
        scored_on.append(next(model.parameters()).device)
        return {f"{prefix}_spearman": 50.0}

    monkeypatch.setattr(contrastive_hf.evaluation, "sts_eval_metrics", spy)
    model = ContrastiveModel(ContrastiveConfig(encoder=tiny_bert_config()))
    data_args = SimpleNamespace(stsb_dev_file=str(DEMO_DATA / "sts-dev.csv"))
    # "meta" stands for a GPU: a device other than the CPU the model was built on
    training_args = SimpleNamespace(device=torch.device("meta"), eval_strategy="no", should_log=False)
    _, before = load_sts_dev(data_args, training_args, model, tokenizer)
    assert scored_on == [torch.device("meta")] and before == {"stsb_spearman": 50.0}


@pytest.fixture
def saved(tokenizer, tmp_path):
    torch.manual_seed(0)
    config = ContrastiveConfig(encoder=tiny_bert_config(), projection_type="mlp", projection_at_inference=True)
    model = ContrastiveModel(config).eval()
    model.tokenizer = tokenizer
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    return model, tmp_path


def test_the_reload_check_loads_on_the_trained_device(saved, tokenizer, monkeypatch, capsys):
    import sentence_transformers

    model, folder = saved
    devices = []
    moved = torch.nn.Module.to

    def to(module, *args, **kwargs):
        if isinstance(module, ContrastiveModel) and isinstance(args[0], (str, torch.device)):
            devices.append(torch.device(args[0]))
        return moved(module, *args, **kwargs)

    built = sentence_transformers.SentenceTransformer.__init__

    def sentence_transformer(self, *args, device=None, **kwargs):
        devices.append(torch.device(device))
        built(self, *args, device=device, **kwargs)

    monkeypatch.setattr(torch.nn.Module, "to", to)
    monkeypatch.setattr(sentence_transformers.SentenceTransformer, "__init__", sentence_transformer)
    reference = trained_embeddings(model, SENTENCES, tokenizer)
    assert reference.device == torch.device("cpu") and reference.weights_dtype == torch.float32
    verify_reload(str(folder), tokenizer, reference)
    assert devices == [reference.device, reference.device]  # ContrastiveModel, then SentenceTransformer
    assert capsys.readouterr().out.count("gives the trained embeddings (max |difference|") == 2


def test_the_reload_check_fails_on_other_weights(saved, tokenizer):
    model, folder = saved
    reference = trained_embeddings(model, SENTENCES, tokenizer)
    other = ReloadReference(reference.sentences, reference.embeddings + 1e-4, reference.device, torch.float32)
    with pytest.raises(RuntimeError, match="does not reproduce the trained embeddings"):
        verify_reload(str(folder), tokenizer, other)


def test_tolerance_fits_the_precision_trained_in():
    rng = np.random.default_rng(0)
    embeddings = rng.standard_normal((4, 16)).astype(np.float32)
    bf16_rounded = torch.from_numpy(embeddings).bfloat16().float().numpy()  # about 2e-3 relative
    exact = ReloadReference(["a"] * 4, embeddings, torch.device("cpu"), torch.float32)
    assert exact.agreement(embeddings + 5e-6)[0]
    assert not exact.agreement(bf16_rounded)[0]  # float32 training: the same arithmetic, to 1e-5
    half = ReloadReference(["a"] * 4, embeddings, torch.device("cpu"), torch.bfloat16)
    agrees, words = half.agreement(bf16_rounded)
    assert agrees and words.startswith("lowest cosine 1.0000") and "torch.bfloat16" in words
    assert not half.agreement(np.roll(embeddings, 1, axis=1))[0]  # another embedding entirely
