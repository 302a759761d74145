"""SG-BERT (recipes.sg_bert): each loss against a slow reference written from the paper's formulas (loops
over sentences and layers), the views and the sampler, the regulariser, the frozen copy and layer 0 staying put, what
the trainer saves and resumes, and the example script end to end on the Wikipedia sentences."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from datasets import Dataset
from safetensors import safe_open
from transformers import BertModel

import contrastive_hf  # noqa: F401  (registers the model type)
import contrastive_hf.models.distributed as distributed
from contrastive_hf import ContrastiveConfig, ContrastiveModel
from contrastive_hf.evaluation import STSData, evaluate_sts
from contrastive_hf.models.objectives import NTXentLoss, get_loss
from contrastive_hf.recipes.sg_bert import (
    HEAD_FILE,
    SelfGuidedCollator,
    SelfGuidedConfig,
    SelfGuidedModel,
    SelfGuidedTrainer,
    SelfGuidedTrainingArguments,
    parameter_distance,
    pool_layers,
    sample_layer_views,
    self_guided_base_loss,
    self_guided_opt1_loss,
    self_guided_opt2_loss,
    self_guided_opt3_loss,
)

from conftest import tiny_bert_config

SENTENCES = [
    "the cat sat on the mat",
    "a man is playing a guitar",
    "south australia has a unique position in history",
    "the river flows into the sea",
    "she wrote a book about the war",
    "many were attracted to the free state",
    "the team won the final match",
    "a woman is slicing an onion",
]


# --- slow references, written from the paper's formulas (§3.1-3.2) -------------------------------------------------


def phi(u: torch.Tensor, v: torch.Tensor, temperature: float) -> torch.Tensor:
    """phi(u, v) = exp(cos(u, v) / tau), on vectors already projected by f."""
    return torch.exp(torch.dot(u, v) / (u.norm() * v.norm()) / temperature)


def reference_base(c, h, temperature):
    b = c.shape[0]
    x = [c[i] for i in range(b)] + [h[i] for i in range(b)]

    def mu(m):  # the matching function: the other half of pair m
        return m + b if m < b else m - b

    total = 0.0
    for m in range(2 * b):
        denominator = sum(phi(x[m], x[n], temperature) for n in range(2 * b) if n != m)
        total = total - torch.log(phi(x[m], x[mu(m)], temperature) / denominator)
    return total / (2 * b)


def reference_opt1(c, h, temperature):
    b = c.shape[0]
    total = 0.0
    for i in range(b):
        denominator = sum(phi(c[i], c[j], temperature) for j in range(b) if j != i)
        denominator = denominator + sum(phi(c[i], h[j], temperature) for j in range(b))
        total = total - torch.log(phi(c[i], h[i], temperature) / denominator)
    return total / b


def reference_opt2(c, h, temperature):
    b = c.shape[0]
    total = 0.0
    for i in range(b):
        denominator = sum(phi(c[i], h[j], temperature) for j in range(b))
        total = total - torch.log(phi(c[i], h[i], temperature) / denominator)
    return total / b


def reference_opt3(c, layer_h, temperature):
    b, num_layers = layer_h.shape[:2]
    total = 0.0
    for i in range(b):
        others = sum(phi(c[i], layer_h[m, n], temperature) for m in range(b) if m != i for n in range(num_layers))
        for k in range(num_layers):
            positive = phi(c[i], layer_h[i, k], temperature)
            total = total - torch.log(positive / (positive + others))
    return total / (b * num_layers)


def reference_distance(reference, model):
    frozen = dict(reference.named_parameters())
    return sum(((p - frozen[name]) ** 2).sum() for name, p in model.named_parameters() if p.requires_grad)


def reference_views(hidden_states, attention_mask, pooling):
    """h_{i,k}: layer k of sentence i pooled over its real tokens, one at a time."""
    rows = []
    for i in range(attention_mask.shape[0]):
        tokens = [t for t in range(attention_mask.shape[1]) if attention_mask[i, t] == 1]
        layers = []
        for layer in hidden_states:
            states = torch.stack([layer[i, t] for t in tokens])
            layers.append(states.max(dim=0).values if pooling == "max" else states.mean(dim=0))
        rows.append(torch.stack(layers))
    return torch.stack(rows)  # (B, K, h)


def reference_head(head, x):
    """f: linear -> GELU -> linear -> GELU (the paper's head), written out."""
    first, second = head.layers
    hidden = torch.nn.functional.gelu(x @ first.weight.T + first.bias)
    return torch.nn.functional.gelu(hidden @ second.weight.T + second.bias)


# --- losses ----------------------------------------------------------------------------------------------------------


def _inputs(b=5, num_layers=4, d=6, seed=0):
    generator = torch.Generator().manual_seed(seed)
    c = torch.randn(b, d, generator=generator, dtype=torch.float64)
    h = torch.randn(b, d, generator=generator, dtype=torch.float64)
    layer_h = torch.randn(b, num_layers, d, generator=generator, dtype=torch.float64)
    return c, h, layer_h


FAST_AND_SLOW = {
    "base": (
        lambda c, h, layer_h, t: self_guided_base_loss(c, h, t),
        lambda c, h, layer_h, t: reference_base(c, h, t),
    ),
    "opt1": (
        lambda c, h, layer_h, t: self_guided_opt1_loss(c, h, t),
        lambda c, h, layer_h, t: reference_opt1(c, h, t),
    ),
    "opt2": (
        lambda c, h, layer_h, t: self_guided_opt2_loss(c, h, t),
        lambda c, h, layer_h, t: reference_opt2(c, h, t),
    ),
    "opt3": (
        lambda c, h, layer_h, t: self_guided_opt3_loss(c, layer_h, t),
        lambda c, h, layer_h, t: reference_opt3(c, layer_h, t),
    ),
}


@pytest.mark.parametrize("temperature", [0.5, 0.01])
@pytest.mark.parametrize("name", list(FAST_AND_SLOW))
def test_each_loss_and_its_gradient_match_the_papers_formula(name, temperature):
    fast, slow = FAST_AND_SLOW[name]
    c, h, layer_h = _inputs()
    inputs = [tensor.clone().requires_grad_(True) for tensor in (c, h, layer_h)]
    references = [tensor.clone().requires_grad_(True) for tensor in (c, h, layer_h)]
    value = fast(*inputs, temperature)
    expected = slow(*references, temperature)
    assert value.dtype == torch.float64  # as precise as the inputs (float32 at least), as every loss of the package
    torch.testing.assert_close(value.double(), expected, rtol=1e-5, atol=1e-4)
    value.backward()
    expected.backward()
    for tensor, reference in zip(inputs, references, strict=True):
        if reference.grad is None:  # opt3 reads layer_h only, the others h only
            assert tensor.grad is None or tensor.grad.abs().max() == 0
        else:
            torch.testing.assert_close(tensor.grad, reference.grad, rtol=1e-4, atol=1e-4 / temperature)


def test_the_losses_differ_as_the_paper_says():
    """opt1 drops the h anchors of base, opt2 also the other c's: three different numbers on the same inputs."""
    c, h, _ = _inputs()
    values = [float(loss(c, h, 0.1)) for loss in (self_guided_base_loss, self_guided_opt1_loss, self_guided_opt2_loss)]
    assert len({round(value, 4) for value in values}) == 3


def replace_collectives(monkeypatch, rank: int, sizes: tuple[int, ...], global_batch: torch.Tensor) -> None:
    """This process is ``rank`` of ``len(sizes)`` (holding ``sizes[rank]`` rows), and what it gathers is
    ``global_batch`` with its own rows, the ones it passes, in their place (so that their gradient path is kept)."""
    rows = slice(sum(sizes[:rank]), sum(sizes[: rank + 1]))

    def gather_with_grad(tensor, gathered_sizes):
        assert torch.equal(tensor, global_batch[rows]) and list(gathered_sizes) == list(sizes)
        return torch.cat([global_batch[: rows.start], tensor, global_batch[rows.stop :]])

    monkeypatch.setattr(distributed, "world_size", lambda: len(sizes))
    monkeypatch.setattr(distributed, "rank", lambda: rank)
    monkeypatch.setattr(distributed, "gather_sizes", lambda size, device: list(sizes))
    monkeypatch.setattr(distributed, "gather_with_grad", gather_with_grad)


@pytest.mark.parametrize("name", list(FAST_AND_SLOW))
def test_each_process_s_loss_on_the_gathered_batch_averages_to_the_global_loss(name, monkeypatch):
    """2 processes of 4 and 2 sentences, the collectives replaced: each scores its rows at its offset in the global
    batch, scaled by its share, and the mean over the processes is the loss of the whole batch (with real collectives,
    on 2 gloo processes: tests/integration/test_distributed.py)."""
    c, h, layer_h = _inputs(b=6)
    loss = {
        "base": self_guided_base_loss,
        "opt1": self_guided_opt1_loss,
        "opt2": self_guided_opt2_loss,
        "opt3": self_guided_opt3_loss,
    }[name]
    views = layer_h if name == "opt3" else h
    global_batch = layer_h if name == "opt3" else torch.stack([c, h], dim=1)  # what each loss gathers
    sizes, local = (4, 2), []
    for rank, rows in enumerate((slice(0, 4), slice(4, 6))):
        replace_collectives(monkeypatch, rank, sizes, global_batch)
        local.append(loss(c[rows], views[rows], 0.1, gather_across_devices=True))
    monkeypatch.undo()
    torch.testing.assert_close(sum(local) / 2, loss(c, views, 0.1))


# --- views, sampler, regulariser -------------------------------------------------------------------------------------


@pytest.mark.parametrize("pooling", ["max", "mean"])
def test_layer_pooling_ignores_padding(pooling):
    generator = torch.Generator().manual_seed(0)
    hidden_states = [torch.randn(3, 5, 4, generator=generator) for _ in range(3)]
    attention_mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0]])
    hidden_states[0][1, 3] = 100.0  # a padding position: must not win the max nor move the mean
    pooled = pool_layers(hidden_states, attention_mask, pooling)
    assert pooled.shape == (3, 3, 4)
    torch.testing.assert_close(pooled, reference_views(hidden_states, attention_mask, pooling))


def test_the_sampler_draws_every_layer_uniformly_or_by_weight():
    views = torch.arange(4 * 3).float().view(4, 3, 1).expand(4, 3, 2)  # sentence i, layer k -> 3i + k
    picked, layers = sample_layer_views(views, generator=torch.Generator().manual_seed(0))
    assert torch.equal(picked[:, 0], torch.arange(4) * 3 + layers)
    draws = torch.cat(
        [sample_layer_views(views, generator=torch.Generator().manual_seed(seed))[1] for seed in range(300)]
    )
    counts = torch.bincount(draws, minlength=3).float() / draws.numel()
    assert torch.all((counts - 1 / 3).abs() < 0.05)  # 1,200 draws: uniform within 5 points
    weighted = torch.cat(
        [sample_layer_views(views, [0, 1, 3], torch.Generator().manual_seed(seed))[1] for seed in range(100)]
    )
    assert 0 not in weighted.tolist() and (weighted == 2).float().mean() > 0.6
    with pytest.raises(ValueError, match="one weight per layer"):
        sample_layer_views(views, [1.0, 1.0])


def test_parameter_distance_is_the_squared_l2_distance_and_trains_only_the_model():
    reference = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2)).requires_grad_(False)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    model[0].bias.requires_grad_(False)  # frozen parameters are left out
    distance = parameter_distance(reference, model)
    torch.testing.assert_close(distance, reference_distance(reference, model))
    distance.backward()
    torch.testing.assert_close(model[1].weight.grad, 2 * (model[1].weight - reference[1].weight).detach())
    assert model[0].bias.grad is None and all(p.grad is None for p in reference.parameters())
    with pytest.raises(ValueError, match="same-shaped counterpart"):
        parameter_distance(torch.nn.Linear(3, 5), torch.nn.Linear(3, 4))


# --- the model -------------------------------------------------------------------------------------------------------


def tiny_tuned(tokenizer, **encoder_overrides) -> ContrastiveModel:
    encoder = tiny_bert_config(vocab_size=len(tokenizer), **encoder_overrides)
    return ContrastiveModel(
        ContrastiveConfig(encoder=encoder, pooler_type="cls_before_pooler", projection_type="none")
    )


@pytest.mark.parametrize("loss", ["base", "opt1", "opt2", "opt3"])
def test_the_models_loss_is_the_papers_objective_on_bert_f_layers_and_bert_t_cls(tokenizer, loss):
    """Wiring: c_i = BERT_T's last-layer [CLS], h_{i,k} = BERT_F's layers 0..l max-pooled, f on both, + lambda L_reg"""
    tuned = tiny_tuned(tokenizer, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = SelfGuidedModel(tuned, loss=loss, temperature=0.05, regularization_weight=0.3, projection_hidden_size=16)
    with torch.no_grad():  # BERT_T has moved away from BERT_F, so that L_reg > 0 and c differs from BERT_F's [CLS]
        for parameter in model.contrastive.encoder.encoder.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    batch = SelfGuidedCollator(tokenizer)([{"text": s} for s in SENTENCES[:5]])
    view_layers = torch.tensor([0, 2, 1, 2, 0])  # layer 0 is the embedding layer
    output = model(**batch, view_layers=None if loss == "opt3" else view_layers)

    c = model.contrastive.encoder(**batch).last_hidden_state[:, 0]
    hidden_states = model.frozen_encoder(**batch, output_hidden_states=True).hidden_states
    assert len(hidden_states) == 3  # 2 layers + embeddings
    layer_h = reference_views(hidden_states, batch["attention_mask"], "max")
    fc, f_layer_h = reference_head(model.projection, c), reference_head(model.projection, layer_h)
    f_h = f_layer_h[torch.arange(5), view_layers]
    slow = {"base": reference_base, "opt1": reference_opt1, "opt2": reference_opt2}
    expected_cl = reference_opt3(fc, f_layer_h, 0.05) if loss == "opt3" else slow[loss](fc, f_h, 0.05)
    expected_reg = reference_distance(model.frozen_encoder, model.contrastive.encoder)
    assert expected_reg > 0
    torch.testing.assert_close(output.cl_loss, expected_cl, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(output.regularization_loss, expected_reg, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(output.loss, expected_cl + 0.3 * expected_reg, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(output.embeddings, c)


@pytest.mark.parametrize("loss", ["info_nce", "nt_xent"])
def test_a_registered_in_batch_loss_scores_each_sentence_against_its_layer_view(tokenizer, loss):
    """Any registered loss trains SG-BERT: c_i (through f) is the query and its sampled layer view the positive."""
    model = SelfGuidedModel(tiny_tuned(tokenizer), loss=loss, temperature=0.05, projection_hidden_size=16)
    assert isinstance(model.loss_fn, get_loss(loss)) and model.loss_fn.temperature == 0.05
    batch = SelfGuidedCollator(tokenizer)([{"text": s} for s in SENTENCES[:5]])
    view_layers = torch.tensor([0, 2, 1, 2, 0])
    output = model.train()(**batch, view_layers=view_layers)
    f_c = model.projection(output.embeddings)
    f_h = model.projection(model.layer_views(**batch)[torch.arange(5), view_layers])
    expected, negatives = get_loss(loss)(temperature=0.05)(torch.stack([f_c, f_h], dim=1))
    torch.testing.assert_close(output.cl_loss, expected)
    assert float(output.negatives_per_query) == float(negatives) == (4 if loss == "info_nce" else 8)
    output.loss.backward()
    assert all(p.grad is not None for p in model.contrastive.encoder.encoder.parameters())


def test_a_loss_handed_to_the_trainer_trains_sg_bert(tokenizer, tmp_path):
    trainer = make_trainer(tokenizer, tmp_path, loss="base", max_steps=2)
    handed = SelfGuidedTrainer(
        model=trainer.model, args=trainer.args, train_dataset=trainer.train_dataset,
        data_collator=trainer.data_collator, processing_class=tokenizer, loss=NTXentLoss(temperature=0.1),
    )  # fmt: skip
    assert trainer.model.loss_fn is handed.loss_fn and isinstance(handed.loss_fn, NTXentLoss)
    handed.train()
    logged = [entry for entry in handed.state.log_history if "cl_loss" in entry]
    assert len(logged) == 2 and all(entry["negatives_per_query"] == 14 for entry in logged)  # 2 x 8 - 2


def test_the_frozen_copy_gets_no_gradient_and_stays_in_eval_mode(tokenizer):
    model = SelfGuidedModel(tiny_tuned(tokenizer), loss="base", projection_hidden_size=16).train()
    assert not model.frozen_encoder.training and model.contrastive.training
    batch = SelfGuidedCollator(tokenizer)([{"text": s} for s in SENTENCES])
    model(**batch).loss.backward()
    assert all(not p.requires_grad and p.grad is None for p in model.frozen_encoder.parameters())
    assert all(p.grad is None for p in model.contrastive.encoder.embeddings.parameters())  # layer 0 of BERT_T
    assert all(p.grad is not None for p in model.contrastive.encoder.encoder.parameters())
    assert all(p.grad is not None for p in model.projection.parameters())


def test_from_encoder_pretrained_starts_from_a_plain_encoder_or_continues_a_contrastive_checkpoint(
    tokenizer, tmp_path
):
    BertModel(tiny_bert_config(vocab_size=len(tokenizer))).save_pretrained(tmp_path / "bert")
    tiny_tuned(tokenizer, num_hidden_layers=3).save_pretrained(tmp_path / "contrastive")
    for folder, layers in (("bert", 2), ("contrastive", 3)):
        model = SelfGuidedModel.from_encoder_pretrained(tmp_path / folder, loss="opt1", projection_hidden_size=8)
        assert model.config.pooler_type == "cls_before_pooler" and model.config.projection_type == "none"
        assert model.self_guided_config.loss == "opt1"
        frozen = dict(model.frozen_encoder.named_parameters())
        assert all(torch.equal(p, frozen[name]) for name, p in model.contrastive.encoder.named_parameters())
        batch = SelfGuidedCollator(tokenizer)([{"text": s} for s in SENTENCES[:3]])
        assert model.layer_views(**batch).shape == (3, layers + 1, 32)


def test_bad_settings_are_clear_errors(tokenizer):
    with pytest.raises(ValueError, match=r"one of base, opt1, opt2, opt3, or a registered in-batch loss \(nt_xent"):
        SelfGuidedConfig(loss="opt4")
    with pytest.raises(ValueError, match="projection_type='none'"):
        config = ContrastiveConfig(encoder=tiny_bert_config(vocab_size=len(tokenizer)), projection_type="mlp")
        SelfGuidedModel(ContrastiveModel(config))
    with pytest.raises(ValueError, match="give 3"):
        SelfGuidedModel(tiny_tuned(tokenizer), loss="base", layer_sampling_weights=[1.0, 2.0])
    with pytest.raises(ValueError, match="one layer in 0..2 per sentence"):
        model = SelfGuidedModel(tiny_tuned(tokenizer), loss="base", projection_hidden_size=8)
        model(**SelfGuidedCollator(tokenizer)([{"text": "a b"}, {"text": "c"}]), view_layers=torch.tensor([0, 3]))
    with pytest.raises(ValueError, match="'input_ids' or a 'text' column"):
        SelfGuidedCollator(tokenizer)([{"sentence": "a b"}])


# --- training, saving, resuming --------------------------------------------------------------------------------------


def make_trainer(tokenizer, output_dir, tuned=None, loss="opt3", **arguments):
    tuned = tuned if tuned is not None else tiny_tuned(tokenizer)
    model = SelfGuidedModel(tuned, loss=loss, projection_hidden_size=16)
    defaults = dict(
        output_dir=str(output_dir),
        per_device_train_batch_size=8,
        learning_rate=1e-3,
        max_steps=3,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
        seed=0,
    )
    args = SelfGuidedTrainingArguments(**{**defaults, **arguments})
    return SelfGuidedTrainer(
        model=model,
        args=args,
        train_dataset=Dataset.from_dict({"text": SENTENCES * 4}),
        data_collator=SelfGuidedCollator(tokenizer, max_length=16),
        processing_class=tokenizer,
    )


def test_training_moves_bert_t_but_not_bert_f_nor_layer_0(tokenizer, tmp_path):
    trainer = make_trainer(tokenizer, tmp_path, loss="opt2")
    model = trainer.model
    assert trainer.args.adam_beta2 == 0.9 and trainer.args.per_device_train_batch_size == 8  # Table 8's beta2
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    trainer.train()
    optimised = {id(p) for group in trainer.optimizer.param_groups for p in group["params"]}
    for name, parameter in model.named_parameters():
        moved = not torch.equal(parameter, before[name])
        if name.startswith("frozen_encoder.") or name.startswith("contrastive.encoder.embeddings."):
            assert not moved and id(parameter) not in optimised, name
        elif name.startswith("contrastive.encoder.encoder.") or name.startswith("projection."):
            assert moved and id(parameter) in optimised, name
    logged = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert len(logged) == 3 and all(entry["cl_loss"] > 0 for entry in logged)
    assert logged[0]["regularization_loss"] == 0 and logged[-1]["regularization_loss"] > 0  # BERT_T drifts
    pairs = STSData(SENTENCES[:4], SENTENCES[4:], [0.0, 1.0, 2.0, 3.0])
    metrics = trainer.evaluate(pairs)  # STS during training scores BERT_T's embeddings
    expected = evaluate_sts(model.contrastive, pairs, tokenizer=tokenizer)["spearman"]
    assert metrics["eval_spearman"] == pytest.approx(expected)


def test_gradient_checkpointing_through_the_trainer_checkpoints_bert_t(tokenizer, tmp_path):
    """--gradient_checkpointing: transformers' Trainer enables it with the options of its version (5.24:
    ``every_n_layers`` and ``offload``, which SG-BERT's model refused with a TypeError)."""
    trainer = make_trainer(tokenizer, tmp_path, gradient_checkpointing=True, max_steps=1)
    trainer.train()
    model = trainer.model

    def checkpointed(module) -> bool:
        return any(getattr(part, "gradient_checkpointing", False) for part in module.modules())

    assert checkpointed(model.contrastive.encoder)  # BERT_T's layers recompute their activations
    assert not checkpointed(model.frozen_encoder)  # BERT_F runs without gradients


@pytest.mark.slow  # a run and its resume: 1 s of CPU
def test_saved_model_is_bert_t_alone_and_checkpoints_resume_exactly(tokenizer, tmp_path):
    no_dropout = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
    torch.manual_seed(0)
    start = tiny_tuned(tokenizer, **no_dropout)
    start.save_pretrained(tmp_path / "start")

    straight = make_trainer(tokenizer, tmp_path / "straight", tuned=start, max_steps=4, save_strategy="steps",
                            save_steps=2)  # fmt: skip
    straight.train()
    straight.save_model()
    final = tmp_path / "straight"
    checkpoint = final / "checkpoint-2"
    encoder_keys = set(start.encoder.state_dict())
    for folder in (final, checkpoint):
        with safe_open(folder / "model.safetensors", "pt") as weights:
            keys = set(weights.keys())
        assert keys == encoder_keys, sorted(keys ^ encoder_keys)  # BERT_T's encoder: no BERT_F, no head f
        assert not (folder / "contrastive_heads.safetensors").exists()  # BERT_T has no projection
    assert (checkpoint / HEAD_FILE).is_file() and not (final / HEAD_FILE).exists()

    reloaded = ContrastiveModel.from_pretrained(final)
    assert reloaded.config.pooler_type == "cls_before_pooler"
    expected = straight.model.contrastive.encode(SENTENCES, tokenizer=tokenizer)
    np.testing.assert_allclose(reloaded.encode(SENTENCES, tokenizer=tokenizer), expected, atol=1e-6)

    fresh = ContrastiveModel.from_pretrained(tmp_path / "start")
    resumed = make_trainer(tokenizer, tmp_path / "straight", tuned=fresh, max_steps=4, save_strategy="steps",
                           save_steps=2)  # fmt: skip
    resumed.train(resume_from_checkpoint=str(checkpoint))
    for name, parameter in straight.model.named_parameters():
        torch.testing.assert_close(dict(resumed.model.named_parameters())[name], parameter, rtol=1e-5, atol=1e-6)
