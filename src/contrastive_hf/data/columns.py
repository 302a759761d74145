"""Which columns of a data set hold a query, its positive passage and its hard negatives: given by name, or found
among the common layouts. DPR's recipe trains on them and ``contrastive-hf mine`` reads them."""

from __future__ import annotations

from collections.abc import Sequence

from .collators import negative_columns

__all__ = [
    "QUERY_COLUMN_CANDIDATES",
    "POSITIVE_COLUMN_CANDIDATES",
    "HARD_NEGATIVE_COLUMN_CANDIDATES",
    "resolve_query_passage_columns",
]

# Column names tried, in order, when none is given: ours, then common Hub layouts (sentence-transformers' query/answer,
# SimCSE's NLI sent0/sent1/hard_neg, anchor/positive/negative).
QUERY_COLUMN_CANDIDATES = ("query", "question", "anchor", "sent0")
POSITIVE_COLUMN_CANDIDATES = ("positive", "positive_passage", "passage", "answer", "sent1")
HARD_NEGATIVE_COLUMN_CANDIDATES = ("hard_negative", "negative_passage", "negative", "hard_neg")


def resolve_query_passage_columns(
    column_names: Sequence[str],
    query_column: str | None = None,
    positive_column: str | None = None,
    hard_negative_column: str | Sequence[str] | None = None,
    use_hard_negatives: bool = True,
) -> tuple[str, ...]:
    """``(query, positive, *hard negatives)`` column names of a dataset: 2 + k names for k hard negatives.

    Given names must exist; missing ones are detected from the ``*_CANDIDATES`` lists. Hard negatives are used when
    ``use_hard_negatives``: the columns ``hard_negative_column`` names (one, a comma-separated list, or a sequence),
    else the first candidate column present, else numbered ones (``negative_1, ..., negative_k`` as
    ``contrastive-hf mine`` writes them; `collators.negative_columns`). A column may also hold a list of negatives.
    """
    columns = list(column_names)

    def check(given: str, flag: str) -> str:
        if given not in columns:
            raise ValueError(f"{flag} {given!r} is not a column of the data set; its columns are {columns}.")
        return given

    def pick(given: str | None, candidates: Sequence[str], what: str, flag: str) -> str:
        if given is not None:
            return check(given, flag)
        found = next((name for name in candidates if name in columns), None)
        if found is None:
            raise ValueError(
                f"Found no {what} column among {columns} (tried {', '.join(candidates)}): name it with {flag}."
            )
        return found

    query = pick(query_column, QUERY_COLUMN_CANDIDATES, "query", "--query_column")
    positive = pick(positive_column, POSITIVE_COLUMN_CANDIDATES, "positive passage", "--positive_column")
    if query == positive:
        raise ValueError(f"The query and positive passage columns are both {query!r}: name them apart.")
    if isinstance(hard_negative_column, str):
        hard_negative_column = [name.strip() for name in hard_negative_column.split(",") if name.strip()]
    if not use_hard_negatives:
        if hard_negative_column:
            raise ValueError("--hard_negative_column was given but hard negatives are turned off.")
        return query, positive
    if hard_negative_column:
        negatives = tuple(check(name, "--hard_negative_column") for name in hard_negative_column)
    else:
        negatives = negative_columns(columns, HARD_NEGATIVE_COLUMN_CANDIDATES)
    clash = [name for name in negatives if name in (query, positive)]
    if clash:
        raise ValueError(f"Column {clash[0]!r} is named both as a hard negative and as the query or positive.")
    return query, positive, *negatives
