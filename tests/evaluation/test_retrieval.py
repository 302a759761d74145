"""In-memory retrieval evaluation: ranks and metrics against hand-computed cases (ties included), blocked scoring
and batched encoding equal to one-shot, and evaluate_retrieval with a dual encoder and with a single encoder."""

from __future__ import annotations

import pytest
import torch

from contrastive_hf import ContrastiveConfig, ContrastiveModel
from contrastive_hf.evaluation.retrieval import (
    RetrievalData,
    build_retrieval_data,
    evaluate_retrieval,
    passage_ranks,
    retrieval_eval_metrics,
    retrieval_metrics,
    search,
)
from contrastive_hf.models.configuration_dual_encoder import DualEncoderConfig
from contrastive_hf.models.modeling_dual_encoder import DualEncoderModel

from conftest import DEMO_DATA, tiny_bert_config

# Passages on the plane; the dot products with query (1, 0) are their first coordinates.
PASSAGES = torch.tensor([[3.0, 0.0], [1.0, 5.0], [2.0, 0.0], [2.0, -1.0], [0.0, 1.0]])


def test_ranks_by_hand_with_ties_counted_against_the_model():
    queries = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    # query 0: relevant p0 scores 3, nothing scores higher -> rank 1
    # query 1: relevant p2 scores 2, tied with irrelevant p3, below p0 -> rank 1 + |{p0, p3}| = 3
    # query 2: relevant {p3, p4} score {2, 0}; the best is 2, tied with irrelevant p2, below p0 -> rank 3
    # query 3 (0, 1): relevant p4 scores 1, p1 scores 5 -> rank 2; the tie of p0, p2 (0) is below it
    relevant = [[0], [2], [3, 4], [4]]
    ranks = passage_ranks(queries, PASSAGES, relevant, similarity="dot")
    assert ranks.tolist() == [1, 3, 3, 2]
    metrics = retrieval_metrics(ranks, k_values=(1, 2, 3))
    assert metrics == pytest.approx(
        {"recall@1": 0.25, "recall@2": 0.5, "recall@3": 1.0, "mrr": (1 + 1 / 3 + 1 / 3 + 1 / 2) / 4}
    )


def test_equal_scores_everywhere_rank_every_query_last():
    """A collapsed encoder (all passages alike) must not look perfect: the tie rule ranks it last."""
    passages = torch.ones(6, 4)
    ranks = passage_ranks(torch.ones(3, 4), passages, [[0], [3], [5]])
    assert ranks.tolist() == [6, 6, 6]
    assert retrieval_metrics(ranks, k_values=(1,))["recall@1"] == 0.0


def test_cosine_ignores_the_norms_that_dot_rewards():
    queries = torch.tensor([[1.0, 0.0]])
    passages = torch.tensor([[10.0, 10.0], [1.0, 0.0]])
    assert passage_ranks(queries, passages, [[1]], similarity="dot").tolist() == [2]
    assert passage_ranks(queries, passages, [[1]], similarity="cosine").tolist() == [1]
    with pytest.raises(ValueError, match="Unknown similarity"):
        passage_ranks(queries, passages, [[1]], similarity="l2")


def test_blocked_scoring_equals_one_block_and_search_agrees_with_the_ranks():
    generator = torch.Generator().manual_seed(0)
    queries, passages = torch.randn(37, 16, generator=generator), torch.randn(101, 16, generator=generator)
    relevant = [[i, (3 * i + 1) % 101] for i in range(37)]
    one_block = passage_ranks(queries, passages, relevant, block_elements=1 << 30)
    for block_elements in (1, 101 * 5, 101 * 36):  # one query per block, five, a short last block
        assert torch.equal(passage_ranks(queries, passages, relevant, block_elements=block_elements), one_block)
    scores, indices = search(queries, passages, k=101, block_elements=101 * 4)
    assert torch.equal(search(queries, passages, k=101)[1], indices)
    assert (scores[:, :-1] >= scores[:, 1:]).all()
    for row, wanted in enumerate(relevant):  # no ties among random scores: the first relevant hit is the rank
        first = min(indices[row].tolist().index(p) for p in wanted) + 1
        assert first == one_block[row]
    top3 = search(queries, passages, k=3)
    assert top3[0].shape == (37, 3)
    torch.testing.assert_close(top3[0], scores[:, :3])


def test_build_retrieval_data_keeps_one_copy_of_each_passage():
    data = build_retrieval_data(["q0", "q1", "q2"], ["p", "r", "p"], distractors=["x", "r", "y"], name="toy")
    assert data.passages == ["p", "r", "x", "y"]
    assert data.relevant == [[0], [1], [0]]
    with pytest.raises(ValueError, match="one per query"):
        build_retrieval_data(["q0"], ["p", "r"])
    with pytest.raises(ValueError, match="no relevant passage"):
        RetrievalData(["q"], ["p"], [[]])
    with pytest.raises(ValueError, match="outside the 1 passages"):
        RetrievalData(["q"], ["p"], [[3]])


def snli_task(count: int) -> RetrievalData:
    import csv

    with open(DEMO_DATA / "nli_sample.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))[:count]
    return build_retrieval_data([r["sent0"] for r in rows], [r["sent1"] for r in rows], [r["hard_neg"] for r in rows])


def test_batched_encoding_equals_one_shot(tokenizer):
    model = DualEncoderModel(DualEncoderConfig(query_encoder=tiny_bert_config(vocab_size=len(tokenizer)))).eval()
    task = snli_task(20)
    one_shot = model.encode_passages(task.passages, tokenizer, batch_size=len(task.passages))
    batched = model.encode_passages(task.passages, tokenizer, batch_size=3)
    torch.testing.assert_close(batched, one_shot, atol=1e-5, rtol=1e-4)
    single = model.encode_passages(task.passages[7], tokenizer)
    torch.testing.assert_close(single, one_shot[7], atol=1e-5, rtol=1e-4)
    # the query tower is another encoder: other vectors for the same texts
    assert not torch.allclose(model.encode_queries(task.passages[:4], tokenizer), one_shot[:4])
    queries_batched = model.encode_queries(task.queries, tokenizer, batch_size=4)
    queries_one_shot = model.encode_queries(task.queries, tokenizer, batch_size=64)
    torch.testing.assert_close(queries_batched, queries_one_shot, atol=1e-5, rtol=1e-4)


def test_evaluate_retrieval_with_a_dual_encoder_and_with_a_single_encoder(tokenizer):
    # a shared encoder asked for the passages themselves finds each one first
    model = DualEncoderModel(
        DualEncoderConfig(
            query_encoder=tiny_bert_config(vocab_size=len(tokenizer)), share_encoders=True, similarity="cosine"
        )
    )
    passages = snli_task(12).passages
    itself = RetrievalData(passages, passages, [[i] for i in range(len(passages))], name="itself")
    metrics = evaluate_retrieval(model, itself, tokenizer, k_values=(1, 5, 100))
    assert metrics == {"recall@1": 1.0, "recall@5": 1.0, "mrr": 1.0, "queries": 24, "passages": 24}  # no k >= 24
    logged = retrieval_eval_metrics(model, itself, tokenizer, k_values=(1,), prefix="eval_itself")
    assert logged == {"eval_itself_recall@1": 1.0, "eval_itself_mrr": 1.0}

    task = snli_task(30)
    scores = evaluate_retrieval(model, task, tokenizer, k_values=(1, 20))
    assert 0.0 <= scores["recall@1"] <= scores["recall@20"] <= 1.0 and 1 / 60 <= scores["mrr"] <= 1.0
    assert scores["queries"] == 30 and scores["passages"] == len(task.passages) == 59  # one hypothesis twice

    single = ContrastiveModel(
        ContrastiveConfig(encoder=tiny_bert_config(vocab_size=len(tokenizer)), pooler_type="mean")
    )
    single_scores = evaluate_retrieval(single, itself, tokenizer, k_values=(1,))
    assert single_scores["recall@1"] == 1.0
