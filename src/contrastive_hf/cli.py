"""The ``contrastive-hf`` command line."""

from __future__ import annotations

import argparse
import json
import sys

__all__ = ["main", "load_encoder"]


def load_encoder(name_or_path: str, pooler_type: str = "mean"):
    """A [`ContrastiveModel`] and its tokenizer: a contrastive_hf checkpoint as saved, or any transformers encoder
    checkpoint wrapped with ``pooler_type`` and no projection."""
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    from . import ContrastiveConfig, ContrastiveModel

    config = AutoConfig.from_pretrained(name_or_path)
    if config.model_type == ContrastiveConfig.model_type:
        model = AutoModel.from_pretrained(name_or_path)
    else:
        model = ContrastiveModel.from_encoder_pretrained(name_or_path, pooler_type=pooler_type, projection_type="none")
    model.tokenizer = AutoTokenizer.from_pretrained(name_or_path)
    return model.eval()


def evaluate_command(args: argparse.Namespace) -> int:
    from .evaluation import evaluate_sts, read_stsbenchmark

    model = load_encoder(args.model, pooler_type=args.pooler_type)
    scores = evaluate_sts(model, read_stsbenchmark(args.stsb_file), batch_size=args.batch_size)
    results = {"model": args.model, "stsb": {"spearman": scores["spearman"], "pearson": scores["pearson"]}}
    print(f"{'task':<10} {'spearman x 100':>15}")
    print(f"{'STS-B':<10} {scores['spearman']:>15.2f}")
    with open(args.output, "w", encoding="utf-8") as handle:
        json.dump(results, handle, indent=2)
    print(f"Results written to {args.output}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="contrastive-hf", description="Contrastive sentence encoders on HF.")
    commands = parser.add_subparsers(dest="command", required=True)
    evaluate = commands.add_parser("evaluate", help="Score a model on STS (cosine similarity, Spearman x 100).")
    evaluate.add_argument("model", help="A contrastive_hf checkpoint, or any transformers encoder checkpoint.")
    evaluate.add_argument("--stsb-file", required=True, help="STS Benchmark sts-dev.csv or sts-test.csv.")
    evaluate.add_argument(
        "--pooler-type", default="mean", help="Pooling for plain transformers checkpoints (default: mean)."
    )
    evaluate.add_argument("--batch-size", type=int, default=64)
    evaluate.add_argument("--output", default="eval_results.json", help="Where the JSON results go.")
    evaluate.set_defaults(handler=evaluate_command)
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
