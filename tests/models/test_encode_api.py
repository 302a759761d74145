"""`encode` as sentence-transformers spells it, answered as sentence-transformers answers it on the same checkpoint:
`encode_query` / `encode_document` (their prompts, and none where the model has none), ``prompt_name="query"`` on a
model without prompts, ``precision`` (int8, uint8, binary, ubinary) and ``output_value`` (token embeddings, or
everything), for both model families. The reference is ``SentenceTransformer(path)`` itself."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sentence_transformers import SentenceTransformer
from transformers import AutoTokenizer

from contrastive_hf import ContrastiveConfig, ContrastiveModel, DualEncoderConfig, DualEncoderModel

from conftest import DEMO_TOKENIZER, tiny_bert_config

SENTENCES = ["A man is playing a guitar.", "Someone plays music on a stage tonight.", "The cat sleeps."]
# The document prompt named "document", as the scripts' --document_prompt saves it: sentence-transformers' default
# prompts hold a "document" key of their own, so its encode_document reaches a "passage" or "corpus" prompt only in a
# model that drops that key; contrastive_hf takes the first of "document", "passage", "corpus" the model has.
PROMPTS = {"query": "query: ", "document": "represent this passage: "}


def save(model, folder):
    tokenizer = AutoTokenizer.from_pretrained(DEMO_TOKENIZER)
    model.tokenizer = tokenizer  # a dual encoder saves it beside each tower
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    loaded = type(model).from_pretrained(folder)
    loaded.tokenizer = tokenizer
    return loaded, SentenceTransformer(str(folder))


@pytest.fixture(scope="module")
def prompted(tmp_path_factory):
    """A mean-pooling model with a query and a passage prompt, the query prompt its default."""
    torch.manual_seed(0)
    config = ContrastiveConfig(
        encoder=tiny_bert_config(), pooler_type="mean", prompts=PROMPTS, default_prompt_name="query"
    )
    return save(ContrastiveModel(config), tmp_path_factory.mktemp("prompted"))


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    torch.manual_seed(1)
    return save(ContrastiveModel(ContrastiveConfig(encoder=tiny_bert_config())), tmp_path_factory.mktemp("plain"))


def close(ours, theirs):
    np.testing.assert_allclose(np.asarray(ours), np.asarray(theirs), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("role", ["query", "document"])
def test_encode_query_and_document_use_the_role_s_prompt_as_sentence_transformers_does(prompted, role):
    ours, theirs = prompted
    encode = getattr(ours, f"encode_{role}")
    close(encode(SENTENCES), getattr(theirs, f"encode_{role}")(SENTENCES))
    prompt = PROMPTS[role]
    close(encode(SENTENCES), ours.encode(SENTENCES, prompt=prompt))  # the role's prompt, not the default one
    close(encode(SENTENCES, prompt=""), theirs.encode(SENTENCES, prompt=""))  # an explicit prompt wins


@pytest.mark.parametrize("role", ["query", "document"])
def test_without_prompts_the_roles_and_their_names_encode_without_one(plain, role):
    ours, theirs = plain
    bare = ours.encode(SENTENCES)
    close(getattr(ours, f"encode_{role}")(SENTENCES), bare)
    close(ours.encode(SENTENCES, prompt_name=role), theirs.encode(SENTENCES, prompt_name=role))
    close(ours.encode(SENTENCES, prompt_name=role), bare)
    with pytest.raises(ValueError, match="Unknown prompt_name 'classification'"):
        ours.encode(SENTENCES, prompt_name="classification")


@pytest.mark.parametrize("precision", ["int8", "uint8", "binary", "ubinary"])
def test_quantized_embeddings_equal_sentence_transformers(prompted, precision):
    ours, theirs = prompted
    quantized = ours.encode(SENTENCES, precision=precision)
    expected = theirs.encode(SENTENCES, precision=precision)
    assert quantized.dtype == expected.dtype and quantized.shape == expected.shape
    np.testing.assert_array_equal(quantized, expected)
    assert torch.equal(ours.encode(SENTENCES, precision=precision, convert_to_tensor=True), torch.from_numpy(expected))


def test_token_embeddings_and_every_output_equal_sentence_transformers(prompted):
    ours, theirs = prompted
    tokens = ours.encode(SENTENCES, output_value="token_embeddings")
    expected = theirs.encode(SENTENCES, output_value="token_embeddings")
    assert isinstance(tokens, list) and [t.shape for t in tokens] == [e.shape for e in expected]
    for mine, reference in zip(tokens, expected, strict=True):
        close(mine, reference)
    everything = ours.encode(SENTENCES, output_value=None)
    reference = theirs.encode(SENTENCES, output_value=None)
    for mine, theirs_row in zip(everything, reference, strict=True):
        assert torch.equal(mine["input_ids"], theirs_row["input_ids"])
        assert torch.equal(mine["attention_mask"], theirs_row["attention_mask"])
        close(mine["token_embeddings"], theirs_row["token_embeddings"])
        close(mine["sentence_embedding"], theirs_row["sentence_embedding"])


def test_bad_output_value_and_precision_are_refused_naming_the_choices(plain):
    ours, _ = plain
    with pytest.raises(ValueError, match="output_value must be one of"):
        ours.encode(SENTENCES, output_value="cls")
    with pytest.raises(ValueError, match="precision must be one of"):
        ours.encode(SENTENCES, precision="float16")
    with pytest.raises(ValueError, match="use it with output_value='sentence_embedding'"):
        ours.encode(SENTENCES, precision="int8", output_value="token_embeddings")


def test_a_dual_encoder_s_towers_answer_as_sentence_transformers_router(tmp_path):
    torch.manual_seed(2)
    config = DualEncoderConfig(
        query_encoder=tiny_bert_config(), passage_encoder=tiny_bert_config(), pooler_type="mean", prompts=PROMPTS
    )
    ours, theirs = save(DualEncoderModel(config), tmp_path)
    close(ours.encode_query(SENTENCES), theirs.encode_query(SENTENCES))
    close(ours.encode_document(SENTENCES), theirs.encode_document(SENTENCES))
    assert not np.allclose(ours.encode_query(SENTENCES), ours.encode_document(SENTENCES))  # two towers, two prompts
    np.testing.assert_array_equal(
        ours.encode_document(SENTENCES, precision="binary"), theirs.encode_document(SENTENCES, precision="binary")
    )
    tokens = ours.encode_query(SENTENCES, output_value="token_embeddings")
    for mine, reference in zip(tokens, theirs.encode_query(SENTENCES, output_value="token_embeddings"), strict=True):
        close(mine, reference)


def test_two_towers_without_a_tokenizer_are_not_saved(tmp_path):
    """sentence-transformers reads each tower's tokenizer from the tower's folder; without one it built an empty
    vocabulary and embedded every text as unknown tokens, without a word. Refused, before anything is written."""
    config = DualEncoderConfig(query_encoder=tiny_bert_config(), passage_encoder=tiny_bert_config())
    with pytest.raises(ValueError, match="each tower's folder .* needs the tokenizer. Set model.tokenizer"):
        DualEncoderModel(config).save_pretrained(tmp_path / "dual")
    assert not (tmp_path / "dual").exists()
