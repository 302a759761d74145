"""The ``contrastive-hf`` command line: ``evaluate`` a model, ``plot`` a run, ``mine`` hard negatives.

contrastive-hf evaluate MODEL --tasks sts,transfer,align --data-dir DIR [--output eval_results.json]
contrastive-hf evaluate MODEL --tasks glue [--data-dir GLUE_DIR] [--learning-rates 2e-5 --seeds 0 1 ...]
contrastive-hf plot RUN_DIR [RESULTS.json ...] [--output-dir DIR]
contrastive-hf mine PAIRS --model MODEL --output MINED.csv [--num-negatives 3 --margin 0.05 ...]

``evaluate`` and ``mine`` take ``--include-module MODULE`` (repeatable): a module of the user's imported before the
model loads, e.g. one registering the pooler a checkpoint names.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings

from .._atomic import write_atomically
from .._files import read_json_file

__all__ = ["main", "build_parser"]


def _true_or_false(value: str) -> bool:
    """An option's ``true`` or ``false`` (also yes/no, 1/0), as transformers' own boolean options take them."""
    words = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}
    if value.lower() not in words:
        raise argparse.ArgumentTypeError(f"give true or false, not {value!r}")
    return words[value.lower()]


def _integer_at_least(minimum: int, why: str = ""):
    """An option's integer, refused below ``minimum`` (argparse then names the option, the value and the range)."""

    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"give an integer >= {minimum}{why}, not {value!r}") from None
        if number < minimum:
            raise argparse.ArgumentTypeError(f"must be an integer >= {minimum}{why}, got {number}")
        return number

    return parse


def _check_output_file(path: str) -> None:
    """Refuse, before any work, an ``--output`` that names a folder: the results go to a file."""
    if os.path.isdir(path):
        raise ValueError(
            f"--output {path} is a folder: give the path of the file to write, e.g. "
            f"{os.path.join(path, 'results.json')}."
        )


def _write_json(path: str, payload: dict) -> None:
    """Write through a temporary file, so that a failure never leaves a half-written results file."""
    write_atomically(path, lambda handle: json.dump(payload, handle, indent=2))


def _include_modules(names: list[str] | None) -> None:
    """Import each ``--include-module`` before any model loads, so that what it registers (a pooler, a loss, an
    augmentation: `register_pooler`, `register_loss`, `register_augmentation`) is known. Found as ``python -m`` finds a
    module: in the current folder first, then on the Python path. A module that is nowhere is the user's to fix."""
    import importlib

    if not names:
        return
    if os.getcwd() not in sys.path:  # ``python -m`` puts it first; the ``contrastive-hf`` command does not
        sys.path.insert(0, os.getcwd())
    for name in names:
        if name.endswith(".py") or os.sep in name or name.startswith("."):
            raise ValueError(
                f"--include-module {name}: give a module's dotted name, as python -m takes it (my_losses for "
                "./my_losses.py, my_package.poolers for my_package/poolers.py), not a file path."
            )
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as error:
            missing = error.name or name
            where = (
                f"no module named {missing!r} in the current folder ({os.getcwd()}) or on the Python path: run from "
                "the folder holding it, or add its folder to PYTHONPATH."
                if name == missing or name.startswith(f"{missing}.")
                else f"importing it failed: {error} (a module it imports): install it, or fix the import."
            )
            raise ValueError(f"--include-module {name}: {where}") from None


def _add_include_module(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--include-module",
        action="append",
        default=[],
        metavar="MODULE",
        help="Import MODULE (a dotted name, found as python -m finds it: the current folder first) before the model "
        "loads, e.g. the module registering a pooler, loss or augmentation of your own that the checkpoint names "
        "(register_pooler, register_loss, register_augmentation). Repeatable.",
    )


def evaluate_command(args: argparse.Namespace) -> int:
    from ..evaluation import format_results, load_encoder, run_evaluation
    from ..evaluation.suite import GLUE_PREFIX, parse_tasks
    from .glue_options import glue_arguments

    if args.data_dir is None and args.stsb_file is None and not args.tasks:
        raise ValueError(
            "Give --data-dir (a folder laid out like SentEval's data/downstream) or --stsb-file, or --tasks glue "
            "(GLUE from the Hub)."
        )
    _check_output_file(args.output)
    tasks = parse_tasks(args.tasks or ("sts" if args.data_dir else "STS-B,align"))  # fails before the model loads
    glue = glue_arguments(args)
    embedding_tasks = [task for task in tasks if not task.startswith(GLUE_PREFIX)]
    if embedding_tasks and args.data_dir is None and args.stsb_file is None:
        raise ValueError(f"{', '.join(embedding_tasks)} need --data-dir (SentEval's data/downstream) or --stsb-file.")
    if args.no_progress:
        from transformers.utils.logging import disable_progress_bar

        disable_progress_bar()  # transformers' "Loading weights" bar
    model = args.model
    if embedding_tasks:
        model = load_encoder(
            args.model, backend=args.backend, pooler_type=args.pooler_type, max_length=args.max_length,
            device=args.device, bf16=args.bf16,
        )  # fmt: skip
    results = run_evaluation(
        model,
        args.data_dir,
        tasks,
        aggregation=args.sts_aggregation,
        stsb_split=args.stsb_split,
        sick_split=args.sick_split,
        stsb_file=args.stsb_file,
        kfold=args.kfold,
        n_jobs=args.n_jobs,
        transfer_protocol=args.protocol,
        batch_size=args.batch_size,
        show_progress=not args.no_progress,
        glue=glue,
        checkpoint=args.model,
    )
    results["model"] = args.model
    backend = f" ({results['encoder']['backend']})" if "encoder" in results else ""
    print(f"Model: {args.model}{backend}")
    print(format_results(results))
    _write_json(args.output, results)
    print(f"Results written to {args.output}")
    return 0


def plot_command(args: argparse.Namespace) -> int:
    from ..evaluation.plots import (
        alignment_uniformity_trajectory,
        load_glue_scores,
        load_model_point,
        load_training_run,
        plot_alignment_uniformity,
        plot_glue,
        plot_training_curves,
    )

    runs, models, glue, left_out = [], [], [], []
    for path in args.inputs:
        if os.path.isdir(path):
            runs.append(load_training_run(path))
            continue
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{path} does not exist; give training output directories or JSON files.")
        content = read_json_file(path)
        if isinstance(content, dict) and "log_history" in content:
            runs.append(load_training_run(path))
            continue
        if isinstance(content, dict) and content.get("glue"):
            glue.append(load_glue_scores(path))
        try:
            models.append(load_model_point(path))
        except ValueError as error:  # e.g. results of `evaluate --tasks sts`: drawn if something else is
            if not (isinstance(content, dict) and content.get("glue")):
                left_out.append(str(error))
    if not runs and not models and not glue:
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
    if glue:
        written.append(plot_glue(glue, os.path.join(args.output_dir, "glue.png")))
    for path in written:
        print(f"Wrote {path}")
    return 0


def _read_rows(path: str, expected: str):
    """A file ``mine`` reads (the pairs, a --corpus), read as a corpus is; a file without a single row (empty, or a
    header alone) is named as such, with what it should hold: datasets says 'Instruction "train" corresponds to no
    data!', naming nothing."""
    from ..data.reading import EmptyCorpusError, load_corpus

    no_rows = ValueError(f"{path} has no rows: it is empty or holds a header alone. Give a file of {expected}.")
    try:
        return load_corpus(path)
    except EmptyCorpusError:  # 0 bytes: its message is about training files
        raise no_rows from None
    except ValueError as error:
        try:
            empty = next(iter(load_corpus(path, streaming=True)), None) is None
        except ValueError:  # the file cannot be read (bytes that are not UTF-8): ``error`` says why, naming it
            raise error from None
        if empty:
            raise no_rows from None
        raise


def mine_command(args: argparse.Namespace) -> int:
    from ..data.columns import resolve_query_passage_columns
    from ..data.mining import TiedScoresWarning, load_mining_encoder, mine_hard_negatives, write_mined
    from ..data.reading import drop_incomplete_rows

    _check_output_file(args.output)
    print(f"Reading {args.pairs} ...", flush=True)
    pairs = _read_rows(args.pairs, "(query, positive) pairs: a header such as query,positive, then one pair per row")
    columns = resolve_query_passage_columns(pairs.column_names, args.query_column, args.positive_column)
    pairs = drop_incomplete_rows(pairs, columns)
    corpus = [
        text
        for column in columns[2:]
        for value in pairs[column]
        for text in (value if isinstance(value, list) else [value])
    ]
    for path in args.corpus or ():
        extra = _read_rows(path, "passages: one per line (.txt), or per row under a header (.csv, .json)")
        text_column = args.corpus_column or ("text" if "text" in extra.column_names else extra.column_names[0])
        corpus += [text for text in extra[text_column] if isinstance(text, str) and text.strip()]
    print(f"Loading the model ({args.model}) ...", flush=True)
    encode_queries, encode_documents, similarity = load_mining_encoder(
        args.model, batch_size=args.batch_size, max_length=args.max_length, device=args.device
    )
    print(
        f"Embedding {len(pairs):,} queries and {len(set(pairs[columns[1]]) | set(corpus)):,} passages, then searching "
        f"each query's {args.num_negatives} negative(s) ...",
        flush=True,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TiedScoresWarning)  # said below, as this command's own warning, at the end
        mined = mine_hard_negatives(
            pairs[columns[0]],
            pairs[columns[1]],
            encode_queries,
            encode_documents,
            corpus=corpus,
            num_negatives=args.num_negatives,
            similarity=similarity,
            skip_top=args.skip_top,
            max_candidates=args.max_candidates,
            margin=args.margin,
            max_score=args.max_score,
            duplicate_threshold=args.duplicate_threshold,
            sampling=args.sampling,
            seed=args.seed,
        )
    write_mined(mined.rows, args.output)
    print(mined.summary())
    if mined.ties_warning:
        print(f"contrastive-hf mine: warning: {mined.ties_warning}", file=sys.stderr)
    negatives = ", ".join(f"negative_{index}" for index in range(1, args.num_negatives + 1))
    print(f"Wrote {args.output} (columns query, positive, {negatives}).")
    return 0


# argparse prints the usage with each error: one line, not the thirty options of evaluate
_SHORT_USAGE = "%(prog)s {arguments} [--option value ...]  (--help lists the options)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="contrastive-hf", description="Contrastive sentence encoders on HF.")
    commands = parser.add_subparsers(dest="command", required=True)

    evaluate = commands.add_parser(
        "evaluate",
        help="Score a model on STS (Spearman x 100), SentEval transfer and alignment/uniformity.",
        description="Score a model as the papers do; prints a table and writes the results as JSON.",
        usage=_SHORT_USAGE.format(arguments="MODEL --tasks ... --data-dir DIR"),
    )
    evaluate.add_argument(
        "model",
        help="A contrastive_hf checkpoint, a sentence-transformers folder, or any transformers encoder checkpoint.",
    )
    evaluate.add_argument(
        "--tasks",
        default=None,
        help="Comma-separated groups (sts, transfer, align, glue) or tasks (STS12..STS16, STS-B, SICK-R, MR, CR, "
        "SUBJ, MPQA, SST2, TREC, MRPC; GLUE's glue/cola, glue/sst2, glue/mrpc, glue/stsb, glue/qqp, glue/mnli, "
        "glue/qnli, glue/rte, glue/wnli). Default: sts with --data-dir, STS-B,align with --stsb-file alone.",
    )
    evaluate.add_argument(
        "--data-dir",
        default=None,
        help="A folder laid out like SentEval's data/downstream (STS/STS12-en-test, ...); for GLUE, one holding "
        "GLUE's task folders (SST-2/train.tsv, dev.tsv, ...; also in its glue_data/). GLUE tasks not found there "
        "load from the Hub (nyu-mll/glue).",
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
    evaluate.add_argument(
        "--max-length", type=_integer_at_least(1), default=None, help="Truncation in tokens (default: the model's)."
    )
    evaluate.add_argument(
        "--batch-size", type=_integer_at_least(1), default=64, help="Sentences encoded at once (default 64)."
    )
    evaluate.add_argument("--device", default=None, help="cpu, cuda, cuda:1 ... (default: CUDA when available).")
    evaluate.add_argument(
        "--bf16",
        type=_true_or_false,
        default=None,
        help="true or false: encode under bf16 autocast, or in float32. Default: bf16 on a CPU with bf16 matrix "
        "instructions (AMX, AVX-512 BF16) and on a CUDA GPU that supports it, float32 elsewhere (docs/benchmarks.md: "
        "within 0.3 of float32 on STS).",
    )
    evaluate.add_argument(
        "--kfold",
        type=_integer_at_least(2, " (cross-validation needs two folds or more)"),
        default=10,
        help="Cross-validation folds of the transfer tasks (at least 2; default 10, SentEval's).",
    )
    evaluate.add_argument("--n-jobs", type=int, default=None, help="Processes for the transfer classifiers.")
    evaluate.add_argument(
        "--protocol",
        default="simcse",
        choices=("simcse", "sklearn"),
        help="Transfer classifier: simcse = SentEval's PyTorch classifier as SimCSE reports its figures (default); "
        "sklearn = SentEval's scikit-learn logistic regression (several times faster on CPU).",
    )
    evaluate.add_argument("--output", default="eval_results.json", help="Where the JSON results go.")
    evaluate.add_argument("--no-progress", action="store_true", help="No progress bars.")
    from .glue_options import add_glue_options  # GlueArguments' fields, their defaults and help

    add_glue_options(evaluate)
    _add_include_module(evaluate)
    evaluate.set_defaults(handler=evaluate_command)

    plot = commands.add_parser(
        "plot",
        help="Draw the alignment-uniformity plane, training curves and GLUE scores.",
        description="Writes training_curves.png (from each run's trainer_state.json), alignment_uniformity.png "
        "(a trajectory per run that logged eval_*_alignment/uniformity, a point per evaluate results JSON) and "
        "glue.png (the GLUE scores of each evaluate results JSON that has them, seeds as dots).",
    )
    plot.add_argument(
        "inputs",
        nargs="+",
        help="Training output directories or trainer_state.json files, and results JSON of `evaluate` (--tasks align, "
        "glue).",
    )
    plot.add_argument("--output-dir", default=".", help="Where the PNG files go (default: the current directory).")
    plot.set_defaults(handler=plot_command)

    mine = commands.add_parser(
        "mine",
        usage=_SHORT_USAGE.format(arguments="PAIRS --model MODEL --output MINED.csv"),
        help="Mine hard negatives for (query, positive) pairs with a trained model.",
        description="Scores every query against a corpus (the pairs' positives and existing negatives, plus --corpus) "
        "by exact search on the CPU and writes query, positive, negative_1..negative_k rows, which run_simcse.py "
        "(--mode sup) and run_dpr.py read as they are. A pair's positives, its query and texts identical to a "
        "positive are never its negatives.",
    )
    mine.add_argument("pairs", help="A .csv or .json(l) file of (query, positive[, negatives]) pairs.")
    mine.add_argument(
        "--model",
        required=True,
        help="The model that scores: a contrastive_hf checkpoint (a dual encoder uses its two towers), a "
        "sentence-transformers folder, or a transformers encoder (mean pooling).",
    )
    mine.add_argument("--output", required=True, help="Where the rows go: .csv, .tsv, .json or .jsonl.")
    mine.add_argument("--query-column", default=None, help="Default: query, question, anchor or sent0.")
    mine.add_argument("--positive-column", default=None, help="Default: positive, passage, answer, sent1, ...")
    mine.add_argument("--corpus", action="append", help="More passages to draw negatives from (a file; repeatable).")
    mine.add_argument("--corpus-column", default=None, help="The text column of --corpus files (default: text).")
    mine.add_argument("--num-negatives", type=int, default=3, help="Negatives per pair (default 3).")
    mine.add_argument(
        "--skip-top", type=int, default=0, help="Skip the first N candidates of each ranking (likely false negatives)."
    )
    mine.add_argument(
        "--max-candidates", type=int, default=100, help="Consider the N best candidates after the skipped ones."
    )
    mine.add_argument(
        "--margin",
        type=float,
        default=None,
        help="A negative must score below the positive's score minus this (e.g. 0.05 for cosine).",
    )
    mine.add_argument("--max-score", type=float, default=None, help="A negative must score at most this.")
    mine.add_argument(
        "--duplicate-threshold",
        type=float,
        default=None,
        help="Passages this similar (cosine) to the positive are near-duplicates of it, never negatives (e.g. 0.95).",
    )
    mine.add_argument("--sampling", default="top", choices=("top", "random"), help="The best, or at random.")
    mine.add_argument("--seed", type=int, default=0, help="Seed of --sampling random.")
    mine.add_argument(
        "--batch-size", type=_integer_at_least(1), default=64, help="Texts encoded at once (default 64)."
    )
    mine.add_argument(
        "--max-length", type=_integer_at_least(1), default=None, help="Truncation in tokens (default: the model's)."
    )
    mine.add_argument("--device", default=None, help="cpu, cuda, ... (default: CUDA when available).")
    _add_include_module(mine)
    mine.set_defaults(handler=mine_command)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        _include_modules(getattr(args, "include_module", None))  # the sub-commands that load a model
        return args.handler(args)
    except (ValueError, FileNotFoundError, OSError) as error:
        print(f"contrastive-hf {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
