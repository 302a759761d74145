"""DualEncoderModel (DPR): towers, saving and loading, the loss against DPR's formula, duplicate masking, cross-device
gathering, the pre-batch queue and GradCache through ContrastiveTrainer; QueryPassageCollator."""

from __future__ import annotations

import math

import pytest
import torch
from datasets import Dataset
from transformers import AutoConfig, AutoModel, BertModel

import contrastive_hf.models.distributed as distributed
import contrastive_hf.models.objectives as objectives
from contrastive_hf.models.configuration_contrastive import EMBEDDING_FIELDS, ContrastiveConfig
from contrastive_hf.models.configuration_dual_encoder import DualEncoderConfig
from contrastive_hf.models.modeling_dual_encoder import DualEncoderModel
from contrastive_hf.models.objectives import register_loss, unregister_loss
from contrastive_hf.recipes.dpr import QueryPassageCollator, tokenize_query_passage_pairs
from contrastive_hf.training.trainer import ContrastiveTrainer

from conftest import tiny_bert_config
from helpers.builders import (
    DUAL_ENCODER_VOCAB,
    CountedInfoNCE,
    make_dual_encoder,
    make_dual_encoder_trainer,
    queue_holding,
    snli_triples,
)


def token_batch(batch_size=3, passages=2, generator_seed=0):
    generator = torch.Generator().manual_seed(generator_seed)
    queries = torch.randint(5, DUAL_ENCODER_VOCAB, (batch_size, 6), generator=generator)
    passage_ids = torch.randint(5, DUAL_ENCODER_VOCAB, (batch_size, passages, 9), generator=generator)
    passage_mask = torch.ones_like(passage_ids)
    passage_mask[:, :, 7:] = 0  # some padding
    return {
        "query_input_ids": queries,
        "query_attention_mask": torch.ones_like(queries),
        "passage_input_ids": passage_ids,
        "passage_attention_mask": passage_mask,
    }


# ----------------------------------------------------------------------------------------------------------------
# Configuration and towers
# ----------------------------------------------------------------------------------------------------------------


def test_config_defaults_and_errors_that_name_the_fix():
    assert DualEncoderConfig().temperature == 1.0  # DPR: raw dot product
    assert DualEncoderConfig(similarity="cosine").temperature == 0.05
    assert DualEncoderConfig(similarity="cosine", temperature=0.1).temperature == 0.1
    separate = DualEncoderConfig(query_encoder=tiny_bert_config())
    assert separate.passage_encoder.to_dict() == separate.query_encoder.to_dict()
    assert separate.passage_encoder is not separate.query_encoder
    with pytest.raises(ValueError, match="leave passage_encoder unset"):
        DualEncoderConfig(share_encoders=True, passage_encoder=tiny_bert_config())
    with pytest.raises(ValueError, match="choose one of cosine, dot"):
        DualEncoderConfig(similarity="l2")
    with pytest.raises(ValueError, match="temperature must be > 0"):
        DualEncoderConfig(temperature=0.0)
    with pytest.raises(ValueError, match="Set projection_dim"):
        DualEncoderConfig(query_encoder=tiny_bert_config(), passage_encoder=tiny_bert_config(hidden_size=64))
    projected = DualEncoderConfig(
        query_encoder=tiny_bert_config(), passage_encoder=tiny_bert_config(hidden_size=64), projection_dim=16
    )
    assert projected.embedding_size == 16


def test_shared_encoders_are_one_set_of_weights_and_separate_towers_both_learn():
    shared, separate = make_dual_encoder(share_encoders=True), make_dual_encoder(share_encoders=False)
    encoder_parameters = BertModel(shared.config.query_encoder).num_parameters()
    assert shared.passage_encoder is None
    assert shared.num_parameters() == encoder_parameters
    assert separate.num_parameters() == 2 * encoder_parameters

    batch = token_batch()
    ids, mask = batch["query_input_ids"], batch["query_attention_mask"]
    torch.testing.assert_close(shared.embed_queries(ids, mask), shared.embed_passages(ids, mask))
    assert not torch.allclose(separate.embed_queries(ids, mask), separate.embed_passages(ids, mask))

    separate(**batch).loss.backward()
    for tower in (separate.query_encoder, separate.passage_encoder):
        gradient = tower.encoder.layer[0].attention.self.query.weight.grad
        assert gradient is not None and gradient.abs().sum() > 0


@pytest.mark.parametrize("share_encoders", [False, True])
def test_save_and_load_round_trips(tmp_path, tokenizer, share_encoders):
    model = make_dual_encoder(share_encoders=share_encoders, similarity="cosine", projection_dim=8).eval()
    model.tokenizer = tokenizer  # two towers: each carries it
    model.save_pretrained(tmp_path)
    loaded = DualEncoderModel.from_pretrained(tmp_path).eval()
    assert loaded.config.share_encoders is share_encoders and loaded.config.similarity == "cosine"
    assert (loaded.passage_encoder is None) is share_encoders
    batch = token_batch()
    with torch.no_grad():
        torch.testing.assert_close(loaded(**batch).embeddings, model(**batch).embeddings)
    # after `import contrastive_hf`, AutoModel finds a two-tower checkpoint's model; one shared encoder is, at the
    # root, that encoder in its own architecture
    expected = "bert" if share_encoders else "dual_encoder"
    assert AutoConfig.from_pretrained(tmp_path).model_type == expected
    assert isinstance(AutoModel.from_pretrained(tmp_path), BertModel if share_encoders else DualEncoderModel)


def test_from_encoder_pretrained_starts_both_towers_from_the_checkpoint(tmp_path):
    source = BertModel(tiny_bert_config(vocab_size=DUAL_ENCODER_VOCAB), add_pooling_layer=False)
    source.save_pretrained(tmp_path)
    model = DualEncoderModel.from_encoder_pretrained(tmp_path, pooler_type="mean")
    reference = source.embeddings.word_embeddings.weight
    torch.testing.assert_close(model.query_encoder.embeddings.word_embeddings.weight, reference)
    torch.testing.assert_close(model.passage_encoder.embeddings.word_embeddings.weight, reference)
    assert model.query_encoder is not model.passage_encoder
    shared = DualEncoderModel.from_encoder_pretrained(tmp_path, share_encoders=True)
    assert shared.passage_encoder is None
    with pytest.raises(ValueError, match="single encoder"):
        DualEncoderModel.from_encoder_pretrained(tmp_path, passage_name_or_path=tmp_path, share_encoders=True)


# ----------------------------------------------------------------------------------------------------------------
# The loss against DPR's formula
# ----------------------------------------------------------------------------------------------------------------


def reference_loss(embeddings, similarity, temperature, extra=None, ids=None, extra_ids=None, rows=None, offset=0):
    """DPR eq. (2) with loops: -log e^{s(q_i, p_i+)} / sum over in-batch positives, hard negatives and queued passages
    of e^{s(q_i, p)}, leaving out passages with the same id as q_i or p_i+ (except p_i+ itself).

    ``embeddings`` is the (global) batch; ``rows`` the queries scored (all by default), ``offset`` unused but for
    naming the global row of local query 0. Returns (mean loss, mean number of negatives), in float64.
    """
    embeddings = embeddings.double()
    batch, columns = embeddings.shape[:2]
    candidates = [(embeddings[j, 1], None if ids is None else ids[j, 1], ("positive", j)) for j in range(batch)]
    if columns == 3:
        candidates += [(embeddings[j, 2], None if ids is None else ids[j, 2], ("hard", j)) for j in range(batch)]
    for m in range(0 if extra is None else extra.shape[0]):
        candidates.append((extra[m].double(), None if extra_ids is None else extra_ids[m], ("extra", m)))

    def score(a, b):
        if similarity == "cosine":
            return float(a @ b / (a.norm() * b.norm())) / temperature
        return float(a @ b) / temperature

    losses, negatives = [], []
    for i in rows if rows is not None else range(batch):
        query = embeddings[i, 0]
        own = ids[i, :2].tolist() if ids is not None else []
        terms, count = [], 0
        for vector, vector_id, tag in candidates:
            if tag == ("positive", i):
                positive = score(query, vector)
                terms.append(positive)
                continue
            if vector_id is not None and int(vector_id) in own:
                continue
            terms.append(score(query, vector))
            count += 1
        log_denominator = math.log(sum(math.exp(t) for t in terms))
        losses.append(log_denominator - positive)
        negatives.append(count)
    return sum(losses) / len(losses), sum(negatives) / len(negatives)


@pytest.mark.parametrize("similarity", ["dot", "cosine"])
@pytest.mark.parametrize("columns", [2, 3])
def test_loss_matches_dpr_formula_with_hard_and_queued_negatives(similarity, columns):
    model = make_dual_encoder(similarity=similarity)
    generator = torch.Generator().manual_seed(1)
    embeddings = torch.randn(5, columns, 8, generator=generator)
    extra = torch.randn(4, 8, generator=generator)
    queue_holding(model, extra)
    loss, negatives = model.compute_contrastive_loss(embeddings)
    expected, expected_negatives = reference_loss(embeddings, similarity, model.config.temperature, extra=extra)
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    assert negatives.item() == expected_negatives == 5 * (columns - 1) - 1 + 4


def test_duplicates_are_never_negatives_and_the_loss_still_matches_the_formula():
    model = make_dual_encoder(similarity="cosine")
    generator = torch.Generator().manual_seed(2)
    embeddings = torch.randn(4, 3, 8, generator=generator, requires_grad=True)
    ids = torch.arange(12).view(4, 3) + 100
    ids[2, 1] = ids[0, 1]  # queries 0 and 2 share their positive passage
    ids[3, 2] = ids[1, 1]  # query 3's hard negative is query 1's positive
    ids[1, 2] = ids[1, 0]  # query 1's hard negative is its own question's text
    extra = torch.randn(3, 8, generator=generator)
    extra_ids = torch.tensor([ids[3, 1].item(), 7, 8])  # the queue holds query 3's positive again
    queue_holding(model, extra, extra_ids)
    loss, negatives = model.compute_contrastive_loss(embeddings, sentence_ids=ids)
    expected, expected_negatives = reference_loss(
        embeddings.detach(), "cosine", 0.05, extra=extra, ids=ids, extra_ids=extra_ids
    )
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    assert negatives.item() == pytest.approx(expected_negatives)
    assert expected_negatives < 4 * 2 - 1 + 3  # something was masked

    queue_holding(model, extra)
    unmasked_loss, _ = model.compute_contrastive_loss(embeddings)
    assert not math.isclose(loss.item(), unmasked_loss.item(), rel_tol=1e-4)


def test_queue_without_ids_is_never_masked():
    model = make_dual_encoder()
    embeddings = torch.randn(3, 2, 8)
    ids = torch.arange(6).view(3, 2)
    extra = embeddings[:, 1].clone()  # queued copies of this batch's positives, ids unknown
    queue_holding(model, extra)
    _, negatives = model.compute_contrastive_loss(embeddings, sentence_ids=ids)
    assert negatives.item() == 2 + 3


def test_gathered_loss_scores_local_queries_against_every_process_passages(monkeypatch):
    """Rank 1 of 2 with the collectives replaced: its loss is the reference loss of its own queries against the
    passages of both processes (open_clip's "local loss"), with the labels offset by rank * batch."""
    model = make_dual_encoder()
    generator = torch.Generator().manual_seed(3)
    other = torch.randn(3, 3, 8, generator=generator)  # rank 0's embeddings
    mine = torch.randn(3, 3, 8, generator=generator, requires_grad=True)
    other_ids, my_ids = torch.arange(9).view(3, 3), torch.arange(9).view(3, 3) + 9
    my_ids[0, 1] = other_ids[2, 1]  # a positive duplicated across processes
    monkeypatch.setattr(distributed, "world_size", lambda: 2)
    monkeypatch.setattr(distributed, "rank", lambda: 1)
    monkeypatch.setattr(distributed, "gather_sizes", lambda size, device: [3, size])
    monkeypatch.setattr(distributed, "gather_with_grad", lambda t, sizes: torch.cat([other, t]))
    monkeypatch.setattr(objectives, "gather_no_grad", lambda t, sizes: torch.cat([other_ids, t]))
    model.loss_fn.gather_across_devices = True
    loss, negatives = model.compute_contrastive_loss(mine, sentence_ids=my_ids)
    everyone = torch.cat([other, mine.detach()])
    expected, expected_negatives = reference_loss(
        everyone, "dot", 1.0, ids=torch.cat([other_ids, my_ids]), rows=[3, 4, 5]
    )
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    assert negatives.item() == pytest.approx(expected_negatives)
    # without gathering, only this process's passages are negatives
    model.loss_fn.gather_across_devices = False
    _, local_negatives = model.compute_contrastive_loss(mine, sentence_ids=my_ids)
    assert local_negatives.item() == 3 * 2 - 1


def test_forward_is_embed_views_then_the_loss_and_checks_its_inputs():
    model = make_dual_encoder()
    batch = token_batch()
    output = model(**batch)
    embeddings = model.embed_views(**{name: batch[name] for name in model.view_input_names if name in batch})
    torch.testing.assert_close(output.embeddings, embeddings)
    torch.testing.assert_close(output.loss, model.compute_contrastive_loss(embeddings)[0])
    assert output.embeddings.shape == (3, 3, 32) and output.cl_loss is output.loss
    one_passage = model(
        **{**batch, "passage_input_ids": batch["passage_input_ids"][:, 0], "passage_attention_mask": None}
    )
    assert one_passage.embeddings.shape == (3, 2, 32)
    with pytest.raises(ValueError, match="passage_input_ids"):
        model(query_input_ids=batch["query_input_ids"])
    with pytest.raises(ValueError, match="encode_queries"):
        model()


# ----------------------------------------------------------------------------------------------------------------
# Collator
# ----------------------------------------------------------------------------------------------------------------


def test_collator_pads_queries_and_passages_separately_and_hashes_texts(tokenizer):
    features = snli_triples(4)
    features[2]["positive"] = features[0]["positive"]
    batch = QueryPassageCollator(tokenizer)(features)
    lengths = [len(tokenizer(f["query"])["input_ids"]) for f in features]
    assert batch["query_input_ids"].shape == (4, max(lengths))
    assert batch["passage_input_ids"].shape[:2] == (4, 2)
    assert batch["passage_attention_mask"].sum(-1)[:, 1].tolist() == [
        len(tokenizer(f["hard_negative"])["input_ids"]) for f in features
    ]
    assert batch["sentence_ids"].shape == (4, 3) and batch["sentence_ids"].dtype == torch.int64
    assert batch["sentence_ids"][2, 1] == batch["sentence_ids"][0, 1]
    assert len(set(batch["sentence_ids"].flatten().tolist())) == 11

    # token ids from tokenize_query_passage_pairs give the same batch as texts
    tokenized = tokenize_query_passage_pairs(
        Dataset.from_list(features), tokenizer, ("query", "positive", "hard_negative")
    )
    from_ids = QueryPassageCollator(tokenizer)(list(tokenized))
    for name, value in batch.items():
        torch.testing.assert_close(from_ids[name], value)

    pairs = QueryPassageCollator(tokenizer, columns=("query", "positive"))(features)
    assert pairs["passage_input_ids"].shape[1] == 1 and pairs["sentence_ids"].shape == (4, 2)
    with pytest.raises(ValueError, match="has no 'positive'"):
        QueryPassageCollator(tokenizer)([{"query": "a question", "positive": " "}])


# ----------------------------------------------------------------------------------------------------------------
# Through ContrastiveTrainer
# ----------------------------------------------------------------------------------------------------------------


def test_prebatch_queue_adds_the_previous_batches_passages_as_negatives(tokenizer, tmp_path):
    trainer = make_dual_encoder_trainer(tokenizer, tmp_path, max_steps=4, prebatch_size=2, logging_steps=1)
    seen = []
    trainer.model.register_forward_hook(lambda module, args, output: seen.append(output.negatives_per_query.item()))
    trainer.train()
    # batch of 8 with hard negatives: 8 positives + 8 hard negatives - 1, then 8 more per queued batch (at most 2)
    assert seen == [15.0, 23.0, 31.0, 31.0]
    logged = [entry["negatives_per_query"] for entry in trainer.state.log_history if "negatives_per_query" in entry]
    assert logged == seen


def test_a_loss_handed_to_the_trainer_trains_both_towers_and_the_card_names_it(tokenizer, tmp_path):
    """DPR's config builds InfoNCE over dot products; ContrastiveTrainer(loss=...) hands the towers any loss, here
    over cosine similarities at temperature 0.1, and the card says which."""
    loss = CountedInfoNCE(temperature=0.1, similarity="cosine")
    trainer = make_dual_encoder_trainer(tokenizer, tmp_path, max_steps=2, loss=loss, logging_steps=1)
    assert trainer.model.loss_fn is loss and trainer.loss_fn is loss
    trainer.train()
    assert loss.calls == 2
    trainer.create_model_card()
    card = (tmp_path / "README.md").read_text()
    assert "counted_info_nce: InfoNCE, counted (a test's), over cosine similarities, temperature 0.1" in card


def test_a_registered_loss_named_in_the_config_trains_dpr_and_its_checkpoint_keeps_the_name(tokenizer, tmp_path):
    """A loss of one's own is one class and one registration: DualEncoderConfig(contrastive_loss=...) (run_dpr's
    --contrastive_loss) builds it, it trains both towers, the saved checkpoint names it and loads with it."""
    register_loss(CountedInfoNCE)
    try:
        model = make_dual_encoder(vocab_size=len(tokenizer), contrastive_loss="counted_info_nce")
        assert isinstance(model.loss_fn, CountedInfoNCE) and model.loss_fn.temperature == model.config.temperature
        model.tokenizer = tokenizer
        model.save_pretrained(tmp_path / "saved")
        reloaded = DualEncoderModel.from_pretrained(tmp_path / "saved")
        assert reloaded.config.contrastive_loss == "counted_info_nce" and isinstance(reloaded.loss_fn, CountedInfoNCE)
        parts = make_dual_encoder_trainer(tokenizer, tmp_path / "run", max_steps=1)
        trainer = ContrastiveTrainer(
            model=reloaded, args=parts.args, train_dataset=parts.train_dataset, data_collator=parts.data_collator,
            processing_class=tokenizer,
        )  # fmt: skip
        trainer.train()
        assert trainer.model.loss_fn is trainer.loss_fn and trainer.loss_fn.calls == 1
    finally:
        unregister_loss("counted_info_nce")
    assert DualEncoderModel.from_pretrained(tmp_path / "saved").loss_fn is None  # loads and encodes without it
    assert make_dual_encoder(vocab_size=len(tokenizer)).config.contrastive_loss == "info_nce"  # DPR's


def test_grad_cache_chunks_give_the_full_batch_update(tokenizer, tmp_path):
    """GradCache through the trainer (chunks of 3 of a batch of 8, with a pre-batch queue) makes the same SGD steps
    as the whole batch at once: `embed_views` + `compute_contrastive_loss` + the cached-gradient forward compose."""
    settings = dict(count=16, max_steps=2, prebatch_size=1, optim="sgd", learning_rate=0.5)
    full = make_dual_encoder_trainer(tokenizer, tmp_path / "full", **settings)
    chunked = make_dual_encoder_trainer(tokenizer, tmp_path / "chunked", grad_cache_chunk_size=3, **settings)
    chunked.model.load_state_dict(full.model.state_dict())
    initial = {name: value.clone() for name, value in full.model.state_dict().items()}
    full.train()
    chunked.train()
    moved = 0
    for (name, expected), actual in zip(full.model.named_parameters(), chunked.model.parameters(), strict=True):
        torch.testing.assert_close(actual, expected, atol=1e-5, rtol=1e-4, msg=name)
        moved += not torch.allclose(expected, initial[name])
    assert moved > 10  # both towers trained


def test_a_retrieval_eval_set_is_scored_during_training(tokenizer, tmp_path):
    from contrastive_hf.evaluation.retrieval import build_retrieval_data

    triples = snli_triples(24)
    held_out = build_retrieval_data(
        [row["query"] for row in triples],
        [row["positive"] for row in triples],
        [row["hard_negative"] for row in triples],
    )
    trainer = make_dual_encoder_trainer(
        tokenizer, tmp_path, max_steps=2, eval_strategy="steps", eval_steps=1, eval_dataset={"snli": held_out}
    )
    trainer.train()
    scored = [entry for entry in trainer.state.log_history if "eval_snli_mrr" in entry]
    assert len(scored) == 2
    assert 0.0 < scored[-1]["eval_snli_mrr"] <= 1.0 and 0.0 <= scored[-1]["eval_snli_recall@1"] <= 1.0


def test_the_settings_every_sentence_embedding_model_shares_are_declared_and_checked_once():
    """`SentenceEmbeddingConfig` declares the loss, encoding and serving settings both model families have; each
    family declares only its encoders and heads, and DPR its own defaults. The dual encoder's prompts are checked
    as the sentence encoder's are (they were not)."""
    assert not set(EMBEDDING_FIELDS) & set(ContrastiveConfig.__annotations__)
    assert set(EMBEDDING_FIELDS) & set(DualEncoderConfig.__annotations__) == {
        "similarity",
        "temperature",
        "contrastive_loss",
    }
    for config_class in (ContrastiveConfig, DualEncoderConfig):
        encoder = (
            {"encoder": tiny_bert_config()}
            if config_class is ContrastiveConfig
            else {"query_encoder": tiny_bert_config()}
        )
        with pytest.raises(ValueError, match="default_prompt_name 'query' is not among the prompts"):
            config_class(**encoder, prompts={"document": "passage: "}, default_prompt_name="query")
        with pytest.raises(ValueError, match="prompts must map names to prompt texts"):
            config_class(**encoder, prompts={"query": 1})
