"""Checkpoints saved by contrastive_hf 0.1 (before the package moved into wings) load and embed as they did."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModel

import contrastive_hf
from contrastive_hf import ContrastiveModel, DualEncoderModel
from contrastive_hf.models.transformers_compat import SubConfigSpec

OLD = Path(__file__).parent / "data" / "checkpoints_0_1"
EXPECTED = load_file(OLD / "expected_embeddings.safetensors")
INPUT_IDS = EXPECTED["input_ids"]
ATTENTION_MASK = (INPUT_IDS != 0).long()


@pytest.mark.parametrize("name", ["contrastive_cls", "contrastive_mean_projected"])
def test_a_0_1_contrastive_checkpoint_loads_with_automodel_and_embeds_the_same(name):
    model = AutoModel.from_pretrained(OLD / name).eval()
    assert isinstance(model, ContrastiveModel)
    with torch.no_grad():
        embeddings = model(input_ids=INPUT_IDS, attention_mask=ATTENTION_MASK).pooler_output
    torch.testing.assert_close(embeddings, EXPECTED[name], rtol=0, atol=1e-6)


def test_a_0_1_dual_encoder_checkpoint_loads_and_embeds_the_same():
    model = AutoModel.from_pretrained(OLD / "dual_encoder").eval()
    assert isinstance(model, DualEncoderModel)
    with torch.no_grad():
        queries = model.embed_queries(INPUT_IDS, ATTENTION_MASK)
        passages = model.embed_passages(INPUT_IDS, ATTENTION_MASK)
    torch.testing.assert_close(queries, EXPECTED["dual_encoder_queries"], rtol=0, atol=1e-6)
    torch.testing.assert_close(passages, EXPECTED["dual_encoder_passages"], rtol=0, atol=1e-6)


@pytest.mark.skipif(
    SubConfigSpec is None,
    reason="the modeling code a 0.1 checkpoint ships imports SubConfigSpec, which transformers has from 5.20 on; "
    "on older releases load 0.1 checkpoints with contrastive_hf (the tests above)",
)
def test_a_0_1_checkpoint_still_loads_with_its_own_shipped_code_where_contrastive_hf_is_absent(tmp_path):
    """trust_remote_code runs the modeling files the 0.1 checkpoint carries, in a process that cannot import us."""
    script = textwrap.dedent(
        f"""
        import sys
        sys.modules["contrastive_hf"] = None  # importing it would fail
        import torch
        from safetensors.torch import load_file
        from transformers import AutoModel
        expected = load_file({str(OLD / "expected_embeddings.safetensors")!r})
        ids = expected["input_ids"]
        model = AutoModel.from_pretrained({str(OLD / "contrastive_cls")!r}, trust_remote_code=True).eval()
        with torch.no_grad():
            out = model(input_ids=ids, attention_mask=(ids != 0).long()).pooler_output
        torch.testing.assert_close(out, expected["contrastive_cls"], rtol=0, atol=1e-6)
        print("ok", type(model).__module__)
        """
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "modules")}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith("ok transformers_modules")


def test_the_0_1_module_paths_still_import_with_a_warning_naming_the_new_one():
    with pytest.warns(FutureWarning, match="contrastive_hf.training_args moved to contrastive_hf.training"):
        from contrastive_hf.training_args import ContrastiveTrainingArguments
    assert ContrastiveTrainingArguments is contrastive_hf.ContrastiveTrainingArguments
    # a 0.1 training_args.bin pickles the class under its old path: unpickling finds the same class
    import pickle

    restored = pickle.loads(
        pickle.dumps(ContrastiveTrainingArguments, protocol=2).replace(
            b"contrastive_hf.training.training_args", b"contrastive_hf.training_args"
        )
    )
    assert restored is ContrastiveTrainingArguments
