"""LLM2Vec on tiny decoders built in code: masked next-token prediction (MNTP) against the loss transformers' own
causal-LM models compute on the masked tokens' labels, which is how LLM2Vec computes it (every decoder family,
attending causally and both ways, on every way a batch is encoded); the decoder's language-model head read from its
causal-LM checkpoint and saved back in it; the masking a decoder needs (a mask token of its vocabulary, no first
token masked); the encoder's dropout as a setting; and docs/recipes/llm2vec.md's two steps run as the page gives them.
"""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from sentence_transformers import SentenceTransformer
from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer, BertConfig

from contrastive_hf import ContrastiveConfig, ContrastiveDataCollator, ContrastiveForPreTraining, ContrastiveModel
from contrastive_hf.models.heads import MaskedLMHead, NextTokenHead
from contrastive_hf.models.packing import PACKABLE_DECODER_MODEL_TYPES

from conftest import DEMO_DATA, REPO_ROOT
from helpers.decoders import DECODERS, OTHER_DECODERS, decoder_config, qwen2_tokenizer, save_tiny_qwen2
from helpers.in_process import run_script

TEXTS = (DEMO_DATA / "wiki1m_sample.txt").read_text().splitlines()[:6]


@pytest.fixture(scope="module")
def tokenizer():
    return qwen2_tokenizer()


def mntp_batch(tokenizer, probability=0.3, seed=0, **settings) -> dict:
    collator = ContrastiveDataCollator(
        tokenizer, augmentation="dropout", mlm_probability=probability, mask_token="_", masked_next_token=True,
        max_length=32, seed=seed, **settings,
    )  # fmt: skip
    return collator([{"text": text} for text in TEXTS])


def pretrained_decoder(family, tokenizer, folder, **settings):
    """A decoder's causal-LM checkpoint from random weights, and `ContrastiveForPreTraining` wrapping it for MNTP."""
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(decoder_config(family, len(tokenizer))).save_pretrained(folder)
    settings = {"mlm_weight": 1.0, "cl_weight": 0.0, "pooler_type": "mean", "projection_type": "none", **settings}
    return ContrastiveForPreTraining.from_encoder_pretrained(folder, **settings).eval()


@pytest.mark.parametrize("bidirectional", [False, True], ids=["causal", "bidirectional"])
@pytest.mark.parametrize("family", [*DECODERS, *OTHER_DECODERS])
def test_mntp_is_the_causal_lm_loss_on_the_masked_tokens_for_every_family(family, bidirectional, tokenizer, tmp_path):
    """L_MLM of a decoder equals transformers' ``*ForCausalLM`` loss given the masked copy and its labels (the state
    before each masked token scores it through the checkpoint's own head: LLM2Vec's MNTP), on the host-indexed, the
    device-indexed and the all-logits paths, padded and (where the family packs) packed; the logits returned for
    evaluation are the causal LM's, one position later (the scores of each position's own token)."""
    model = pretrained_decoder(family, tokenizer, tmp_path, bidirectional_attention=bidirectional)
    assert isinstance(model.mlm_head, NextTokenHead) and model.predicts_next_token
    reference = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    reference.config.is_causal = not bidirectional
    batch = mntp_batch(tokenizer)
    ids, mask, labels = batch["mlm_input_ids"], batch["mlm_attention_mask"], batch["mlm_labels"]
    assert (labels != -100).sum() > 20
    with torch.no_grad():
        expected = reference(input_ids=ids, attention_mask=mask, labels=labels)
        host = model.compute_mlm_loss(ids, mask, labels, batch["mlm_lengths"], batch["mlm_positions"])
        device = model.compute_mlm_loss(ids, mask, labels)
        output = model(**batch)  # evaluation: the scores of every token, and the loss from them
    for loss in (host, device, output.mlm_loss):
        torch.testing.assert_close(loss, expected.loss, rtol=0, atol=2e-6)
    valid = mask[:, 1:].bool()
    torch.testing.assert_close(output.logits[:, 1:][valid], expected.logits[:, :-1][valid], rtol=0, atol=2e-5)
    if family in PACKABLE_DECODER_MODEL_TYPES:
        model.config.sub_batch_size = "packed"
        with torch.no_grad():
            packed = model.compute_mlm_loss(ids, mask, labels, batch["mlm_lengths"], batch["mlm_positions"])
        torch.testing.assert_close(packed, expected.loss, rtol=0, atol=2e-6)


def test_mntp_trains_through_the_forward_pass_with_gradients_of_the_causal_lm_loss(tokenizer, tmp_path):
    model = pretrained_decoder("qwen2", tokenizer, tmp_path, bidirectional_attention=True).train()
    reference = AutoModelForCausalLM.from_pretrained(tmp_path).train()
    reference.config.is_causal = False
    batch = mntp_batch(tokenizer)
    model(**batch).loss.backward()
    reference(input_ids=batch["mlm_input_ids"], attention_mask=batch["mlm_attention_mask"],
              labels=batch["mlm_labels"]).loss.backward()  # fmt: skip
    ours = model.contrastive.encoder.layers[0].self_attn.q_proj.weight.grad
    torch.testing.assert_close(ours, reference.model.layers[0].self_attn.q_proj.weight.grad, rtol=1e-4, atol=1e-7)
    torch.testing.assert_close(model.mlm_head.decoder_weight.grad, reference.lm_head.weight.grad, rtol=1e-4, atol=1e-7)


def test_the_head_is_the_checkpoint_s_and_is_saved_back_as_the_causal_lm_model(tokenizer, tmp_path, caplog):
    """The untied head is read from the checkpoint's ``lm_head.weight`` (not a second model); a tied one is the input
    embeddings; a bare decoder has none and says so. A model that trained it saves the decoder as its causal-LM
    model with the head, which ``AutoModelForCausalLM`` loads, and reads it back."""
    model = pretrained_decoder("qwen2", tokenizer, tmp_path / "untied")
    checkpoint = load_file(tmp_path / "untied" / "model.safetensors")
    torch.testing.assert_close(model.mlm_head.decoder_weight, checkpoint["lm_head.weight"], rtol=0, atol=0)
    tied = pretrained_decoder("gemma", tokenizer, tmp_path / "tied")
    assert tied.mlm_head.decoder_weight is None  # Gemma ties them: the embeddings score

    with torch.no_grad():
        model.mlm_head.decoder_weight.mul_(2.0)  # as trained
    model.save_pretrained(tmp_path / "saved")
    tokenizer.save_pretrained(tmp_path / "saved")
    assert json.loads((tmp_path / "saved" / "config.json").read_text())["architectures"] == ["Qwen2ForCausalLM"]
    causal_lm = AutoModelForCausalLM.from_pretrained(tmp_path / "saved")
    torch.testing.assert_close(causal_lm.lm_head.weight, model.mlm_head.decoder_weight, rtol=0, atol=0)
    back = ContrastiveForPreTraining.from_pretrained(tmp_path / "saved")
    torch.testing.assert_close(back.mlm_head.decoder_weight, model.mlm_head.decoder_weight, rtol=0, atol=0)
    assert type(AutoModel.from_pretrained(tmp_path / "saved")).__name__ == "Qwen2Model"

    save_tiny_qwen2(tmp_path / "bare")  # the decoder without its causal-LM head
    with caplog.at_level(logging.WARNING):
        ContrastiveForPreTraining.from_encoder_pretrained(tmp_path / "bare", pooler_type="mean", mlm_weight=1.0)
    assert "has no language-model head" in caplog.text and "starts at random" in caplog.text


def test_an_encoder_keeps_bert_s_mlm_head():
    config = ContrastiveConfig(encoder=BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1,
                                                  num_attention_heads=2, intermediate_size=32))  # fmt: skip
    model = ContrastiveForPreTraining(config)
    assert isinstance(model.mlm_head, MaskedLMHead) and not model.predicts_next_token


def test_masking_for_a_decoder_uses_a_token_of_its_vocabulary_and_never_its_first(tokenizer):
    underscore = tokenizer.convert_tokens_to_ids("_")
    batch = mntp_batch(tokenizer, probability=1.0)  # every token but the first is selected
    masked = batch["mlm_labels"] != -100
    assert not masked[:, 0].any() and masked[:, 1:][batch["mlm_attention_mask"][:, 1:].bool()].all()
    assert (batch["mlm_input_ids"][masked] == underscore).float().mean() > 0.6  # 80% become the mask token
    collator = ContrastiveDataCollator(tokenizer, augmentation="dropout", mlm_probability=1.0, mask_token="_", seed=1)
    assert (collator([{"text": text} for text in TEXTS])["mlm_labels"][:, 0] != -100).all()  # BERT's rule masks it
    assert "masked_next_token" not in collator.card_description()
    mntp = ContrastiveDataCollator(tokenizer, augmentation="dropout", mask_token="_", masked_next_token=True)
    assert mntp.card_description()["masked_next_token"]  # what LLM2Vec's claim reads
    with pytest.raises(ValueError, match=r"has no mask token.*--mask_token.*'_'"):
        ContrastiveDataCollator(tokenizer, augmentation="dropout")
    with pytest.raises(ValueError, match=r"mask_token '<mask>' is not a token of Qwen2Tokenizer's vocabulary"):
        ContrastiveDataCollator(tokenizer, augmentation="dropout", mask_token="<mask>")


def test_encoder_dropout_sets_every_dropout_the_encoder_has_and_is_saved(tokenizer, tmp_path):
    bert = ContrastiveConfig(encoder=BertConfig(), encoder_dropout=0.2)
    assert bert.encoder.hidden_dropout_prob == bert.encoder.attention_probs_dropout_prob == 0.2
    assert bert.encoder_dropout == 0.2
    save_tiny_qwen2(tmp_path / "qwen2")
    model = ContrastiveModel.from_encoder_pretrained(tmp_path / "qwen2", pooler_type="mean", encoder_dropout=0.3)
    assert model.encoder.layers[0].self_attn.attention_dropout == 0.3  # the built layers, not the config only
    model.save_pretrained(tmp_path / "saved")
    assert json.loads((tmp_path / "saved" / "config.json").read_text())["attention_dropout"] == 0.3
    assert ContrastiveModel.from_pretrained(tmp_path / "saved").config.encoder_dropout == 0.3
    with pytest.raises(ValueError, match=r"encoder_dropout must be in \[0, 1\), got 1.5"):
        ContrastiveConfig(encoder=BertConfig(), encoder_dropout=1.5)


@pytest.mark.slow  # two whole script runs (in this process): 2 s of CPU
def test_llm2vec_runs_both_steps_as_its_page_says(tmp_path):
    """docs/recipes/llm2vec.md on a tiny Qwen2 (its causal-LM checkpoint, a Qwen2 tokenizer): run_llm2vec.py trains
    MNTP with a LoRA adapter on the decoder made bidirectional, its card names LLM2Vec and MNTP, its merged model is
    the causal-LM model with the pretrained head; run_simcse.py with llm2vec_simcse.json trains SimCSE on it with
    attention dropout, and sentence-transformers serves the trained embeddings."""
    folder = save_tiny_qwen2(tmp_path / "qwen2", causal_lm=True)
    common = ["--train_file", DEMO_DATA / "wiki1m_sample.txt", "--max_train_samples", "16",
              "--per_device_train_batch_size", "8", "--max_steps", "2", "--max_seq_length", "32", "--use_cpu", "true",
              "--report_to", "none"]  # fmt: skip
    run = run_script("run_llm2vec", ["--model_name_or_path", folder, *common, "--output_dir", tmp_path / "mntp"])
    assert "Training a LoRA adapter" in run.output and "mlm_loss" in run.output
    card = (tmp_path / "mntp" / "README.md").read_text()
    assert "| Method | LLM2Vec (BehnamGhader et al., 2024) |" in card and "attending both ways |" in card
    assert "| Objective | 1.0 x L_MNTP (masked next-token prediction) + 0.0 x L_CL" in card
    mntp = tmp_path / "mntp-merged"
    assert json.loads((mntp / "config.json").read_text())["architectures"] == ["Qwen2ForCausalLM"]
    pretrained_head = load_file(folder / "model.safetensors")["lm_head.weight"]
    torch.testing.assert_close(load_file(mntp / "model.safetensors")["lm_head.weight"], pretrained_head)  # frozen

    run_script("run_simcse", [REPO_ROOT / "examples" / "llm" / "llm2vec_simcse.json", "--model_name_or_path", mntp,
                              *common, "--output_dir", tmp_path / "simcse"])  # fmt: skip
    merged = tmp_path / "simcse-merged"
    saved = json.loads((merged / "config.json").read_text())
    assert saved["is_causal"] is False and saved["attention_dropout"] == 0.3
    trained = ContrastiveModel.from_pretrained(merged)
    assert trained.config.pooler_type == "mean" and trained.config.temperature == 0.05
    assert "| Method | SimCSE (Gao et al., 2021) |" in (tmp_path / "simcse" / "README.md").read_text()
    served = SentenceTransformer(str(merged), device="cpu")
    sentences = ["A man is playing a guitar.", "Rain."]
    np.testing.assert_allclose(served.encode(sentences), trained.encode(sentences), rtol=0, atol=1e-5)
    assert AutoTokenizer.from_pretrained(merged).mask_token is None  # the mask token was the collator's only


@pytest.mark.slow  # a whole script run (in this process): 1 s of CPU
def test_clear_on_a_decoder_trains_mntp_and_the_contrastive_loss_together(tmp_path):
    """CLEAR's objective on a decoder (run_clear.py with a mask token): MNTP beside NT-Xent on word-deletion views,
    both logged, the card naming CLEAR and the decoder's MLM as MNTP."""
    folder = save_tiny_qwen2(tmp_path / "qwen2", causal_lm=True)
    run = run_script("run_clear", [
        "--model_name_or_path", folder, "--mask_token", "_", "--pooler_type", "last_token",
        "--train_file", DEMO_DATA / "wiki1m_sample.txt", "--max_train_samples", "16",
        "--per_device_train_batch_size", "8", "--max_steps", "2", "--max_seq_length", "32", "--use_cpu", "true",
        "--report_to", "none", "--output_dir", tmp_path / "out",
    ])  # fmt: skip
    assert "mlm_loss" in run.output and "cl_loss" in run.output
    card = (tmp_path / "out" / "README.md").read_text()
    assert "| Method | CLEAR (Wu et al., 2020) |" in card
    assert "| Objective | 1.0 x L_MNTP (masked next-token prediction) + 1.0 x L_CL (nt_xent" in card


@pytest.mark.parametrize("chunk_size", [2, 4])
def test_grad_cache_trains_mntp_and_the_contrastive_loss_of_a_decoder_as_one_full_batch_pass(
    chunk_size, tokenizer, tmp_path
):
    """GradCache's chunks give a decoder's MNTP + InfoNCE step the full batch's losses and gradients: each chunk's
    share of the masked tokens is exact because no first token is masked."""
    from contrastive_hf.training.grad_cache import grad_cache_step

    settings = dict(bidirectional_attention=True, cl_weight=1.0, contrastive_loss="info_nce")
    reference = pretrained_decoder("qwen2", tokenizer, tmp_path / "a", **settings).train()
    model = pretrained_decoder("qwen2", tokenizer, tmp_path / "b", **settings).train()
    batch = mntp_batch(tokenizer)
    expected = reference(**batch)
    expected.loss.backward()
    result = grad_cache_step(model, model, batch, chunk_size)
    torch.testing.assert_close(result.mlm_loss, expected.mlm_loss.detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(result.cl_loss, expected.cl_loss.detach(), rtol=1e-5, atol=1e-6)
    theirs = dict(reference.named_parameters())
    for name, parameter in model.named_parameters():
        if parameter.grad is not None or theirs[name].grad is not None:
            torch.testing.assert_close(parameter.grad, theirs[name].grad, rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.slow  # a whole script run (in this process): 1 s of CPU each
@pytest.mark.parametrize("mode", ["unsup", "sup"])
def test_simcse_s_auxiliary_mlm_on_a_decoder_is_mntp(mode, tmp_path):
    """run_simcse.py --do_mlm on a decoder: its auxiliary MLM is masked next-token prediction with --mask_token, on
    dropout views (LLM2Vec's second and third steps in one run) and on NLI pairs."""
    folder = save_tiny_qwen2(tmp_path / "qwen2", causal_lm=True)
    data = DEMO_DATA / ("wiki1m_sample.txt" if mode == "unsup" else "nli_sample.csv")
    run = run_script("run_simcse", [
        "--mode", mode, "--model_name_or_path", folder, "--do_mlm", "true", "--mask_token", "_",
        "--pooler_type", "mean", "--train_file", data, "--max_train_samples", "16", "--per_device_train_batch_size",
        "8", "--max_steps", "2", "--max_seq_length", "32", "--use_cpu", "true", "--report_to", "none",
        "--output_dir", tmp_path / "out",
    ])  # fmt: skip
    assert "mlm_loss" in run.output and "cl_loss" in run.output
    assert " x L_MNTP (masked next-token prediction) + 1.0 x L_CL" in (tmp_path / "out" / "README.md").read_text()


# 0 both ways: a padded batch gives its decoder a ready mask built on the device (`attention_mask_for`); with the 2D
# mask, transformers' causal mask read it back to see whether it could be dropped (masking_utils' fast_all, twice a
# forward pass: the views' and the MLM copy's), 4 a step; a packed batch passes no such mask
DECODER_SYNC_BUDGETS = {0: 0, "packed": 0}


@pytest.mark.parametrize("sub_batch_size", list(DECODER_SYNC_BUDGETS))
def test_a_decoder_s_mntp_and_contrastive_step_stays_within_its_host_sync_budget(sub_batch_size, tokenizer, tmp_path):
    """The GPU contract of the other training steps (tests/training/test_host_syncs.py), for MNTP + InfoNCE on a
    decoder: the masked tokens' positions shifted on the host, and no key/value cache built (transformers' decoders
    fill one at every forward pass unless told not to: 8 host tensors a step before)."""
    from datasets import Dataset

    from contrastive_hf.training.trainer import ContrastiveTrainer

    from helpers.steps import _arguments, syncs_of_a_step

    model = pretrained_decoder("qwen2", tokenizer, tmp_path / "qwen2", cl_weight=1.0, contrastive_loss="info_nce",
                               sub_batch_size=sub_batch_size).train()  # fmt: skip
    collator = ContrastiveDataCollator(tokenizer, augmentation="dropout", mask_token="_", masked_next_token=True,
                                       max_length=32, seed=0)  # fmt: skip
    data = Dataset.from_dict({"text": (DEMO_DATA / "wiki1m_sample.txt").read_text().splitlines()[:64]})
    trainer = ContrastiveTrainer(model=model, args=_arguments(tmp_path / "out"), train_dataset=data,
                                 data_collator=collator)  # fmt: skip
    counter = syncs_of_a_step(trainer)
    assert counter.total <= DECODER_SYNC_BUDGETS[sub_batch_size], counter.where
    assert not [where for where in counter.where if where.startswith("host tensor")], counter.where
