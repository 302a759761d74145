"""README's Python blocks run as pasted: each is run in a fresh interpreter, in a folder holding the repository's
`examples/` and, where README loads the demo's checkpoint (`outputs/clear-demo`), a tiny one saved there."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import torch
from transformers import AutoTokenizer

from contrastive_hf import ContrastiveConfig, ContrastiveForPreTraining

from conftest import DEMO_TOKENIZER, REPO_ROOT, tiny_bert_config

README = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"^```python\n(.*?)^```", README, flags=re.MULTILINE | re.DOTALL)


def test_readme_has_python_blocks():
    assert len(BLOCKS) >= 5


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("readme")
    (folder / "examples").symlink_to(REPO_ROOT / "examples")
    tokenizer = AutoTokenizer.from_pretrained(DEMO_TOKENIZER)
    torch.manual_seed(0)
    model = ContrastiveForPreTraining(
        ContrastiveConfig(encoder=tiny_bert_config(vocab_size=len(tokenizer)), pooler_type="mean")
    )
    model.save_pretrained(folder / "outputs" / "clear-demo")
    tokenizer.save_pretrained(folder / "outputs" / "clear-demo")
    return folder


@pytest.mark.parametrize("index", range(len(BLOCKS)), ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_readme_python_block_runs_as_pasted(workdir, index):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, "-c", BLOCKS[index]], capture_output=True, text=True, env=env, cwd=workdir, timeout=600
    )
    assert result.returncode == 0, f"README block {index}:\n{BLOCKS[index]}\n{result.stderr[-3000:]}"
