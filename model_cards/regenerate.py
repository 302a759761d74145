#!/usr/bin/env python
"""Regenerate model_cards/: the model card each recipe's example script writes, from a short run of the script.

Usage, from the repository root (a few minutes on a CPU; offline)::

    HF_HUB_OFFLINE=1 .venv/bin/python model_cards/regenerate.py

Each recipe's script trains a tiny encoder (``examples/demo/encoder_config.json``) for 2 steps on the repository's
own samples, in a temporary folder, as a user would run it. Its card (``README.md``) is copied to
``model_cards/<recipe>.md``, and what the card was rendered from (the run's `ModelCardInfo`, the saved model's class
and configuration) to ``model_cards/<recipe>.json``. tests/hub/test_model_cards.py renders every card again from its
``.json`` with the current code and compares it with the ``.md``: a change to the template or to what a card says
shows in review as a change of these files (run this script and commit them).
"""

from __future__ import annotations

import dataclasses
import json
import os
import runpy
import shutil
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
CARDS = REPO_ROOT / "model_cards"
DEMO = REPO_ROOT / "examples" / "demo"
SAMPLES = REPO_ROOT / "tests" / "fixtures"
STSB_DEV = SAMPLES / "sts" / "stsbenchmark" / "sts-dev.csv"

# The run of each card: the script and its flags (a tiny encoder from scratch, 2 steps, the shipped data).
TINY = ["--config_name", str(DEMO / "encoder_config.json"), "--tokenizer_name", str(DEMO / "tokenizer")]
SHORT = ["--max_steps", "2", "--per_device_train_batch_size", "8", "--report_to", "none", "--save_strategy", "no",
         "--use_cpu", "true", "--seed", "0", "--disable_tqdm", "true"]  # fmt: skip
RUNS = {
    "clear": ("run_clear.py", [*TINY, "--train_file", str(DEMO / "data" / "wiki1m_sample.txt"),
                               "--max_train_samples", "64", "--augmentations", "del_word", "--pooler_type", "mean",
                               "--stsb_dev_file", str(STSB_DEV)]),
    "simcse-unsup": ("run_simcse.py", ["--mode", "unsup", *TINY, "--train_file",
                                       str(DEMO / "data" / "wiki1m_sample.txt"), "--max_train_samples", "64",
                                       "--stsb_dev_file", str(STSB_DEV)]),
    "simcse-sup": ("run_simcse.py", ["--mode", "sup", *TINY, "--train_file", str(DEMO / "data" / "nli_sample.csv"),
                                     "--max_train_samples", "64", "--stsb_dev_file", str(STSB_DEV)]),
    "declutr": ("run_declutr.py", [*TINY, "--train_file", str(DEMO / "data" / "enwiki_paragraphs_sample.txt"),
                                   "--max_train_samples", "64", "--span_words", "16", "--stsb_dev_file",
                                   str(STSB_DEV)]),
    # SG-BERT tunes a pretrained encoder: the tiny one, saved as one ({encoder} below)
    "sg-bert": ("run_sg_bert.py", ["--model_name_or_path", "{encoder}", "--train_file",
                                   str(DEMO / "data" / "wiki1m_sample.txt"), "--max_train_samples", "64",
                                   "--stsb_dev_file", str(STSB_DEV)]),
    "dpr": ("run_dpr.py", [*TINY, "--train_file", str(DEMO / "data" / "nli_sample.csv"), "--query_column", "sent0",
                           "--positive_column", "sent1", "--hard_negative_column", "hard_neg",
                           "--max_passage_length", "64", "--max_train_samples", "64", "--eval_size", "32"]),
}  # fmt: skip


def record_cards(records: list) -> None:
    """Record, as every card is written, what it is rendered from."""
    import contrastive_hf.training.trainer as trainer_module
    from contrastive_hf.hub import model_card

    write = trainer_module.write_model_card

    def recording(output_dir, model, info):
        fixed = dataclasses.replace(  # the card names the machine and libraries of this run, kept in the record
            info, hardware=model_card._hardware(info.world_size, info.zero_stage),
            frameworks=model_card._framework_versions(),
        )  # fmt: skip
        config = model.config.to_dict()
        config.pop("_name_or_path", None)  # where this run's tiny encoder lay: a temporary folder
        records.append({"model_class": type(model).__name__, "config": config, "info": dataclasses.asdict(fixed)})
        return write(output_dir, model, fixed)

    trainer_module.write_model_card = recording


def tiny_encoder(folder: str) -> str:
    """The demo's tiny encoder, with random weights, saved as a pretrained checkpoint with the demo's tokenizer."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    torch.manual_seed(0)
    BertModel(BertConfig.from_json_file(DEMO / "encoder_config.json")).save_pretrained(folder)
    AutoTokenizer.from_pretrained(DEMO / "tokenizer").save_pretrained(folder)
    return folder


def main() -> None:
    records: list = []
    record_cards(records)
    for name, (script, argv) in RUNS.items():
        with tempfile.TemporaryDirectory() as scratch:
            output_dir = os.path.join(scratch, f"{name}-tiny")  # the card names the model after its folder
            if "{encoder}" in argv:
                argv = [tiny_encoder(os.path.join(scratch, "encoder")) if a == "{encoder}" else a for a in argv]
            sys.argv = [script, *argv, *SHORT, "--output_dir", output_dir]
            records.clear()
            runpy.run_path(str(REPO_ROOT / "examples" / script), run_name="__main__")
            shutil.copyfile(os.path.join(output_dir, "README.md"), CARDS / f"{name}.md")
        (CARDS / f"{name}.json").write_text(json.dumps(records[-1], indent=2) + "\n")
        print(f"model_cards/{name}.md and .json written")


if __name__ == "__main__":
    main()
