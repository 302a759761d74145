"""Counter-based random numbers: every draw is a pure function of (seed, epoch, example, view, stream, counter).

Views must be reproducible exactly: a run resumed from a checkpoint has to see the views the uninterrupted run saw,
and a given sentence must get the same view whatever batch (or dataloader worker) it lands in. A stateful generator
cannot promise that, and building one ``np.random.Generator`` per sentence costs tens of microseconds. Instead each
random number is a hash: a 64-bit *key* per row (one sentence's view) is derived by hashing the seed, the epoch, the
example index and the view number, and the numbers of that row are SplitMix64 outputs of the key
(``mix64(key + (counter + 1) * GOLDEN_GAMMA)``). Everything is vectorised numpy on ``uint64`` arrays, so drawing a
number for each token of a 512 x 128 batch costs well under a millisecond.

SplitMix64 (Steele, Lea and Flood, 2014) is the generator numpy uses to seed its own bit generators; its outputs
pass BigCrush. Keys and stream names are hashed with fixed constants (``zlib.crc32`` for names, never Python's
salted ``hash``), so the draws are the same in every process, on every machine.
"""

from __future__ import annotations

import zlib

import numpy as np

__all__ = [
    "EXAMPLE_INDEX_COLUMN",
    "GOLDEN_GAMMA",
    "mix64",
    "combine",
    "stream",
    "example_keys",
    "random_bits",
    "uniform",
    "new_seed",
]

# The dataset column holding each example's stable identity (a row number, or a streamed line's file and byte
# offset), from which its random views are keyed: `corpus.tokenize_corpus` writes it, the collators read it.
EXAMPLE_INDEX_COLUMN = "example_index"
GOLDEN_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_MIX_1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX_2 = np.uint64(0x94D049BB133111EB)
_MASK_64 = (1 << 64) - 1
_TO_UNIT = 2.0**-53


def _as_uint64(values) -> np.ndarray:
    """Python ints (any sign or size, taken modulo 2**64) or integer arrays as ``uint64`` arrays."""
    if isinstance(values, np.ndarray):
        return values.astype(np.uint64, copy=False)
    if isinstance(values, (int, np.integer)):
        return np.array(int(values) & _MASK_64, dtype=np.uint64)
    return np.array([int(value) & _MASK_64 for value in values], dtype=np.uint64)


def mix64(values) -> np.ndarray:
    """SplitMix64's finaliser: a bijection of 64-bit integers that scatters nearby inputs across the whole range."""
    z = _as_uint64(values)
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * _MIX_1
        z = (z ^ (z >> np.uint64(27))) * _MIX_2
    return z ^ (z >> np.uint64(31))


def combine(keys, values) -> np.ndarray:
    """Hash ``values`` into ``keys`` (broadcasting): a new key per element, different for every value."""
    with np.errstate(over="ignore"):
        return mix64(_as_uint64(keys) ^ mix64(_as_uint64(values) + GOLDEN_GAMMA))


def stream(keys, name: str) -> np.ndarray:
    """Independent keys for the draws called ``name`` (e.g. ``"del_span/starts"``) of each row."""
    return combine(keys, zlib.crc32(name.encode("utf-8")))


def example_keys(seed: int, epoch: int, examples, views) -> np.ndarray:
    """One key per row from (seed, epoch, example, view); ``examples`` and ``views`` broadcast against each other.

    ``examples`` are stable 64-bit identities of the examples (their index in the corpus, or a hash of their token
    ids when the dataset has no index column).
    """
    base = combine(combine(mix64(seed), epoch), examples)
    return combine(base, views)


def random_bits(keys, counters) -> np.ndarray:
    """64 random bits per (key, counter), broadcasting numpy's way: ``keys[:, None]`` of shape ``(N, 1)`` and
    ``counters`` of shape ``(M,)`` give ``(N, M)``. Counters are non-negative integers (token positions, draw
    numbers); the same (key, counter) always gives the same bits."""
    keys = _as_uint64(keys)
    counters = _as_uint64(counters)
    with np.errstate(over="ignore"):
        return mix64(keys + (counters + np.uint64(1)) * GOLDEN_GAMMA)


def uniform(keys, counters) -> np.ndarray:
    """Uniform floats in [0, 1) with 53 random bits, shaped like `random_bits`."""
    return (random_bits(keys, counters) >> np.uint64(11)).astype(np.float64) * _TO_UNIT


def new_seed() -> int:
    """A fresh random 63-bit seed, for collators built without one (their views are then not reproducible)."""
    return int(np.random.SeedSequence().generate_state(1, dtype=np.uint64)[0] >> np.uint64(1))
