"""Semantic textual similarity: cosine similarity of the two embeddings against gold scores, Spearman x 100."""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import torch
from scipy.stats import pearsonr, spearmanr

__all__ = ["STSData", "read_stsbenchmark", "evaluate_sts"]


@dataclass
class STSData:
    """Sentence pairs with gold similarity scores."""

    sentences1: list[str]
    sentences2: list[str]
    scores: list[float]

    def __len__(self) -> int:
        return len(self.scores)


def read_stsbenchmark(path: str | os.PathLike) -> STSData:
    """Read an STS Benchmark file (``sts-{train,dev,test}.csv``).

    Tab-separated: genre, file, year, id, score, sentence1, sentence2, and on some rows one or two source columns
    after sentence2. Quotes are not escaped, so lines are split on tabs, never parsed as CSV.
    """
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"STS Benchmark file not found: {path}. Expected the tab-separated sts-dev.csv / sts-test.csv of "
            "the STS Benchmark (columns genre, file, year, id, score, sentence1, sentence2)."
        )
    data = STSData([], [], [])
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            columns = line.rstrip("\n").split("\t")
            if not line.strip():
                continue
            if len(columns) < 7:
                raise ValueError(f"{path}:{number}: expected at least 7 tab-separated columns, got {len(columns)}.")
            data.scores.append(float(columns[4]))
            data.sentences1.append(columns[5])
            data.sentences2.append(columns[6])
    if not data.scores:
        raise ValueError(f"{path} holds no sentence pairs.")
    return data


def evaluate_sts(model, data: STSData, tokenizer=None, batch_size: int = 64, max_length: int | None = 128) -> dict:
    """Spearman and Pearson correlations (x 100) of the embeddings' cosine similarities with the gold scores.

    ``model`` is anything with ``encode(sentences, tokenizer=..., batch_size=..., max_length=...)`` returning a
    tensor (a `ContrastiveModel`); a `ContrastiveForPreTraining` is scored through its encoder part.
    """
    model = getattr(model, "contrastive", model)
    embeddings1 = model.encode(data.sentences1, tokenizer=tokenizer, batch_size=batch_size, max_length=max_length)
    embeddings2 = model.encode(data.sentences2, tokenizer=tokenizer, batch_size=batch_size, max_length=max_length)
    cosine = torch.nn.functional.cosine_similarity(embeddings1.float(), embeddings2.float(), dim=-1).numpy()
    gold = np.asarray(data.scores)
    return {
        "spearman": float(spearmanr(cosine, gold).statistic * 100),
        "pearson": float(pearsonr(cosine, gold).statistic * 100),
        "pairs": len(data),
    }
