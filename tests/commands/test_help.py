"""Every entry point answers ``--help``: each example script and each ``contrastive-hf`` sub-command exits with
status 0 and lists its own key flags. argparse %-formats every help string, so one bare ``%`` in any argument
dataclass a script reads (its own, the package's shared ones, the training arguments) breaks ``--help`` for it.

In process: a script is run as ``python examples/run_x.py --help`` runs it (`runpy`, as ``__main__``), which costs
the imports once for all of them instead of seconds per subprocess."""

from __future__ import annotations

import runpy
import sys

import pytest

from contrastive_hf.commands import cli

from conftest import REPO_ROOT

# Each entry point and flags that are its own (or that it shares with the package, such as --logging_steps, whose
# help string once held a bare %).
SCRIPT_FLAGS = {
    "run_clear": ("--augmentations", "--del_word_probability", "--lora_r", "--temperature", "--logging_steps"),
    "run_simcse": ("--mode", "--pair_columns", "--train_files", "--do_mlm", "--query_prompt", "--lora_r"),
    "run_dpr": ("--passage_model_name_or_path", "--share_encoders", "--max_passage_length", "--lora_r"),
    "run_declutr": ("--span_view", "--span_words", "--hard_negatives", "--lora_r"),
    "run_sg_bert": ("--loss", "--regularization_weight", "--freeze_embeddings", "--lora_r"),
    "run_multitask": ("--sst_dir", "--mrpc_dir", "--stsb_dir", "--mrpc_head", "--lora_modules_to_save"),
}
COMMAND_FLAGS = {
    (): ("evaluate", "plot", "mine"),
    ("evaluate",): ("--tasks", "--data-dir", "--stsb-file", "--backend", "--sts-aggregation"),
    ("plot",): ("inputs", "--output-dir"),
    ("mine",): ("--model", "--num-negatives", "--margin", "--max-candidates", "--duplicate-threshold"),
}
ENTRY_POINTS = [(f"examples/{script}.py", flags) for script, flags in SCRIPT_FLAGS.items()]
ENTRY_POINTS += [(" ".join(("contrastive-hf", *command)), flags) for command, flags in COMMAND_FLAGS.items()]


def help_of(entry_point: str, monkeypatch, capsys) -> tuple[object, str]:
    """The exit status and standard output of ``<entry_point> --help``."""
    if entry_point.startswith("examples/"):
        script = str(REPO_ROOT / entry_point)
        monkeypatch.setattr(sys, "argv", [script, "--help"])
        monkeypatch.syspath_prepend(str(REPO_ROOT / "examples"))
        run = lambda: runpy.run_path(script, run_name="__main__")  # noqa: E731
    else:
        command = entry_point.split()[1:]
        run = lambda: cli.main([*command, "--help"])  # noqa: E731
    with pytest.raises(SystemExit) as exit_:
        run()
    return exit_.value.code, capsys.readouterr().out


@pytest.mark.parametrize(("entry_point", "flags"), ENTRY_POINTS, ids=[entry for entry, _ in ENTRY_POINTS])
def test_every_entry_point_answers_help_with_its_own_flags(entry_point, flags, monkeypatch, capsys):
    status, output = help_of(entry_point, monkeypatch, capsys)
    assert status in (0, None), output
    missing = [flag for flag in flags if flag not in output]
    assert not missing, f"{entry_point} --help does not list {missing}:\n{output}"
