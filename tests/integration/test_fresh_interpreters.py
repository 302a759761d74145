"""Checks that need a fresh interpreter: what importing the package loads; checkpoints that load where contrastive_hf
cannot be imported (sentence-transformers alone, a 0.1 checkpoint's own code); the card texts only the imported
recipes have registered."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from contrastive_hf import ContrastiveForPreTraining
from contrastive_hf.models.transformers_compat import SubConfigSpec

from conftest import CHECKPOINTS_0_1, tiny_bert_config
from helpers.builders import make_dual_encoder, tiny_multitask_model

# The start of a script run where contrastive_hf cannot be imported: sentence-transformers alone reads the checkpoint.
WITHOUT_THE_PACKAGE = textwrap.dedent(
    """
    import sys
    import numpy as np

    class BlockPackage:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] == "contrastive_hf":
                raise ImportError("contrastive_hf is blocked in this test")

    sys.meta_path.insert(0, BlockPackage())
    from sentence_transformers import SentenceTransformer
    """
)


def test_importing_the_package_does_not_import_the_trainer_datasets_or_the_evaluation_stack():
    """The trainer, datasets and evaluation modules load on first use, not with `import contrastive_hf`."""
    code = (
        "import sys, contrastive_hf\n"
        "heavy = ['contrastive_hf.training.trainer', 'datasets', 'contrastive_hf.evaluation', 'matplotlib']\n"
        "print([name for name in heavy if name in sys.modules])\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]", result.stdout


def test_a_contrastive_checkpoint_loads_in_sentence_transformers_where_the_package_cannot_be_imported(
    tmp_path, tokenizer
):
    """No remote code: sentence-transformers reads the encoder, pooling and projection from the files alone."""
    model = ContrastiveForPreTraining.from_config(
        tiny_bert_config(), pooler_type="mean", projection_at_inference=True
    ).eval()
    model.resize_token_embeddings(len(tokenizer))
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    sentences = ["a man is playing a guitar .", "the cat sat"]
    expected = model.encode(sentences, tokenizer=tokenizer)
    np.save(tmp_path / "expected.npy", expected)
    script = WITHOUT_THE_PACKAGE + textwrap.dedent(
        f"""

        model = SentenceTransformer({str(tmp_path)!r}, device="cpu")  # no trust_remote_code
        assert "contrastive_hf" not in sys.modules
        np.save({str(tmp_path / "theirs.npy")!r}, model.encode({sentences!r}))
        """
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "modules")}
    subprocess.run([sys.executable, "-c", script], check=True, env=env, cwd=tmp_path)
    np.testing.assert_allclose(np.load(tmp_path / "theirs.npy"), expected, atol=1e-5)


@pytest.mark.parametrize("share_encoders", [False, True])
def test_a_dual_encoder_loads_in_sentence_transformers_where_the_package_cannot_be_imported(
    tmp_path, tokenizer, share_encoders
):
    """No remote code: one encoder, or two towers as a sentence-transformers Router (encode_query runs the query
    tower, encode_document the passage tower), with DPR's dot product as the similarity function."""
    model = make_dual_encoder(share_encoders=share_encoders, pooler_type="mean", projection_dim=8).eval()
    model.resize_token_embeddings(len(tokenizer))
    model.tokenizer = tokenizer
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    queries, passages = ["who wrote hamlet ?"], ["hamlet is a tragedy by shakespeare .", "the cat sat"]
    np.save(tmp_path / "queries.npy", model.encode_query(queries))
    np.save(tmp_path / "passages.npy", model.encode_document(passages))
    script = WITHOUT_THE_PACKAGE + textwrap.dedent(
        f"""

        model = SentenceTransformer({str(tmp_path)!r}, device="cpu")  # no trust_remote_code
        assert "contrastive_hf" not in sys.modules and model.similarity_fn_name == "dot"
        np.testing.assert_allclose(model.encode_query({queries!r}), np.load({str(tmp_path / "queries.npy")!r}),
                                   atol=1e-5)
        np.testing.assert_allclose(model.encode_document({passages!r}), np.load({str(tmp_path / "passages.npy")!r}),
                                   atol=1e-5)
        """
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]


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
        expected = load_file({str(CHECKPOINTS_0_1 / "expected_embeddings.safetensors")!r})
        ids = expected["input_ids"]
        model = AutoModel.from_pretrained({str(CHECKPOINTS_0_1 / "contrastive_cls")!r}, trust_remote_code=True).eval()
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


def test_each_recipe_registers_its_card_text_when_imported():
    """The card code imports no recipe by name and `import contrastive_hf` imports none: each recipe registers its
    text when imported (building its collator or model imports it), and a card naming a method not registered yet
    (CLEAR or SimCSE, named by the core's collators) imports the recipes through the registry's finder."""
    code = (
        "import json, sys\n"
        "from contrastive_hf.hub.model_card import METHODS, method_card\n"
        "print(json.dumps(sorted(METHODS)))\n"
        "from contrastive_hf.recipes.dpr import QueryPassageCollator\n"
        "from contrastive_hf.recipes.sg_bert.data import SelfGuidedCollator\n"
        "print(json.dumps(sorted(METHODS)))\n"
        "print(json.dumps('contrastive_hf.recipes.declutr' in sys.modules))\n"
        "print(json.dumps(method_card('CLEAR')['citation_short']))\n"
        "print(json.dumps(sorted(METHODS)))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300)
    on_import, after_recipes, declutr_loaded, clear_citation, after_card = map(json.loads, result.stdout.splitlines())
    assert on_import == []
    assert after_recipes == ["DPR", "SG-BERT"]
    assert declutr_loaded is False  # nothing imported DeCLUTR, so nothing registered it
    assert clear_citation == "Wu et al., 2020"  # a card naming CLEAR: every recipe imported and registered
    assert after_card == ["CLEAR", "DPR", "DeCLUTR", "SG-BERT", "SimCSE", "Supervised SimCSE"]


def test_a_multitask_checkpoint_loads_with_automodel_after_importing_the_package_alone(tokenizer, tmp_path):
    """The multitask model lives with the other model types in models/: `import contrastive_hf` registers it with the
    Auto classes, and no recipe is imported for it."""
    tiny_multitask_model(tokenizer).save_pretrained(tmp_path / "multitask")
    code = (
        "import sys, contrastive_hf\n"
        "from transformers import AutoModel\n"
        f"model = AutoModel.from_pretrained({str(tmp_path / 'multitask')!r})\n"
        "print(type(model).__name__, [spec.name for spec in model.config.task_specs],\n"
        "      'contrastive_hf.recipes.multitask' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "MultitaskModel ['sst', 'mrpc', 'stsb'] False"
