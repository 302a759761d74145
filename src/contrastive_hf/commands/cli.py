"""The ``contrastive-hf`` command line: ``evaluate`` a model, ``plot`` a run.

contrastive-hf evaluate MODEL --tasks sts,transfer,align --data-dir DIR [--output eval_results.json]
contrastive-hf plot RUN_DIR [RESULTS.json ...] [--output-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

__all__ = ["main", "build_parser"]


def _write_json(path: str, payload: dict) -> None:
    """Write through a temporary file, so that a failure never leaves a half-written results file."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    temporary = f"{path}.tmp-{os.getpid()}"
    try:
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump(payload, handle, indent=2)
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)


def evaluate_command(args: argparse.Namespace) -> int:
    from ..evaluation import format_results, load_encoder, run_evaluation
    from ..evaluation.suite import parse_tasks

    if args.data_dir is None and args.stsb_file is None:
        raise ValueError("Give --data-dir (a folder laid out like SentEval's data/downstream) or --stsb-file.")
    tasks = parse_tasks(args.tasks or ("sts" if args.data_dir else "STS-B,align"))  # fails before the model loads
    if args.no_progress:
        from transformers.utils.logging import disable_progress_bar

        disable_progress_bar()  # transformers' "Loading weights" bar
    encoder = load_encoder(
        args.model, backend=args.backend, pooler_type=args.pooler_type, max_length=args.max_length, device=args.device
    )
    results = run_evaluation(
        encoder,
        args.data_dir,
        tasks,
        aggregation=args.sts_aggregation,
        stsb_split=args.stsb_split,
        sick_split=args.sick_split,
        stsb_file=args.stsb_file,
        kfold=args.kfold,
        n_jobs=args.n_jobs,
        batch_size=args.batch_size,
        show_progress=not args.no_progress,
    )
    results["model"] = args.model
    print(f"Model: {args.model} ({results['encoder']['backend']})")
    print(format_results(results))
    _write_json(args.output, results)
    print(f"Results written to {args.output}")
    return 0


def plot_command(args: argparse.Namespace) -> int:
    from ..evaluation.plots import (
        alignment_uniformity_trajectory,
        load_model_point,
        load_training_run,
        plot_alignment_uniformity,
        plot_training_curves,
    )

    runs, models, left_out = [], [], []
    for path in args.inputs:
        if os.path.isdir(path):
            runs.append(load_training_run(path))
            continue
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{path} does not exist; give training output directories or JSON files.")
        with open(path, encoding="utf-8") as handle:
            content = json.load(handle)
        if isinstance(content, dict) and "log_history" in content:
            runs.append(load_training_run(path))
            continue
        try:
            models.append(load_model_point(path))
        except ValueError as error:  # e.g. results of `evaluate --tasks sts`: drawn if something else is
            left_out.append(str(error))
    if not runs and not models:
        raise ValueError(" ".join(left_out))
    for reason in left_out:
        print(f"Left out of alignment_uniformity.png: {reason}")
    os.makedirs(args.output_dir, exist_ok=True)
    written = []
    if runs:
        written.append(plot_training_curves(runs, os.path.join(args.output_dir, "training_curves.png")))
    if models or any(alignment_uniformity_trajectory(run) for run in runs):
        written.append(
            plot_alignment_uniformity(runs, models, os.path.join(args.output_dir, "alignment_uniformity.png"))
        )
    elif runs:
        print(
            "No alignment/uniformity was logged during these runs (train with STS evaluation: --eval_strategy steps "
            "--stsb_dev_file ...), so alignment_uniformity.png is not drawn."
        )
    for path in written:
        print(f"Wrote {path}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="contrastive-hf", description="Contrastive sentence encoders on HF.")
    commands = parser.add_subparsers(dest="command", required=True)

    evaluate = commands.add_parser(
        "evaluate",
        help="Score a model on STS (Spearman x 100), SentEval transfer and alignment/uniformity.",
        description="Score a model as the papers do; prints a table and writes the results as JSON.",
    )
    evaluate.add_argument(
        "model",
        help="A contrastive_hf checkpoint, a sentence-transformers folder, or any transformers encoder checkpoint.",
    )
    evaluate.add_argument(
        "--tasks",
        default=None,
        help="Comma-separated groups (sts, transfer, align) or tasks (STS12..STS16, STS-B, SICK-R, MR, CR, SUBJ, "
        "MPQA, SST2, TREC, MRPC). Default: sts with --data-dir, STS-B,align with --stsb-file alone.",
    )
    evaluate.add_argument(
        "--data-dir", default=None, help="A folder laid out like SentEval's data/downstream (STS/STS12-en-test, ...)."
    )
    evaluate.add_argument("--stsb-file", default=None, help="Score STS-B from this file (e.g. sts-dev.csv) instead.")
    evaluate.add_argument(
        "--stsb-split",
        default="test",
        choices=("train", "dev", "test"),
        help="STS-B split for sts and align (default: test).",
    )
    evaluate.add_argument(
        "--sick-split", default="test", choices=("train", "trial", "test"), help="SICK-R split (default: test)."
    )
    evaluate.add_argument(
        "--sts-aggregation",
        default="all",
        choices=("all", "wmean", "mean"),
        help="STS12-16: all = subsets concatenated, one Spearman (SimCSE; default); wmean = SentEval's weighted mean.",
    )
    evaluate.add_argument(
        "--backend",
        default="auto",
        choices=("auto", "contrastive", "transformers", "sentence-transformers"),
        help="How to encode: auto (contrastive_hf checkpoints, then folders with modules.json as "
        "sentence-transformers, then transformers), or force one.",
    )
    evaluate.add_argument(
        "--pooler-type", default="mean", help="Pooling for the transformers backend (default: mean)."
    )
    evaluate.add_argument("--max-length", type=int, default=None, help="Truncation in tokens (default: the model's).")
    evaluate.add_argument("--batch-size", type=int, default=64)
    evaluate.add_argument("--device", default=None, help="cpu, cuda, cuda:1 ... (default: CUDA when available).")
    evaluate.add_argument("--kfold", type=int, default=10, help="Cross-validation folds of the transfer tasks.")
    evaluate.add_argument("--n-jobs", type=int, default=None, help="Processes for the transfer classifiers.")
    evaluate.add_argument("--output", default="eval_results.json", help="Where the JSON results go.")
    evaluate.add_argument("--no-progress", action="store_true", help="No progress bars.")
    evaluate.set_defaults(handler=evaluate_command)

    plot = commands.add_parser(
        "plot",
        help="Draw the alignment-uniformity plane and training curves.",
        description="Writes training_curves.png (from each run's trainer_state.json) and alignment_uniformity.png "
        "(a trajectory per run that logged eval_*_alignment/uniformity, a point per evaluate results JSON).",
    )
    plot.add_argument(
        "inputs",
        nargs="+",
        help="Training output directories or trainer_state.json files, and results JSON of `evaluate --tasks align`.",
    )
    plot.add_argument("--output-dir", default=".", help="Where the PNG files go (default: the current directory).")
    plot.set_defaults(handler=plot_command)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except (ValueError, FileNotFoundError, OSError) as error:
        print(f"contrastive-hf {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
