"""Several datasets in one run: one dataset per batch under a proportional or round-robin schedule, the same on
every process, each dataset's loss logged (checked against the per-step losses), an exact resume in a later epoch,
and run_simcse's --train_files end to end."""

from __future__ import annotations

import json
from collections import Counter

import pytest
import torch
from datasets import Dataset

from contrastive_hf import ContrastiveConfig, ContrastiveForPreTraining
from contrastive_hf.data.collators import ContrastiveDataCollator, PairCollator
from contrastive_hf.data.mixture import (
    DATASET_KEY,
    DatasetMixture,
    MixtureBatchSampler,
    MixtureCollator,
    parse_named_files,
)
from contrastive_hf.data.reading import load_corpus
from contrastive_hf.data.tokenizing import tokenize_corpus
from contrastive_hf.training.trainer import ContrastiveTrainer
from contrastive_hf.training.training_args import ContrastiveTrainingArguments

from conftest import DEMO_DATA, tiny_bert_config
from helpers.builders import run_simcse_in_process, saved_settings, snli_slice

NLI, WIKI = 24, 16  # batches of 8: 3 + 2 per epoch


def datasets(tokenizer) -> dict:
    lines = (DEMO_DATA / "wiki1m_sample.txt").read_text().splitlines()[:WIKI]
    return {
        "nli": load_corpus(str(DEMO_DATA / "nli_sample.csv")).select(range(NLI)),  # sent0, sent1, hard_neg
        "wiki": tokenize_corpus(Dataset.from_dict({"text": lines}), tokenizer, max_seq_length=24),
    }


def collator(tokenizer) -> MixtureCollator:
    return MixtureCollator(
        {
            "nli": PairCollator(tokenizer, max_length=24),
            "wiki": ContrastiveDataCollator(tokenizer, augmentation="dropout", mlm=False, seed=0),
        }
    )


def test_each_batch_is_one_dataset_and_the_schedules_order_them(tokenizer):
    mixture = DatasetMixture(datasets(tokenizer))
    assert len(mixture) == NLI + WIKI and mixture[NLI][DATASET_KEY] == "wiki" and mixture[0][DATASET_KEY] == "nli"
    batches = collator(tokenizer)
    for schedule, expected in (("round_robin", ["nli", "wiki", "nli", "wiki", "nli"]), ("random", None)):
        sampler = MixtureBatchSampler(mixture.sizes, 8, schedule=schedule, seed=1)
        names = []
        for indices in sampler:
            batch = batches([mixture[i] for i in indices])
            names.append(batch[DATASET_KEY])
            assert batch["input_ids"].shape[:2] == (8, 3 if names[-1] == "nli" else 2)
        assert Counter(names) == {"nli": 3, "wiki": 2}
        if expected is not None:
            assert names == expected
    # two processes draw the same dataset at every step, and split its global batch
    ranks = [list(MixtureBatchSampler(mixture.sizes, 4, seed=2, num_processes=2, process_index=r)) for r in (0, 1)]
    for first, second in zip(*ranks, strict=True):
        assert {mixture[i][DATASET_KEY] for i in first + second} == {mixture[first[0]][DATASET_KEY]}
        assert not set(first) & set(second)
    with pytest.raises(ValueError, match="one dataset"):
        batches([mixture[0], mixture[NLI]])
    with pytest.raises(ValueError, match="Unknown dataset schedule 'sequential'"):
        DatasetMixture(datasets(tokenizer), schedule="sequential")
    with pytest.raises(ValueError, match="letters, digits"):
        DatasetMixture({"a b": [1]})
    assert parse_named_files("nli=a.csv, wiki=b.txt") == {"nli": "a.csv", "wiki": "b.txt"}
    with pytest.raises(ValueError, match="name=path"):
        parse_named_files("a.csv")


class RecordingCollator:
    def __init__(self, collator, name, drawn):
        self.collator, self.name, self.drawn = collator, name, drawn

    def set_epoch(self, epoch):
        self.collator.set_epoch(epoch)

    def __call__(self, features):
        self.drawn.append((self.name, sorted(str(f.get("example_index", f.get("sent0"))) for f in features)))
        return self.collator(features)


def train(tokenizer, output_dir, resume_from_checkpoint=None, logging_steps=1):
    torch.manual_seed(0)
    encoder = tiny_bert_config(vocab_size=len(tokenizer), hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = ContrastiveForPreTraining(ContrastiveConfig(encoder=encoder, contrastive_loss="info_nce", mlm_weight=0))
    args = ContrastiveTrainingArguments(
        output_dir=str(output_dir), per_device_train_batch_size=8, num_train_epochs=2, save_strategy="steps",
        save_steps=6,  # one checkpoint, after the first step of epoch 1
        learning_rate=1e-3, logging_steps=logging_steps, report_to="none", disable_tqdm=True, use_cpu=True, seed=3,
    )  # fmt: skip
    mixture = DatasetMixture(datasets(tokenizer), schedule="proportional")
    trainer = ContrastiveTrainer(
        model=model, args=args, train_dataset=mixture, data_collator=collator(tokenizer), processing_class=tokenizer
    )
    drawn = []  # (dataset, its examples) of every batch built, in order
    collators = trainer.data_collator.collators
    for name, inner in list(collators.items()):
        collators[name] = RecordingCollator(inner, name, drawn)
    trainer.train(resume_from_checkpoint=resume_from_checkpoint)
    weights = {name: value.detach().clone() for name, value in trainer.model.state_dict().items()}
    logged = {entry["step"]: entry for entry in trainer.state.log_history if "loss" in entry}
    return drawn, weights, logged


@pytest.mark.slow  # a run and its resume: 1.5 s of CPU
def test_each_dataset_s_loss_is_logged_and_a_resumed_run_is_the_uninterrupted_one(tokenizer, tmp_path):
    drawn, weights, logged = train(tokenizer, tmp_path)
    assert len(drawn) == len(logged) == 10
    names = [name for name, _ in drawn]
    assert Counter(names[:5]) == Counter(names[5:]) == {"nli": 3, "wiki": 2}
    assert names[:5] != names[5:] or drawn[:5] != drawn[5:]  # epoch 1 draws a new order (or new batches)
    for step, (name, _) in enumerate(drawn, start=1):  # logged every step: the dataset's loss is the step's loss
        per_dataset = {key: value for key, value in logged[step].items() if key.startswith("cl_loss_")}
        assert per_dataset == {f"cl_loss_{name}": logged[step]["cl_loss"]}

    resumed_drawn, resumed_weights, resumed_logged = train(
        tokenizer, tmp_path, resume_from_checkpoint=str(tmp_path / "checkpoint-6")
    )
    assert resumed_drawn == drawn[6:]  # the batches of the uninterrupted run, in epoch 1
    for name, value in weights.items():
        torch.testing.assert_close(resumed_weights[name], value, rtol=0, atol=1e-6, msg=name)
    for step in range(7, 11):
        for key, value in logged[step].items():
            if key.startswith(("loss", "cl_loss")):
                assert resumed_logged[step][key] == value, (step, key)


@pytest.mark.slow  # a run of a mixture: 1.5 s of CPU
def test_a_dataset_s_logged_loss_is_the_mean_over_its_steps_since_the_last_log(tokenizer, tmp_path):
    drawn, _, every_step = train(tokenizer, tmp_path / "every")
    _, _, every_five = train(tokenizer, tmp_path / "five", logging_steps=5)
    for last in (5, 10):
        steps = range(last - 4, last + 1)
        for name in ("nli", "wiki"):
            losses = [every_step[s]["cl_loss"] for s in steps if drawn[s - 1][0] == name]
            assert every_five[last][f"cl_loss_{name}"] == pytest.approx(sum(losses) / len(losses), abs=2e-4)


@pytest.mark.slow  # a whole script run (in this process)
def test_run_simcse_trains_on_named_files(tmp_path):

    nli = snli_slice(tmp_path / "nli.csv", 48)
    log, output_dir = run_simcse_in_process(
        tmp_path, "sup", "--train_files", f"nli={nli},wiki={DEMO_DATA / 'wiki1m_sample.txt'}",
        "--max_train_samples", "32", "--dataset_schedule", "round_robin", "--max_steps", "4",
    )  # fmt: skip
    assert "Dataset 'nli': 32 examples" in log and "Dataset 'wiki': 32 examples" in log
    _, _, history = saved_settings(output_dir)
    seen = [key for entry in history for key in entry if key.startswith("cl_loss_")]
    assert seen == ["cl_loss_nli", "cl_loss_wiki"] * 2  # round robin, one dataset per logged step
    card = (output_dir / "README.md").read_text()
    assert "`one dataset per batch: nli: pairs: sent0 -> sent1, hard negatives hard_neg; wiki: dropout`" in card
    assert "nli (nli.csv), wiki (wiki1m_sample.txt); round_robin schedule" in card
    assert json.loads((output_dir / "contrastive_config.json").read_text())["contrastive_loss"] == "info_nce"
