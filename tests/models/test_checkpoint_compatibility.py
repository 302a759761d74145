"""Files saved by contrastive_hf 0.1 (before the package moved into wings) and 0.2 load as they did: checkpoints embed
the same, and a 0.1 run's training_args.bin is compared on resume and unpickles."""

from __future__ import annotations

import importlib
import sys
import types
import zipfile

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModel

from contrastive_hf import ContrastiveForPreTraining, ContrastiveModel, DualEncoderModel
from contrastive_hf.training.resume_changes import changed_settings

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


# ---- a 0.1 run's training_args.bin: its arguments pickled under the module of 0.1 that defined their class ----


def saved_by_0_1(arguments, module_of_0_1: str, path) -> None:
    """``torch.save(arguments, path)`` as 0.1 wrote it (`Trainer.save_model`): the class named by its 0.1 module."""
    cls = type(arguments)
    module = types.ModuleType(module_of_0_1)
    setattr(module, cls.__name__, cls)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cls, "__module__", module_of_0_1)
        patch.setitem(sys.modules, module_of_0_1, module)
        torch.save(arguments, path)
    with zipfile.ZipFile(path) as archive:
        pickled = archive.read(next(name for name in archive.namelist() if name.endswith("data.pkl")))
    assert f"{module_of_0_1}\n{cls.__name__}".encode() in pickled and cls.__module__.encode() not in pickled


@pytest.mark.parametrize(
    ("module_of_0_1", "module", "name", "setting"),
    [
        ("contrastive_hf.training_args", "contrastive_hf.training.training_args", "ContrastiveTrainingArguments",
         ("prebatch_size", 4, 8)),
        ("contrastive_hf.sg_bert", "contrastive_hf.recipes.sg_bert.trainer", "SelfGuidedTrainingArguments",
         ("prebatch_size", 4, 8)),
        ("contrastive_hf.multitask_trainer", "contrastive_hf.recipes.multitask.trainer", "MultitaskTrainingArguments",
         ("pcgrad", True, False)),
    ],
)  # fmt: skip
def test_a_0_1_training_args_bin_is_compared_on_resume_and_loads(module_of_0_1, module, name, setting, tmp_path):
    cls = getattr(importlib.import_module(module), name)
    field, saved, resumed = setting
    saved_by_0_1(cls(output_dir=str(tmp_path), **{field: saved}), module_of_0_1, tmp_path / "training_args.bin")
    # a resume compares the settings without importing what the pickle names
    changes = changed_settings(str(tmp_path), model=None, args=types.SimpleNamespace(**{field: resumed}))
    assert changes == [f"{field} {saved!r} -> {resumed!r}"]
    # and the file loads as the class of today
    loaded = torch.load(tmp_path / "training_args.bin", weights_only=False)
    assert type(loaded) is cls and getattr(loaded, field) == saved


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
