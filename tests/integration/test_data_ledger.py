"""Every example exactly once per epoch: a data ledger over every reader of the example scripts, in 1 and 2 processes,
fresh and resumed from a checkpoint in the middle of an epoch.

Each text of row N of the training files begins with the word ``ledgerN``; `scripts/ledger.py` runs the scripts and
records, for every batch a collator builds, the ``ledgerN`` numbers of each example (decoded from its token ids). The
tests count those numbers against the files, trusting nothing of the library's own bookkeeping: each epoch of a
map-style reader holds every row once, plus what is documented and counted (the rows accelerate repeats to complete
the last batch of each process, the pairs DPR holds out for evaluation, the skipped empty lines); each pass of a
stream holds every line of the reader's part once, the parts of the processes cover the corpus, and a pass is
reshuffled; a resumed run reads exactly what the uninterrupted one did from its checkpoint on; every process stops
at the same step; and the log says what each epoch or pass held.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from conftest import DEMO_DATA, DEMO_TOKENIZER, REPO_ROOT, free_port, tiny_bert_config

# its module-scoped launches run once, on one pytest-xdist worker (make test: --dist loadgroup)
pytestmark = pytest.mark.xdist_group("data_ledger")

BATCH = 4  # per process
TIMEOUT = 900  # seconds for all the jobs of one launch

# what each job's files hold: the row ids trained on
TEXT_ROWS = 45  # text.txt: 45 tagged lines and 3 empty ones
STREAM_ROWS = 360  # stream.txt: about 36 KB, 9 byte ranges
HUB_ROWS = 2 * 60  # hub/: two parquet files, the shards of a Hub-style dataset
PAIR_ROWS = 40  # pairs.csv (sent0, sent1), triplets.jsonl (query, positive, negative_1..3), mined.csv
DPR_ROWS, DPR_HELD_OUT = 45, 5  # dpr.csv: the first 5 pairs are held out for evaluation
MIXTURE_TEXT_FIRST, MIXTURE_TEXT_ROWS = 1000, 30  # mixture: pairs.csv and text of ids 1000-1029
DOCUMENT_ROWS = 30  # documents.txt: Wikipedia paragraphs, about 30 KB (7 byte ranges when streamed)


def _sentences(count: int, start: int = 0) -> list[str]:
    lines = [line for line in (DEMO_DATA / "wiki1m_sample.txt").read_text().splitlines() if 40 < len(line) < 90]
    return lines[start : start + count]


def _write_data(folder: Path) -> dict[str, Path]:
    """The training files, every text of row N starting with ``ledgerN``."""
    import pandas as pd

    folder.mkdir(parents=True, exist_ok=True)
    files = {}
    text = [f"ledger{i} {sentence}" for i, sentence in enumerate(_sentences(TEXT_ROWS))]
    files["text"] = folder / "text.txt"
    files["text"].write_text(
        "\n".join(text[:10] + [""] + text[10:20] + ["  "] + text[20:30] + [""] + text[30:]) + "\n"
    )
    stream = [f"ledger{i} {sentence}" for i, sentence in enumerate(_sentences(STREAM_ROWS, 100))]
    files["stream"] = folder / "stream.txt"
    files["stream"].write_text("\n".join(stream) + "\n")
    hub = folder / "hub"
    hub.mkdir(exist_ok=True)
    half = HUB_ROWS // 2
    for part in range(2):
        rows = [f"ledger{i} {s}" for i, s in enumerate(_sentences(half, 500 + part * half), start=part * half)]
        pd.DataFrame({"text": rows}).to_parquet(hub / f"train-{part:05d}-of-00002.parquet")
    files["hub"] = hub
    nli = pd.read_csv(DEMO_DATA / "nli_sample.csv").dropna()
    pairs = nli.iloc[:PAIR_ROWS]
    files["pairs"] = folder / "pairs.csv"
    _tagged(pairs, ("sent0", "sent1")).to_csv(files["pairs"], index=False)
    files["triplets"] = folder / "triplets.jsonl"
    with files["triplets"].open("w") as handle:
        for i, row in enumerate(nli.iloc[100 : 100 + PAIR_ROWS].itertuples()):
            negatives = {
                f"negative_{k}": f"ledger{i} {text}"
                for k, text in enumerate(nli.hard_neg.iloc[200 + 3 * i : 203 + 3 * i], 1)
            }
            handle.write(
                json.dumps({"query": f"ledger{i} {row.sent0}", "positive": f"ledger{i} {row.sent1}", **negatives})
                + "\n"
            )
    dpr = nli.iloc[300 : 300 + DPR_ROWS]
    files["dpr"] = folder / "dpr.csv"
    _tagged(dpr, ("sent0", "sent1", "hard_neg")).to_csv(files["dpr"], index=False)
    mixture_text = [f"ledger{i} {s}" for i, s in enumerate(_sentences(MIXTURE_TEXT_ROWS, 800), MIXTURE_TEXT_FIRST)]
    files["mixture_text"] = folder / "mixture_text.txt"
    files["mixture_text"].write_text("\n".join(mixture_text) + "\n")
    paragraphs = [
        p for p in (DEMO_DATA / "enwiki_paragraphs_sample.txt").read_text().splitlines() if len(p.split()) > 120
    ]
    files["documents"] = folder / "documents.txt"
    files["documents"].write_text("\n".join(f"ledger{i} {p}" for i, p in enumerate(paragraphs[:DOCUMENT_ROWS])) + "\n")
    return files


def _tagged(frame, columns):
    """The ``columns`` of a data frame, each text of row N starting with ``ledgerN``."""
    import pandas as pd

    return pd.DataFrame({name: [f"ledger{i} {text}" for i, text in enumerate(frame[name])] for name in columns})


def _mine(files: dict[str, Path], folder: Path) -> Path:
    """``contrastive-hf mine`` over pairs.csv with a tiny model: a mined file (query, positive, negative_1, negative_2)
    whose negatives are other rows' positives."""
    import torch
    from transformers import AutoTokenizer

    from contrastive_hf import ContrastiveConfig, ContrastiveModel
    from contrastive_hf.commands.cli import main as cli

    torch.manual_seed(0)
    model = ContrastiveModel(ContrastiveConfig(encoder=tiny_bert_config(), pooler_type="mean"))
    model.save_pretrained(folder / "miner")
    AutoTokenizer.from_pretrained(DEMO_TOKENIZER).save_pretrained(folder / "miner")
    mined = folder / "mined.csv"
    status = cli(["mine", str(files["pairs"]), "--model", str(folder / "miner"), "--output", str(mined),
                  "--num-negatives", "2", "--margin", "-10", "--device", "cpu"])  # fmt: skip
    assert status == 0
    return mined


def _jobs(files: dict[str, Path], processes: int, folder: Path) -> dict[str, dict]:
    """The jobs of one launch: each reader, then the same run resumed from its mid-epoch checkpoint."""
    encoder = folder / "encoder.json"
    config = tiny_bert_config().to_dict()
    config["model_type"] = "bert"
    encoder.write_text(json.dumps(config))
    common = ["--config_name", str(encoder), "--tokenizer_name", str(DEMO_TOKENIZER),
              "--per_device_train_batch_size", str(BATCH), "--report_to", "none", "--use_cpu", "true",
              "--logging_steps", "1", "--save_strategy", "steps", "--seed", "0"]  # fmt: skip

    def map_style(*rows: int) -> list[str]:  # rows: of each dataset, batched on its own
        steps = sum(math.ceil(count / (BATCH * processes)) for count in rows)  # per epoch (even_batches)
        return ["--num_train_epochs", "2", "--save_steps", str(steps + steps // 2 + 1)]  # mid-epoch 2

    def streamed(rows: int) -> list[str]:
        steps = math.ceil(2.6 * rows / (BATCH * processes))  # more than 2 passes of any process's part
        return ["--streaming", "true", "--max_steps", str(steps), "--save_steps", str(steps // 2)]

    sup = ["--mode", "sup", "--pooler_type", "mean", "--max_seq_length", "24"]
    jobs = {
        "text": ("examples/run_clear.py", ["--train_file", str(files["text"]), "--max_seq_length", "24",
                                           *map_style(TEXT_ROWS)]),
        "text_stream": ("examples/run_clear.py", ["--train_file", str(files["stream"]), "--max_seq_length", "24",
                                                  *streamed(STREAM_ROWS)]),
        "hub_stream": ("examples/run_clear.py", ["--dataset_name", str(files["hub"]), "--max_seq_length", "24",
                                                 *streamed(HUB_ROWS)]),
        "pairs": ("examples/run_simcse.py", [*sup, "--train_file", str(files["pairs"]), *map_style(PAIR_ROWS)]),
        "triplets": ("examples/run_simcse.py", [*sup, "--train_file", str(files["triplets"]),
                                                *map_style(PAIR_ROWS)]),
        "mined": ("examples/run_simcse.py", [*sup, "--train_file", str(files["mined"]), *map_style(PAIR_ROWS)]),
        "mixture": ("examples/run_simcse.py", [*sup, "--train_files",
                                               f"nli={files['pairs']},wiki={files['mixture_text']}",
                                               *map_style(PAIR_ROWS, MIXTURE_TEXT_ROWS)]),
        "dpr": ("examples/run_dpr.py", ["--train_file", str(files["dpr"]), "--query_column", "sent0",
                                        "--positive_column", "sent1", "--hard_negative_column", "hard_neg",
                                        "--eval_size", str(DPR_HELD_OUT), "--max_query_length", "24",
                                        "--max_passage_length", "24", *map_style(DPR_ROWS - DPR_HELD_OUT)]),
        "documents": ("examples/run_declutr.py", ["--train_file", str(files["documents"]), "--span_words", "8",
                                                  "--max_seq_length", "32", *map_style(DOCUMENT_ROWS)]),
        "documents_stream": ("examples/run_declutr.py", ["--train_file", str(files["documents"]),
                                                         "--span_words", "8", "--max_seq_length", "32",
                                                         *streamed(DOCUMENT_ROWS)]),
    }  # fmt: skip
    result = {}
    for name, (script, argv) in jobs.items():
        full = folder / f"{name}-full"
        result[name] = {"script": script, "argv": [*common, *argv, "--output_dir", str(full)]}
        save_steps = int(argv[argv.index("--save_steps") + 1])
        result[f"{name}-resumed"] = {
            "script": script,
            "argv": [*common, *argv, "--output_dir", str(folder / f"{name}-resumed"),
                     "--resume_from_checkpoint", str(full / f"checkpoint-{save_steps}")],
        }  # fmt: skip
    return result


def _launch(processes: int, folder: Path) -> dict:
    """Run every job in ``processes`` processes; the ledgers, logs and trainer states."""
    folder.mkdir(parents=True, exist_ok=True)
    files = _write_data(folder / "data")
    files["mined"] = _mine(files, folder / "data")
    jobs = _jobs(files, processes, folder)
    jobs_file = folder / "jobs.json"
    jobs_file.write_text(json.dumps([{"name": name, **job} for name, job in jobs.items()]))
    harness = [str(REPO_ROOT / "tests" / "scripts" / "ledger.py"), str(jobs_file), str(folder)]
    if processes == 1:
        command = [sys.executable, *harness]
    else:
        command = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes",
                   str(processes), "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
                   "--main_process_port", str(free_port()), *harness]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=folder, timeout=TIMEOUT)
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-6000:]
    return {"folder": folder, "log": log, "jobs": jobs, "files": files, "processes": processes}


# ----------------------------------------------------------------------------------------------------
# Reading the ledgers
# ----------------------------------------------------------------------------------------------------

MAP_STYLE = {  # job: (the rows each epoch must hold, the column naming a row: None for each dataset's first)
    "text": (range(TEXT_ROWS), "input_ids"),
    "pairs": (range(PAIR_ROWS), "sent0"),
    "triplets": (range(PAIR_ROWS), "query"),
    "mined": (range(PAIR_ROWS), "query"),
    "mixture": ([*range(PAIR_ROWS), *range(MIXTURE_TEXT_FIRST, MIXTURE_TEXT_FIRST + MIXTURE_TEXT_ROWS)], None),
    "dpr": (range(DPR_ROWS), "query"),  # less the 5 pairs held out at random for evaluation
    "documents": (range(DOCUMENT_ROWS), "input_ids"),
}
STREAMS = {"text_stream": range(STREAM_ROWS), "hub_stream": range(HUB_ROWS), "documents_stream": range(DOCUMENT_ROWS)}


def _batches(run: dict, job: str, rank: int) -> list[dict]:
    path = run["folder"] / f"{job}.rank{rank}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def _row_id(row: dict, column: str | None) -> int:
    """The id of a row: the ``ledgerN`` of its naming column (of its first column holding one, for a mixture), and
    every other text of the row is of the same row (a mined file's negatives excepted: other rows' positives)."""
    ids = {name: found for name, found in row.items() if found}
    column = column or next(iter(ids))
    (row_id,) = ids[column]
    for name, found in ids.items():
        assert name.startswith("negative") or found == [row_id], row
    return row_id


def _job_log(run: dict, job: str, rank: int = 0) -> str:
    return (run["folder"] / f"{job}.rank{rank}.log").read_text()


def _counts_logged(log: str) -> list[str]:
    return re.findall(r"contrastive_hf\.data_counts - (.*?)(?:\r|\n|$)", log)


def _assert_same_step_everywhere(run: dict, job: str) -> None:
    """Every process trained the same steps: as many batches read, and the run's final step saved."""
    lengths = {len(_batches(run, job, rank)) for rank in range(run["processes"])}
    assert len(lengths) == 1, (job, lengths)
    state = json.loads((run["folder"] / f"{job}-full" / "trainer_state.json").read_text())
    resumed = json.loads((run["folder"] / f"{job}-resumed" / "trainer_state.json").read_text())
    assert state["global_step"] == resumed["global_step"] == state["max_steps"]


def check_map_style(run: dict, job: str) -> None:
    expected, column = MAP_STYLE[job]
    processes = run["processes"]
    ranks = [_batches(run, job, rank) for rank in range(processes)]
    logged = [line for line in _counts_logged(_job_log(run, job)) if line.startswith("Epoch")]
    held_out = None
    for epoch in (0, 1):
        ids = Counter(_row_id(row, column) for batches in ranks for batch in batches if batch["epoch"] == epoch
                      for row in batch["rows"])  # fmt: skip
        if job == "dpr":  # the pairs held out (at random) are the same in each epoch, and as many as logged
            held_out = held_out or set(MAP_STYLE[job][0]) - set(ids)
            assert set(MAP_STYLE[job][0]) - set(ids) == held_out and len(held_out) == DPR_HELD_OUT
            assert f"Retrieval evaluation: {DPR_HELD_OUT} held-out questions" in _job_log(run, job)
            expected = sorted(set(expected) - held_out)
        assert set(ids) == set(expected), (job, epoch, sorted(set(expected) ^ set(ids)))
        repeated = sum(ids.values()) - len(expected)
        # only accelerate's completion of each process's last batch (even_batches) repeats rows, and only with
        # several processes: fewer than a global batch, each at most once more
        assert 0 <= repeated < (BATCH * processes if processes > 1 else 1), (job, epoch, repeated)
        assert max(ids.values()) <= 2
        size = len(expected)
        if repeated:
            assert logged[epoch].startswith(f"Epoch {epoch + 1}: {size + repeated:,} examples, the {size:,} of the "
                                            f"training set once and {repeated:,} of them again"), logged  # fmt: skip
        else:
            assert logged[epoch] == f"Epoch {epoch + 1}: {size:,} examples, all {size:,} of the training set once."
    # resumed in the middle of epoch 2: the rest of the uninterrupted run's batches, in its order
    save_steps = int(run["jobs"][job]["argv"][run["jobs"][job]["argv"].index("--save_steps") + 1])
    for rank, batches in enumerate(ranks):
        resumed = _batches(run, f"{job}-resumed", rank)
        assert resumed == batches[save_steps:], (job, rank)
    resumed_log = _counts_logged(_job_log(run, f"{job}-resumed"))
    steps_per_epoch = len(ranks[0]) // 2
    resumed_examples = sum(len(batch["rows"]) for batches in ranks for batch in batches[save_steps:])
    assert resumed_log == [f"Epoch 2 (resumed after {save_steps - steps_per_epoch} of its {steps_per_epoch} batches "
                           f"per process): {resumed_examples:,} examples."]  # fmt: skip
    _assert_same_step_everywhere(run, job)


def check_stream(run: dict, job: str) -> None:
    processes = run["processes"]
    parts = []
    for rank in range(processes):
        ids = [_row_id(row, "input_ids") for batch in _batches(run, job, rank) for row in batch["rows"]]
        who = "the whole stream" if processes == 1 else f"process {rank} of {processes} "
        passes = [line for line in _counts_logged(_job_log(run, job, rank)) if line.startswith("Read pass")]
        counts = {int(line.rsplit(": ", 1)[1].split()[0].replace(",", "")) for line in passes if who in line}
        assert len(counts) == 1 and len(passes) >= 2, passes  # at least 2 passes read, of one length
        count = counts.pop()
        first, second = ids[:count], ids[count : 2 * count]
        assert len(set(first)) == count  # a pass: every example of the part once
        assert sorted(second) == sorted(first) and second != first  # then the same part, reshuffled
        parts.append(set(first))
        # resumed: the uninterrupted run's stream (the skipped batches are read again, then trained on)
        resumed = [
            _row_id(row, "input_ids") for batch in _batches(run, f"{job}-resumed", rank) for row in batch["rows"]
        ]
        common = min(len(resumed), len(ids))
        assert resumed[:common] == ids[:common] and common >= len(ids) - 2 * BATCH
    assert sorted(i for part in parts for i in part) == list(STREAMS[job])  # the parts: the corpus, split
    _assert_same_step_everywhere(run, job)


@pytest.fixture(scope="module", params=[1, 2], ids=["1-process", "2-processes"])
def run(request, tmp_path_factory):
    return _launch(request.param, tmp_path_factory.mktemp(f"ledger-{request.param}"))


@pytest.mark.parametrize("job", list(MAP_STYLE))
def test_each_epoch_holds_every_row_once(run, job):
    check_map_style(run, job)


@pytest.mark.parametrize("job", list(STREAMS))
def test_each_pass_of_a_stream_holds_every_line_of_the_process_s_part_once(run, job):
    check_stream(run, job)


def test_empty_lines_are_skipped_and_counted(run):
    assert "Skipped 3 empty line(s) of 48 in the corpus." in _job_log(run, "text")
