"""Every example exactly once per epoch: a data ledger over every reader of the example scripts, in 1 and 2 processes,
with 0 and 2 dataloader workers, fresh and resumed from a checkpoint in the middle of an epoch; and a resume with
another number of processes, batch size, gradient accumulation, streaming or dataloader workers, a grown corpus,
another seed or other views refused before it trains (run_multitask's as run_clear's), or resumed anyway with
--resume_with_changed_data, saying what the epoch skips.

Each text of row N of the training files begins with the word ``ledgerN``; `scripts/ledger.py` runs the scripts and
records, for every batch the trainer takes to train on, in order, the ``ledgerN`` numbers of each example (decoded
from its token ids where the collator built the batch). The tests count those numbers against the files, trusting
nothing of the library's own bookkeeping: each epoch of a map-style reader holds every row once, plus what is
documented and counted (the rows accelerate repeats to complete the last batch of each process, the pairs DPR holds
out for evaluation, the skipped empty lines); each reader of a stream (a process, or each of its dataloader workers,
whose batches the dataloader takes in turn) reads its part whole each pass, reshuffled, its parts hold as many lines
(one more in the first ones), and a global pass (one pass of every reader) holds every line of the corpus once, as
the log counts it; a resumed run trains on exactly what the uninterrupted one did from its checkpoint on; every
process stops at the same step; and the log says what each epoch or pass held.
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

from conftest import DEMO_DATA, DEMO_TOKENIZER, REPO_ROOT, TEST_DATA, free_port, tiny_bert_config

# its module-scoped launches run once, on one pytest-xdist worker (make test: --dist loadgroup)
pytestmark = pytest.mark.xdist_group("data_ledger")

BATCH = 4  # per process
STREAM_BATCH = 16  # per process, streamed: the same passes in fewer steps
WORKERS = 2  # the dataloader workers of the jobs named <reader>-workers
TIMEOUT = 1200  # seconds for all the jobs of one launch

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


def _common_arguments(folder: Path) -> list[str]:
    """Every job's: a tiny BERT from a config, the demo tokenizer, BATCH examples per process, a checkpoint saved at
    ``--save_steps``."""
    encoder = folder / "encoder.json"
    config = tiny_bert_config().to_dict()
    config["model_type"] = "bert"
    encoder.write_text(json.dumps(config))
    return ["--config_name", str(encoder), "--tokenizer_name", str(DEMO_TOKENIZER),
            "--per_device_train_batch_size", str(BATCH), "--report_to", "none", "--use_cpu", "true",
            "--logging_steps", "1", "--save_strategy", "steps", "--seed", "0"]  # fmt: skip


def _jobs(files: dict[str, Path], processes: int, folder: Path) -> dict[str, dict]:
    """The jobs of one launch: each reader with and without dataloader workers, then the same run resumed from its
    mid-epoch checkpoint (a map-style reader's without workers, whose only job there is collating)."""
    common = _common_arguments(folder)

    def map_style(*rows: int) -> list[str]:  # rows: of each dataset, batched on its own
        steps = sum(math.ceil(count / (BATCH * processes)) for count in rows)  # per epoch (even_batches)
        return ["--num_train_epochs", "2", "--save_steps", str(steps + steps // 2 + 1)]  # mid-epoch 2

    def streamed(rows: int) -> list[str]:
        steps = math.ceil(2.6 * rows / (STREAM_BATCH * processes))  # more than 2 passes of any process's part
        return ["--streaming", "true", "--per_device_train_batch_size", str(STREAM_BATCH), "--max_steps", str(steps),
                "--save_steps", str(steps // 2)]  # fmt: skip

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
    for base, (script, argv) in jobs.items():
        for name, workers in ((base, []), (f"{base}-workers", ["--dataloader_num_workers", str(WORKERS)])):
            full = folder / f"{name}-full"
            result[name] = {"script": script, "argv": [*common, *argv, *workers, "--output_dir", str(full)]}
            if workers and base not in STREAMS:  # map-style: the workers only collate; its resume is the one above
                continue
            save_steps = int(argv[argv.index("--save_steps") + 1])
            result[f"{name}-resumed"] = {
                "script": script,
                "argv": [*common, *argv, *workers, "--output_dir", str(folder / f"{name}-resumed"),
                         "--resume_from_checkpoint", str(full / f"checkpoint-{save_steps}")],
            }  # fmt: skip
    return result


def _run_jobs(processes: int, folder: Path, jobs: dict[str, dict], files: dict[str, Path]) -> dict:
    """Run ``jobs`` in ``processes`` processes, in ``folder``; the ledgers, logs and trainer states."""
    jobs_file = folder / f"jobs-{processes}.json"
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
STREAM_SHARDS = {"hub_stream": 2}  # the shards of a stream that is not cut for its readers: its parquet files


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
    """Every process trained the same steps: as many batches, and the final step saved (the resumed run's too)."""
    lengths = {len(_batches(run, job, rank)) for rank in range(run["processes"])}
    assert len(lengths) == 1, (job, lengths)
    state = json.loads((run["folder"] / f"{job}-full" / "trainer_state.json").read_text())
    assert state["global_step"] == state["max_steps"] == lengths.pop()
    if f"{job}-resumed" in run["jobs"]:
        resumed = json.loads((run["folder"] / f"{job}-resumed" / "trainer_state.json").read_text())
        assert resumed["global_step"] == state["max_steps"]


def _save_steps(run: dict, job: str) -> int:
    argv = run["jobs"][job]["argv"]
    return int(argv[argv.index("--save_steps") + 1])


def check_map_style(run: dict, job: str) -> None:
    reader = job.removesuffix("-workers")
    expected, column = MAP_STYLE[reader]
    processes = run["processes"]
    ranks = [_batches(run, job, rank) for rank in range(processes)]
    logged = [line for line in _counts_logged(_job_log(run, job)) if line.startswith("Epoch")]
    held_out = None
    for epoch in (0, 1):
        ids = Counter(_row_id(row, column) for batches in ranks for batch in batches if batch["epoch"] == epoch
                      for row in batch["rows"])  # fmt: skip
        if reader == "dpr":  # the pairs held out (at random) are the same in each epoch, and as many as logged
            held_out = held_out or set(MAP_STYLE[reader][0]) - set(ids)
            assert set(MAP_STYLE[reader][0]) - set(ids) == held_out and len(held_out) == DPR_HELD_OUT
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
    _assert_same_step_everywhere(run, job)
    if f"{job}-resumed" not in run["jobs"]:
        return
    # resumed in the middle of epoch 2: the rest of the uninterrupted run's batches, in its order
    save_steps = _save_steps(run, job)
    for rank, batches in enumerate(ranks):
        resumed = _batches(run, f"{job}-resumed", rank)
        assert resumed == batches[save_steps:], (job, rank)
    resumed_log = _counts_logged(_job_log(run, f"{job}-resumed"))
    steps_per_epoch = len(ranks[0]) // 2
    resumed_examples = sum(len(batch["rows"]) for batches in ranks for batch in batches[save_steps:])
    assert resumed_log == [f"Epoch 2 (resumed after {save_steps - steps_per_epoch} of its {steps_per_epoch} batches "
                           f"per process): {resumed_examples:,} examples."]  # fmt: skip


def _stream_readers(run: dict, job: str) -> tuple[int, int]:
    """``(processes, dataloader workers per process)`` that read a stream job's parts: a stream of fewer shards than
    readers gets fewer workers (`prepare_streaming`)."""
    processes = run["processes"]
    workers = WORKERS if job.endswith("-workers") else 1
    shards = STREAM_SHARDS.get(job.removesuffix("-workers"))
    while workers > 1 and shards is not None and processes * workers > shards:
        workers -= 1
    return processes, workers


def _reader(processes: int, workers: int, rank: int, worker: int) -> str:
    """How the log names a reader's part (`stream_passes`)."""
    if processes * workers == 1:
        return "the whole stream"
    who = f"process {rank} of {processes}"
    return (who + (f", dataloader worker {worker} of {workers}" if workers > 1 else "")) + " ("


def check_stream(run: dict, job: str) -> None:
    corpus = list(STREAMS[job.removesuffix("-workers")])
    processes, workers = _stream_readers(run, job)
    readers = processes * workers
    passes = {}  # reader: (its part's size, as logged; the passes it trained on, each a list of ids)
    for rank in range(processes):
        logged = [line for line in _counts_logged(_job_log(run, job, rank)) if line.startswith("Read pass")]
        batches = _batches(run, job, rank)
        for worker in range(workers):  # the dataloader takes a batch from each worker in turn
            ids = [_row_id(row, "input_ids") for batch in batches[worker::workers] for row in batch["rows"]]
            who = _reader(processes, workers, rank, worker)
            counts = {int(line.rsplit(": ", 1)[1].split()[0].replace(",", "")) for line in logged if who in line}
            assert len(counts) == 1, (job, who, logged)  # every pass of a reader: its whole part
            count = counts.pop()
            reader_passes = [ids[start : start + count] for start in range(0, len(ids) - count + 1, count)]
            assert len(reader_passes) >= 2, (job, who, len(ids), count)
            first, second = reader_passes[:2]
            assert len(set(first)) == count  # a pass: every example of the part once
            assert sorted(second) == sorted(first) and second != first  # then the same part, reshuffled
            passes[(rank, worker)] = (count, reader_passes)
    # a global pass, one pass of every reader: every line of the corpus once, as the logged counts add up
    assert sum(count for count, _ in passes.values()) == len(corpus)
    for global_pass in range(2):
        seen = Counter(i for _, reader_passes in passes.values() for i in reader_passes[global_pass])
        assert sorted(seen) == corpus and set(seen.values()) == {1}, (job, global_pass)
    # in lockstep: parts of as many lines, so that the first ceil(lines / readers) examples of every reader hold every
    # line of the corpus, fewer than ``readers`` of them twice
    sizes = [count for count, _ in passes.values()]
    assert max(sizes) - min(sizes) <= 1, (job, sizes)
    share = -(-len(corpus) // readers)
    lockstep = Counter(i for _, reader_passes in passes.values() for i in sum(reader_passes, [])[:share])
    assert set(lockstep) == set(corpus) and sum(lockstep.values()) - len(corpus) < readers, job
    if readers > 1 and job.removesuffix("-workers") not in STREAM_SHARDS:  # cut by lines, as the log says once
        plan = [line for line in _counts_logged(_job_log(run, job)) if line.startswith("Streaming")]
        who = f"{processes} process{'es' if processes > 1 else ''}"
        who += f" x {workers} dataloader workers" if workers > 1 else ""
        sizes_text = " or ".join(f"{size:,}" for size in sorted(set(sizes)))
        assert plan == [
            f"Streaming {len(corpus):,} lines in {readers} parts of {sizes_text} lines, one per reader ({who}): a "
            "global pass, one pass of every part in lockstep, reads each line once."
        ], plan
    _assert_same_step_everywhere(run, job)
    if f"{job}-resumed" in run["jobs"]:  # resumed: the rest of the uninterrupted run's batches, in its order
        for rank in range(processes):
            assert _batches(run, f"{job}-resumed", rank) == _batches(run, job, rank)[_save_steps(run, job) :], rank


@pytest.fixture(scope="module")
def launches(tmp_path_factory) -> dict[int, dict]:
    """Two launches run every job: one process runs the readers' jobs (`_jobs`) and saves the checkpoints that
    `_layout_jobs` resumes with another layout, then 2 processes run the readers' jobs and the resumes on another
    number of processes. ``{processes: the launch's ledgers, logs and trainer states}``."""
    folder = tmp_path_factory.mktemp("ledger")
    files = _write_data(folder / "data")
    files["mined"] = _mine(files, folder / "data")
    (folder / "layout").mkdir()
    layout = _layout_jobs(folder / "layout", files)
    runs = {}
    for processes in (1, 2):
        (folder / f"{processes}").mkdir()
        jobs = {**_jobs(files, processes, folder / f"{processes}"), **layout[processes]}
        runs[processes] = _run_jobs(processes, folder / f"{processes}", jobs, files)
    return runs


@pytest.fixture(params=[1, 2], ids=["1-process", "2-processes"])
def run(request, launches):
    return launches[request.param]


@pytest.mark.parametrize("job", [*MAP_STYLE, *(f"{job}-workers" for job in MAP_STYLE)])
def test_each_epoch_holds_every_row_once(run, job):
    check_map_style(run, job)


@pytest.mark.parametrize("job", [*STREAMS, *(f"{job}-workers" for job in STREAMS)])
def test_each_pass_of_a_stream_holds_every_line_of_the_reader_s_part_once_and_a_global_pass_every_line(run, job):
    """The reported defects: with 2 dataloader workers each worker read about half of its part per pass (the log
    reporting whole passes), and 2 processes in lockstep reached 1,194 of 1,200 lines in a global pass (parts of
    unequal line counts)."""
    check_stream(run, job)


def test_empty_lines_are_skipped_and_counted(run):
    assert "Skipped 3 empty line(s) of 48 in the corpus." in _job_log(run, "text")


# ----------------------------------------------------------------------------------------------------
# A resume with another data layout: refused before training
# ----------------------------------------------------------------------------------------------------

SAVED_STEP = 5  # the checkpoint resumed, in the first epoch


GROWN_ROWS = 8  # grown.txt: text.txt and 8 more rows


def _layout_jobs(folder: Path, files: dict[str, Path]) -> dict[int, dict[str, dict]]:
    """Checkpoints of two 1-process runs of run_clear (map-style, streamed) and one of run_multitask, each resumed
    with another data layout: in 1 process with another batch size, gradient accumulation, streaming on or off,
    dataloader workers, a grown corpus, another seed or other views (and the grown corpus resumed anyway), and in 2
    processes. ``{processes: {job: ...}}``, the jobs named ``layout-<name>``."""
    common = _common_arguments(folder)
    text = ["--train_file", str(files["text"]), "--max_seq_length", "24", "--save_steps", str(SAVED_STEP)]
    map_style = [*text, "--num_train_epochs", "1"]
    streamed = [*text, "--streaming", "true", "--max_steps", "10"]
    grown = folder / "grown.txt"
    more = (f"ledger{TEXT_ROWS + i} {sentence}" for i, sentence in enumerate(_sentences(GROWN_ROWS, 900)))
    grown.write_text(files["text"].read_text() + "\n".join(more) + "\n")
    grown_style = [*map_style, "--train_file", str(grown)]

    def job(name: str, argv: list[str], resume: str | None = None, status: int = 0) -> dict:
        resumed = ["--resume_from_checkpoint", str(folder / resume / f"checkpoint-{SAVED_STEP}")] if resume else []
        argv = [*common, *argv, "--output_dir", str(folder / name), *resumed]
        return {"script": "examples/run_clear.py", "argv": argv, "status": status}

    def multitask(name: str, resume: str | None = None, status: int = 0) -> dict:
        resumed = ["--resume_from_checkpoint", str(folder / resume / f"checkpoint-{SAVED_STEP}")] if resume else []
        argv = [
            "--model_name_or_path", str(_encoder_folder(folder)),
            "--sst_dir", str(TEST_DATA / "senteval" / "SST" / "Binary"),
            "--mrpc_dir", str(TEST_DATA / "senteval" / "MRPC"),
            "--max_train_samples", "24", "--max_eval_samples", "8", "--max_seq_length", "24",
            "--max_steps", str(SAVED_STEP + 1), "--save_strategy", "steps", "--save_steps", str(SAVED_STEP),
            "--per_device_train_batch_size", str(BATCH), "--report_to", "none", "--use_cpu", "true",
            "--output_dir", str(folder / name), *resumed,
        ]  # fmt: skip
        return {"script": "examples/run_multitask.py", "argv": argv, "status": status}

    one_process = {
        "saved": job("saved", map_style),
        "saved_stream": job("saved_stream", streamed),
        "batch": job("batch", [*map_style, "--per_device_train_batch_size", "8"], "saved", 2),
        "accumulation": job("accumulation", [*map_style, "--gradient_accumulation_steps", "2"], "saved", 2),
        "streaming_on": job("streaming_on", streamed, "saved", 2),
        "streaming_off": job("streaming_off", map_style, "saved_stream", 2),
        "workers": job("workers", [*streamed, "--dataloader_num_workers", str(WORKERS)], "saved_stream", 2),
        "grown": job("grown", grown_style, "saved", 2),
        "seed": job("seed", [*map_style, "--seed", "7"], "saved", 2),
        "views": job("views", [*map_style, "--augmentations", "reorder"], "saved", 2),
        "grown_anyway": job("grown_anyway", [*grown_style, "--resume_with_changed_data", "true"], "saved"),
        "multitask_saved": multitask("multitask_saved"),
    }
    two_processes = {
        "processes": job("processes", map_style, "saved", 2),
        "processes_stream": job("processes_stream", streamed, "saved_stream", 2),
        "multitask_processes": multitask("multitask_processes", "multitask_saved", 2),
    }
    return {
        processes: {f"layout-{name}": job for name, job in jobs.items()}
        for processes, jobs in ((1, one_process), (2, two_processes))
    }


def _encoder_folder(folder: Path) -> Path:
    """A tiny BERT encoder with the demo tokenizer, saved as a pretrained model (run_multitask starts from one)."""
    from transformers import AutoTokenizer, BertModel

    saved = folder / "encoder_model"
    if not saved.exists():
        tokenizer = AutoTokenizer.from_pretrained(DEMO_TOKENIZER)
        BertModel(tiny_bert_config(vocab_size=len(tokenizer))).save_pretrained(saved)
        tokenizer.save_pretrained(saved)
    return saved


REFUSALS = {  # job: (the processes it ran in, its checkpoint, what changed, the settings to give back)
    "batch": (1, "saved", "--per_device_train_batch_size 4 -> 8", "--per_device_train_batch_size 4"),
    "accumulation": (1, "saved", "--gradient_accumulation_steps 1 -> 2", "--gradient_accumulation_steps 1"),
    "streaming_on": (1, "saved", "--streaming False -> True", "--streaming false"),
    "streaming_off": (1, "saved_stream", "--streaming True -> False", "--streaming true"),
    "workers": (1, "saved_stream", "--dataloader_num_workers (each worker reads its own part of the stream) 0 -> 2",
                "--dataloader_num_workers 0"),
    "processes": (2, "saved", "processes (world size) 1 -> 2", "accelerate launch --num_processes 1"),
    "processes_stream": (2, "saved_stream", "processes (world size) 1 -> 2", "accelerate launch --num_processes 1"),
    "grown": (1, "saved", f"training rows {TEXT_ROWS} -> {TEXT_ROWS + GROWN_ROWS}",
              f"the same training data ({TEXT_ROWS} rows: the same files and --max_train_samples)"),
    "seed": (1, "saved", "--seed 0 -> 7", "--seed 0"),
    "views": (1, "saved", "views (--augmentations) 'del_word' -> 'reorder'", "its views (del_word)"),
    "multitask_processes": (2, "multitask_saved", "processes (world size) 1 -> 2",
                            "accelerate launch --num_processes 1"),
}  # fmt: skip


@pytest.mark.parametrize("job", list(REFUSALS))
def test_a_resume_with_another_data_layout_is_refused_before_training(launches, job):
    """The reported defect: a 1-process checkpoint resumed on 2 processes trained on, skipping rows (the checkpoint's
    step count, in batches of the new size: 16 of an epoch of 64 never trained, exit status 0, no warning); so did a
    changed batch size, and turning streaming on or off was not noticed. Each such resume now stops before training
    with a one-line error naming the old and new values and what to do."""
    processes, saved, changed, restore = REFUSALS[job]
    run = launches[processes]
    folder = launches[1]["folder"].parent / "layout"
    checkpoint = folder / saved / f"checkpoint-{SAVED_STEP}"
    script = "run_multitask.py" if saved.startswith("multitask") else "run_clear.py"
    if script == "run_clear.py":
        assert len(_batches(launches[1], f"layout-{saved}", 0)) == (10 if saved == "saved_stream" else 12)  # trained
    for rank in range(processes):
        log = _job_log(run, f"layout-{job}", rank)
        assert (
            f"{script}: error: Cannot resume from {checkpoint} with other data than it was trained with: {changed}. "
            f"The checkpoint counts where training is at step {SAVED_STEP} of its own batches; resumed on other "
            "batches, some examples of the epoch (or stream) would never be trained on and others twice, or seen "
            f"with other views. Resume with its settings ({restore}), or start a new run from its weights "
            f"(--model_name_or_path {checkpoint}, without --resume_from_checkpoint), or resume anyway with "
            "--resume_with_changed_data true (the log says what the epoch skips or repeats)."
        ) in log, log[-3000:]
        if script == "run_clear.py":
            assert _batches(run, f"layout-{job}", rank) == []  # nothing trained
    output = folder / job
    assert not list(output.glob("checkpoint-*")) and not (output / "trainer_state.json").exists()


def test_a_resume_anyway_onto_a_grown_corpus_says_what_its_epoch_skips_and_the_ledger_counts_it(launches):
    """--resume_with_changed_data: the run trains on, and its log gives the rows its epoch skips and repeats; the
    ledger counts what happened: of the grown corpus, the rows neither the saved run (before its checkpoint) nor the
    resumed run trained on, and the rows both did."""
    run = launches[1]
    folder = run["folder"].parent / "layout"
    checkpoint = folder / "saved" / f"checkpoint-{SAVED_STEP}"
    trained = SAVED_STEP * BATCH
    log = _job_log(run, "layout-grown_anyway")
    rows = TEXT_ROWS + GROWN_ROWS
    assert (
        f"Resuming from {checkpoint} with other data than it was trained with (--resume_with_changed_data): "
        f"training rows {TEXT_ROWS} -> {rows}. At step {SAVED_STEP} the saved run had trained {trained} of the "
        f"{TEXT_ROWS} rows of its epoch 1; this run skips the first {trained} of its {rows} rows in its own order "
        f"and trains the rest. In another order, up to {trained} rows go untrained this epoch and up to {trained} "
        f"train twice (about {trained * (1 - trained / rows):.0f} and {trained * (1 - trained / rows):.0f} for "
        "random orders)."
    ) in log, log[-3000:]
    saved = _batches(run, "layout-saved", 0)[:SAVED_STEP]
    before = [_row_id(row, "input_ids") for batch in saved for row in batch["rows"]]
    after = [_row_id(row, "input_ids") for batch in _batches(run, "layout-grown_anyway", 0) for row in batch["rows"]]
    untrained = set(range(rows)) - set(before) - set(after)
    twice = set(before) & set(after)
    assert len(after) == rows - trained  # the rest of the epoch
    assert 0 < len(untrained) <= trained and 0 < len(twice) <= trained  # what the log warned of, counted
