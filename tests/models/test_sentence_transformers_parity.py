"""Parity with sentence-transformers, computed by sentence-transformers itself on the same weights and the same batch.

Where sentence-transformers defines the answer (its losses, its Pooling module with prompts), each test saves a tiny
BERT with contrastive_hf, loads the folder with ``SentenceTransformer`` (its own Transformer, Pooling and Dense
modules), and compares the loss and the gradient of every parameter, or the embeddings, with contrastive_hf's:

- `MultipleNegativesRankingLoss` (scale = 1 / temperature, cosine) with 0, 1 and 3 hard negatives against
  `ContrastiveForPreTraining`'s InfoNCE (`objectives.InfoNCELoss`);
- `CachedMultipleNegativesRankingLoss` (GradCache) against `training.grad_cache.grad_cache_step`;
- `MatryoshkaLoss` around either of them against ``matryoshka_dims`` / ``matryoshka_weights``;
- prompts, ``include_prompt`` True and False, for every pooler both libraries have (``cls``: Pooling on the first
  token and a Dense layer holding the encoder's pooler; ``cls_before_pooler``, ``mean``, ``max``): ``encode`` on
  both sides, and the training-time embeddings and gradients against sentence-transformers' forward and MNRL.

The models are float64, and so are both sides' logits (`losses.loss_dtype`), so a mismatch is a difference in the
mathematics, not rounding: losses agree to 1e-12 and every gradient to 1e-10 of its tensor's largest entry (1e-12 of
the model's largest where it is zero in exact arithmetic); ``encode`` returns float32 on both sides, compared to
1e-6. The weights are drawn in float32 and then made float64, so the Dense layers, which the checkpoint stores in
float32, lose nothing.

Duplicates: contrastive_hf leaves a sentence that occurs twice in a batch out of its copy's softmax (the collators'
``sentence_ids``); sentence-transformers' MNRL counts the copy as a negative (its ``NO_DUPLICATES`` batch sampler
keeps copies apart instead). The batches here hold distinct sentences only (asserted), where the two must agree.
"""

from __future__ import annotations

import copy
import csv

import numpy as np
import pytest
import torch
from sentence_transformers import SentenceTransformer
from sentence_transformers.losses import (
    CachedMultipleNegativesRankingLoss,
    MatryoshkaLoss,
    MultipleNegativesRankingLoss,
)
from tokenizers.processors import TemplateProcessing
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from contrastive_hf import ContrastiveConfig, ContrastiveForPreTraining, ContrastiveModel
from contrastive_hf.data.collators import PairCollator
from contrastive_hf.models.modeling_contrastive import dense_stages
from contrastive_hf.models.prompts import prompt_token_count
from contrastive_hf.training.grad_cache import grad_cache_step

from conftest import DEMO_DATA, DEMO_TOKENIZER, tiny_bert_config

TEMPERATURE = 0.05
LOSS_TOLERANCE = 1e-12
GRADIENT_TOLERANCE = 1e-10  # of the largest entry of each gradient tensor
# Of the largest gradient entry of the whole model, for gradients that are zero in exact arithmetic (the attention
# keys' biases: the softmax over keys is blind to them), which come out as float64 rounding of that size on each side.
ZERO_GRADIENT_NOISE = 1e-12
# Prompts of different token counts, so that a prompt length applied to the wrong column shows.
PROMPTS = {"query": "query: ", "document": "represent this passage for retrieval: "}
POOLERS = ("cls", "cls_before_pooler", "mean", "max")  # the poolers sentence-transformers' Pooling also has
# Wider than BERT's 0.02: at 0.02 a tiny random BERT gives every sentence nearly the same [CLS] state (cosines above
# 0.99999), the loss sits at log(batch) and its gradients are differences of nearly equal numbers, rounding-bound at
# 1e-10; at 0.3 the sentences' cosines spread down to about 0.5.
INITIALIZER_RANGE = 0.3


def distinct_rows(count: int, negatives: int) -> list[dict[str, str]]:
    """``count`` rows of SNLI (anchor, positive, ``negatives`` hard negatives) in which no sentence occurs twice; the
    hard negatives of row i are the ``hard_neg`` sentences of rows i, i + count, ... of the sample."""
    with open(DEMO_DATA / "nli_sample.csv", newline="") as handle:
        sample = [row for row in csv.DictReader(handle) if max(len(text.split()) for text in row.values()) <= 14]
    rows = []
    for index in range(count):
        row = {"anchor": sample[index]["sent0"], "positive": sample[index]["sent1"]}
        row.update({f"negative_{j}": sample[index + j * count]["hard_neg"] for j in range(negatives)})
        rows.append(row)
    sentences = [text for row in rows for text in row.values()]
    assert len(set(sentences)) == len(sentences), "the batch must hold distinct sentences (see the module docstring)"
    return rows


def float64_model(tokenizer, **config) -> ContrastiveForPreTraining:
    """A tiny BERT without dropout, drawn in float32 and made float64 (see the module docstring)."""
    torch.manual_seed(0)
    encoder = tiny_bert_config(
        vocab_size=len(tokenizer),
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        max_position_embeddings=128,
        initializer_range=INITIALIZER_RANGE,
    )
    defaults = dict(
        pooler_type="mean",
        projection_type="linear",
        projection_at_inference=True,  # a Dense module on sentence-transformers' side
        contrastive_loss="info_nce",
        temperature=TEMPERATURE,
        mlm_weight=0.0,
        sub_batch_size="packed",  # the path training takes by default on these encoders
    )
    return ContrastiveForPreTraining(ContrastiveConfig(encoder=encoder, **{**defaults, **config})).double().train()


def load_in_sentence_transformers(model, tokenizer, folder, dtype=torch.float64) -> SentenceTransformer:
    """``model`` saved by contrastive_hf into ``folder`` and loaded by sentence-transformers, in ``dtype``."""
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    theirs = SentenceTransformer(str(folder), device="cpu", model_kwargs={"dtype": dtype}).to(dtype)
    for name, (mine, other) in paired_parameters(model.sentence_model(), theirs).items():
        assert torch.equal(mine.to(dtype), other), f"{name} was not loaded as saved"
    return theirs


def paired_parameters(ours: ContrastiveModel, theirs: SentenceTransformer) -> dict[str, tuple]:
    """Each parameter of our sentence model with its copy in the SentenceTransformer: the encoder's in its
    Transformer module, and the linear layers after the pooling (the encoder's pooler layer for ``cls``, then the
    projection) in its Dense modules, in order. sentence-transformers trains the Dense copy of the pooler layer."""
    their_encoder = dict(theirs[0].auto_model.named_parameters())
    dense_modules = [module for module in theirs if type(module).__name__ == "Dense"]
    stages = [ours.get_submodule(stage.name) for stage in dense_stages(ours)]  # named as in ours' state dict
    assert len(dense_modules) == len(stages)
    in_dense = {id(parameter) for layer in stages for parameter in layer.parameters()}
    pairs = {
        f"encoder.{name}": (parameter, their_encoder[name])
        for name, parameter in ours.encoder.named_parameters()
        if id(parameter) not in in_dense
    }
    for index, (layer, dense) in enumerate(zip(stages, dense_modules, strict=True)):
        pairs[f"dense_{index}.weight"] = (layer.weight, dense.linear.weight)
        pairs[f"dense_{index}.bias"] = (layer.bias, dense.linear.bias)
    return pairs


def assert_same_gradients(model, theirs: SentenceTransformer) -> None:
    """Every parameter's gradient equal on both sides (none on one side: zero on the other); no gradient outside the
    paired parameters."""
    pairs = paired_parameters(model.sentence_model(), theirs)
    paired = {id(tensor) for pair in pairs.values() for tensor in pair}
    for module in (model, theirs):
        unpaired = [name for name, p in module.named_parameters() if p.grad is not None and id(p) not in paired]
        assert not unpaired, f"gradients outside the compared parameters: {unpaired}"
    gradients = {
        name: tuple(torch.zeros_like(tensor) if tensor.grad is None else tensor.grad for tensor in pair)
        for name, pair in pairs.items()
    }
    noise = ZERO_GRADIENT_NOISE * max(grad.abs().max().item() for pair in gradients.values() for grad in pair)
    for name, (mine, other) in gradients.items():
        scale = max(mine.abs().max().item(), other.abs().max().item())
        difference = (mine - other).abs().max().item()
        assert difference <= GRADIENT_TOLERANCE * scale + noise, (
            f"{name}: gradients differ by {difference} (largest entry {scale})"
        )
    assert pairs["encoder.embeddings.word_embeddings.weight"][0].grad.abs().max() > 0  # a gradient was compared


def column_texts(rows: list[dict[str, str]]) -> list[list[str]]:
    return [[row[column] for row in rows] for column in rows[0]]


def their_features(theirs: SentenceTransformer, rows, prompts: dict | None = None) -> list[dict]:
    """The batch as sentence-transformers' data collator builds it: each column preprocessed with its prompt (the
    anchors with the query prompt, the other columns with the document prompt, as contrastive_hf's collators do)."""
    prompts = prompts or {}
    return [
        theirs.preprocess(texts, prompt=prompts.get("query" if index == 0 else "document"))
        for index, texts in enumerate(column_texts(rows))
    ]


def assert_same_tokens(batch: dict, features: list[dict]) -> None:
    """Both sides embed the same token ids (prompt included) in every column."""
    for column, feature in enumerate(features):
        for row in range(batch["input_ids"].shape[0]):
            mine = batch["input_ids"][row, column][batch["attention_mask"][row, column].bool()]
            other = feature["input_ids"][row][feature["attention_mask"][row].bool()]
            assert mine.tolist() == other.tolist()


def our_batch(tokenizer, rows, prompts: dict | None = None, include_prompt: bool = True) -> dict:
    return PairCollator(
        tokenizer, columns=list(rows[0]), max_length=64, prompts=prompts, include_prompt=include_prompt
    )(rows)


# ----------------------------------------------------------------------------------------------------
# The losses
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("negatives", [0, 1, 3])
def test_multiple_negatives_ranking_loss_and_every_gradient(tokenizer, tmp_path, negatives):
    model = float64_model(tokenizer)
    theirs = load_in_sentence_transformers(model, tokenizer, tmp_path)
    rows = distinct_rows(6, negatives)
    batch, features = our_batch(tokenizer, rows), their_features(theirs, rows)
    assert_same_tokens(batch, features)
    assert batch["input_ids"].shape[1] == 2 + negatives

    ours = model(**batch).loss
    ours.backward()
    reference = MultipleNegativesRankingLoss(theirs, scale=1 / TEMPERATURE)(features, labels=None)
    reference.backward()

    assert ours.dtype == reference.dtype == torch.float64
    assert abs(ours.item() - reference.item()) <= LOSS_TOLERANCE
    assert_same_gradients(model, theirs)


@pytest.mark.parametrize("encoding", ["packed", 0])
def test_the_encoding_path_does_not_change_the_loss_or_gradients(tokenizer, tmp_path, encoding):
    """Packed (the default on BERT) and one padded pass both give sentence-transformers' loss and gradients."""
    model = float64_model(tokenizer, sub_batch_size=encoding)
    theirs = load_in_sentence_transformers(model, tokenizer, tmp_path)
    rows = distinct_rows(5, 2)
    model(**our_batch(tokenizer, rows)).loss.backward()
    MultipleNegativesRankingLoss(theirs, scale=1 / TEMPERATURE)(their_features(theirs, rows), None).backward()
    assert_same_gradients(model, theirs)


def test_cached_multiple_negatives_ranking_loss_equals_grad_cache(tokenizer, tmp_path):
    """GradCache on both sides, chunks of 4 sentences over a batch of 10 (the last chunk shorter)."""
    model = float64_model(tokenizer)
    theirs = load_in_sentence_transformers(model, tokenizer, tmp_path)
    rows = distinct_rows(10, 1)
    batch, features = our_batch(tokenizer, rows), their_features(theirs, rows)

    ours = grad_cache_step(model, model, batch, chunk_size=4).cl_loss
    reference = CachedMultipleNegativesRankingLoss(theirs, scale=1 / TEMPERATURE, mini_batch_size=4)(features, None)
    reference.backward()

    assert abs(ours.item() - reference.item()) <= LOSS_TOLERANCE
    assert_same_gradients(model, theirs)


@pytest.mark.parametrize("cached", [False, True])
def test_matryoshka_loss_equals_matryoshka_dims_and_weights(tokenizer, tmp_path, cached):
    dims, weights = [32, 16, 8], [1.0, 0.5, 0.25]
    model = float64_model(tokenizer, matryoshka_dims=dims, matryoshka_weights=weights)
    theirs = load_in_sentence_transformers(model, tokenizer, tmp_path)
    rows = distinct_rows(6, 1)
    batch, features = our_batch(tokenizer, rows), their_features(theirs, rows)

    if cached:
        inner = CachedMultipleNegativesRankingLoss(theirs, scale=1 / TEMPERATURE, mini_batch_size=4)
        ours = grad_cache_step(model, model, batch, chunk_size=4).cl_loss
    else:
        inner = MultipleNegativesRankingLoss(theirs, scale=1 / TEMPERATURE)
        ours = model(**batch).loss
        ours.backward()
    reference = MatryoshkaLoss(theirs, inner, matryoshka_dims=dims, matryoshka_weights=weights)(features, None)
    reference.backward()

    assert abs(ours.item() - reference.item()) <= LOSS_TOLERANCE
    assert_same_gradients(model, theirs)


# ----------------------------------------------------------------------------------------------------
# Prompts and include_prompt, for every pooler both libraries have
# ----------------------------------------------------------------------------------------------------

SENTENCES = [
    "A man is playing a guitar on the stage .",
    "Two dogs run .",
    "The woman slices an onion in a small kitchen near the window .",
    "Kids play football .",
]


@pytest.mark.parametrize("padding_side", ["right", "left"])
@pytest.mark.parametrize("include_prompt", [True, False])
@pytest.mark.parametrize("pooler_type", POOLERS)
def test_encode_with_prompts_equals_sentence_transformers_encode(tmp_path, pooler_type, include_prompt, padding_side):
    """``SentenceTransformer(path).encode`` and ``ContrastiveModel.from_pretrained(path).encode`` on a checkpoint
    saved with prompts: by prompt name, by prompt text, and without a prompt (float32, as both return it)."""
    tokenizer = AutoTokenizer.from_pretrained(DEMO_TOKENIZER, padding_side=padding_side)  # saved: both sides pad so
    torch.manual_seed(0)
    encoder = tiny_bert_config(
        vocab_size=len(tokenizer), max_position_embeddings=128, initializer_range=INITIALIZER_RANGE
    )
    config = ContrastiveConfig(
        encoder=encoder,
        pooler_type=pooler_type,
        projection_type="linear",
        projection_at_inference=True,
        prompts=PROMPTS,
        include_prompt=include_prompt,
    )
    ContrastiveModel(config).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    ours = ContrastiveModel.from_pretrained(tmp_path)
    theirs = SentenceTransformer(str(tmp_path), device="cpu")
    for how in ({"prompt_name": "query"}, {"prompt_name": "document"}, {"prompt": "search: "}, {}):
        mine = ours.encode(SENTENCES, batch_size=8, **how)
        reference = theirs.encode(SENTENCES, batch_size=8, **how)
        np.testing.assert_allclose(mine, reference, rtol=0, atol=1e-6, err_msg=str(how))
    assert ours.tokenizer.padding_side == theirs.tokenizer.padding_side == padding_side  # the saved tokenizer's


def test_a_prompt_is_counted_as_sentence_transformers_counts_it_without_a_trailing_special_token(tmp_path):
    """A tokenizer that adds a leading special token only (as BOS-only tokenizers do): the prompt's tokens and the
    leading one are left out of the pooling, with no trailing token to take off the count."""
    bert = AutoTokenizer.from_pretrained(DEMO_TOKENIZER)
    backend = copy.deepcopy(bert.backend_tokenizer)
    backend.post_processor = TemplateProcessing(single="[CLS] $A", special_tokens=[("[CLS]", bert.cls_token_id)])
    specials = ("cls_token", "sep_token", "pad_token", "unk_token", "mask_token")
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, **{name: getattr(bert, name) for name in specials})
    assert prompt_token_count(tokenizer, "query: ") == len(tokenizer("query: ")["input_ids"]) == 4
    encoder = tiny_bert_config(vocab_size=len(tokenizer), initializer_range=INITIALIZER_RANGE)
    config = ContrastiveConfig(
        encoder=encoder, pooler_type="mean", projection_type="none", prompts=PROMPTS, include_prompt=False
    )
    ContrastiveModel(config).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    mine = ContrastiveModel.from_pretrained(tmp_path).encode(SENTENCES, prompt_name="query")
    reference = SentenceTransformer(str(tmp_path), device="cpu").encode(SENTENCES, prompt_name="query")
    np.testing.assert_allclose(mine, reference, rtol=0, atol=1e-6)


@pytest.mark.parametrize("include_prompt", [True, False])
@pytest.mark.parametrize("pooler_type", POOLERS)
def test_training_with_prompts_embeds_and_learns_as_sentence_transformers(
    tokenizer, tmp_path, pooler_type, include_prompt
):
    """The training batch (PairCollator with the model's prompts; ``prompt_lengths`` when they are left out) gives
    the embeddings of sentence-transformers' forward on its own preprocessed columns, and MNRL's loss and gradients."""
    model = float64_model(tokenizer, pooler_type=pooler_type, prompts=PROMPTS, include_prompt=include_prompt)
    theirs = load_in_sentence_transformers(model, tokenizer, tmp_path)
    rows = distinct_rows(5, 1)
    batch = our_batch(tokenizer, rows, PROMPTS, include_prompt)
    features = their_features(theirs, rows, PROMPTS)
    assert_same_tokens(batch, features)
    assert ("prompt_lengths" in batch) == (not include_prompt)

    output = model(**batch)
    for column, feature in enumerate(features):
        reference = theirs(dict(feature))["sentence_embedding"]
        torch.testing.assert_close(output.embeddings[:, column], reference, rtol=0, atol=1e-12)
    output.loss.backward()
    MultipleNegativesRankingLoss(theirs, scale=1 / TEMPERATURE)(features, None).backward()
    assert_same_gradients(model, theirs)
