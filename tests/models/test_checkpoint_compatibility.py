"""Checkpoints saved by contrastive_hf 0.1 (before the package moved into wings) load and embed as they did."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModel

import contrastive_hf
from contrastive_hf import ContrastiveForPreTraining, ContrastiveModel, DualEncoderModel

from conftest import CHECKPOINTS_0_1, CHECKPOINTS_0_2

OLD = CHECKPOINTS_0_1
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


# ---- 0.2 checkpoints (before issues 22-26 changed the saving code) ----

SENTENCES = ["A man is playing a guitar.", "A cat sleeps on the sofa.", "Stocks fell sharply on Monday."]
EXPECTED_0_2 = load_file(CHECKPOINTS_0_2 / "expected_embeddings.safetensors")


@pytest.mark.parametrize(("name", "prompt"), [("contrastive_cls_mlp", None), ("contrastive_mean_prompts", "query")])
def test_a_0_2_checkpoint_embeds_the_same_in_contrastive_hf_and_sentence_transformers(name, prompt):
    from sentence_transformers import SentenceTransformer

    path = CHECKPOINTS_0_2 / name
    ours = ContrastiveModel.from_pretrained(path).encode(SENTENCES, prompt_name=prompt)
    theirs = SentenceTransformer(str(path), device="cpu").encode(SENTENCES, prompt_name=prompt)
    torch.testing.assert_close(torch.as_tensor(ours), EXPECTED_0_2[name], rtol=0, atol=1e-6)
    torch.testing.assert_close(torch.as_tensor(theirs), EXPECTED_0_2[name], rtol=0, atol=1e-5)
    assert ContrastiveForPreTraining.from_pretrained(path).config.pooler_type == name.split("_")[1]  # whole, heads too


def test_a_0_2_dual_encoder_embeds_the_same_in_contrastive_hf_and_sentence_transformers():
    from sentence_transformers import SentenceTransformer

    path = CHECKPOINTS_0_2 / "dual_encoder"
    ours, theirs = DualEncoderModel.from_pretrained(path), SentenceTransformer(str(path), device="cpu")
    for role, key in (("query", "dual_encoder_queries"), ("document", "dual_encoder_documents")):
        expected = EXPECTED_0_2[key]
        mine = torch.as_tensor(getattr(ours, f"encode_{role}")(SENTENCES))
        torch.testing.assert_close(mine, expected, rtol=0, atol=1e-6)
        torch.testing.assert_close(
            torch.as_tensor(getattr(theirs, f"encode_{role}")(SENTENCES)), expected, rtol=0, atol=1e-5
        )
