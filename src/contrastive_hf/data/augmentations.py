"""Positive-pair views made on token ids (after tokenization, so they are fast and tokenizer-agnostic).

CLEAR's four augmentations (Wu et al., 2020, §3.1; defaults from §4.1), each vectorised over a whole batch:

* ``del_word``: a fraction p = 0.7 of the tokens replaced by [DEL]; a run of consecutive [DEL]s becomes one.
* ``del_span``: 5 spans, each about 5% of the length, each replaced by a single [DEL].
* ``reorder``: 5 pairs of spans, each about 5% of the length, swapped pairwise.
* ``subs``: 30% of the words that have a synonym replaced by one of their synonyms (whole words, however many
  pieces they have; synonym sources in `contrastive_hf.data.synonyms`).

plus ``dropout``, the identity view of unsupervised SimCSE (Gao et al., 2021), whose two views differ only by the
encoder's dropout masks. Names compose as CLEAR writes them: ``subs+del_span`` substitutes first, then deletes
spans. A comma mixes: with ``del_word,reorder`` each view draws one of the two.

Rules every augmentation keeps: special tokens ([CLS], [SEP], <s>, </s>, [DEL], padding) are never deleted, moved
or substituted; a sentence too short for the requested spans gets fewer (or one-token) spans; a view is never empty
(a sentence of one word keeps it, and a fully deleted sentence keeps one [DEL]).

Every random draw is a hash of the row's key (see `contrastive_hf.data.seeding`), so a view depends only on
(seed, epoch, example, view) and never on the rest of the batch.

Each augmentation is a class that says everything about itself once: its ``name`` (what ``--augmentations``
writes), its ``description`` (the model card's and ``--help``'s text), its tunable ``hyperparameters`` (each a
`Hyperparameter`: the flag, the constructor argument it sets, its default and help), and whether it writes [DEL] or
needs synonyms (``needs_del_token``, ``needs_synonyms``). Registering the class (`register_augmentation`) offers it to
``--augmentations``, gives each of its hyper-parameters a flag (``--del_word_probability``, ``--span_ratio``...), a
keyword of `build_augmentation` and an entry of the collator's ``view_settings``, and puts the values a run used on its
model card. An augmentation of one's own is a subclass of `Augmentation` and one registration, in any module imported
before the script reads its arguments (for its flags) and before the collator is built.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from ..models.registry import Registry
from .seeding import combine, stream, uniform
from .synonyms import TokenSynonyms, load_synonyms
from .token_batch import TokenBatch, ragged_arange

__all__ = [
    "DEL_TOKEN",
    "DEL_WORD_PROBABILITY",
    "NUM_DELETED_SPANS",
    "NUM_REORDERED_PAIRS",
    "SPAN_RATIO",
    "SUBSTITUTION_PROBABILITY",
    "AUGMENTATION_NAMES",
    "CLEAR_AUGMENTATIONS",
    "AUGMENTATIONS",
    "Hyperparameter",
    "AugmentationSettings",
    "AugmentationSpec",
    "augmentation_hyperparameters",
    "register_augmentation",
    "unregister_augmentation",
    "get_augmentation",
    "augmentation_names",
    "augmentation_help",
    "check_augmentation",
    "describe_augmentation",
    "needs_synonyms",
    "Augmentation",
    "Identity",
    "WordDeletion",
    "SpanDeletion",
    "Reordering",
    "SynonymSubstitution",
    "Composition",
    "Mixture",
    "build_augmentation",
    "needs_del_token",
    "add_del_token",
]

DEL_TOKEN = "[DEL]"

# CLEAR §4.1 hyper-parameters, the defaults everywhere in the package.
DEL_WORD_PROBABILITY = 0.7  # del_word: fraction of the tokens deleted
NUM_DELETED_SPANS = 5  # del_span: spans deleted per sentence
NUM_REORDERED_PAIRS = 5  # reorder: pairs of spans swapped per sentence
SPAN_RATIO = 0.05  # del_span, reorder: length of each span as a fraction of the sentence
SUBSTITUTION_PROBABILITY = 0.3  # subs: fraction of the words having a synonym that are substituted

# The augmentations and compositions of CLEAR's Tables 1 and 2.
CLEAR_AUGMENTATIONS = (
    "del_word",
    "del_span",
    "reorder",
    "subs",
    "subs+del_word",
    "subs+del_span",
    "del_word+reorder",
    "del_span+reorder",
    "subs+del_word+reorder",
)
_NEVER = np.iinfo(np.int64).max // 4  # a position no row reaches


@dataclass(frozen=True)
class Hyperparameter:
    """A tunable setting of an augmentation, declared once on its class.

    Attributes:
        flag: its name everywhere outside the class: the scripts' ``--<flag>``, `build_augmentation`'s keyword, the
            collator's ``view_settings`` key and the model card's (``del_word_probability``). Two augmentations may
            share one (``span_ratio``) when they give it the same default.
        argument: the class's constructor argument it sets (``probability``), read back from the attribute of
            that name.
        default: its value when not given (and its type: an int or a float).
        help: what it sets, for ``--help``.
    """

    flag: str
    argument: str
    default: int | float
    help: str


class Augmentation:
    """Base class. ``apply(batch, keys)`` makes one view of each row of a `TokenBatch`; ``keys`` are the rows'
    ``(N,)`` uint64 random keys (`contrastive_hf.data.seeding.example_keys`).

    A registered subclass (`register_augmentation`) sets ``name`` and ``description``, and declares its tunable
    settings in ``hyperparameters``; its constructor takes ``del_token_id`` first when it ``needs_del_token``,
    ``synonyms`` first when it ``needs_synonyms``, then each hyper-parameter's ``argument`` (kept as an attribute of
    that name)."""

    name = "augmentation"
    description: ClassVar[str] = ""
    hyperparameters: ClassVar[tuple[Hyperparameter, ...]] = ()
    needs_del_token = False  # it writes [DEL] (the tokenizer needs `add_del_token`)
    needs_synonyms = False  # it reads a synonym source (`build_augmentation`'s ``synonyms``)

    @classmethod
    def from_settings(cls, settings: AugmentationSettings) -> Augmentation:
        """The augmentation configured by ``settings`` (its resources and each hyper-parameter by its flag)."""
        resources = {}
        if cls.needs_del_token:
            resources["del_token_id"] = settings.del_token_id
        if cls.needs_synonyms:
            resources["synonyms"] = settings.synonyms
        values = {item.argument: settings.values.get(item.flag, item.default) for item in cls.hyperparameters}
        return cls(**resources, **values)

    def settings(self) -> dict[str, int | float]:
        """``{flag: value}`` of every hyper-parameter of this augmentation and the ones it is made of."""
        return {
            item.flag: getattr(atom, item.argument) for atom in self.atoms() for item in type(atom).hyperparameters
        }

    def apply(self, batch: TokenBatch, keys: np.ndarray) -> TokenBatch:
        raise NotImplementedError

    def augment(self, ids: Sequence[int], is_special: Sequence[bool], rng: np.random.Generator) -> list[int]:
        """One view of one sentence, its key drawn from ``rng`` (for trying an augmentation out)."""
        flags = np.asarray(is_special, dtype=bool).reshape(-1)
        batch = TokenBatch.from_rows([list(ids)], [flags.tolist()])
        key = rng.integers(0, 2**64, size=1, dtype=np.uint64)
        return self.apply(batch, key).rows()[0]

    def atoms(self) -> tuple[Augmentation, ...]:
        """The single augmentations this one is made of (itself, or the parts of a composition or mixture)."""
        return (self,)

    def __repr__(self) -> str:
        return self.name


class Identity(Augmentation):
    """SimCSE's unsupervised view: the sentence itself; dropout in the encoder makes the two views differ."""

    name = "dropout"
    description = "the sentence itself; the encoder's dropout makes the two views differ (SimCSE)"

    def apply(self, batch, keys):
        return batch


# del_span's and reorder's: one setting for both
_SPAN_RATIO = Hyperparameter(
    "span_ratio", "span_ratio", SPAN_RATIO, "del_span and reorder: length of each span as a fraction of the sentence."
)


def _round(values: np.ndarray) -> np.ndarray:
    """Round to the nearest integer (halves to even, like Python's ``round``)."""
    return np.rint(values).astype(np.int64)


def _choose_sorted(keys: np.ndarray, population: np.ndarray, count: np.ndarray, max_count: int) -> np.ndarray:
    """For each row, ``count`` distinct integers drawn uniformly from ``range(population)``, sorted ascending;
    ``(N, max_count)`` with `_NEVER` after a row's ``count`` values.

    Floyd's algorithm, vectorised over rows: at step i (j = population - count + i), draw t uniformly in [0, j];
    take t, or j when t was already taken. Every subset is equally likely; it needs ``max_count`` draws per row.
    """
    rows = len(keys)
    chosen = np.full((rows, max_count), -1, dtype=np.int64)
    draws = uniform(keys[:, None], np.arange(max_count))  # (N, max_count)
    for step in range(max_count):  # at most 2 * NUM_REORDERED_PAIRS steps
        active = step < count
        j = population - count + step
        t = np.floor(draws[:, step] * (j + 1)).astype(np.int64)
        taken = (chosen[:, :step] == t[:, None]).any(axis=1)
        chosen[:, step] = np.where(active, np.where(taken, j, t), -1)
    chosen[chosen < 0] = _NEVER
    return np.sort(chosen, axis=1)


def _replace_runs_with_del(batch: TokenBatch, deleted: np.ndarray, del_token_id: int) -> TokenBatch:
    """Delete the ``deleted`` positions, each maximal run of them becoming one [DEL] (itself a special token)."""
    previous = np.zeros_like(deleted)
    previous[:, 1:] = deleted[:, :-1]
    run_start = deleted & ~previous
    ids = np.where(run_start, del_token_id, batch.ids)
    is_special = batch.is_special | run_start
    return TokenBatch(ids, is_special, batch.lengths, batch.pad_id).keep(~deleted | run_start)


def _content(batch: TokenBatch) -> tuple[np.ndarray, np.ndarray]:
    """The positions an augmentation may touch (``(N, L)`` bool) and their number per row."""
    content = ~batch.is_special
    return content, content.sum(axis=1)


def _mark_ranges(starts: np.ndarray, span: np.ndarray, width: int) -> np.ndarray:
    """``(N, width)`` bool: True inside ``[starts[r, j], starts[r, j] + span[r])`` for the real starts of each row
    (not `_NEVER`); ranges must be at least one position apart (so no range ends where another starts)."""
    rows, slots = np.nonzero(starts != _NEVER)
    begin = starts[rows, slots]
    diff = np.zeros((len(starts), width + 1), dtype=np.int8)
    diff[rows, begin] = 1
    diff[rows, begin + span[rows]] = -1
    return np.cumsum(diff, axis=1, dtype=np.int8)[:, :width] > 0


def _by_content_rank(content: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Look up ``table[r, k]`` at each content position, k being its rank among the row's content positions."""
    rank = np.maximum(np.cumsum(content, axis=1) - 1, 0)
    return np.take_along_axis(table, np.minimum(rank, table.shape[1] - 1), axis=1) & content


class WordDeletion(Augmentation):
    """CLEAR's word deletion: a fraction ``probability`` of the tokens becomes [DEL]; a run of [DEL]s becomes one.

    Args:
        del_token_id: id of the [DEL] token (see `add_del_token`).
        probability: fraction of the non-special tokens deleted (CLEAR §4.1: 0.7). The count is
            round(probability * n), so every view of an n-token sentence deletes the same number of tokens, chosen
            uniformly at random.
    """

    name = "del_word"
    description = "a fraction of the tokens deleted, each run of them replaced by one [DEL] (CLEAR)"
    hyperparameters = (
        Hyperparameter(
            "del_word_probability", "probability", DEL_WORD_PROBABILITY, "del_word: fraction of the tokens deleted."
        ),
    )
    needs_del_token = True

    def __init__(self, del_token_id: int, probability: float = DEL_WORD_PROBABILITY):
        if not 0.0 <= probability <= 1.0:
            raise ValueError(f"del_word probability must be in [0, 1], got {probability}.")
        self.del_token_id = del_token_id
        self.probability = probability

    def deletes_every_token(self, max_content: int | None = None) -> bool:
        """Whether every sentence of 1 to ``max_content`` non-special tokens (any length when None) loses all of
        them, so that every view is the same ``[CLS] [DEL] [SEP]`` whatever the sentence."""
        if max_content is None:
            return self.probability >= 1.0
        lengths = np.arange(1, max(max_content, 1) + 1)
        return bool((_round(self.probability * lengths) >= lengths).all())

    def apply(self, batch, keys):
        content, n = _content(batch)
        count = _round(self.probability * n)
        if not count.any():
            return batch
        # delete the `count` content positions with the smallest random priorities
        priority = uniform(stream(keys, self.name)[:, None], np.arange(batch.width))  # (N, L)
        priority[~content] = 2.0
        threshold = np.sort(priority, axis=1)[np.arange(len(batch)), np.maximum(count - 1, 0)]
        threshold[count == 0] = -1.0
        return _replace_runs_with_del(batch, priority <= threshold[:, None], self.del_token_id)


class SpanDeletion(Augmentation):
    """CLEAR's span deletion: ``num_spans`` spans of about ``span_ratio`` of the length each become one [DEL] each.

    For a sentence of n non-special tokens the spans are s = max(1, round(span_ratio * n)) tokens long and there
    are k = min(num_spans, round(num_spans * span_ratio * n / s)) of them (so short sentences, whose spans round up
    to one token, lose about the same share, not more), placed uniformly at random without overlapping or
    touching (each [DEL] stands for one span). Fewer fit when the sentence is short; a sentence of one token is
    left alone, and a view always keeps at least one of its tokens.
    """

    name = "del_span"
    description = "spans of the sentence each replaced by one [DEL] (CLEAR)"
    hyperparameters = (
        Hyperparameter("num_deleted_spans", "num_spans", NUM_DELETED_SPANS, "del_span: spans deleted per sentence."),
        _SPAN_RATIO,
    )
    needs_del_token = True

    def __init__(self, del_token_id: int, num_spans: int = NUM_DELETED_SPANS, span_ratio: float = SPAN_RATIO):
        if num_spans < 1:
            raise ValueError(f"del_span num_spans must be >= 1, got {num_spans}.")
        if not 0.0 < span_ratio <= 1.0:
            raise ValueError(f"del_span span_ratio must be in (0, 1], got {span_ratio}.")
        self.del_token_id = del_token_id
        self.num_spans = num_spans
        self.span_ratio = span_ratio

    def spans(self, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Span length and number of spans for sentences of ``n`` non-special tokens."""
        span = np.maximum(1, _round(self.span_ratio * n))
        count = np.minimum(self.num_spans, np.maximum(1, _round(self.num_spans * self.span_ratio * n / span)))
        count = np.minimum(count, (n + 1) // (span + 1))  # spans separated by at least one kept token
        count = np.minimum(count, (n - 1) // span)  # and at least one token of the sentence kept
        count[n < 2] = 0
        return span, count

    def apply(self, batch, keys):
        content, n = _content(batch)
        span, count = self.spans(n)
        if not count.any():
            return batch
        # k spans of s tokens, each followed by a kept token (the last one by a virtual one past the end): k blocks
        # of s + 1 among n + 1 places, i.e. k of the (n + 1 - k*(s+1)) + k items "free token or block"
        slots = _choose_sorted(stream(keys, self.name), n + 1 - count * span, count, self.num_spans)
        starts = np.where(slots == _NEVER, _NEVER, slots + np.arange(self.num_spans) * span[:, None])
        deleted = _by_content_rank(content, _mark_ranges(starts, span, int(n.max())))
        return _replace_runs_with_del(batch, deleted, self.del_token_id)


class Reordering(Augmentation):
    """CLEAR's reordering: ``num_pairs`` pairs of spans of about ``span_ratio`` of the length each, swapped pairwise.

    2k spans of s = max(1, round(span_ratio * n)) tokens (k = min(num_pairs, round(num_pairs * span_ratio * n / s),
    n // (2s))) are placed uniformly at random without overlapping, paired at random, and each pair's contents are
    exchanged. Only non-special tokens move: the spans are taken over the sentence without its special tokens.
    """

    name = "reorder"
    description = "pairs of spans swapped (CLEAR)"
    hyperparameters = (
        Hyperparameter(
            "num_reordered_pairs", "num_pairs", NUM_REORDERED_PAIRS, "reorder: pairs of spans swapped per sentence."
        ),
        _SPAN_RATIO,
    )

    def __init__(self, num_pairs: int = NUM_REORDERED_PAIRS, span_ratio: float = SPAN_RATIO):
        if num_pairs < 1:
            raise ValueError(f"reorder num_pairs must be >= 1, got {num_pairs}.")
        if not 0.0 < span_ratio <= 0.5:
            raise ValueError(f"reorder span_ratio must be in (0, 0.5], got {span_ratio}.")
        self.num_pairs = num_pairs
        self.span_ratio = span_ratio

    def spans(self, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Span length and number of *pairs* for sentences of ``n`` non-special tokens."""
        span = np.maximum(1, _round(self.span_ratio * n))
        pairs = np.minimum(self.num_pairs, np.maximum(1, _round(self.num_pairs * self.span_ratio * n / span)))
        pairs = np.minimum(pairs, n // (2 * span))
        pairs[n < 2] = 0
        return span, pairs

    def apply(self, batch, keys):
        content, n = _content(batch)
        span, pairs = self.spans(n)
        if not pairs.any():
            return batch
        rows = len(batch)
        max_spans = 2 * self.num_pairs
        spans = 2 * pairs
        # 2k non-overlapping spans: choose 2k of (n - 2k*s) + 2k slots, then widen each slot to s tokens
        slots = _choose_sorted(stream(keys, self.name + "/spans"), n - spans * span + spans, spans, max_spans)
        starts = np.where(slots == _NEVER, _NEVER, slots + np.arange(max_spans) * (span[:, None] - 1))
        # pair the spans at random: a random order of each row's spans, read two by two
        priority = uniform(stream(keys, self.name + "/pairs")[:, None], np.arange(max_spans))
        priority[np.arange(max_spans) >= spans[:, None]] = 2.0
        order = np.argsort(priority, axis=1)
        partner = np.empty_like(order)
        row_index = np.arange(rows)[:, None]
        partner[row_index, order[:, 0::2]] = order[:, 1::2]
        partner[row_index, order[:, 1::2]] = order[:, 0::2]
        # the content rank each content rank takes its token from
        width = int(n.max())
        rank = np.arange(width)
        span_flags = np.zeros((rows, width + 1), dtype=np.int64)
        real = starts != _NEVER
        span_flags[np.nonzero(real)[0], starts[real]] = 1
        which = np.cumsum(span_flags, axis=1)[:, :width] - 1  # (N, W): the last span starting at or before
        safe = np.maximum(which, 0)
        offset = rank - np.take_along_axis(starts, safe, axis=1)
        inside = (which >= 0) & (offset < span[:, None]) & (rank < n[:, None])
        partner_start = np.take_along_axis(starts, np.take_along_axis(partner, safe, axis=1), axis=1)
        source_rank = np.where(inside, partner_start + offset, rank)
        # content ranks to positions, and the move
        content_rows, content_cols = np.nonzero(content)
        content_rank = (np.cumsum(content, axis=1) - 1)[content_rows, content_cols]
        position_of_rank = np.zeros((rows, width), dtype=np.int64)
        position_of_rank[content_rows, content_rank] = content_cols
        source = position_of_rank[content_rows, source_rank[content_rows, content_rank]]
        ids = batch.ids.copy()
        ids[content_rows, content_cols] = batch.ids[content_rows, source]
        return TokenBatch(ids, batch.is_special, batch.lengths, batch.pad_id)


class SynonymSubstitution(Augmentation):
    """CLEAR's synonym substitution: round(probability * h) of the h words having a synonym, chosen uniformly, are
    each replaced by one of their synonyms, chosen uniformly.

    A word is a maximal run of pieces (a word-start piece and its continuations, e.g. ``un ##believ ##ably``); it
    is looked up and replaced as a whole, so a synonym may have a different number of pieces than the word.

    Args:
        synonyms: a compiled `TokenSynonyms` (from a JSON table or the encoder's input embeddings).
        probability: fraction of the words having a synonym that are substituted (CLEAR §4.1: 0.3).
    """

    name = "subs"
    description = "words replaced by synonyms (CLEAR)"
    hyperparameters = (
        Hyperparameter(
            "substitution_probability",
            "probability",
            SUBSTITUTION_PROBABILITY,
            "subs: fraction of the words having a synonym that are substituted.",
        ),
    )
    needs_synonyms = True

    def __init__(self, synonyms: TokenSynonyms, probability: float = SUBSTITUTION_PROBABILITY):
        if not 0.0 <= probability <= 1.0:
            raise ValueError(f"subs probability must be in [0, 1], got {probability}.")
        self.synonyms = synonyms
        self.probability = probability

    def apply(self, batch, keys):
        rows, width = batch.ids.shape
        if rows == 0 or width == 0:
            return batch
        if int(batch.ids.max()) >= self.synonyms.vocab_size:
            raise ValueError(
                f"Token id {int(batch.ids.max())} is outside the vocabulary the synonyms were built for "
                f"({self.synonyms.vocab_size} ids): build them with the tokenizer of these input_ids."
            )
        content = ~batch.is_special
        after_special = np.ones_like(content)
        after_special[:, 1:] = batch.is_special[:, :-1]
        word_start = content & (self.synonyms.word_starts[batch.ids] | after_special)
        continues = np.zeros_like(content)
        continues[:, :-1] = content[:, 1:] & ~word_start[:, 1:]
        word_end = content & ~continues
        flat_ids = batch.ids.ravel()
        starts = np.flatnonzero(word_start.ravel())  # one entry per word, in row-major order
        lengths = np.flatnonzero(word_end.ravel()) - starts + 1
        offset, count = self.synonyms.lookup(flat_ids, starts, lengths)
        candidates = np.flatnonzero(count)  # the words having synonyms
        candidate_row, candidate_column = np.divmod(starts[candidates], width)
        chosen_per_row = _round(self.probability * np.bincount(candidate_row, minlength=rows))
        if not chosen_per_row.any():
            return batch
        # choose the words: the `chosen_per_row` candidates of each row with the smallest random priorities
        priority = np.full((rows, width), 2.0)  # (N, L), at the first piece of each candidate word
        priority[candidate_row, candidate_column] = uniform(
            stream(keys, self.name + "/words")[candidate_row], candidate_column
        )
        threshold = np.sort(priority, axis=1)[np.arange(rows), np.maximum(chosen_per_row - 1, 0)]
        threshold[chosen_per_row == 0] = -1.0
        picked = candidates[priority[candidate_row, candidate_column] <= threshold[candidate_row]]
        picked_row, picked_column = np.divmod(starts[picked], width)
        # and one synonym for each
        draw = uniform(stream(keys, self.name + "/choice")[picked_row], picked_column)
        choice = offset[picked] + np.floor(draw * count[picked]).astype(np.int64)
        replacement_start = self.synonyms.choice_start[choice]
        replacement_length = self.synonyms.choice_length[choice]
        word_start_flat, word_length = starts[picked], lengths[picked]
        ids = batch.ids.copy()
        if (word_length == 1).all() and (replacement_length == 1).all():  # one piece for one piece
            ids.ravel()[word_start_flat] = self.synonyms.pool[replacement_start]
            return TokenBatch(ids, batch.is_special, batch.lengths, batch.pad_id)
        if np.array_equal(replacement_length, word_length):  # same lengths
            ids.ravel()[np.repeat(word_start_flat, word_length) + ragged_arange(word_length)] = self.synonyms.pool[
                np.repeat(replacement_start, replacement_length) + ragged_arange(replacement_length)
            ]
            return TokenBatch(ids, batch.is_special, batch.lengths, batch.pad_id)
        # otherwise rebuild the rows: every position emits itself, except that a picked word emits its replacement
        # (from the synonym pool, appended after the batch) at its first piece and nothing at the others
        emit = batch.valid.ravel().astype(np.int64)
        source = np.arange(rows * width, dtype=np.int64)
        emit[np.repeat(word_start_flat, word_length) + ragged_arange(word_length)] = 0
        emit[word_start_flat] = replacement_length
        source[word_start_flat] = rows * width + replacement_start
        gather = np.repeat(source, emit) + ragged_arange(emit)
        pool_ids = np.concatenate([flat_ids, self.synonyms.pool])
        pool_special = np.concatenate([batch.is_special.ravel(), np.zeros(len(self.synonyms.pool), dtype=bool)])
        lengths_out = emit.reshape(rows, width).sum(axis=1)
        return TokenBatch.from_flat(pool_ids[gather], pool_special[gather], lengths_out, batch.pad_id)


class Composition(Augmentation):
    """Augmentations applied in order, each with its own random draws: ``subs+del_span`` substitutes, then deletes."""

    def __init__(self, parts: Sequence[Augmentation]):
        if not parts:
            raise ValueError("A composition needs at least one augmentation.")
        self.parts = tuple(parts)
        self.name = "+".join(part.name for part in self.parts)
        self.needs_del_token = any(part.needs_del_token for part in self.parts)
        self.needs_synonyms = any(part.needs_synonyms for part in self.parts)

    def atoms(self) -> tuple[Augmentation, ...]:
        return tuple(atom for part in self.parts for atom in part.atoms())

    def apply(self, batch, keys):
        for stage, part in enumerate(self.parts):
            batch = part.apply(batch, combine(keys, stage))
        return batch


class Mixture(Augmentation):
    """Each view draws one augmentation of ``choices``, uniformly (the mixing option; named ``a,b,...``)."""

    def __init__(self, choices: Sequence[Augmentation]):
        if not choices:
            raise ValueError("A mixture needs at least one augmentation.")
        self.choices = tuple(choices)
        self.name = ",".join(choice.name for choice in self.choices)
        self.needs_del_token = any(choice.needs_del_token for choice in self.choices)
        self.needs_synonyms = any(choice.needs_synonyms for choice in self.choices)

    def atoms(self) -> tuple[Augmentation, ...]:
        return tuple(atom for choice in self.choices for atom in choice.atoms())

    def pick(self, keys: np.ndarray) -> np.ndarray:
        """Which choice each row uses."""
        draw = uniform(stream(keys, "mix"), 0)
        return np.minimum((draw * len(self.choices)).astype(np.int64), len(self.choices) - 1)

    def apply(self, batch, keys):
        picked = self.pick(keys)
        parts, rows = [], []
        for index, choice in enumerate(self.choices):
            selected = np.flatnonzero(picked == index)
            if len(selected):
                parts.append(choice.apply(batch.take(selected), combine(keys[selected], index)))
                rows.append(selected)
        return TokenBatch.stack(parts, rows, len(batch), batch.pad_id)


@dataclass
class AugmentationSettings:
    """What a registered augmentation is built from (`Augmentation.from_settings`): the tokenizer, the [DEL] id
    (set when an augmentation named ``needs_del_token``), ``synonyms`` (a compiled `TokenSynonyms`, when one
    ``needs_synonyms``) and ``values``, the hyper-parameters given, by flag (the others keep their defaults)."""

    tokenizer: Any
    del_token_id: int | None = None
    synonyms: TokenSynonyms | None = None
    values: Mapping[str, int | float] = field(default_factory=dict)


@dataclass(frozen=True)
class AugmentationSpec:
    """A registered augmentation: its name and its class, which says the rest (``description``,
    ``hyperparameters``, ``needs_del_token``, ``needs_synonyms``)."""

    name: str
    augmentation_class: type[Augmentation]

    @property
    def description(self) -> str:
        return self.augmentation_class.description

    @property
    def needs_del_token(self) -> bool:
        return self.augmentation_class.needs_del_token

    @property
    def needs_synonyms(self) -> bool:
        return self.augmentation_class.needs_synonyms


AUGMENTATIONS: Registry[AugmentationSpec] = Registry(
    "augmentation", "contrastive_hf.data.augmentations.register_augmentation"
)


def register_augmentation(augmentation_class: type[Augmentation], *, replace: bool = False) -> type[Augmentation]:
    """Offer an augmentation class to the collators, ``--augmentations``, the scripts' flags (one per
    hyper-parameter) and the model card, under its ``name``; returns the class (so it also decorates one).

    A hyper-parameter flag another registered augmentation declares with another default is refused: one flag
    sets one value."""
    name = augmentation_class.__dict__.get("name")
    if not isinstance(name, str) or not name or not augmentation_class.description:
        raise ValueError(
            f"{augmentation_class.__name__} needs its own `name` (what --augmentations writes) and `description` "
            "(the model card's text) as class attributes to be registered."
        )
    for item in augmentation_class.hyperparameters:
        for spec in AUGMENTATIONS:
            if spec.name == name:
                continue
            for other in spec.augmentation_class.hyperparameters:
                if other.flag == item.flag and other.default != item.default:
                    raise ValueError(
                        f"{augmentation_class.__name__}'s hyper-parameter {item.flag!r} (default {item.default}) "
                        f"is {spec.name}'s already, with default {other.default}: one flag sets one value. Name "
                        "yours apart (e.g. with the augmentation's name in it)."
                    )
    AUGMENTATIONS.add(name, AugmentationSpec(name, augmentation_class), replace=replace)
    return augmentation_class


def augmentation_hyperparameters() -> dict[str, Hyperparameter]:
    """``{flag: Hyperparameter}`` of every registered augmentation, in registration order: the scripts' flags and
    `build_augmentation`'s keywords."""
    return {item.flag: item for spec in AUGMENTATIONS for item in spec.augmentation_class.hyperparameters}


def unregister_augmentation(name: str) -> AugmentationSpec:
    return AUGMENTATIONS.remove(name)


def get_augmentation(name: str) -> AugmentationSpec:
    return AUGMENTATIONS.get(name)


def augmentation_names() -> tuple[str, ...]:
    return AUGMENTATIONS.names()


AUGMENTATION_NAMES = AUGMENTATIONS.names_view()  # the registered augmentations, read at each use


def augmentation_help() -> str:
    """The help of an ``--augmentations`` option (argparse's: a % is written %%), listing the registered
    augmentations."""
    text = (
        f"How the two views are made: {', '.join(augmentation_names())}; '+' composes in order as CLEAR names it "
        "(subs+del_span), ',' mixes: each view draws one (del_word,reorder)."
    )
    return text.replace("%", "%%")


def _parse(spec: str) -> list[list[str]]:
    """``"a+b,c"`` -> ``[["a", "b"], ["c"]]``, checking every name."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"Empty augmentation {spec!r}: choose one of {', '.join(augmentation_names())}.")
    mixture = [[name.strip() for name in choice.split("+")] for choice in spec.split(",")]
    for choice in mixture:
        for name in choice:
            if name not in AUGMENTATIONS:
                raise ValueError(
                    f"Unknown augmentation {name!r}: choose one of {', '.join(augmentation_names())}, composed with "
                    "'+' (CLEAR's names, e.g. subs+del_span) or mixed with ',' (each view draws one, e.g. "
                    "del_word,reorder); one of your own: register it with "
                    "contrastive_hf.data.augmentations.register_augmentation."
                )
    return mixture


def check_augmentation(spec: str) -> None:
    """A `ValueError` for an ``--augmentations`` value that names no registered augmentation (or nothing), naming the
    value, the registered names and how to register one: what a script checks when it reads its arguments, before
    any model loads."""
    _parse(spec)


def _named(spec: str) -> list[AugmentationSpec]:
    return [AUGMENTATIONS.get(name) for name in dict.fromkeys(name for choice in _parse(spec) for name in choice)]


def needs_del_token(spec: str | Augmentation) -> bool:
    """Whether an augmentation (or its name) writes the [DEL] token, so the tokenizer needs `add_del_token`."""
    if isinstance(spec, Augmentation):
        return spec.needs_del_token
    return any(named.needs_del_token for named in _named(spec))


def needs_synonyms(spec: str | Augmentation) -> bool:
    """Whether an augmentation (or its name) reads a synonym source (``subs``)."""
    if isinstance(spec, Augmentation):
        return spec.needs_synonyms
    return any(named.needs_synonyms for named in _named(spec))


def describe_augmentation(spec: str | Augmentation) -> str:
    """The registered description of the augmentation ``spec`` names, or ``name: description`` of each one it
    names (``"subs+del_span"``) or is made of (by the ``name`` of its atoms), for a model card; for a built
    augmentation, followed by the values of its hyper-parameters (``, with del_word_probability=0.3``)."""
    if isinstance(spec, Augmentation):
        names = dict.fromkeys(atom.name for atom in spec.atoms())
        named = [AUGMENTATIONS.get(name) for name in names if name in AUGMENTATIONS]
        settings = ", ".join(f"{flag}={value}" for flag, value in spec.settings().items())
    else:
        named, settings = _named(spec), ""
    text = (
        named[0].description if len(named) == 1 else "; ".join(f"{entry.name}: {entry.description}" for entry in named)
    )
    return f"{text}, with {settings}" if settings else text


def build_augmentation(name: str, tokenizer, synonyms=None, **hyperparameters: int | float) -> Augmentation:
    """The augmentation called ``name``, configured for ``tokenizer``.

    ``name`` is a registered augmentation (`augmentation_names`), a ``+`` composition of them (``subs+del_span``) or
    a ``,`` mixture (``del_word,subs+reorder``). ``synonyms`` is needed for ``subs``: a JSON table file, a word ->
    synonyms dict, a `TokenSynonyms`, or a model (or embedding matrix) whose input embeddings give nearest-neighbour
    synonyms. ``hyperparameters`` are the registered augmentations' settings by flag
    (`augmentation_hyperparameters`: CLEAR's ``del_word_probability``, ``num_deleted_spans``,
    ``num_reordered_pairs``, ``span_ratio``, ``substitution_probability``, defaults from its §4.1); one that no
    augmentation of ``name`` reads is ignored, one no registered augmentation declares is refused.
    """
    mixture = _parse(name)
    known = augmentation_hyperparameters()
    unknown = [flag for flag in hyperparameters if flag not in known]
    if unknown:
        raise ValueError(
            f"Unknown augmentation setting(s) {', '.join(map(repr, unknown))}: the registered augmentations' are "
            f"{', '.join(known) or 'none'}."
        )
    settings = AugmentationSettings(tokenizer, values=dict(hyperparameters))
    if needs_del_token(name):
        settings.del_token_id = tokenizer.convert_tokens_to_ids(DEL_TOKEN)
        if settings.del_token_id is None or settings.del_token_id == tokenizer.unk_token_id:
            raise ValueError(
                f"{name} needs the {DEL_TOKEN} token in the tokenizer; call "
                "contrastive_hf.data.augmentations.add_del_token(tokenizer, model) first."
            )
    if needs_synonyms(name):
        if synonyms is None:
            raise ValueError(
                f"{name} needs a synonym source: synonyms='table.json' (a JSON word -> synonyms table, "
                "--synonyms_file) or synonyms=model (nearest neighbours in the encoder's input embeddings)."
            )
        settings.synonyms = load_synonyms(synonyms, tokenizer)

    def atom(atom_name: str) -> Augmentation:
        return AUGMENTATIONS.get(atom_name).augmentation_class.from_settings(settings)

    choices = [atom(choice[0]) if len(choice) == 1 else Composition([atom(a) for a in choice]) for choice in mixture]
    return choices[0] if len(choices) == 1 else Mixture(choices)


register_augmentation(Identity)
register_augmentation(WordDeletion)
register_augmentation(SpanDeletion)
register_augmentation(Reordering)
register_augmentation(SynonymSubstitution)


def add_del_token(tokenizer, model=None) -> int:
    """Add CLEAR's [DEL] special token to ``tokenizer`` when missing, resize ``model``'s embeddings to match, and
    return its id."""
    if DEL_TOKEN not in tokenizer.get_vocab():
        # keep the tokenizer's other extra special tokens special (the default would replace them)
        tokenizer.add_special_tokens({"additional_special_tokens": [DEL_TOKEN]}, replace_extra_special_tokens=False)
    if model is not None and model.get_input_embeddings().num_embeddings < len(tokenizer):
        # [DEL]'s embedding is drawn from the others' mean and covariance (transformers' mean_resizing), which
        # transformers announces on every run; the user did not ask for the resize, so the notice is left out
        modeling_logger = logging.getLogger("transformers.modeling_utils")
        modeling_logger.addFilter(_without_mean_resizing_notice)
        try:
            model.resize_token_embeddings(len(tokenizer))
        finally:
            modeling_logger.removeFilter(_without_mean_resizing_notice)
    return tokenizer.convert_tokens_to_ids(DEL_TOKEN)


def _without_mean_resizing_notice(record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith("The new embeddings will be initialized")
