"""A training step that never makes the host wait for the GPU (issue 32).

On a GPU the host queues kernels ahead of the device; an operation that reads a value back (``.item()``, a boolean
mask, ``nonzero``) or copies from pageable host memory stops it until every queued kernel has run, and at the sizes
of sentence encoders that idle time was most of the gap to the matrix work. `helpers.gpu_contracts.HostSyncCounter`
sees each such operation on the CPU, by its operator; here a non-logging training step of every path runs under it
(the second step: the first makes one-time choices), through ``ContrastiveTrainer.training_step`` as the Trainer
calls it, on batches of the real collators. Each path has its budget, written below with what the remaining ones
are; 0 is the budget of padded and packed SimCSE and CLEAR. Before issue 32 the same steps counted 4 (SimCSE
padded), 7 (sorted), 14 (packed), 12 and 31 (CLEAR padded and packed), 17 (hard negatives, packed), 8 and 119
(GradCache in 3 chunks, SimCSE padded and CLEAR packed).
"""

from __future__ import annotations

import pytest
import torch
from datasets import Dataset

from contrastive_hf import ContrastiveConfig, ContrastiveModel
from contrastive_hf.recipes.sg_bert import SelfGuidedModel, SelfGuidedTrainer, SelfGuidedTrainingArguments
from contrastive_hf.recipes.sg_bert.data import SelfGuidedCollator

from conftest import tiny_bert_config
from helpers.batches import sentences
from helpers.builders import make_dual_encoder_trainer, multitask_trainer, tiny_multitask_model
from helpers.gpu_contracts import HostSyncCounter
from helpers.steps import contrastive_trainer, syncs_of_a_step

# (kind, sub_batch_size, trainer options, budget)
CONTRASTIVE_PATHS = [
    ("simcse", 0, {}, 0),
    ("simcse", "packed", {}, 0),
    ("simcse", "sorted", {}, 0),
    ("simcse", 4, {}, 0),
    ("clear", 0, {}, 0),
    ("clear", "packed", {}, 0),
    ("clear_mlm_on_views", "packed", {}, 0),
    ("hard_negatives", 0, {}, 0),
    ("hard_negatives", "packed", {}, 0),
    ("prompts", "packed", {}, 0),
    ("prompts", 0, {}, 0),
    ("simcse", "packed", {"prebatch_size": 2}, 0),
    ("simcse", 0, {"grad_cache_chunk_size": 3}, 0),
    ("clear", "packed", {"grad_cache_chunk_size": 3}, 0),
]


@pytest.mark.parametrize(("kind", "sub_batch_size", "options", "budget"), CONTRASTIVE_PATHS)
def test_a_contrastive_step_stays_within_its_host_sync_budget(tokenizer, tmp_path, kind, sub_batch_size, options,
                                                              budget):  # fmt: skip
    counter = syncs_of_a_step(contrastive_trainer(tokenizer, tmp_path, kind, sub_batch_size, **options))
    assert counter.total <= budget, counter.where


@pytest.mark.parametrize("sub_batch_size", [0, "packed"])
def test_a_dpr_step_stays_within_its_host_sync_budget(tokenizer, tmp_path, sub_batch_size):
    trainer = make_dual_encoder_trainer(tokenizer, tmp_path, max_steps=3, logging_steps=100)
    trainer.model.config.sub_batch_size = sub_batch_size
    assert syncs_of_a_step(trainer).where == []


def test_an_sg_bert_step_stays_within_its_host_sync_budget(tokenizer, tmp_path):
    """SG-BERT's step (BERT_T and BERT_F on the padded batch, the opt3 loss over every layer): budget 0."""
    torch.manual_seed(0)
    encoder = tiny_bert_config(vocab_size=len(tokenizer))
    tuned = ContrastiveModel(
        ContrastiveConfig(encoder=encoder, pooler_type="cls_before_pooler", projection_type="none")
    )
    model = SelfGuidedModel(tuned, loss="opt3", projection_hidden_size=16)
    args = SelfGuidedTrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=8, max_steps=3, logging_steps=100,
        save_strategy="no", report_to="none", use_cpu=True,
    )  # fmt: skip
    trainer = SelfGuidedTrainer(
        model=model, args=args, train_dataset=Dataset.from_dict({"text": sentences(64)}),
        data_collator=SelfGuidedCollator(tokenizer, max_length=32),
    )  # fmt: skip
    assert syncs_of_a_step(trainer).where == []


def test_a_multitask_pcgrad_step_stays_within_its_host_sync_budget(tokenizer, tmp_path):
    """The multitask recipe's PCGrad step (one batch of every task): budget 3, the `tolist` of each task's random
    order of the others, drawn by a CPU generator (a CPU tensor read on the host: no wait for the GPU there either,
    but the counter cannot tell a CPU tensor of a GPU run from the tensors of this CPU run)."""
    trainer = multitask_trainer(tiny_multitask_model(tokenizer), tokenizer, tmp_path, logging_steps=100, pcgrad=True)
    counter = syncs_of_a_step(trainer)
    assert counter.total <= 3 and all("random_orders" in place for place in counter.where), counter.where


def test_the_counter_sees_each_kind_of_sync():
    """The control: each kind of operation the budgets count is counted."""
    values = torch.arange(6.0)
    with HostSyncCounter() as counter:
        values.sum().item()
        values[values > 2].sum()  # a boolean mask
        values.nonzero()
        torch.tensor([1.0, 2.0]) + values[:2]  # a tensor from host values
        values.tolist()
    assert counter.counts == {"item": 2, "boolean mask": 1, "data-dependent shape": 1, "host tensor": 1}
