"""Keyed random draws: known answers, a pure-Python reference, statistics, and exact resumption of training views."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
import torch
from datasets import Dataset
from hypothesis import given, settings
from hypothesis import strategies as st

from contrastive_hf import ContrastiveConfig, ContrastiveForPreTraining
from contrastive_hf.data.augmentations import add_del_token
from contrastive_hf.data.collators import ContrastiveDataCollator
from contrastive_hf.data.seeding import combine, example_keys, mix64, random_bits, stream, uniform
from contrastive_hf.data.tokenizing import tokenize_corpus
from contrastive_hf.training.trainer import ContrastiveTrainer
from contrastive_hf.training.training_args import ContrastiveTrainingArguments

from conftest import REPO_ROOT, tiny_bert_config

MASK = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


def reference_mix64(value: int) -> int:
    """SplitMix64's output function, written with Python integers."""
    z = value & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def reference_combine(key: int, value: int) -> int:
    return reference_mix64(key ^ reference_mix64(value + GOLDEN))


def reference_bits(key: int, counter: int) -> int:
    return reference_mix64(key + (counter + 1) * GOLDEN)


def test_splitmix64_known_answer():
    # SplitMix64 seeded with 0: the first outputs of the reference implementation (Vigna's splitmix64.c)
    assert int(random_bits(np.uint64(0), 0)) == 0xE220A8397B1DCDAF
    assert int(random_bits(np.uint64(0), 1)) == 0x6E789E6AA1B965F4
    assert int(random_bits(np.uint64(0), 2)) == 0x06C45D188009454F


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    values=st.lists(st.integers(min_value=0, max_value=MASK), min_size=1, max_size=20),
    key=st.integers(min_value=0, max_value=MASK),
)
def test_vectorised_matches_python_reference(values, key):
    array = np.array(values, dtype=np.uint64)
    assert mix64(array).tolist() == [reference_mix64(v) for v in values]
    assert combine(np.uint64(key), array).tolist() == [reference_combine(key, v) for v in values]
    counters = np.arange(len(values))
    assert random_bits(np.uint64(key), counters).tolist() == [reference_bits(key, c) for c in range(len(values))]
    expected_uniform = [(reference_bits(key, c) >> 11) * 2.0**-53 for c in range(len(values))]
    assert uniform(np.uint64(key), counters).tolist() == expected_uniform


def test_example_keys_follow_the_documented_derivation():
    seed, epoch = 42, 3
    examples, views = [0, 1, 7, 2**40 + 5], [0, 1, 0, 1]
    keys = example_keys(seed, epoch, np.array(examples, dtype=np.uint64), np.array(views))
    expected = [
        reference_combine(reference_combine(reference_combine(reference_mix64(seed), epoch), example), view)
        for example, view in zip(examples, views, strict=True)
    ]
    assert keys.tolist() == expected
    # pinned: a change here changes every user's views (and breaks resuming runs started before it)
    assert keys[:3].tolist() == [5716127357467800693, 8417352565979108552, 13810566859158979588]
    # stream names are hashed with crc32, identical in every process (Python's hash() is salted)
    assert stream(keys, "del_span").tolist() == [reference_combine(k, zlib.crc32(b"del_span")) for k in expected]


def test_every_coordinate_of_the_key_matters():
    base = example_keys(1, 0, np.uint64(10), 0)
    for other in (example_keys(2, 0, np.uint64(10), 0), example_keys(1, 1, np.uint64(10), 0)):
        assert other != base
    assert example_keys(1, 0, np.uint64(11), 0) != base
    assert example_keys(1, 0, np.uint64(10), 1) != base
    assert stream(base, "a") != stream(base, "b")


def test_uniform_statistics():
    keys = example_keys(0, 0, np.arange(200, dtype=np.uint64), 0)
    draws = uniform(keys[:, None], np.arange(500))  # (200, 500)
    assert draws.min() >= 0.0 and draws.max() < 1.0
    assert abs(draws.mean() - 0.5) < 0.005
    histogram, _ = np.histogram(draws, bins=20, range=(0, 1))
    chi2 = ((histogram - draws.size / 20) ** 2 / (draws.size / 20)).sum()
    assert chi2 < 45  # 19 degrees of freedom: p < 1e-3 above ~43.8
    # neighbouring counters and neighbouring keys are uncorrelated
    assert abs(np.corrcoef(draws[:, :-1].ravel(), draws[:, 1:].ravel())[0, 1]) < 0.01
    assert abs(np.corrcoef(draws[:-1].ravel(), draws[1:].ravel())[0, 1]) < 0.01


# ----------------------------------------------------------------------------------------------------
# Resuming training sees the views of the uninterrupted run; each epoch sees new ones
# ----------------------------------------------------------------------------------------------------


class RecordingCollator:
    """Wraps a collator and records (epoch, example indices, views, MLM inputs) of every batch it builds."""

    def __init__(self, collator):
        self.collator = collator
        self.batches = []

    def set_epoch(self, epoch):
        self.collator.set_epoch(epoch)

    def __call__(self, features):
        batch = self.collator(features)
        indices = [feature["example_index"] for feature in features]
        self.batches.append((self.collator.epoch, indices, batch["input_ids"].clone(), batch["mlm_input_ids"].clone()))
        return batch


def _train(tokenizer, output_dir, resume_from_checkpoint=None):
    lines = (REPO_ROOT / "examples" / "demo" / "data" / "wiki1m_sample.txt").read_text().splitlines()[:24]
    dataset = tokenize_corpus(Dataset.from_dict({"text": lines}), tokenizer, max_seq_length=16)
    torch.manual_seed(0)
    model = ContrastiveForPreTraining(ContrastiveConfig(encoder=tiny_bert_config(vocab_size=len(tokenizer))))
    collator = RecordingCollator(ContrastiveDataCollator(tokenizer, augmentation="del_span+reorder", seed=3))
    args = ContrastiveTrainingArguments(
        output_dir=str(output_dir),
        per_device_train_batch_size=8,
        num_train_epochs=2,  # 3 steps per epoch
        save_strategy="steps",
        save_steps=4,  # one checkpoint, after the first step of epoch 1
        learning_rate=1e-3,
        logging_steps=1,
        report_to="none",
        disable_tqdm=True,
        use_cpu=True,
        seed=11,
    )
    trainer = ContrastiveTrainer(
        model=model, args=args, train_dataset=dataset, data_collator=collator, processing_class=tokenizer
    )
    trainer.train(resume_from_checkpoint=resume_from_checkpoint)
    weights = {name: value.detach().clone() for name, value in trainer.model.state_dict().items()}
    logged = {entry["step"]: entry for entry in trainer.state.log_history if "loss" in entry}
    return collator.batches, weights, logged


@pytest.mark.slow  # a run and its resume: 1.5 s of CPU
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_resumed_training_sees_the_same_views_and_epochs_differ(tokenizer, tmp_path):
    add_del_token(tokenizer)
    full, full_weights, full_logs = _train(tokenizer, tmp_path)
    assert [batch[0] for batch in full] == [0, 0, 0, 1, 1, 1]

    resumed, resumed_weights, resumed_logs = _train(
        tokenizer, tmp_path, resume_from_checkpoint=str(tmp_path / "checkpoint-4")
    )
    # the resumed run builds exactly the batches the uninterrupted run built after its 4th step
    assert len(resumed) == 2
    for (epoch, indices, views, mlm), (epoch_r, indices_r, views_r, mlm_r) in zip(full[4:], resumed, strict=True):
        assert epoch == epoch_r == 1
        assert indices == indices_r
        assert torch.equal(views, views_r)
        assert torch.equal(mlm, mlm_r)
    for name, value in full_weights.items():
        torch.testing.assert_close(resumed_weights[name], value, rtol=0, atol=1e-6, msg=name)
    # and it logs the losses the uninterrupted run logged at steps 5 and 6
    assert sorted(resumed_logs) == [1, 2, 3, 4, 5, 6]  # steps 1-4 come with the checkpoint
    for step in (5, 6):
        for key in ("loss", "mlm_loss", "cl_loss", "alignment", "uniformity", "grad_norm"):
            assert resumed_logs[step][key] == full_logs[step][key], (step, key)

    # each example's views in epoch 0 differ from its views in epoch 1
    def views_by_example(epoch):
        found = {}
        for batch_epoch, indices, views, _ in full:
            if batch_epoch == epoch:
                for row, index in enumerate(indices):
                    found[index] = views[row]
        return found

    first, second = views_by_example(0), views_by_example(1)
    assert sorted(first) == sorted(second) == list(range(24))
    differing = sum(not torch.equal(first[index], second[index]) for index in first)
    assert differing >= 22, differing
