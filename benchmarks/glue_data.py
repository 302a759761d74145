#!/usr/bin/env python
"""Arrange the offline copies of SST-2, MRPC and STS-B (../shared/data) in GLUE's own file layout, for
``contrastive-hf evaluate MODEL --tasks glue/sst2,glue/mrpc,glue/stsb --data-dir OUTPUT`` on a machine without the Hub.

    python benchmarks/glue_data.py                       # writes outputs/glue_data/{SST-2,MRPC,STS-B}/
    python benchmarks/glue_data.py --output DIR --senteval-dir SentEval/data/downstream --stsb-dir DIR/stsbenchmark

What each folder holds, and how it differs from GLUE's:

- ``SST-2/train.tsv``, ``dev.tsv``: SentEval's ``SST/binary/sentiment-{train,dev}``, which are GLUE's SST-2 train
  (67,349 phrases) and dev (872 sentences) as they are: only GLUE's ``sentence<TAB>label`` header is added.
- ``STS-B/train.tsv``, ``dev.tsv``: the STS Benchmark's ``sts-{train,dev}.csv`` (5,749 and 1,500 pairs), GLUE's STS-B,
  in GLUE's ten columns (index, genre, filename, year, old_index, source1, source2, sentence1, sentence2, score;
  source1/2 are the benchmark's extra columns where a row has them, else ``none``).
- ``MRPC/train.tsv``, ``dev.tsv``: **not GLUE's split.** GLUE's MRPC dev set is 408 pairs taken out of the MSR
  Paraphrase training file by its ``dev_ids.tsv``, which is not available offline. Here train is the whole MSR training
  file (4,076 pairs: GLUE's 3,668 plus its 408 dev pairs) and dev is the MSR **test** file (1,725 pairs), the corpus's
  own held-out set. Figures on it are MRPC test figures, not comparable with GLUE dev ones; the results record the
  sizes (dev 1,725, not 408), and ``OUTPUT/README.md`` says so.

``--max-train-rows`` / ``--max-dev-rows`` keep the first rows of each file (the repository's samples in
``tests/fixtures/glue`` were written with 48 and 30 from the shared data).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from data_files import SHARED_DATA, require_files

REPO = Path(__file__).resolve().parents[1]
OUTPUT = REPO / "outputs" / "glue_data"
STSB_HEADER = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore"
MRPC_HEADER = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"
README = """\
# SST-2, MRPC and STS-B in GLUE's layout, from offline copies

Written by benchmarks/glue_data.py of contrastive_hf. SST-2 and STS-B are GLUE's train and dev sets. MRPC is not GLUE's
split: train is the whole MSR Paraphrase training file (4,076 pairs) and dev.tsv is the MSR test file (1,725 pairs),
because GLUE's dev_ids.tsv (408 dev pairs taken out of the training file) is not available offline. MRPC figures on
this folder are MSR test figures, not comparable with GLUE dev figures.
"""


def _lines(path: Path) -> list[str]:
    with open(path, encoding="utf-8-sig") as handle:  # MSR's files start with a byte-order mark
        return [line.rstrip("\r\n") for line in handle if line.strip()]


def _write(path: Path, header: str, rows: list[str], limit: int | None) -> int:
    rows = rows[:limit] if limit is not None else rows
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as handle:
        handle.write("\n".join([header, *rows]) + "\n")
    return len(rows)


def _stsb_rows(path: Path) -> list[str]:
    rows = []
    for index, line in enumerate(_lines(path)):
        fields = line.split("\t")
        if len(fields) < 7:
            sys.exit(f"{path}:{index + 1}: {len(fields)} tab-separated fields, expected at least 7 (STS Benchmark).")
        genre, filename, year, old_index, score, sentence1, sentence2 = fields[:7]
        source1, source2 = (fields[7:9] + ["none", "none"])[:2]
        rows.append(
            "\t".join([str(index), genre, filename, year, old_index, source1, source2, sentence1, sentence2, score])
        )
    return rows


def arrange(senteval_dir: Path, stsb_dir: Path, output: Path, max_train: int | None, max_dev: int | None) -> dict:
    """Write SST-2, MRPC and STS-B in GLUE's layout under ``output``; returns ``{file: rows written}``."""
    sst = senteval_dir / "SST" / "binary"
    if not sst.is_dir() and (senteval_dir / "SST" / "Binary").is_dir():  # SentEval's name, and the shared copy's
        sst = senteval_dir / "SST" / "Binary"
    sources = {
        "SST-2/train.tsv": sst / "sentiment-train",
        "SST-2/dev.tsv": sst / "sentiment-dev",
        "MRPC/train.tsv": senteval_dir / "MRPC" / "msr_paraphrase_train.txt",
        "MRPC/dev.tsv": senteval_dir / "MRPC" / "msr_paraphrase_test.txt",
        "STS-B/train.tsv": stsb_dir / "sts-train.csv",
        "STS-B/dev.tsv": stsb_dir / "sts-dev.csv",
    }
    require_files(sources.values(), "--senteval-dir (SentEval's data/downstream: SST/binary, MRPC) and --stsb-dir")
    written = {}
    for target, source in sources.items():
        limit = max_train if target.endswith("train.tsv") else max_dev
        if target.startswith("SST-2"):
            header, rows = "sentence\tlabel", _lines(source)
        elif target.startswith("MRPC"):
            header, rows = MRPC_HEADER, _lines(source)[1:]  # MSR's own header, the same columns
        else:
            header, rows = STSB_HEADER, _stsb_rows(source)
        written[target] = _write(output / target, header, rows, limit)
    (output / "README.md").write_text(README, encoding="utf-8")
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", type=Path, default=OUTPUT, help=f"Where the GLUE folders go (default: {OUTPUT}).")
    parser.add_argument(
        "--senteval-dir",
        type=Path,
        default=SHARED_DATA / "senteval",
        help="SentEval's data/downstream (SST/binary, MRPC); default: ../shared/data/senteval.",
    )
    parser.add_argument(
        "--stsb-dir",
        type=Path,
        default=SHARED_DATA / "sts" / "stsbenchmark",
        help="The STS Benchmark's folder (sts-train.csv, sts-dev.csv); default: ../shared/data/sts/stsbenchmark.",
    )
    parser.add_argument("--max-train-rows", type=int, default=None, help="Keep the first N rows of each train file.")
    parser.add_argument("--max-dev-rows", type=int, default=None, help="Keep the first N rows of each dev file.")
    args = parser.parse_args()
    written = arrange(args.senteval_dir, args.stsb_dir, args.output, args.max_train_rows, args.max_dev_rows)
    for target, rows in written.items():
        print(f"{os.path.join(args.output, target)}: {rows} rows")
    print(f"MRPC's dev.tsv is the MSR test set, not GLUE's dev split ({args.output / 'README.md'}).")


if __name__ == "__main__":
    main()
