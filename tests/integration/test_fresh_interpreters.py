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

# its module-scoped fresh interpreter runs once, on one pytest-xdist worker (make test: --dist loadgroup)
pytestmark = pytest.mark.xdist_group("fresh_interpreters")

# One interpreter where contrastive_hf cannot be imported runs every case below, each in a function of its own (one
# failing does not stop the others), and records each one's outcome: "ok" or its traceback.
WITHOUT_THE_PACKAGE = textwrap.dedent(
    """
    import json, sys, traceback
    import numpy as np
    import torch

    class BlockPackage:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] == "contrastive_hf":
                raise ImportError("contrastive_hf is blocked in this test")

    sys.meta_path.insert(0, BlockPackage())
    from sentence_transformers import SentenceTransformer

    def contrastive(folder, sentences):
        model = SentenceTransformer(folder, device="cpu")  # no trust_remote_code
        np.testing.assert_allclose(model.encode(sentences), np.load(f"{folder}/expected.npy"), atol=1e-5)

    def dual_encoder(folder, queries, passages):
        model = SentenceTransformer(folder, device="cpu")  # no trust_remote_code
        assert model.similarity_fn_name == "dot"
        np.testing.assert_allclose(model.encode_query(queries), np.load(f"{folder}/queries.npy"), atol=1e-5)
        np.testing.assert_allclose(model.encode_document(passages), np.load(f"{folder}/passages.npy"), atol=1e-5)

    def checkpoint_0_1(folder, expected_file):
        from safetensors.torch import load_file
        from transformers import AutoModel

        expected = load_file(expected_file)
        ids = expected["input_ids"]
        model = AutoModel.from_pretrained(folder, trust_remote_code=True).eval()
        assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
        with torch.no_grad():
            out = model(input_ids=ids, attention_mask=(ids != 0).long()).pooler_output
        torch.testing.assert_close(out, expected["contrastive_cls"], rtol=0, atol=1e-6)

    outcomes = {}
    for name, case, arguments in json.loads(sys.argv[1]):
        try:
            globals()[case](*arguments)
            assert "contrastive_hf" not in sys.modules
            outcomes[name] = "ok"
        except Exception:
            outcomes[name] = traceback.format_exc()
    print(json.dumps(outcomes))
    """
)
SENTENCES = ["a man is playing a guitar .", "the cat sat"]
QUERIES, PASSAGES = ["who wrote hamlet ?"], ["hamlet is a tragedy by shakespeare .", "the cat sat"]


@pytest.fixture(scope="module")
def without_the_package(tmp_path_factory) -> dict[str, str]:
    """Checkpoints saved here, each loaded in one interpreter where contrastive_hf cannot be imported: a contrastive
    model, a dual encoder with one encoder and with two towers, by sentence-transformers; a 0.1 checkpoint by its own
    shipped code. ``{case: "ok" or its traceback}``."""
    from transformers import AutoTokenizer

    from conftest import DEMO_TOKENIZER

    folder = tmp_path_factory.mktemp("without_the_package")
    tokenizer = AutoTokenizer.from_pretrained(DEMO_TOKENIZER)
    model = ContrastiveForPreTraining.from_config(
        tiny_bert_config(), pooler_type="mean", projection_at_inference=True
    ).eval()
    model.resize_token_embeddings(len(tokenizer))
    model.save_pretrained(folder / "contrastive")
    tokenizer.save_pretrained(folder / "contrastive")
    np.save(folder / "contrastive" / "expected.npy", model.encode(SENTENCES, tokenizer=tokenizer))
    cases = [["contrastive", "contrastive", [str(folder / "contrastive"), SENTENCES]]]
    for share_encoders in (False, True):
        name = f"dual_encoder_shared_{share_encoders}"
        dual = make_dual_encoder(share_encoders=share_encoders, pooler_type="mean", projection_dim=8).eval()
        dual.resize_token_embeddings(len(tokenizer))
        dual.tokenizer = tokenizer
        dual.save_pretrained(folder / name)
        tokenizer.save_pretrained(folder / name)
        np.save(folder / name / "queries.npy", dual.encode_query(QUERIES))
        np.save(folder / name / "passages.npy", dual.encode_document(PASSAGES))
        cases.append([name, "dual_encoder", [str(folder / name), QUERIES, PASSAGES]])
    shipped = [str(CHECKPOINTS_0_1 / "contrastive_cls"), str(CHECKPOINTS_0_1 / "expected_embeddings.safetensors")]
    cases.append(["checkpoint_0_1", "checkpoint_0_1", shipped])
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(folder / "modules")}
    result = subprocess.run([sys.executable, "-c", WITHOUT_THE_PACKAGE, json.dumps(cases)], capture_output=True,
                            text=True, env=env, cwd=folder, timeout=600)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.splitlines()[-1])


def test_a_contrastive_checkpoint_loads_in_sentence_transformers_where_the_package_cannot_be_imported(
    without_the_package,
):
    """No remote code: sentence-transformers reads the encoder, pooling and projection from the files alone."""
    assert without_the_package["contrastive"] == "ok", without_the_package["contrastive"]


@pytest.mark.parametrize("share_encoders", [False, True])
def test_a_dual_encoder_loads_in_sentence_transformers_where_the_package_cannot_be_imported(
    without_the_package, share_encoders
):
    """No remote code: one encoder, or two towers as a sentence-transformers Router (encode_query runs the query
    tower, encode_document the passage tower), with DPR's dot product as the similarity function."""
    outcome = without_the_package[f"dual_encoder_shared_{share_encoders}"]
    assert outcome == "ok", outcome


@pytest.mark.skipif(
    SubConfigSpec is None,
    reason="the modeling code a 0.1 checkpoint ships imports SubConfigSpec, which transformers has from 5.20 on; "
    "on older releases load 0.1 checkpoints with contrastive_hf (the tests above)",
)
def test_a_0_1_checkpoint_still_loads_with_its_own_shipped_code_where_contrastive_hf_is_absent(without_the_package):
    """trust_remote_code runs the modeling files the 0.1 checkpoint carries, in a process that cannot import us."""
    assert without_the_package["checkpoint_0_1"] == "ok", without_the_package["checkpoint_0_1"]


def test_each_recipe_registers_its_card_text_when_imported():
    """The card code imports no recipe by name and `import contrastive_hf` imports none: each recipe registers its
    text when imported (building its collator or model imports it), and a card naming a method not registered yet
    (CLEAR or SimCSE, named by the core's collators) imports the recipes through the registry's finder."""
    code = (
        "import json, sys\n"
        "from contrastive_hf.hub.method_cards import METHODS, method_card\n"
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
    assert after_card == ["CLEAR", "DPR", "DeCLUTR", "LLM2Vec", "SG-BERT", "SimCSE", "Supervised SimCSE"]


def test_after_import_contrastive_hf_alone(tokenizer, tmp_path):
    """In one fresh interpreter, in this order: `import contrastive_hf` loads neither the trainer, datasets, the
    evaluation stack nor any recipe (they load on first use); the multitask model, which lives with the other model
    types in models/, loads with `AutoModel` (the package registered it with the Auto classes, no recipe imported for
    it); and a card naming a core method (CLEAR, supervised SimCSE) still finds its text, importing the recipes."""
    tiny_multitask_model(tokenizer).save_pretrained(tmp_path / "multitask")
    code = textwrap.dedent(
        f"""
        import json, sys
        import contrastive_hf
        heavy = ["contrastive_hf.training.trainer", "datasets", "contrastive_hf.evaluation", "matplotlib"]
        print(json.dumps([name for name in heavy if name in sys.modules]))
        print(json.dumps(sorted(name for name in sys.modules if name.startswith("contrastive_hf.recipes."))))
        from transformers import AutoModel
        model = AutoModel.from_pretrained({str(tmp_path / "multitask")!r})
        print(json.dumps([type(model).__name__, [spec.name for spec in model.config.task_specs],
                          "contrastive_hf.recipes.multitask" in sys.modules]))
        from contrastive_hf.hub.method_cards import method_card
        print(json.dumps([method_card("CLEAR")["citation_short"], method_card("Supervised SimCSE")["citation_short"]]))
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    heavy, recipes, multitask, citations = map(json.loads, result.stdout.splitlines())
    assert heavy == [] and recipes == []
    assert multitask == ["MultitaskModel", ["sst", "mrpc", "stsb"], False]
    assert citations == ["Wu et al., 2020", "Gao et al., 2021"]
