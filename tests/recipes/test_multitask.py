"""Multitask fine-tuning: task specs and heads, the shared-encoder model (save/reload, "CL then multitask" from a
contrastive_hf checkpoint), collators, the batch schedules, MultitaskTrainer (PCGrad against the reference, one task
= plain training, gradient accumulation, per-task metrics) and examples/run_multitask.py on the real data, on one
process and on two (DDP + PCGrad = one process on the whole batch)."""

from __future__ import annotations

from collections import Counter

import datasets
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy.stats import spearmanr
from transformers import BertModel

import contrastive_hf
from contrastive_hf import ContrastiveConfig, ContrastiveForPreTraining
from contrastive_hf.models.modeling_multitask import (
    CosineSimilarityHead,
    MultitaskConfig,
    MultitaskModel,
    PairHead,
    TaskSpec,
)
from contrastive_hf.models.objectives import InfoNCELoss, register_loss, unregister_loss
from contrastive_hf.recipes.multitask import (
    MultitaskBatchSampler,
    MultitaskCollator,
    MultitaskDataset,
    TaskCollator,
    task_dataset,
)
from contrastive_hf.recipes.multitask.pcgrad import combine_task_gradients, random_orders
from contrastive_hf.recipes.multitask.trainer import check_pcgrad_setup, task_metrics

from conftest import TEST_DATA, tiny_bert_config
from helpers.builders import (
    MULTITASK_TASKS,
    CountedInfoNCE,
    multitask_toy_data,
    multitask_trainer,
    snli_triples,
    tiny_multitask_model,
)

# ---- Task specs, heads, model ----


def test_task_specs_default_heads_and_reject_bad_settings():
    assert TaskSpec("s", "classification").head == "linear"
    assert TaskSpec("p", "pair_classification").head == "uv_absdiff"
    regression = TaskSpec("r", "pair_regression", num_labels=5)
    assert regression.head == "cosine" and regression.num_labels == 1
    with pytest.raises(ValueError, match="unknown type 'ranking'"):
        TaskSpec("x", "ranking")
    with pytest.raises(ValueError, match="cannot use head 'cosine'"):
        TaskSpec("x", "pair_classification", head="cosine")
    with pytest.raises(ValueError, match="letters, digits and underscores"):
        TaskSpec("a.b", "classification")
    with pytest.raises(ValueError, match="appear more than once"):
        MultitaskConfig(tasks=[TaskSpec("a", "classification").to_dict()] * 2)


def test_pair_heads_compute_their_features():
    torch.manual_seed(0)
    embeddings = torch.randn(5, 2, 4)  # (B, 2, d)
    u, v = embeddings[:, 0], embeddings[:, 1]
    head = PairHead("uv_absdiff_product", 4, 3, dropout=0.0)
    expected = head.classifier(torch.cat([u, v, (u - v).abs(), u * v], dim=-1))
    torch.testing.assert_close(head(embeddings), expected)
    head = PairHead("concat", 4, 2, dropout=0.0)
    torch.testing.assert_close(head(embeddings), head.classifier(torch.cat([u, v], dim=-1)))
    cosine = CosineSimilarityHead()(embeddings)
    torch.testing.assert_close(cosine, F.cosine_similarity(u, v, dim=-1)[:, None])


def test_model_losses_match_their_formulas_and_task_batches_sum_them(tokenizer):
    model = tiny_multitask_model(tokenizer).eval()
    collator = MultitaskCollator(tokenizer, MULTITASK_TASKS)
    data = multitask_toy_data(6)
    batches = collator([{**data[name][i], "task": name} for name in data for i in range(6)])
    expected_total = 0.0
    for spec in MULTITASK_TASKS:
        batch = batches[spec.name]
        output = model(task=spec.name, **batch)
        embeddings = model.embed(batch["input_ids"], batch["attention_mask"])
        logits = model.heads[spec.name](embeddings)
        torch.testing.assert_close(output.logits, logits)
        if spec.is_regression:
            reference = ((logits.squeeze(-1) - batch["labels"]) ** 2).mean()
        else:
            reference = -torch.log_softmax(logits, dim=-1)[torch.arange(6), batch["labels"]].mean()
        torch.testing.assert_close(output.loss, reference)
        expected_total = expected_total + spec.loss_weight * reference
    together = model(task_batches=batches)
    torch.testing.assert_close(together.loss, expected_total)
    assert set(together.task_losses) == {"sst", "mrpc", "stsb"}

    with pytest.raises(ValueError, match=r"takes input_ids of shape \(batch, 2, length\)"):
        model(task="mrpc", input_ids=batches["sst"]["input_ids"])
    with pytest.raises(ValueError, match="Unknown task 'nli'"):
        model(task="nli", input_ids=batches["sst"]["input_ids"])


def test_model_saves_reloads_and_exports_its_encoder(tokenizer, tmp_path):
    model = tiny_multitask_model(tokenizer).eval()
    batch = TaskCollator(tokenizer, MULTITASK_TASKS[1])([{**multitask_toy_data(4)["mrpc"][i]} for i in range(4)])
    model.save_pretrained(tmp_path / "multitask")
    reloaded = MultitaskModel.from_pretrained(tmp_path / "multitask").eval()
    assert [spec.name for spec in reloaded.config.task_specs] == ["sst", "mrpc", "stsb"]
    assert reloaded.config.task_specs[1].loss_weight == 0.5
    with torch.no_grad():
        torch.testing.assert_close(reloaded(**batch).logits, model(**batch).logits)

    model.save_sentence_encoder(tmp_path / "encoder", tokenizer)
    encoder = contrastive_hf.ContrastiveModel.from_pretrained(tmp_path / "encoder")
    sentences = ["a good film", "the plot is boring"]
    np.testing.assert_allclose(
        encoder.encode(sentences, tokenizer=tokenizer), model.encode(sentences, tokenizer=tokenizer), atol=1e-6
    )


def test_contrastive_checkpoints_and_plain_encoders_become_the_shared_encoder(tokenizer, tmp_path):
    """CL then multitask: a ContrastiveForPreTraining checkpoint (run_clear.py's output) gives its encoder."""
    torch.manual_seed(3)
    pretrained = ContrastiveForPreTraining(
        ContrastiveConfig(encoder=tiny_bert_config(vocab_size=len(tokenizer)), pooler_type="avg_first_last")
    )
    pretrained.save_pretrained(tmp_path / "clear")
    model = MultitaskModel.from_sentence_encoder(tmp_path / "clear", MULTITASK_TASKS)
    assert model.config.contrastive.pooler_type == "avg_first_last"  # the checkpoint's own pooler
    source = pretrained.contrastive.encoder.state_dict()
    for name, weight in model.contrastive.encoder.state_dict().items():
        torch.testing.assert_close(weight, source[name])

    BertModel(tiny_bert_config(vocab_size=len(tokenizer))).save_pretrained(tmp_path / "bert")
    plain = MultitaskModel.from_sentence_encoder(tmp_path / "bert", MULTITASK_TASKS, pooler_type="max")
    assert plain.config.contrastive.pooler_type == "max"
    reference = BertModel.from_pretrained(tmp_path / "bert").state_dict()
    for name, weight in plain.contrastive.encoder.state_dict().items():
        torch.testing.assert_close(weight, reference[name])


# ---- A contrastive task ----

NLI = TaskSpec("nli", "contrastive", loss_weight=0.5)


def nli_model(tokenizer, **loss) -> MultitaskModel:
    """SST-2's head and a contrastive task on one tiny encoder whose config names the loss (``loss``)."""
    torch.manual_seed(0)
    encoder = tiny_bert_config(vocab_size=len(tokenizer), hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    config = ContrastiveConfig(encoder=encoder, pooler_type="mean", **loss)
    return MultitaskModel.from_sentence_encoder(contrastive_hf.ContrastiveModel(config), [MULTITASK_TASKS[0], NLI])


def test_a_contrastive_task_is_sentence_transformers_ranking_loss_on_the_shared_embeddings(tokenizer):
    """MultipleNegativesRankingLoss as sentence-transformers defines it (cross-entropy of scale x cosine of each
    anchor with every positive, then every hard negative, of the batch), on SNLI triples; no head, no labels."""
    assert (NLI.head, NLI.num_labels, NLI.is_pair) == ("none", 0, True)
    with pytest.raises(ValueError, match=r"Task 'nli' \(contrastive\) cannot use head 'cosine'; choose one of none"):
        TaskSpec("nli", "contrastive", head="cosine")
    model = nli_model(tokenizer, contrastive_loss="info_nce", temperature=0.05).eval()
    assert "nli" not in model.heads and isinstance(model.loss_fn, InfoNCELoss)
    rows = [{"sent0": r["query"], "sent1": r["positive"], "hard_neg": r["hard_negative"]} for r in snli_triples(8)]
    batch = TaskCollator(tokenizer, NLI)(rows)
    assert batch["input_ids"].shape[:2] == (8, 3) and torch.equal(batch["labels"], torch.arange(8))
    output = model(**batch)
    embeddings = model.embed(batch["input_ids"], batch["attention_mask"])  # (8, 3, d)
    candidates = torch.cat([embeddings[:, 1], embeddings[:, 2]])  # every positive, then every hard negative
    scores = 20.0 * F.cosine_similarity(embeddings[:, 0, None], candidates[None], dim=-1)  # scale = 1 / 0.05
    torch.testing.assert_close(output.loss, F.cross_entropy(scores, torch.arange(8)))
    hits = (scores.argmax(dim=1) == torch.arange(8)).float()[:, None]
    torch.testing.assert_close(output.logits, hits)
    accuracy = task_metrics(NLI, output.logits.numpy(), batch["labels"].numpy())["accuracy"]
    assert accuracy == pytest.approx(100.0 * hits.mean().item())
    # in task_batches beside a labelled task, weighted; a contrastive batch needs no labels
    sst = TaskCollator(tokenizer, MULTITASK_TASKS[0], add_task_name=False)(multitask_toy_data(8)["sst"])
    unlabelled = {key: value for key, value in batch.items() if key not in ("task", "labels")}
    together = model(task_batches={"sst": sst, "nli": unlabelled})
    torch.testing.assert_close(together.loss, model(task="sst", **sst).loss + 0.5 * output.loss)
    with pytest.raises(ValueError, match=r"Task 'nli' \(contrastive\) takes input_ids of shape \(batch, 2 \+ hard"):
        model(task="nli", input_ids=sst["input_ids"])


def test_a_registered_loss_trains_the_contrastive_task_and_the_checkpoint_keeps_its_name(tokenizer, tmp_path):
    """A loss of one's own is one class and one registration: the encoder config's contrastive_loss (run_multitask's
    --contrastive_loss) builds it, it trains the multitask model, and the saved model names it and loads with it."""
    data = {"sst": multitask_toy_data(8)["sst"], "nli": datasets.Dataset.from_list(snli_triples(8))}
    register_loss(CountedInfoNCE)
    try:
        model = nli_model(tokenizer, contrastive_loss="counted_info_nce", temperature=0.1)
        assert isinstance(model.loss_fn, CountedInfoNCE) and model.loss_fn.temperature == 0.1
        trainer = multitask_trainer(model, tokenizer, tmp_path, data=data, max_steps=2)
        trainer.train()
        assert model.loss_fn.calls == 2  # once a step: super_batch holds a batch of every task
        model.save_pretrained(tmp_path / "saved")
        reloaded = MultitaskModel.from_pretrained(tmp_path / "saved")
        assert reloaded.config.contrastive.contrastive_loss == "counted_info_nce"
        assert isinstance(reloaded.loss_fn, CountedInfoNCE)
    finally:
        unregister_loss("counted_info_nce")
    assert MultitaskModel.from_pretrained(tmp_path / "saved").loss_fn is None  # loads and encodes without it
    metrics = trainer.evaluate()
    assert 0 <= metrics["eval_nli_accuracy"] <= 100 and "eval_nli_loss" in metrics


def test_a_loss_registered_after_the_model_was_built_is_built_by_the_trainer_which_sets_its_gathering(
    tokenizer, tmp_path
):
    """Built when the trainer is, as the model would have built it: the trainer's settings (gathering the passages of
    every process) reach it; built at the first batch instead, it would contrast each process's queries with its own
    passages only."""
    data = {"sst": multitask_toy_data(8)["sst"], "nli": datasets.Dataset.from_list(snli_triples(8))}
    model = nli_model(tokenizer, contrastive_loss="counted_info_nce")
    assert model.loss_fn is None  # not registered yet: the model loads and encodes without it
    register_loss(CountedInfoNCE)
    try:
        trainer = multitask_trainer(model, tokenizer, tmp_path, data=data, max_steps=1)
        assert isinstance(model.loss_fn, CountedInfoNCE) and model.loss_fn.gather_across_devices is False
        trainer.train()
    finally:
        unregister_loss("counted_info_nce")
    assert model.loss_fn.calls == 1


def test_a_loss_handed_to_the_multitask_trainer_trains_the_contrastive_task(tokenizer, tmp_path):
    data = {"sst": multitask_toy_data(8)["sst"], "nli": datasets.Dataset.from_list(snli_triples(8))}
    loss = CountedInfoNCE(temperature=0.2)
    model = nli_model(tokenizer)
    trainer = multitask_trainer(model, tokenizer, tmp_path, data=data, max_steps=1, loss=loss)
    assert model.loss_fn is loss
    trainer.train()
    assert loss.calls == 1
    with pytest.raises(ValueError, match=r"loss=\.\.\.\) is the contrastive tasks' loss, and this model has none"):
        multitask_trainer(tiny_multitask_model(tokenizer), tokenizer, tmp_path, loss=InfoNCELoss())


# ---- Collators ----


def test_pair_collator_stacks_both_sentences_and_types_the_labels(tokenizer):
    examples = [
        {"sentence1": "a good film", "sentence2": "the plot", "label": 0.4},
        {"sentence1": "boring", "sentence2": "a long story about music", "label": 1.0},
    ]
    batch = TaskCollator(tokenizer, TaskSpec("stsb", "pair_regression"))(examples)
    assert batch["task"] == "stsb"
    assert batch["input_ids"].shape[:2] == (2, 2) and batch["attention_mask"].shape == batch["input_ids"].shape
    assert batch["labels"].dtype == torch.float32
    decoded = tokenizer.decode(batch["input_ids"][1, 1], skip_special_tokens=True)
    assert decoded == "a long story about music"
    assert tokenizer.decode(batch["input_ids"][0, 0], skip_special_tokens=True) == "a good film"
    classification = TaskCollator(tokenizer, TaskSpec("sst", "classification"))([{"sentence": "fun", "label": 1}])
    assert classification["input_ids"].dim() == 2 and classification["labels"].dtype == torch.long
    with pytest.raises(ValueError, match="lack sentence2"):
        TaskCollator(tokenizer, TaskSpec("mrpc", "pair_classification"))([{"sentence1": "a", "label": 1}])


def test_multitask_collator_groups_examples_by_task(tokenizer):
    data = multitask_toy_data(3)
    examples = [{**data["stsb"][0], "task": "stsb"}] + [{**data["sst"][i], "task": "sst"} for i in range(2)]
    batches = MultitaskCollator(tokenizer, MULTITASK_TASKS)(examples)
    assert list(batches) == ["sst", "stsb"]  # in the order of the tasks
    assert batches["sst"]["labels"].tolist() == [data["sst"][0]["label"], data["sst"][1]["label"]]
    with pytest.raises(ValueError, match="unknown task 'nli'"):
        MultitaskCollator(tokenizer, MULTITASK_TASKS)([{"sentence": "x", "label": 0, "task": "nli"}])


def test_multitask_dataset_puts_the_tasks_behind_one_index():
    data = multitask_toy_data(3)
    dataset = MultitaskDataset({"mrpc": data["mrpc"], "sst": data["sst"].select(range(2))})
    assert len(dataset) == 5 and dataset.offsets == [0, 3]
    assert dataset[4] == {**data["sst"][1], "task": "sst"} and dataset[2] == {**data["mrpc"][2], "task": "mrpc"}
    with pytest.raises(ValueError, match="The training data of sst is empty"):
        MultitaskDataset({"sst": data["sst"].select([])})


def test_task_dataset_reads_the_evaluation_readers():
    from contrastive_hf.evaluation.sts import read_stsbenchmark
    from contrastive_hf.evaluation.transfer_data import read_mrpc

    stsb = task_dataset(read_stsbenchmark(TEST_DATA / "sts" / "stsbenchmark", "dev"), normalize_scores=5.0)
    assert stsb.column_names == ["sentence1", "sentence2", "label"] and len(stsb) == 40
    assert 0.0 <= min(stsb["label"]) and max(stsb["label"]) <= 1.0
    mrpc = task_dataset(read_mrpc(TEST_DATA / "senteval" / "MRPC")["test"])
    assert len(mrpc) == 30 and set(mrpc["label"]) == {0, 1}


# ---- Batch schedules ----


def decode(sampler: MultitaskBatchSampler) -> list[list[tuple[int, int]]]:
    """Each batch as (task, index within the task) pairs."""
    steps = []
    for indices in sampler:
        tasks = [int(np.searchsorted(sampler.offsets, i, side="right")) - 1 for i in indices]
        steps.append([(task, i - sampler.offsets[task]) for task, i in zip(tasks, indices, strict=True)])
    return steps


def tasks_of(step) -> list[int]:
    return sorted({task for task, _ in step})


SIZES = [10, 4, 7]  # batches of 3: 4, 2 and 3 batches


@pytest.mark.parametrize("schedule", ["fixed", "round_robin", "random"])
def test_interleaved_schedules_use_every_example_once_per_epoch(schedule):
    sampler = MultitaskBatchSampler(SIZES, 3, schedule=schedule, seed=5)
    steps = decode(sampler)
    assert len(steps) == len(sampler) == 4 + 2 + 3
    assert all(len(tasks_of(step)) == 1 for step in steps)  # one task per batch
    seen = Counter(pair for step in steps for pair in step)
    assert set(seen) == {(task, i) for task, size in enumerate(SIZES) for i in range(size)} and max(seen.values()) == 1
    order = [tasks_of(step)[0] for step in steps]
    if schedule == "fixed":
        assert order == [0, 0, 0, 0, 1, 1, 2, 2, 2]
    elif schedule == "round_robin":
        assert order == [0, 1, 2, 0, 1, 2, 0, 2, 0]
    else:
        assert sorted(order) == [0, 0, 0, 0, 1, 1, 2, 2, 2] and order != [0, 0, 0, 0, 1, 1, 2, 2, 2]


def test_schedules_are_deterministic_and_change_with_the_epoch_and_seed():
    def run(seed, epoch, schedule="random"):
        sampler = MultitaskBatchSampler(SIZES, 3, schedule=schedule, seed=seed)
        sampler.set_epoch(epoch)
        return list(sampler)

    assert run(1, 0) == run(1, 0)
    assert run(1, 0) != run(1, 1) and run(1, 0) != run(2, 0)
    assert [sorted(b) for b in run(1, 0, "fixed")] != [sorted(b) for b in run(1, 1, "fixed")]  # reshuffled in-task


def test_super_batches_hold_one_batch_of_every_task():
    longest = MultitaskBatchSampler(SIZES, 3, schedule="super_batch", seed=0)
    steps = decode(longest)
    assert len(steps) == len(longest) == 4  # the largest task's number of batches
    for step in steps:
        assert tasks_of(step) == [0, 1, 2]
        assert all(1 <= count <= 3 for count in Counter(task for task, _ in step).values())
    for task, size in enumerate(SIZES):  # every example at least once; small tasks restart
        assert {i for step in steps for t, i in step if t == task} == set(range(size))
    shortest = MultitaskBatchSampler(SIZES, 3, schedule="super_batch", super_batch_length="min")
    assert len(list(shortest)) == len(shortest) == 2


@pytest.mark.parametrize("schedule", ["random", "super_batch"])
def test_processes_share_each_step_s_task_and_split_the_global_batch(schedule):
    whole = decode(MultitaskBatchSampler([16, 8, 12], 4, schedule=schedule, seed=3))
    parts = [
        decode(MultitaskBatchSampler([16, 8, 12], 2, schedule=schedule, seed=3, num_processes=2, process_index=rank))
        for rank in range(2)
    ]
    assert len(parts[0]) == len(parts[1]) == len(whole)
    for step, first, second in zip(whole, parts[0], parts[1], strict=True):
        assert tasks_of(first) == tasks_of(second) == tasks_of(step)
        assert sorted(first + second) == sorted(step) and not set(first) & set(second)


def test_last_batches_are_padded_for_every_process_or_dropped():
    sampler = MultitaskBatchSampler([5], 2, schedule="fixed", num_processes=2, process_index=1)
    assert [len(batch) for batch in sampler] == [2, 1]  # global batches of 4 and 1 (padded to 2)
    dropped = MultitaskBatchSampler([5, 9], 2, schedule="fixed", drop_last=True)
    assert len(dropped) == 2 + 4 and all(len(batch) == 2 for batch in dropped)
    with pytest.raises(ValueError, match="fewer examples than one global batch"):
        MultitaskBatchSampler([1, 9], 2, drop_last=True)
    with pytest.raises(ValueError, match="Unknown task schedule 'lottery'"):
        MultitaskBatchSampler([3], 2, schedule="lottery")


# ---- Trainer ----


def test_pcgrad_training_step_sets_the_reference_update(tokenizer, tmp_path):
    model = tiny_multitask_model(tokenizer)
    trainer = multitask_trainer(model, tokenizer, tmp_path, pcgrad=True)
    batch = next(iter(trainer.get_train_dataloader()))
    trainer.create_optimizer_and_scheduler(num_training_steps=1)
    trainer.current_gradient_accumulation_steps = 1
    parameters = [p for p in model.parameters() if p.requires_grad]

    # the reference: per-task gradients of the weighted losses, PCGrad with the orders the trainer draws
    model.train()
    outputs = model(task_batches=batch)
    losses = [
        MULTITASK_TASKS[i].loss_weight * outputs.task_losses[spec.name] for i, spec in enumerate(MULTITASK_TASKS)
    ]
    per_task = [list(torch.autograd.grad(loss, parameters, allow_unused=True, retain_graph=True)) for loss in losses]
    seed_key = int(contrastive_hf.data.seeding.combine(contrastive_hf.data.seeding.mix64(trainer.args.seed), 0))
    orders = random_orders(3, torch.Generator().manual_seed(seed_key))
    expected, stats = combine_task_gradients(per_task, orders=orders)

    model.zero_grad()
    trainer.training_step(model, batch)
    for parameter, update in zip(parameters, expected, strict=True):
        if update is None:
            assert parameter.grad is None or not parameter.grad.any()
        else:
            torch.testing.assert_close(parameter.grad, update, atol=1e-6, rtol=1e-5)
    assert stats.task_pairs == 3


def final_weights(trainer) -> dict[str, torch.Tensor]:
    trainer.train()
    return {name: p.detach().clone() for name, p in trainer.model.named_parameters()}


def test_one_task_pcgrad_trains_like_the_plain_summed_loss(tokenizer, tmp_path):
    one = [TaskSpec("stsb", "pair_regression", head="uv_absdiff")]
    data = {"stsb": multitask_toy_data(12)["stsb"]}
    plain = final_weights(multitask_trainer(tiny_multitask_model(tokenizer, one), tokenizer, tmp_path, data))
    surgery = final_weights(
        multitask_trainer(tiny_multitask_model(tokenizer, one), tokenizer, tmp_path, data, pcgrad=True)
    )
    for name, weight in plain.items():
        torch.testing.assert_close(surgery[name], weight, atol=1e-6, rtol=1e-5, msg=name)


@pytest.mark.slow  # per-task backward passes of accumulated steps: 1 s of CPU
def test_pcgrad_projects_the_accumulated_gradients_of_an_optimizer_step(tokenizer, tmp_path):
    """Two micro-batches of 4 = one batch of 8: per-task gradients are accumulated, then projected once."""

    def weights(**settings):
        return final_weights(
            multitask_trainer(tiny_multitask_model(tokenizer), tokenizer, tmp_path, max_steps=2, **settings)
        )

    large = weights(pcgrad=True, per_device_train_batch_size=8)
    accumulated = weights(pcgrad=True, per_device_train_batch_size=4, gradient_accumulation_steps=2)
    plain = weights(per_device_train_batch_size=8)
    for name, weight in large.items():
        torch.testing.assert_close(accumulated[name], weight, atol=1e-5, rtol=1e-4, msg=name)
    assert any(not torch.allclose(plain[name], large[name], atol=1e-4) for name in large)  # the surgery did something


def test_pcgrad_refuses_sharded_gradients_and_steps_with_one_task():
    check_pcgrad_setup(None, False, "super_batch", 1)
    check_pcgrad_setup(1, False, "super_batch", 1)  # ZeRO-1: gradients are whole on every process
    check_pcgrad_setup(None, False, "round_robin", 3)
    for stage in (2, 3):
        with pytest.raises(ValueError, match=f"DeepSpeed ZeRO stage {stage} shards them"):
            check_pcgrad_setup(stage, False, "super_batch", 1)
    with pytest.raises(ValueError, match="FSDP shards them"):
        check_pcgrad_setup(None, True, "super_batch", 1)
    with pytest.raises(ValueError, match="PCGrad has nothing to project"):
        check_pcgrad_setup(None, False, "random", 1)


def test_trainer_checks_pcgrad_and_task_names_at_construction(tokenizer, tmp_path):
    with pytest.raises(ValueError, match="PCGrad has nothing to project"):
        multitask_trainer(tiny_multitask_model(tokenizer), tokenizer, tmp_path, pcgrad=True, task_schedule="random")
    with pytest.raises(ValueError, match="tasks nli that the model has no head for"):
        multitask_trainer(
            tiny_multitask_model(tokenizer), tokenizer, tmp_path, data={"nli": multitask_toy_data(4)["sst"]}
        )


def test_evaluate_reports_each_task_s_metrics_as_computed_by_hand(tokenizer, tmp_path):
    model = tiny_multitask_model(tokenizer)
    trainer = multitask_trainer(model, tokenizer, tmp_path, per_device_eval_batch_size=5)
    data = multitask_toy_data(12, seed=1)
    metrics = trainer.evaluate(data)
    model.eval()
    main = []
    for spec in MULTITASK_TASKS:
        batch = TaskCollator(tokenizer, spec)([data[spec.name][i] for i in range(12)])
        with torch.no_grad():
            logits = model(**batch).logits
        labels = batch["labels"].numpy()
        if spec.is_regression:
            expected = 100 * spearmanr(logits.squeeze(-1).numpy(), labels).statistic
            assert metrics["eval_stsb_spearman"] == pytest.approx(expected, abs=1e-3)
            main.append(expected)
        else:
            predicted = logits.argmax(-1).numpy()
            accuracy = 100 * (predicted == labels).mean()
            true_positive = ((predicted == 1) & (labels == 1)).sum()
            wrong = (predicted != labels).sum()  # false positives + false negatives
            f1 = 100 * 2 * true_positive / (2 * true_positive + wrong) if true_positive + wrong else 0.0
            assert metrics[f"eval_{spec.name}_accuracy"] == pytest.approx(accuracy)
            assert metrics[f"eval_{spec.name}_f1"] == pytest.approx(f1)
            main.append(accuracy)
    assert metrics["eval_average"] == pytest.approx(np.mean(main), abs=1e-3)
    assert "eval_mrpc_loss" in metrics


def test_task_metrics_by_hand():
    spec = TaskSpec("p", "pair_classification")
    logits = np.array([[0.0, 1.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])  # predicts 1, 0, 1, 1
    scores = task_metrics(spec, logits, np.array([1, 1, 0, 1]))
    assert scores["accuracy"] == pytest.approx(50.0)
    assert scores["f1"] == pytest.approx(100 * 2 * 2 / (3 + 3))  # tp 2, 3 predicted, 3 actual positives


def test_training_logs_per_task_losses_and_conflicts(tokenizer, tmp_path):
    trainer = multitask_trainer(tiny_multitask_model(tokenizer), tokenizer, tmp_path, pcgrad=True, max_steps=2)
    trainer.train()
    logged = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert all({"loss_sst", "loss_mrpc", "loss_stsb", "pcgrad_conflict_fraction"} <= set(entry) for entry in logged)
    assert all(0.0 <= entry["pcgrad_conflict_fraction"] <= 1.0 for entry in logged)


@pytest.mark.slow  # a run and its resumes: 1 s of CPU
def test_a_multitask_resume_is_checked_as_every_trainer_s(tokenizer, tmp_path):
    """The reported defect: run_multitask resumed on another number of processes trained 0 more steps and exited 0
    with a model that never saw 28 of its 60 rows; MultitaskTrainer had none of ContrastiveTrainer's resume checks.
    It shares them (`CheckedResume`): another layout or other rows are refused before training, a checkpoint is
    marked incomplete until written, and resume_from_checkpoint=True skips an incomplete one."""
    from contrastive_hf.training.checkpoints import INCOMPLETE_MARKER
    from contrastive_hf.training.resume_changes import DataLayoutChangedError

    data = multitask_toy_data(8)
    multitask_trainer(
        tiny_multitask_model(tokenizer), tokenizer, tmp_path, data, save_strategy="steps", save_steps=1
    ).train()
    checkpoint = tmp_path / "out" / "checkpoint-2"
    for change, message in [
        ({"per_device_train_batch_size": 2}, "--per_device_train_batch_size 4 -> 2"),
        ({"seed": 1}, "--seed 42 -> 1"),
    ]:
        resumed = multitask_trainer(tiny_multitask_model(tokenizer), tokenizer, tmp_path, data, max_steps=4, **change)
        with pytest.raises(DataLayoutChangedError, match=message):
            resumed.train(resume_from_checkpoint=str(checkpoint))
    grown = {**data, "sst": multitask_toy_data(12)["sst"]}
    resumed = multitask_trainer(tiny_multitask_model(tokenizer), tokenizer, tmp_path, grown, max_steps=4)
    with pytest.raises(DataLayoutChangedError, match="training rows 24 -> 28"):
        resumed.train(resume_from_checkpoint=str(checkpoint))
    # the newest checkpoint cut short: resume_from_checkpoint=True resumes the one before it, for 1 more step
    (tmp_path / "out" / "checkpoint-3" / INCOMPLETE_MARKER).write_text("")
    resumed = multitask_trainer(
        tiny_multitask_model(tokenizer), tokenizer, tmp_path, data, save_strategy="steps", save_steps=1
    )
    resumed.train(resume_from_checkpoint=True)
    assert resumed.state.global_step == 3 and not (tmp_path / "out" / "checkpoint-3" / INCOMPLETE_MARKER).exists()


def test_load_best_model_at_end_ranks_by_a_metric_the_multitask_evaluation_logs(tokenizer, tmp_path):
    """The reported defect: --load_best_model_at_end with the default metric (transformers': the eval loss, which
    the multitask evaluation does not log) failed with a KeyError after training started. The default is now the
    tasks' average, and a metric it does not log is refused when the trainer is built."""
    data = multitask_toy_data(8)
    every_step = dict(eval_strategy="steps", eval_steps=1, save_strategy="steps", save_steps=1)
    trainer = multitask_trainer(
        tiny_multitask_model(tokenizer), tokenizer, tmp_path, data, load_best_model_at_end=True, **every_step
    )
    trainer.eval_dataset = data
    trainer.train()
    assert trainer.args.metric_for_best_model == "average" and trainer.state.best_metric is not None
    with pytest.raises(ValueError, match="--metric_for_best_model loss is not a metric the multitask evaluation"):
        multitask_trainer(
            tiny_multitask_model(tokenizer),
            tokenizer,
            tmp_path,
            data,
            load_best_model_at_end=True,
            metric_for_best_model="loss",
            **every_step,
        )
