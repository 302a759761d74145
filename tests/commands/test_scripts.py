"""What the example scripts share (contrastive_hf.commands: arguments, errors, run_end): reading their arguments,
the errors a user sees for a mistyped flag or a missing file, and the before/after summary of a run."""

from __future__ import annotations

import json
import sys

import pytest
from transformers import HfArgumentParser

from contrastive_hf.commands.arguments import CorpusArguments, EncoderArguments, parse_arguments
from contrastive_hf.commands.errors import UsageError, run_script
from contrastive_hf.commands.run_end import format_before_after
from contrastive_hf.training.training_args import ContrastiveTrainingArguments

from conftest import DEMO_DATA, usage_error


def parser() -> HfArgumentParser:
    return HfArgumentParser((EncoderArguments, CorpusArguments, ContrastiveTrainingArguments))


def error_of(argv: list[str], capsys) -> str:
    """What the script prints when ``argv`` is refused: it exits with status 2, as argparse does."""
    with pytest.raises(SystemExit) as exit_:
        parse_arguments(parser(), argv)
    assert exit_.value.code == 2
    return capsys.readouterr().err


def test_a_mistyped_flag_gets_a_short_usage_line_and_the_closest_flag(capsys):
    error = error_of(["--max_seq_lenght", "16", "--output_dir", "out", "--sed", "1"], capsys)
    usage, message = error.splitlines()
    assert usage.startswith("usage: ") and "SETTINGS.json" in usage and len(usage) < 150  # not every flag
    assert message.endswith(
        "error: unrecognized argument(s) --max_seq_lenght (did you mean --max_seq_length?), --sed (did you mean "
        "--seed?)."
    )


def test_a_mistyped_json_key_is_named_with_the_closest_key(tmp_path, capsys):
    settings = tmp_path / "run.json"
    settings.write_text(json.dumps({"output_dir": "out", "max_seq_lenght": 16}))
    assert f"{settings}: unknown key(s) 'max_seq_lenght' (did you mean 'max_seq_length'?)" in error_of(
        [str(settings)], capsys
    )
    assert "settings file not found: nope.json" in error_of(["nope.json"], capsys)
    settings.write_text("[1, 2]")
    assert "must hold one JSON object of settings" in error_of([str(settings)], capsys)


def test_flags_after_a_json_file_override_it(tmp_path):
    settings = tmp_path / "run.json"
    settings.write_text(json.dumps({"output_dir": "out", "max_seq_length": 16, "seed": 3}))
    _, corpus, training = parse_arguments(parser(), [str(settings), "--seed", "7"])
    assert (corpus.max_seq_length, training.seed, training.output_dir) == (16, 7, "out")
    _, corpus, training = parse_arguments(parser(), [str(settings)])
    assert (corpus.max_seq_length, training.seed) == (16, 3)


def test_recipe_defaults_apply_under_what_is_given(tmp_path):
    settings = tmp_path / "run.json"
    settings.write_text(json.dumps({"output_dir": "out", "seed": 3}))
    defaults = {"seed": 5, "learning_rate": 1e-4}
    for argv in ([str(settings)], ["--output_dir", "out", "--seed", "3"]):
        *_, training = parse_arguments(parser(), argv, defaults=defaults)
        assert (training.seed, training.learning_rate) == (3, 1e-4)


def test_defaults_that_follow_a_given_setting_read_it_from_the_flags_or_the_settings_file(tmp_path):
    """As SimCSE's follow its --mode: the function gets what the flags and the file set, typed, and nothing else."""
    settings = tmp_path / "run.json"
    settings.write_text(json.dumps({"output_dir": "out", "seed": 3}))
    given = []

    def by_seed(settings_given):
        given.append(dict(settings_given))
        return {"learning_rate": 1e-4 if settings_given.get("seed") == 3 else 2e-4}

    rates = []
    for argv in ([str(settings)], ["--output_dir", "out", "--seed", "3"], [str(settings), "--seed", "4"]):
        *_, training = parse_arguments(parser(), argv, defaults=by_seed)
        rates.append(training.learning_rate)
    assert rates == [1e-4, 1e-4, 2e-4]
    assert given == [{"output_dir": "out", "seed": 3}] * 2 + [{"output_dir": "out", "seed": 4}]


def test_defaults_for_what_is_not_an_argument_are_a_bug_of_the_recipe():
    with pytest.raises(ValueError, match=r"Defaults for \['span_words'\], which are not arguments of this script"):
        parse_arguments(parser(), ["--output_dir", "out"], defaults={"span_words": 8})


def test_local_files_that_do_not_exist_are_refused_before_anything_loads(tmp_path, capsys):
    missing = str(tmp_path / "corpus.txt")
    error = error_of(["--train_file", missing, "--output_dir", "out"], capsys)
    assert f"error: --train_file {missing}: no such file or folder" in error
    error = error_of(["--model_name_or_path", "./my-model", "--output_dir", "out"], capsys)
    assert "--model_name_or_path ./my-model: no such file or folder" in error
    # a Hub id (at most one slash) is left to transformers, which looks it up on the Hub
    sentences = str(DEMO_DATA / "wiki1m_sample.txt")
    encoder, corpus, _ = parse_arguments(
        parser(), ["--model_name_or_path", "org/model", "--train_file", sentences, "--output_dir", "out"]
    )
    assert (encoder.model_name_or_path, corpus.train_file) == ("org/model", sentences)


def test_a_missing_task_folder_of_run_multitask_is_one_line(tmp_path, capsys):
    from contrastive_hf.recipes.multitask.run import ARGUMENTS

    multitask = HfArgumentParser(ARGUMENTS)
    folder = tmp_path / "SST" / "binary"
    with pytest.raises(SystemExit):
        parse_arguments(multitask, ["--model_name_or_path", "m", "--sst_dir", str(folder), "--output_dir", "o"])
    assert f"error: --sst_dir {folder}: no such file or folder" in capsys.readouterr().err


def test_run_script_prints_usage_errors_and_missing_files_as_one_line(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["run_clear.py"])

    def missing_file():
        open("/nonexistent/corpus.txt")

    def usage_error():
        raise UsageError("give --stsb_dev_file")

    for main, message in (
        (missing_file, "[Errno 2] No such file or directory: '/nonexistent/corpus.txt'"),
        (usage_error, "give --stsb_dev_file"),
    ):
        with pytest.raises(SystemExit) as exit_:
            run_script(main)
        assert exit_.value.code == 2
        assert capsys.readouterr().err == f"run_clear.py: error: {message}\n"  # one line, no traceback

    def bug():
        raise RuntimeError("a bug keeps its traceback")

    with pytest.raises(RuntimeError):
        run_script(bug)


@pytest.mark.parametrize(
    "script,argv,message",
    [
        ("run_clear", [], "Give --tokenizer_name (or --model_name_or_path, whose tokenizer is then used)."),
        ("run_simcse", ["--mode", "unsup"], "Give --tokenizer_name"),
        (
            "run_simcse",
            ["--mode", "sup", "--train_files", "nli=nli.csv", "--dataset_name", "snli"],
            "Give --train_files (several datasets) or --train_file / --dataset_name, not both.",
        ),
        ("run_declutr", [], "Give --tokenizer_name"),
        ("run_dpr", [], "Give --tokenizer_name"),
        ("run_sg_bert", [], "SG-BERT tunes a pretrained encoder: give --model_name_or_path"),
        ("run_multitask", ["--model_name_or_path", "m"], "No task to train on: give at least one of --sst_dir"),
    ],
)
def test_every_scripts_main_ends_a_usage_mistake_with_one_line_and_status_2(script, argv, message, tmp_path, capsys):
    """``main(argv)`` in process, as the command runs it (`exit_on_usage_error`): the line names the script."""
    error = usage_error(script, [*argv, "--output_dir", str(tmp_path), "--report_to", "none"], capsys)
    assert error.startswith(f"{script}.py: error: {message}") and len(error.splitlines()) == 1


def test_before_and_after_are_printed_side_by_side():
    after = {"stsb_spearman": 82.4612, "stsb_alignment": 0.31234}
    before = {"stsb_spearman": 79.7328, "stsb_alignment": 0.25}
    assert format_before_after(after, before) == (
        "Before and after training:\n"
        "  stsb_spearman   79.73 -> 82.46  (+2.73)\n"
        "  stsb_alignment  0.2500 -> 0.3123  (+0.0623)"
    )
    assert format_before_after({"held_out_mrr": 0.5}) == "After training:\n  held_out_mrr  0.5000"
    # a retrieval evaluation's counts name what was scored, once, instead of "300.00 -> 300.00 (+0.00)" rows
    after = {"recall@1": 0.7433, "mrr": 0.8201, "queries": 300, "passages": 599}
    before = {"recall@1": 0.7633, "mrr": 0.8343, "queries": 300, "passages": 599}
    assert format_before_after(after, before) == (
        "Before and after training (300 queries, 599 passages):\n"
        "  recall@1  0.7633 -> 0.7433  (-0.0200)\n"
        "  mrr       0.8343 -> 0.8201  (-0.0142)"
    )


def test_max_train_samples_cuts_the_corpus_before_it_is_tokenized(tmp_path, tokenizer, monkeypatch):
    from contrastive_hf.commands.loaders import load_sentences
    from contrastive_hf.data import tokenizing as tokenizing_module

    lines = (DEMO_DATA / "wiki1m_sample.txt").read_text(encoding="utf-8").splitlines()[:200]
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(lines[:3] + ["", "  "] + lines[3:]) + "\n", encoding="utf-8")  # 2 empty lines early
    training = ContrastiveTrainingArguments(output_dir=str(tmp_path), report_to="none")
    tokenized_rows = []
    tokenize_corpus = tokenizing_module.tokenize_corpus

    def counting(corpus, *args, **kwargs):
        tokenized_rows.append(len(corpus))
        return tokenize_corpus(corpus, *args, **kwargs)

    monkeypatch.setattr(tokenizing_module, "tokenize_corpus", counting)
    whole = load_sentences(CorpusArguments(train_file=str(path), max_seq_length=24), tokenizer, training)
    first = load_sentences(
        CorpusArguments(train_file=str(path), max_seq_length=24, max_train_samples=10), tokenizer, training
    )
    assert tokenized_rows == [202, 12]  # the 10 lines asked for and the 2 empty lines among them
    assert first[:] == whole.select(range(10))[:]  # the same examples, with the same identities


def test_deepspeed_s_first_build_on_the_cpu_is_announced_once(tmp_path, monkeypatch, capsys):
    """DeepSpeed compiles its CPU communication op on first use, for a minute or more, without a word: the scripts
    say so before it starts, and only when it has not been built yet."""
    from contrastive_hf.commands.logs import DEEPSPEED_CPU_OP, announce_first_deepspeed_build

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    monkeypatch.delenv("RANK", raising=False)
    announce_first_deepspeed_build([])
    assert "DeepSpeed compiles its CPU communication op on first use" in capsys.readouterr().out
    built = tmp_path / "py311_cpu" / DEEPSPEED_CPU_OP
    built.mkdir(parents=True)
    (built / f"{DEEPSPEED_CPU_OP}.so").write_bytes(b"")
    announce_first_deepspeed_build([])
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "false")
    (built / f"{DEEPSPEED_CPU_OP}.so").unlink()
    announce_first_deepspeed_build([])  # no DeepSpeed in this run
    assert capsys.readouterr().out == ""


def test_deepspeed_s_flood_of_torch_deprecations_is_filtered_and_nothing_else(recwarn):
    """torch 2.13 warns at every call of the collectives DeepSpeed 0.19 calls in each ZeRO step (hundreds of lines
    per process); those two messages are filtered, any other warning still shows."""
    import warnings

    from contrastive_hf.training.trainer import quiet_deepspeed_deprecations

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        quiet_deepspeed_deprecations()
        for name in ("reduce_scatter_tensor", "all_gather_into_tensor"):
            warnings.warn(
                f"`torch.distributed.{name}` is deprecated. Please use ... instead.", FutureWarning, stacklevel=2
            )
        warnings.warn("`torch.distributed.broadcast` is deprecated.", FutureWarning, stacklevel=2)
        warnings.warn("contrastive_hf's own warning", UserWarning, stacklevel=2)
    assert [str(w.message) for w in recwarn] == [
        "`torch.distributed.broadcast` is deprecated.", "contrastive_hf's own warning"
    ]  # fmt: skip
