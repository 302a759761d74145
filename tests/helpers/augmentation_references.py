"""Slow, obvious references for the vectorised augmentations: one sentence at a time, plain Python loops, and the
random draws of `data.seeding` recomputed with Python integers. Parity tests compare the vectorised batch
code against these, row by row.

Each reference takes (ids, special flags, key) and returns (ids, special flags) of the view.
"""

from __future__ import annotations

import math
import zlib

MASK = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


def mix64(value: int) -> int:
    z = value & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def combine(key: int, value: int) -> int:
    return mix64(key ^ mix64(value + GOLDEN))


def stream(key: int, name: str) -> int:
    return combine(key, zlib.crc32(name.encode()))


def uniform(key: int, counter: int) -> float:
    return (mix64(key + (counter + 1) * GOLDEN) >> 11) * 2.0**-53


def merge_runs(ids, special, deleted, del_id):
    """Drop the ``deleted`` positions, writing one [DEL] (special) per run of consecutive deleted positions."""
    out_ids, out_special, previous = [], [], False
    for position, (token, flag) in enumerate(zip(ids, special, strict=True)):
        if position in deleted:
            if not previous:
                out_ids.append(del_id)
                out_special.append(True)
            previous = True
        else:
            out_ids.append(token)
            out_special.append(flag)
            previous = False
    return out_ids, out_special


def floyd(key: int, population: int, count: int) -> list[int]:
    """``count`` distinct values of range(population), by Floyd's algorithm, sorted."""
    chosen = []
    for step in range(count):
        j = population - count + step
        t = math.floor(uniform(key, step) * (j + 1))
        chosen.append(j if t in chosen else t)
    return sorted(chosen)


def del_word(ids, special, key, del_id, probability=0.7):
    content = [i for i, flag in enumerate(special) if not flag]
    count = round(probability * len(content))
    priority = {i: uniform(stream(key, "del_word"), i) for i in content}
    deleted = set(sorted(content, key=priority.__getitem__)[:count])
    return merge_runs(ids, special, deleted, del_id)


def del_span(ids, special, key, del_id, num_spans=5, span_ratio=0.05):
    content = [i for i, flag in enumerate(special) if not flag]
    n = len(content)
    if n < 2:
        return list(ids), list(special)
    span = max(1, round(span_ratio * n))
    count = min(num_spans, max(1, round(num_spans * span_ratio * n / span)), (n + 1) // (span + 1), (n - 1) // span)
    slots = floyd(stream(key, "del_span"), n + 1 - count * span, count)
    starts = [slot + j * span for j, slot in enumerate(slots)]
    deleted = {content[rank] for start in starts for rank in range(start, start + span)}
    return merge_runs(ids, special, deleted, del_id)


def reorder(ids, special, key, num_pairs=5, span_ratio=0.05):
    content = [i for i, flag in enumerate(special) if not flag]
    n = len(content)
    if n < 2:
        return list(ids), list(special)
    span = max(1, round(span_ratio * n))
    pairs = min(num_pairs, max(1, round(num_pairs * span_ratio * n / span)), n // (2 * span))
    if pairs == 0:
        return list(ids), list(special)
    spans = 2 * pairs
    slots = floyd(stream(key, "reorder/spans"), n - spans * span + spans, spans)
    starts = [slot + j * (span - 1) for j, slot in enumerate(slots)]
    order = sorted(range(spans), key=lambda j: uniform(stream(key, "reorder/pairs"), j))
    partner = {}
    for a, b in zip(order[0::2], order[1::2], strict=True):
        partner[a], partner[b] = b, a
    out = list(ids)
    for j in range(spans):
        for offset in range(span):
            out[content[starts[j] + offset]] = ids[content[starts[partner[j]] + offset]]
    return out, list(special)


def words(ids, special, word_starts):
    """(start, end) of each word: a run of non-special tokens, each after the first a continuation piece."""
    found, position = [], 0
    while position < len(ids):
        if special[position]:
            position += 1
            continue
        end = position + 1
        while end < len(ids) and not special[end] and not word_starts[ids[end]]:
            end += 1
        found.append((position, end))
        position = end
    return found


def subs(ids, special, key, word_starts, choices, probability=0.3):
    """``choices``: dict word (tuple of ids) -> list of replacements (tuples of ids), in the table's order."""
    candidates = [(a, b) for a, b in words(ids, special, word_starts) if choices.get(tuple(ids[a:b]))]
    count = round(probability * len(candidates))
    picked = sorted(candidates, key=lambda word: uniform(stream(key, "subs/words"), word[0]))[:count]
    replacement = {}
    for a, b in picked:
        options = choices[tuple(ids[a:b])]
        replacement[a] = (b, options[math.floor(uniform(stream(key, "subs/choice"), a) * len(options))])
    out_ids, out_special, position = [], [], 0
    while position < len(ids):
        if position in replacement:
            end, new = replacement[position]
            out_ids.extend(new)
            out_special.extend([False] * len(new))
            position = end
        else:
            out_ids.append(ids[position])
            out_special.append(special[position])
            position += 1
    return out_ids, out_special


def compose(parts, ids, special, key):
    """``parts``: references taking (ids, special, key); each stage keyed like `augmentations.Composition`."""
    for stage, part in enumerate(parts):
        ids, special = part(ids, special, combine(key, stage))
    return ids, special


def mixture(choices, ids, special, key):
    index = min(math.floor(uniform(stream(key, "mix"), 0) * len(choices)), len(choices) - 1)
    return choices[index](ids, special, combine(key, index))
