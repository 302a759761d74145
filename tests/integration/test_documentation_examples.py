"""The Python blocks of README and of the documentation's pages (docs/) run as pasted: each in a process of its own,
forked from an interpreter that imported only the third-party libraries (tests/scripts/run_blocks.py: the start-up
paid once), with a fresh namespace, in a folder holding the repository's `examples/` and, where a block loads the
demo's checkpoint (`outputs/clear-demo`), a tiny one saved there, with a LoRA adapter on it (`outputs/lora-run`)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import torch
from transformers import AutoTokenizer

from contrastive_hf import ContrastiveConfig, ContrastiveForPreTraining
from contrastive_hf.hub.adapters import add_adapter, lora_config

from conftest import DEMO_TOKENIZER, REPO_ROOT, tiny_bert_config

# its module-scoped launch (the blocks' interpreter) runs once, on one pytest-xdist worker (--dist loadgroup)
pytestmark = pytest.mark.xdist_group("documentation_examples")

PAGES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md"))]
BLOCKS = [
    (page.relative_to(REPO_ROOT), block)
    for page in PAGES
    for block in re.findall(r"^```python\n(.*?)^```", page.read_text(encoding="utf-8"), flags=re.MULTILINE | re.DOTALL)
]


def test_readme_and_the_guides_have_python_blocks():
    pages = {str(page) for page, _ in BLOCKS}
    assert "README.md" in pages and len(BLOCKS) >= 5


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
    # a LoRA adapter on it, as a --lora_r run saves one (its base named relative to the folder the run started in)
    started_in = os.getcwd()
    os.chdir(folder)
    try:
        base = ContrastiveForPreTraining.from_pretrained("outputs/clear-demo")
        add_adapter(base, lora_config(base, r=4)).save_pretrained("outputs/lora-run")
        tokenizer.save_pretrained("outputs/lora-run")
    finally:
        os.chdir(started_in)
    return folder


@pytest.fixture(scope="module")
def block_results(workdir) -> list[dict]:
    """Every block of `BLOCKS` run by tests/scripts/run_blocks.py: its exit status and output, in order."""
    (workdir / "blocks.json").write_text(json.dumps([block for _, block in BLOCKS]))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    command = [sys.executable, str(REPO_ROOT / "tests" / "scripts" / "run_blocks.py"), str(workdir / "blocks.json"),
               str(workdir), str(workdir / "results.json")]  # fmt: skip
    subprocess.run(command, check=True, env=env, cwd=workdir, timeout=1200)
    return json.loads((workdir / "results.json").read_text())


@pytest.mark.parametrize("index", range(len(BLOCKS)), ids=[f"{page}-{i}" for i, (page, _) in enumerate(BLOCKS)])
def test_a_python_block_runs_as_pasted(block_results, index):
    page, block = BLOCKS[index]
    result = block_results[index]
    assert result["status"] == 0, f"{page}:\n{block}\n{result['output'][-3000:]}"
