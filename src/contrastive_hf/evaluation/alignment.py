"""Alignment and uniformity (Wang & Isola, 2020) of sentence embeddings, as SimCSE's analysis measures them (Gao et
al., 2021, §5 and Figure 2): on STS-B, the positive pairs are the pairs whose gold score is higher than 4 (the
paper's footnote 3; a pair scored exactly 4.0 is not one: 208 of STS-B dev's 1,500 pairs, not 264), and uniformity
runs over all its sentences (each distinct sentence once). Both are lower-is-better; the formulas live in
`contrastive_hf.models.losses`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

import numpy as np
import torch

from ..models.losses import alignment, uniformity
from .encoders import as_encoder

__all__ = ["POSITIVE_THRESHOLD", "ScoredPairs", "alignment_uniformity_from_vectors", "evaluate_alignment_uniformity"]

POSITIVE_THRESHOLD = 4.0  # SimCSE: STS-B pairs scored strictly above 4 (of 5) are positive pairs


class ScoredPairs(Protocol):
    """Sentence pairs with gold similarity scores, as `sts.STSData` holds them (`sts` reports these figures during
    training, so this module does not import it)."""

    sentences1: list[str]
    sentences2: list[str]
    scores: list[float]


def alignment_uniformity_from_vectors(
    data: ScoredPairs, vectors: Mapping[str, np.ndarray], positive_threshold: float = POSITIVE_THRESHOLD
) -> dict:
    """``{"alignment", "uniformity", "positive_pairs", "sentences"}`` from precomputed ``{sentence: embedding}``.

    Positive pairs score ``> positive_threshold``; ``alignment`` is None when there is none.
    """
    positives = [i for i, score in enumerate(data.scores) if score > positive_threshold]
    sentences = list(dict.fromkeys(data.sentences1 + data.sentences2))
    everything = torch.from_numpy(np.stack([vectors[s] for s in sentences]))  # (m, d)
    result = {
        "alignment": None,
        "uniformity": float(uniformity(everything)),
        "positive_pairs": len(positives),
        "sentences": len(sentences),
    }
    if positives:
        first = torch.from_numpy(np.stack([vectors[data.sentences1[i]] for i in positives]))  # (p, d)
        second = torch.from_numpy(np.stack([vectors[data.sentences2[i]] for i in positives]))  # (p, d)
        result["alignment"] = float(alignment(first, second))
    return result


def evaluate_alignment_uniformity(
    model,
    data: ScoredPairs,
    tokenizer=None,
    batch_size: int = 64,
    max_length: int | None = None,
    show_progress: bool = False,
    positive_threshold: float = POSITIVE_THRESHOLD,
) -> dict:
    """Alignment and uniformity of ``model`` (anything `as_encoder` takes) on ``data`` (STS-B in SimCSE)."""
    encoder = as_encoder(model, tokenizer=tokenizer, max_length=max_length)
    sentences = list(dict.fromkeys(data.sentences1 + data.sentences2))
    embeddings = encoder.encode(sentences, batch_size=batch_size, show_progress=show_progress)
    result = alignment_uniformity_from_vectors(data, dict(zip(sentences, embeddings, strict=True)), positive_threshold)
    if result["alignment"] is None:
        raise ValueError(
            f"No pair scores above {positive_threshold}, so there is no positive pair to measure alignment on; use "
            "STS-B (scores 0-5) or lower positive_threshold."
        )
    return result
