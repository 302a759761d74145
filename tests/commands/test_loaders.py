"""What a script prints before training: STS-B dev as the run trains the model, and, where the run's settings replace
how its starting sentence-transformers model embeds (the demo pools all-MiniLM-L6-v2's [CLS] token, which the model
averages over), the starting model's own score beside it, which sentence-transformers' own model gives too."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from sentence_transformers import SentenceTransformer
from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

from contrastive_hf import ContrastiveForPreTraining
from contrastive_hf.commands.loaders import load_sts_dev
from contrastive_hf.evaluation import read_stsbenchmark, sts_eval_metrics

from conftest import TEST_DATA
from helpers.builders import sentence_transformers_folder, tiny_encoder_folder

STS_DEV = str(TEST_DATA / "sts" / "stsbenchmark" / "sts-dev.csv")  # 40 pairs of STS-B dev


@pytest.fixture
def folder(tokenizer, tmp_path) -> str:
    encoder = tiny_encoder_folder(tokenizer, tmp_path / "bert")
    modules = [Transformer(encoder, max_seq_length=48), Pooling(32, "mean"), Normalize()]
    return sentence_transformers_folder(tmp_path / "st", modules)


def lines_before_training(model, tokenizer, capsys) -> list[str]:
    data_args = SimpleNamespace(stsb_dev_file=STS_DEV)
    training_args = SimpleNamespace(device=torch.device("cpu"), eval_strategy="no", should_log=True)
    load_sts_dev(data_args, training_args, model, tokenizer)
    return [line for line in capsys.readouterr().out.splitlines() if line.startswith("STS-B dev Spearman")]


def test_the_starting_models_own_score_is_printed_beside_the_runs(folder, tokenizer, capsys):
    model = ContrastiveForPreTraining.from_pretrained(folder, pooler_type="cls_before_pooler")
    stsb = read_stsbenchmark(STS_DEV)
    trained_as = sts_eval_metrics(model, stsb, tokenizer, prefix="stsb")["stsb_spearman"]
    own = sts_eval_metrics(SentenceTransformer(folder, device="cpu"), stsb, None, prefix="stsb")["stsb_spearman"]
    assert abs(own - trained_as) > 0.1  # the two poolings differ here: each line is its own figure
    assert lines_before_training(model, tokenizer, capsys) == [
        f"STS-B dev Spearman before training: {trained_as:.2f} (with this run's pooler_type='cls_before_pooler')",
        f"STS-B dev Spearman of the starting model as its folder defines it (pooler_type='mean'): {own:.2f}",
    ]


def test_a_run_that_keeps_the_folders_settings_prints_one_score(folder, tokenizer, capsys):
    model = ContrastiveForPreTraining.from_pretrained(folder, temperature=0.1)  # no setting of the embedding
    (line,) = lines_before_training(model, tokenizer, capsys)
    assert line.startswith("STS-B dev Spearman before training: ") and "(" not in line
