"""In-memory dense retrieval evaluation: recall@k and MRR of queries against a passage collection.

Queries and passages are encoded in batches (a dual encoder's `encode_queries` / `encode_passages`, or one sentence
encoder for both), then every query is scored against every passage in blocks of queries, so memory stays bounded
by ``block_elements`` scores whatever the collection's size. Nothing is sorted: the rank of a query's first relevant
passage is counted directly.

Ranks and ties: the rank of a query is 1 + the number of *irrelevant* passages scoring at least as high as its best
relevant passage. A tie between a relevant and an irrelevant passage is thus counted against the model (the
pessimistic convention): an encoder that gives every passage the same score ranks each query last, not first. Ties
among relevant passages do not matter.

Metrics, as fractions in [0, 1]:

* ``recall@k``: the fraction of queries with a relevant passage among their top k (DPR's "top-k retrieval accuracy",
  Karpukhin et al., 2020, §5.1; for queries with a single relevant passage, the usual recall@k);
* ``mrr``: the mean over queries of 1 / rank of the first relevant passage (no cut-off).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

__all__ = [
    "DEFAULT_K_VALUES",
    "RetrievalData",
    "build_retrieval_data",
    "passage_ranks",
    "retrieval_metrics",
    "search",
    "evaluate_retrieval",
    "retrieval_eval_metrics",
]

DEFAULT_K_VALUES = (1, 5, 20, 100)  # DPR reports top-20 and top-100 accuracy
# Scores held at once (64 MiB of float32): the number of queries scored per block is this over the collection size.
BLOCK_ELEMENTS = 1 << 24


@dataclass
class RetrievalData:
    """A retrieval task: queries, a passage collection, and the passages that answer each query.

    Attributes:
        queries: the query texts.
        passages: the collection.
        relevant: for each query, the indices (into ``passages``) of its relevant passages, at least one.
        name: how metrics name the task.
    """

    queries: list[str]
    passages: list[str]
    relevant: list[list[int]]
    name: str = "retrieval"

    # the metric that ranks models on it, for ``metric_for_best_model``: ``eval_<name>_mrr``, and what it is
    primary_metric = "mrr"
    primary_metric_description = "the mean reciprocal rank of each query's first relevant passage"

    def __post_init__(self):
        if len(self.relevant) != len(self.queries):
            raise ValueError(f"{len(self.queries)} queries but {len(self.relevant)} lists of relevant passages.")
        for index, passages in enumerate(self.relevant):
            if len(passages) == 0:
                raise ValueError(f"Query {index} has no relevant passage; every query needs at least one.")
            bad = [p for p in passages if not 0 <= p < len(self.passages)]
            if bad:
                raise ValueError(f"Query {index} names passage(s) {bad} outside the {len(self.passages)} passages.")

    def training_metrics(self, model, tokenizer, batch_size: int = 64, prefix: str = "eval") -> dict[str, float]:
        """What `ContrastiveTrainer.evaluate` logs for this eval set (`evaluation.training.TrainingEvalSet`):
        recall@k and MRR (`retrieval_eval_metrics`)."""
        return retrieval_eval_metrics(model, self, tokenizer, batch_size, prefix)


def build_retrieval_data(
    queries: Sequence[str],
    positives: Sequence[str],
    distractors: Sequence[str] = (),
    name: str = "retrieval",
) -> RetrievalData:
    """A task from aligned (query, positive passage) lists: the collection is every positive and distractor (e.g.
    the hard negatives), each distinct text once; a query's relevant passages are the copies of its positive text.
    """
    if len(queries) != len(positives):
        raise ValueError(f"{len(queries)} queries but {len(positives)} positive passages: give one per query.")
    index: dict[str, int] = {}
    for text in list(positives) + list(distractors):
        index.setdefault(text, len(index))
    return RetrievalData(list(queries), list(index), [[index[text]] for text in positives], name)


def _prepare(embeddings, similarity: str) -> torch.Tensor:
    vectors = torch.as_tensor(np.asarray(embeddings) if not torch.is_tensor(embeddings) else embeddings)
    vectors = vectors.detach().float().cpu()
    if vectors.dim() != 2:
        raise ValueError(f"Embeddings must be (count, dim), got shape {tuple(vectors.shape)}.")
    if similarity == "cosine":
        return F.normalize(vectors, dim=-1)
    if similarity != "dot":
        raise ValueError(f"Unknown similarity {similarity!r}: use 'dot' or 'cosine'.")
    return vectors


def _score_blocks(queries: torch.Tensor, passages: torch.Tensor, block_elements: int):
    """``(start, stop, scores (stop - start, P))`` for consecutive blocks of queries."""
    if queries.shape[1] != passages.shape[1]:
        raise ValueError(f"Query vectors have size {queries.shape[1]} but passage vectors {passages.shape[1]}.")
    rows = max(1, block_elements // max(1, passages.shape[0]))
    for start in range(0, queries.shape[0], rows):
        stop = min(start + rows, queries.shape[0])
        yield start, stop, queries[start:stop] @ passages.T


def passage_ranks(
    query_embeddings,
    passage_embeddings,
    relevant: Sequence[Sequence[int]],
    similarity: str = "dot",
    block_elements: int = BLOCK_ELEMENTS,
) -> torch.Tensor:
    """The rank (1 = first) of each query's best relevant passage, ties counted against the model (see the module
    docstring). Embeddings are ``(Q, d)`` and ``(P, d)`` tensors or arrays; returns a ``(Q,)`` int64 tensor."""
    queries, passages = _prepare(query_embeddings, similarity), _prepare(passage_embeddings, similarity)
    if len(relevant) != queries.shape[0]:
        raise ValueError(f"{queries.shape[0]} query vectors but {len(relevant)} lists of relevant passages.")
    ranks = torch.empty(queries.shape[0], dtype=torch.long)
    for start, stop, scores in _score_blocks(queries, passages, block_elements):
        rows = [row for row in range(stop - start) for _ in relevant[start + row]]
        columns = [column for row in range(start, stop) for column in relevant[row]]
        is_relevant = torch.zeros_like(scores, dtype=torch.bool)
        is_relevant[rows, columns] = True
        best = scores.masked_fill(~is_relevant, float("-inf")).amax(dim=1, keepdim=True)  # (b, 1)
        ranks[start:stop] = 1 + ((scores >= best) & ~is_relevant).sum(dim=1)
    return ranks


def retrieval_metrics(ranks: torch.Tensor, k_values: Sequence[int] = DEFAULT_K_VALUES) -> dict[str, float]:
    """``recall@k`` for each k and ``mrr`` from the ranks of `passage_ranks`."""
    ranks = torch.as_tensor(ranks).float()
    if ranks.numel() == 0:
        raise ValueError("No queries to score.")
    metrics = {f"recall@{k}": (ranks <= k).float().mean().item() for k in k_values}
    metrics["mrr"] = ranks.reciprocal().mean().item()
    return metrics


def search(
    query_embeddings,
    passage_embeddings,
    k: int = 10,
    similarity: str = "dot",
    block_elements: int = BLOCK_ELEMENTS,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The top ``k`` passages of every query: ``(scores, indices)``, each ``(Q, min(k, P))``, best first.

    Passages with equal scores come in an unspecified order; metrics use `passage_ranks`, whose tie rule is fixed.
    """
    queries, passages = _prepare(query_embeddings, similarity), _prepare(passage_embeddings, similarity)
    k = min(k, passages.shape[0])
    scores = torch.empty(queries.shape[0], k)
    indices = torch.empty(queries.shape[0], k, dtype=torch.long)
    for start, stop, block in _score_blocks(queries, passages, block_elements):
        scores[start:stop], indices[start:stop] = block.topk(k, dim=1)
    return scores, indices


def _encode(model, data: RetrievalData, tokenizer, batch_size: int, query_max_length, passage_max_length):
    """(query vectors, passage vectors, similarity) of a dual encoder, or of one sentence encoder for both."""
    if hasattr(model, "encode_queries") and hasattr(model, "encode_passages"):
        queries = model.encode_queries(data.queries, tokenizer, batch_size=batch_size, max_length=query_max_length)
        passages = model.encode_passages(
            data.passages, tokenizer, batch_size=batch_size, max_length=passage_max_length
        )
        return queries, passages, model.config.similarity
    from .encoders import as_encoder

    encoder = as_encoder(model, tokenizer)
    return encoder.encode(data.queries, batch_size), encoder.encode(data.passages, batch_size), "cosine"


def evaluate_retrieval(
    model,
    data: RetrievalData,
    tokenizer=None,
    k_values: Sequence[int] = DEFAULT_K_VALUES,
    batch_size: int = 64,
    query_max_length: int | None = 64,
    passage_max_length: int | None = 256,
    similarity: str | None = None,
    truncate_dims: Sequence[int] = (),
) -> dict[str, float]:
    """Encode ``data``'s queries and collection and score them: ``recall@k`` (for each k below the collection's
    size), ``mrr``, and the counts ``queries`` and ``passages``.

    ``model`` is a `DualEncoderModel` (its query and passage encoders, its similarity), or any single sentence
    encoder `evaluation.encoders.as_encoder` takes (a `ContrastiveModel`, a sentence-transformers model...), scored
    with cosine similarity; ``similarity`` overrides either. ``truncate_dims`` (Matryoshka sizes) also scores the
    first m dimensions of the vectors for each m, as ``recall@k_dim{m}`` and ``mrr_dim{m}``, from the same encoding.
    """
    queries, passages, native = _encode(model, data, tokenizer, batch_size, query_max_length, passage_max_length)
    k_values = [k for k in k_values if k < len(data.passages)]
    metrics = retrieval_metrics(passage_ranks(queries, passages, data.relevant, similarity or native), k_values)
    for dim in truncate_dims:
        ranks = passage_ranks(queries[:, :dim], passages[:, :dim], data.relevant, similarity or native)
        metrics.update({f"{name}_dim{dim}": value for name, value in retrieval_metrics(ranks, k_values).items()})
    metrics.update(queries=len(data.queries), passages=len(data.passages))
    return metrics


def retrieval_eval_metrics(
    model, data: RetrievalData, tokenizer, batch_size: int = 64, prefix: str = "eval", **kwargs
) -> dict[str, float]:
    """`evaluate_retrieval` under the names a Trainer logs, ``{prefix}_recall@k`` and ``{prefix}_mrr`` (as
    `evaluation.sts.sts_eval_metrics` names the STS figures; a dict of eval datasets puts each one's name in
    ``prefix``, e.g. ``eval_nq_recall@20``)."""
    metrics = evaluate_retrieval(model, data, tokenizer, batch_size=batch_size, **kwargs)
    counts = ("queries", "passages")
    return {f"{prefix}_{key}": value for key, value in metrics.items() if key not in counts}
