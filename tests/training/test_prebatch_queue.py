from __future__ import annotations

import pytest
import torch
from datasets import Dataset
from safetensors.torch import load_file

from contrastive_hf import ContrastiveConfig, ContrastiveForPreTraining
from contrastive_hf.models.objectives import InfoNCELoss
from contrastive_hf.models.prebatch_queue import PrebatchQueue
from contrastive_hf.training.trainer import LOSS_STATE_FILE, ContrastiveTrainer
from contrastive_hf.training.training_args import ContrastiveTrainingArguments

from conftest import tiny_bert_config
from helpers.builders import QUEUE_SENTENCES, make_queue_trainer, queue_holding


def test_queue_is_a_bounded_fifo_with_warmup_and_reset():
    queue = PrebatchQueue(num_batches=2, warmup_steps=3)
    batches = [torch.full((4, 3), float(i)) for i in range(3)]
    queue.step = 10
    assert queue.negatives() is None  # empty
    for batch in batches:
        queue.push(batch)
    assert len(queue) == 8
    queue.step = 2
    assert queue.negatives() is None  # warming up
    queue.step = 3
    torch.testing.assert_close(queue.negatives(), torch.cat(batches[1:]))  # oldest dropped
    restored = PrebatchQueue(num_batches=2)
    restored.load_state_dict(queue.state_dict())
    torch.testing.assert_close(restored.negatives(), queue.negatives())
    queue.reset()
    assert len(queue) == 0 and queue.negatives() is None
    with pytest.raises(ValueError, match="num_batches"):
        PrebatchQueue(num_batches=0)


def test_queued_keys_are_extra_negatives_of_the_loss():
    model = ContrastiveForPreTraining(
        ContrastiveConfig(encoder=tiny_bert_config(vocab_size=60), contrastive_loss="info_nce", mlm_weight=0.0)
    )
    for module in model.modules():  # dropout off: the two calls below see the same views
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    views = torch.randint(5, 60, (4, 2, 6))
    queued = torch.randn(8, 32)
    queue = queue_holding(model, queued)
    out = model(input_ids=views)
    assert torch.equal(queue.negatives(), out.embeddings[:, 1].detach())  # the batch's keys, queued after it
    # the formula, written out in float64 (SimCSE eq. (1), DensePhrases' pre-batch negatives as more columns):
    # l_i = -log(exp(cos(q_i, k_i) / t) / (sum_j exp(cos(q_i, k_j) / t) + sum_m exp(cos(q_i, e_m) / t)))
    queries, keys, extra = (x.detach().double() for x in (out.embeddings[:, 0], out.embeddings[:, 1], queued))
    expected = 0.0
    for i, query in enumerate(queries):
        logits = [torch.cosine_similarity(query, key, dim=0) / 0.05 for key in (*keys, *extra)]
        expected -= (logits[i] - torch.logsumexp(torch.stack(logits), dim=0)) / len(queries)
    torch.testing.assert_close(out.loss.double(), expected, rtol=1e-5, atol=1e-6)
    model.loss_fn.prebatch = None
    assert out.loss > model(input_ids=views).loss  # more negatives, larger loss


def test_trainer_feeds_the_queue_after_warmup(tokenizer, tmp_path):
    trainer = make_queue_trainer(tokenizer, tmp_path, max_steps=4, prebatch_size=2, prebatch_warmup_steps=2)
    seen = []
    loss = trainer.model.loss_fn
    compute = loss.compute

    def recording_compute(views):
        seen.append(None if views.extra_negatives is None else views.extra_negatives.shape[0])
        return compute(views)

    loss.compute = recording_compute
    trainer.train()
    assert seen == [None, None, 8, 8]  # steps 0-1 warm up; then 2 batches of 4 keys
    assert loss.prebatch is trainer.loss_fn.prebatch and len(loss.prebatch) == 8


def test_nt_xent_with_a_queue_is_refused_with_the_fix(tokenizer, tmp_path):
    model = ContrastiveForPreTraining(ContrastiveConfig(encoder=tiny_bert_config(vocab_size=len(tokenizer))))
    args = ContrastiveTrainingArguments(output_dir=str(tmp_path), prebatch_size=2, report_to="none", use_cpu=True)
    with pytest.raises(ValueError, match=r"--prebatch_size: The 'nt_xent' loss takes no extra negatives.*info_nce"):
        ContrastiveTrainer(model=model, args=args, train_dataset=Dataset.from_dict({"text": QUEUE_SENTENCES}))


class _CountingLoss(InfoNCELoss):
    """InfoNCE holding a state of its own (the training batches it scored), through the protocol the trainer calls
    for any loss: the trainer knows nothing of it."""

    name = "counting_info_nce"

    def __init__(self, **settings):
        super().__init__(**settings)
        self.scored, self.steps, self.epochs = torch.zeros(()), [], 0

    has_state = True

    def forward(self, embeddings, sentence_ids=None):
        self.scored += self.training
        return super().forward(embeddings, sentence_ids)

    def on_step_begin(self, step):
        self.steps.append(step)

    def on_epoch_begin(self):
        self.epochs += 1

    def step_metrics(self):
        return {"scored": float(self.scored)}

    def loss_state(self):
        return {"scored": self.scored.clone()}

    def load_loss_state(self, state, device="cpu"):
        self.scored = state["scored"].to(device)


def test_a_loss_with_state_of_its_own_is_stepped_logged_saved_and_restored_by_the_trainer(tokenizer, tmp_path):
    first = make_queue_trainer(tokenizer, tmp_path, max_steps=2, save_strategy="steps", save_steps=2, logging_steps=1)
    first.loss_fn.__class__ = _CountingLoss  # the model's loss, with its settings, counting
    first.loss_fn.scored, first.loss_fn.steps, first.loss_fn.epochs = torch.zeros(()), [], 0
    first = ContrastiveTrainer(
        model=first.model, args=first.args, train_dataset=first.train_dataset, data_collator=first.data_collator
    )
    first.train()
    assert first.loss_fn.steps == [0, 1] and first.loss_fn.epochs == 1
    assert [entry["scored"] for entry in first.state.log_history if "scored" in entry] == [1.0, 2.0]
    assert float(load_file(tmp_path / "checkpoint-2" / LOSS_STATE_FILE)["scored"]) == 2.0

    resumed = make_queue_trainer(tokenizer, tmp_path, max_steps=3, save_strategy="no")
    resumed.loss_fn.__class__ = _CountingLoss
    resumed.loss_fn.scored, resumed.loss_fn.steps, resumed.loss_fn.epochs = torch.zeros(()), [], 0
    resumed = ContrastiveTrainer(
        model=resumed.model, args=resumed.args, train_dataset=resumed.train_dataset,
        data_collator=resumed.data_collator,
    )  # fmt: skip
    resumed.train(resume_from_checkpoint=str(tmp_path / "checkpoint-2"))
    assert resumed.loss_fn.steps == [2] and float(resumed.loss_fn.scored) == 3.0  # restored, then one more


@pytest.mark.slow  # a run and its resume: 1 s of CPU
def test_resume_restores_the_queue_and_gives_the_uninterrupted_weights(tokenizer, tmp_path):
    straight = make_queue_trainer(tokenizer, tmp_path / "straight", max_steps=4, prebatch_size=2, save_strategy="no")
    straight.train()

    first = make_queue_trainer(
        tokenizer, tmp_path / "resumed", max_steps=4, prebatch_size=2, save_strategy="steps", save_steps=2
    )
    first.train()  # saves checkpoint-2 (with its queue) and checkpoint-4
    checkpoint = tmp_path / "resumed" / "checkpoint-2"
    saved = load_file(checkpoint / LOSS_STATE_FILE)
    assert sorted(saved) == ["batch_0", "batch_1", "ids_0", "ids_1"]  # two batches of keys, with their sentence ids
    resumed = make_queue_trainer(tokenizer, tmp_path / "resumed", max_steps=4, prebatch_size=2, save_strategy="no")
    resumed.train(resume_from_checkpoint=str(checkpoint))
    for (name, expected), (_, got) in zip(
        straight.model.named_parameters(), resumed.model.named_parameters(), strict=True
    ):
        torch.testing.assert_close(got, expected, atol=1e-6, rtol=0, msg=name)
    resumed_queue, straight_queue = resumed.loss_fn.prebatch, straight.loss_fn.prebatch
    torch.testing.assert_close(resumed_queue.negatives(), straight_queue.negatives())
    assert torch.equal(resumed_queue.negative_ids(), straight_queue.negative_ids())
