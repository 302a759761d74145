"""Evaluation of sentence embeddings as the papers compute it."""

from __future__ import annotations

from .sts import STSData, evaluate_sts, read_stsbenchmark

__all__ = ["STSData", "evaluate_sts", "read_stsbenchmark"]
