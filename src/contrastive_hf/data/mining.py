"""Hard-negative mining: for each (query, positive) pair, the passages a trained model scores highest that are not
the query's positives, written as a dataset the trainer reads (``query, positive, negative_1, ..., negative_k``).

As sentence-transformers' ``mine_hard_negatives`` and NV-Retriever's positive-aware mining do it: every query is
scored against a corpus (the pairs' positives, their existing negatives and any extra passages) by exact search on
the CPU, in blocks of queries so that memory stays bounded (`select_negatives`); then, for each query,

1. its positives (every positive paired with the same query text), the query's own text, and texts identical to a
   positive (after case and whitespace folding) are never candidates; nor, with ``duplicate_threshold``, passages
   whose cosine similarity to the positive reaches it (near-duplicates: paraphrases that would be false negatives);
2. the remaining passages are ranked by score, the first ``skip_top`` are skipped (the likeliest false negatives)
   and only the first ``max_candidates`` kept (the rank window);
3. a candidate must score below the positive's score minus ``margin``, and at most ``max_score``, when given;
4. the ``num_negatives`` best of them are the negatives (``sampling="top"``), or that many drawn at random among
   them (``"random"``, seeded per query). A query with fewer eligible candidates is left out (and counted).

A model that scores every passage alike (embeddings collapsed to nearly one vector: an encoder never trained, or
trained from scratch with [CLS] pooling) ranks nothing: its "hardest" negatives are ties, picked in corpus order, no
harder than random passages. When most rows tie (`TIED_FRACTION` of them, each negative within `TIE_TOLERANCE` of its
positive's score) `mine_hard_negatives` warns (`TiedScoresWarning`), with the figures. It warns rather than refuses, as
sentence-transformers' ``mine_hard_negatives`` reports its score statistics and writes its rows whatever they are:
the scores alone cannot tell a collapsed model from passages that are all near-paraphrases of each other, and the
user decides.
"""

from __future__ import annotations

import csv
import json
import logging
import os
import re
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from .._atomic import write_atomically

logger = logging.getLogger(__name__)

__all__ = [
    "SAMPLING_STRATEGIES",
    "TIE_TOLERANCE",
    "TIED_FRACTION",
    "MinedNegatives",
    "TiedScoresWarning",
    "select_negatives",
    "mine_hard_negatives",
    "load_mining_encoder",
    "write_mined",
]

SAMPLING_STRATEGIES = ("top", "random")
# A row ties when each of its negatives scores within this of its positive (times the positive's magnitude for dot
# products, where it exceeds 1): the same number at the 3 decimals the summary prints. A model whose embeddings
# collapsed ties every row (the tests' untrained hidden-32 encoder with [CLS] pooling: every score 1.000); one that
# ranks ties rarely: all-MiniLM-L6-v2 on the demo's NLI sample (2,000 pairs, its hard negatives as more passages, no
# margin; measured 2026-11-28) ties 11 rows (0.6%) with one negative each, none with three.
TIE_TOLERANCE = 1e-3
# The share of the kept rows that must tie for the mined negatives to be called picked among ties (`MinedNegatives`).
TIED_FRACTION = 0.9
# Scores held at once (64 MiB of float32): the number of queries scored per block is this over the corpus size.
BLOCK_ELEMENTS = 1 << 24
_SPACES = re.compile(r"\s+")


def _text_key(text: str) -> str:
    """What makes two texts "identical" for mining: case and runs of white space folded."""
    return _SPACES.sub(" ", text.strip().lower())


def select_negatives(
    query_vectors: torch.Tensor,
    corpus_vectors: torch.Tensor,
    positives: torch.Tensor,
    excluded: Sequence[Sequence[int]],
    num_negatives: int = 3,
    skip_top: int = 0,
    max_candidates: int | None = 100,
    margin: float | None = None,
    max_score: float | None = None,
    duplicate_threshold: float | None = None,
    similarity: str = "cosine",
    sampling: str = "top",
    seed: int = 0,
    block_elements: int = BLOCK_ELEMENTS,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The negatives of every query by exact search, in blocks of queries (the steps of the module docstring).

    Args:
        query_vectors: ``(Q, d)`` queries; corpus_vectors: ``(P, d)`` passages.
        positives: ``(Q,)`` the corpus index of each query's positive (whose score the margin is measured from).
        excluded: for each query, the corpus indices never to return (its positives, its own text, copies).
        similarity: ``cosine`` (vectors normalised) or ``dot``.
        The others as in the module docstring.

    Returns:
        ``(negatives, scores, positive_scores)``: ``(Q, num_negatives)`` corpus indices (-1 where a query has fewer
        eligible candidates), their scores, and each query's positive's score ``(Q,)``.
    """
    if sampling not in SAMPLING_STRATEGIES:
        raise ValueError(f"Unknown sampling {sampling!r}: choose one of {', '.join(SAMPLING_STRATEGIES)}.")
    if similarity not in ("cosine", "dot"):
        raise ValueError(f"Unknown similarity {similarity!r}: use 'cosine' or 'dot'.")
    if num_negatives < 1 or skip_top < 0:
        raise ValueError(f"num_negatives must be >= 1 and skip_top >= 0, got {num_negatives} and {skip_top}.")
    if max_candidates is not None and num_negatives > max_candidates:
        raise ValueError(
            f"num_negatives={num_negatives} (--num-negatives) is more than the max_candidates={max_candidates} "
            "(--max-candidates) considered per query: no query could get that many. Raise max_candidates or ask for "
            "fewer negatives."
        )
    queries, corpus = query_vectors.float(), corpus_vectors.float()
    if similarity == "cosine":
        queries, corpus = F.normalize(queries, dim=-1), F.normalize(corpus, dim=-1)
    unit_corpus = F.normalize(corpus, dim=-1)  # for near-duplicates of the positive, by cosine whatever the score
    total = corpus.shape[0]
    window = total if max_candidates is None else min(total, skip_top + max_candidates)
    count = queries.shape[0]
    negatives = torch.full((count, num_negatives), -1, dtype=torch.long)
    scores_out = torch.full((count, num_negatives), float("nan"))
    positive_scores = (queries * corpus[positives]).sum(dim=1)  # (Q,)
    rows = max(1, block_elements // max(1, total))
    for start in range(0, count, rows):
        stop = min(start + rows, count)
        scores = queries[start:stop] @ corpus.T  # (b, P)
        blocked = torch.zeros_like(scores, dtype=torch.bool)
        block_rows = [row for row in range(stop - start) for _ in excluded[start + row]]
        block_columns = [column for query in range(start, stop) for column in excluded[query]]
        blocked[block_rows, block_columns] = True
        if duplicate_threshold is not None:
            blocked |= unit_corpus[positives[start:stop]] @ unit_corpus.T >= duplicate_threshold
        values, indices = scores.masked_fill(blocked, float("-inf")).topk(window, dim=1)  # (b, window), best first
        values, indices = values[:, skip_top:], indices[:, skip_top:]
        eligible = torch.isfinite(values)
        if margin is not None:
            eligible &= values < positive_scores[start:stop, None] - margin
        if max_score is not None:
            eligible &= values <= max_score
        for row in range(stop - start):
            chosen = indices[row][eligible[row]]
            chosen_values = values[row][eligible[row]]
            if sampling == "random" and len(chosen) > num_negatives:
                generator = torch.Generator().manual_seed(seed * 1_000_003 + start + row)
                pick = torch.randperm(len(chosen), generator=generator)[:num_negatives].sort().values
                chosen, chosen_values = chosen[pick], chosen_values[pick]
            found = min(num_negatives, len(chosen))
            negatives[start + row, :found] = chosen[:found]
            scores_out[start + row, :found] = chosen_values[:found]
    return negatives, scores_out, positive_scores


class TiedScoresWarning(UserWarning):
    """Most mined rows' negatives score as their positive does: the model ranked nothing (`MinedNegatives`)."""


@dataclass
class MinedNegatives:
    """What `mine_hard_negatives` found: the rows to train on and how they came about."""

    rows: list[dict[str, str]]
    queries: int  # pairs read
    dropped: int  # pairs left out for want of eligible candidates
    corpus_size: int
    positive_score: float  # mean score of the kept pairs' positives
    negative_score: float  # mean score of their negatives
    settings: dict = field(default_factory=dict)
    tied: int = 0  # kept pairs whose every negative scores as its positive does (within `TIE_TOLERANCE`)

    def summary(self) -> str:
        return (
            f"Mined {len(self.rows)} of {self.queries} pairs against {self.corpus_size} passages "
            f"({self.dropped} left out with too few eligible candidates); mean positive score "
            f"{self.positive_score:.3f}, mean negative score {self.negative_score:.3f}."
        )

    @property
    def ties_warning(self) -> str | None:
        """What `mine_hard_negatives` warns of when `TIED_FRACTION` of the rows or more tie (the module docstring),
        with the figures; None otherwise."""
        if not self.rows or self.tied < TIED_FRACTION * len(self.rows):
            return None
        return (
            f"The model scores the positives and the mined negatives alike: in {self.tied} of {len(self.rows)} rows "
            f"({self.tied / len(self.rows):.0%}) every negative scores within {TIE_TOLERANCE:g} of the positive (mean "
            f"positive score {self.positive_score:.3f}, mean negative score {self.negative_score:.3f}), so the "
            "negatives were picked among ties, not by the model: no harder than random passages. A model whose "
            "embeddings collapsed to one vector does this (one never trained, or trained from scratch with [CLS] "
            "pooling): check it with `contrastive-hf evaluate` (a uniformity near 0 says it) and mine with a trained "
            "model. The rows are written all the same, as sentence-transformers' mine_hard_negatives writes them."
        )


def mine_hard_negatives(
    queries: Sequence[str],
    positives: Sequence[str],
    encode_queries: Callable[[list[str]], np.ndarray],
    encode_documents: Callable[[list[str]], np.ndarray],
    corpus: Sequence[str] = (),
    num_negatives: int = 3,
    similarity: str = "cosine",
    **selection,
) -> MinedNegatives:
    """Mine ``num_negatives`` hard negatives for each (query, positive) pair (the module docstring's steps).

    Args:
        queries, positives: the aligned pairs.
        encode_queries, encode_documents: texts -> ``(n, d)`` vectors (a model's query and document encoders; one
            sentence encoder for both); `load_mining_encoder` gives them for a checkpoint.
        corpus: more passages to draw negatives from, beside the positives (e.g. the pairs' existing negatives).
        similarity: ``cosine`` or ``dot`` (the model's).
        selection: `select_negatives`' options (``skip_top``, ``max_candidates``, ``margin``, ``max_score``,
            ``duplicate_threshold``, ``sampling``, ``seed``).

    Returns:
        `MinedNegatives` whose rows are ``{"query", "positive", "negative_1", ..., "negative_k"}``.
    """
    if len(queries) != len(positives):
        raise ValueError(f"{len(queries)} queries but {len(positives)} positives: give one positive per query.")
    passages = list(dict.fromkeys([*positives, *corpus]))  # each distinct text once
    index = {text: position for position, text in enumerate(passages)}
    by_key: dict[str, list[int]] = {}
    for position, text in enumerate(passages):
        by_key.setdefault(_text_key(text), []).append(position)
    positives_of: dict[str, set[str]] = {}  # every positive paired with the same query text
    for query, positive in zip(queries, positives, strict=True):
        positives_of.setdefault(_text_key(query), set()).add(_text_key(positive))
    excluded = []
    for query in queries:
        keys = positives_of[_text_key(query)] | {_text_key(query)}
        excluded.append(sorted({position for key in keys for position in by_key.get(key, ())}))

    most = max((len(passages) - len(positions) for positions in excluded), default=0)
    if num_negatives > most:  # refused before any text is encoded
        raise ValueError(
            f"num_negatives={num_negatives} (--num-negatives), but there are {len(passages)} distinct candidate "
            f"passages (the positives, and the corpus), of which a query can take at most {most} as negatives (never "
            f"its own positives or its own text): add passages (--corpus)"
            + (f" or ask for at most {most} negatives." if most else ".")
        )
    distinct_queries = list(dict.fromkeys(queries))
    query_vectors = torch.as_tensor(np.asarray(encode_queries(distinct_queries)))
    query_position = {text: position for position, text in enumerate(distinct_queries)}
    query_vectors = query_vectors[[query_position[query] for query in queries]]
    corpus_vectors = torch.as_tensor(np.asarray(encode_documents(passages)))
    positive_index = torch.tensor([index[positive] for positive in positives])
    negatives, scores, positive_scores = select_negatives(
        query_vectors,
        corpus_vectors,
        positive_index,
        excluded,
        num_negatives=num_negatives,
        similarity=similarity,
        **selection,
    )
    kept = (negatives >= 0).all(dim=1)
    scale = positive_scores.abs().clamp(min=1.0)[:, None]  # (Q, 1): dot products are compared relatively
    tied = ((scores - positive_scores[:, None]).abs() <= TIE_TOLERANCE * scale).all(dim=1) & kept  # (Q,)
    rows = [
        {
            "query": queries[row],
            "positive": positives[row],
            **{f"negative_{j + 1}": passages[int(negatives[row, j])] for j in range(num_negatives)},
        }
        for row in torch.nonzero(kept).flatten().tolist()
    ]
    mined = MinedNegatives(
        rows=rows,
        queries=len(queries),
        dropped=int((~kept).sum()),
        corpus_size=len(passages),
        positive_score=float(positive_scores[kept].mean()) if kept.any() else float("nan"),
        negative_score=float(scores[kept].mean()) if kept.any() else float("nan"),
        settings={"num_negatives": num_negatives, "similarity": similarity, **selection},
        tied=int(tied.sum()),
    )
    if mined.ties_warning:
        warnings.warn(mined.ties_warning, TiedScoresWarning, stacklevel=2)
    return mined


def load_mining_encoder(name_or_path: str, batch_size: int = 64, max_length: int | None = None, device=None):
    """``(encode_queries, encode_documents, similarity)`` of a checkpoint: a dual encoder's two towers (with their
    prompts) and its similarity, or any checkpoint `evaluation.encoders.load_encoder` takes (a contrastive_hf model,
    a sentence-transformers folder, a transformers encoder with mean pooling) for both sides, with cosine."""
    from ..evaluation.encoders import MAX_LENGTH_FLAG, check_model_source
    from ..models.checkpoint_contents import checkpoint_model_type
    from ..models.positions import check_max_length

    check_model_source(name_or_path)  # one line for a model that is nowhere, before any loader's traceback
    if checkpoint_model_type(name_or_path) == "dual_encoder":
        from transformers import AutoTokenizer

        from ..models.modeling_dual_encoder import DualEncoderModel

        model = DualEncoderModel.from_pretrained(name_or_path).eval()
        check_max_length(model, max_length, flag=MAX_LENGTH_FLAG)
        if device is not None:
            model.to(device)
        tokenizer = AutoTokenizer.from_pretrained(name_or_path)
        options = {
            "tokenizer": tokenizer,
            "batch_size": batch_size,
            "max_length": max_length,
            "show_progress_bar": True,
        }
        return (
            lambda texts: model.encode_query(texts, **options),
            lambda texts: model.encode_document(texts, **options),
            model.config.similarity,
        )
    from ..evaluation.encoders import load_encoder

    encoder = load_encoder(name_or_path, max_length=max_length, device=device)
    encode = lambda texts: encoder.encode(texts, batch_size=batch_size, show_progress=True)  # noqa: E731
    return encode, encode, "cosine"


def write_mined(rows: Sequence[dict[str, str]], path: str | os.PathLike) -> None:
    """Write mined rows as ``.csv`` / ``.tsv`` (a header, then a row per pair) or ``.json`` / ``.jsonl`` (one object
    per line), through a temporary file so that a failure never leaves half a dataset."""
    path = os.fspath(path)
    extension = path.lower().rsplit(".", 1)[-1]
    if extension not in ("csv", "tsv", "json", "jsonl"):
        raise ValueError(f"Write mined pairs to a .csv, .tsv, .json or .jsonl file, got {path!r}.")
    if not rows:
        raise ValueError("No pair kept a full set of negatives: nothing to write (loosen --margin or --skip-top).")

    def write(handle) -> None:
        if extension in ("csv", "tsv"):
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]), delimiter="\t" if extension == "tsv" else ",")
            writer.writeheader()
            writer.writerows(rows)
        else:
            handle.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)

    write_atomically(path, write, newline="")
