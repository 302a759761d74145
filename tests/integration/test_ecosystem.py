"""A saved checkpoint where users take it next: MTEB, an ONNX export, and the files Text Embeddings Inference reads.
(sentence-transformers itself: tests/models/test_loading.py and tests/models/test_modeling_contrastive.py.)"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from sentence_transformers import SentenceTransformer
from transformers import AutoModel, AutoTokenizer

from contrastive_hf import (
    ContrastiveConfig,
    ContrastiveForPreTraining,
    ContrastiveModel,
    DualEncoderConfig,
    DualEncoderModel,
)

from conftest import DEMO_DATA, DEMO_TOKENIZER, tiny_bert_config

SENTENCES = ["a man is playing a guitar .", "the cat sat on the mat", "stocks fell sharply on monday"]


def saved(tokenizer, path, **overrides):
    torch.manual_seed(0)
    model = ContrastiveForPreTraining(
        ContrastiveConfig(encoder=tiny_bert_config(vocab_size=len(tokenizer)), **overrides)
    ).eval()
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return model


def test_mteb_evaluates_the_checkpoint_on_a_local_sts_task_as_readme_shows(tokenizer, tmp_path):
    """README's line: mteb.evaluate(SentenceTransformer(path), tasks); here on a local STS task, offline."""
    import mteb
    from datasets import Dataset, DatasetDict
    from mteb.abstasks.sts import AbsTaskSTS
    from mteb.abstasks.task_metadata import TaskMetadata

    from contrastive_hf.evaluation import evaluate_sts, read_stsbenchmark

    model = saved(tokenizer, tmp_path / "ckpt", pooler_type="mean")
    stsb = read_stsbenchmark(DEMO_DATA / "sts-dev.csv")
    pairs = {"sentence1": stsb.sentences1[:200], "sentence2": stsb.sentences2[:200], "score": stsb.scores[:200]}

    class LocalSTSB(AbsTaskSTS):
        min_score, max_score = 0, 5
        metadata = TaskMetadata(
            name="LocalSTSBenchmarkDev",
            description="The first 200 pairs of the STS Benchmark dev set, from the repository.",
            reference=None,
            dataset={"path": "local", "revision": "local"},
            type="STS",
            category="t2t",
            modalities=["text"],
            eval_splits=["test"],
            eval_langs=["eng-Latn"],
            main_score="cosine_spearman",
            date=None,
            domains=None,
            task_subtypes=None,
            license=None,
            annotations_creators=None,
            dialect=None,
            sample_creation=None,
            bibtex_citation="",
        )

        def load_data(self, **kwargs):
            self.dataset = DatasetDict({"test": Dataset.from_dict(pairs)})
            self.data_loaded = True

    result = mteb.evaluate(SentenceTransformer(str(tmp_path / "ckpt")), tasks=[LocalSTSB()], cache=None)
    score = result.task_results[0].get_score()
    subset = type(stsb)(pairs["sentence1"], pairs["sentence2"], pairs["score"])
    ours = evaluate_sts(model.contrastive, subset, tokenizer=tokenizer)["spearman"]
    assert score == pytest.approx(ours / 100, abs=1e-4)  # MTEB's spearman (0-1) of the same embeddings


def test_the_encoder_exports_to_onnx_and_gives_the_same_embeddings(tokenizer, tmp_path):
    """The root is a plain BertModel checkpoint, so any exporter takes it; optimum's (sentence-transformers'
    backend="onnx") does not install beside transformers 5, so torch's own exporter is used here."""
    import onnxruntime as ort  # dev dependencies, with onnx and onnxscript (torch's exporter)

    saved(tokenizer, tmp_path / "ckpt", pooler_type="mean")
    encoder = AutoModel.from_pretrained(tmp_path / "ckpt").eval()
    batch = AutoTokenizer.from_pretrained(tmp_path / "ckpt")(SENTENCES, padding=True, return_tensors="pt")
    inputs = (batch["input_ids"], batch["attention_mask"])
    dims = {"input_ids": {0: "batch", 1: "length"}, "attention_mask": {0: "batch", 1: "length"}}
    onnx_path = tmp_path / "encoder.onnx"
    torch.onnx.export(
        encoder,
        inputs,
        str(onnx_path),
        input_names=["input_ids", "attention_mask"],
        output_names=["last_hidden_state"],
        dynamic_axes=dims,
        dynamo=True,
    )
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    feeds = {"input_ids": inputs[0].numpy(), "attention_mask": inputs[1].numpy()}
    hidden = session.run(["last_hidden_state"], feeds)[0]  # (3, L, 32)
    mask = inputs[1].numpy()[..., None]
    pooled = (hidden * mask).sum(1) / mask.sum(1)  # mean pooling, as 1_Pooling/config.json says
    reference = SentenceTransformer(str(tmp_path / "ckpt"), device="cpu").encode(SENTENCES)
    np.testing.assert_allclose(pooled, reference, atol=1e-5)


@pytest.mark.parametrize("pooler_type,mode", [("cls_before_pooler", "cls_token"), ("mean", "mean_tokens")])
def test_the_files_text_embeddings_inference_reads(tokenizer, tmp_path, pooler_type, mode):
    """TEI serves a checkpoint from: config.json of an architecture it knows, model.safetensors and tokenizer.json at
    the root, 1_Pooling/config.json with the boolean pooling keys (cls or mean), sentence_bert_config.json's
    max_seq_length, and modules.json naming sentence_transformers.models.* modules (how it finds Dense layers)."""
    saved(tokenizer, tmp_path, pooler_type=pooler_type)
    assert json.loads((tmp_path / "config.json").read_text())["model_type"] == "bert"
    assert (tmp_path / "model.safetensors").is_file() and (tmp_path / "tokenizer.json").is_file()
    pooling = json.loads((tmp_path / "1_Pooling" / "config.json").read_text())
    assert pooling[f"pooling_mode_{mode}"] is True
    assert {"pooling_mode_cls_token", "pooling_mode_mean_tokens"} <= set(pooling)
    assert json.loads((tmp_path / "sentence_bert_config.json").read_text())["max_seq_length"] == 64
    modules = json.loads((tmp_path / "modules.json").read_text())
    assert [module["type"] for module in modules] == [
        "sentence_transformers.models.Transformer",
        "sentence_transformers.models.Pooling",
    ]


@pytest.mark.parametrize("share_encoders", [True, False])
def test_dpr_records_its_dot_product_where_sentence_transformers_and_mteb_read_it(tmp_path, share_encoders):
    model = DualEncoderModel(DualEncoderConfig(query_encoder=tiny_bert_config(), share_encoders=share_encoders))
    model.tokenizer = AutoTokenizer.from_pretrained(DEMO_TOKENIZER)  # two towers: each carries it
    model.save_pretrained(tmp_path)
    settings = json.loads((tmp_path / "config_sentence_transformers.json").read_text())
    assert settings["similarity_fn_name"] == "dot" and settings["model_type"] == "SentenceTransformer"
    contrastive = ContrastiveModel(ContrastiveConfig(encoder=tiny_bert_config()))
    contrastive.save_pretrained(tmp_path / "cosine")
    cosine = json.loads((tmp_path / "cosine" / "config_sentence_transformers.json").read_text())
    assert cosine["similarity_fn_name"] == "cosine"
