"""How many tokens a model's encoders take (contrastive_hf.models.positions), and the one refusal of a maximum length
beyond it that training, ``encode`` and the command line share."""

from __future__ import annotations

import pytest
from transformers import RobertaConfig, RobertaModel

from contrastive_hf import ContrastiveConfig, ContrastiveForPreTraining, ContrastiveModel
from contrastive_hf.models.positions import check_max_length, usable_positions

from conftest import tiny_bert_config


def test_roberta_style_position_tables_lose_the_padding_offset():
    # RoBERTa numbers positions from padding_idx + 1: 66 rows with padding_idx 1 take 64 tokens
    config = RobertaConfig(
        hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=37, max_position_embeddings=66
    )
    assert usable_positions(RobertaModel(config)) == 64
    assert usable_positions(ContrastiveForPreTraining(ContrastiveConfig(encoder=tiny_bert_config()))) == 64
    roberta = ContrastiveModel(ContrastiveConfig(encoder=config))
    assert roberta._max_length(tokenizer=None) == 64  # what encode truncates at by default


def test_a_length_the_model_takes_passes_and_a_longer_one_names_the_value_the_limit_and_the_fix():
    model = ContrastiveModel(ContrastiveConfig(encoder=tiny_bert_config()))
    for length in (None, 1, 64):
        check_max_length(model, length)
    with pytest.raises(ValueError) as error:
        check_max_length(model, 65, flag="--max-length")
    assert str(error.value) == (
        "max_length=65 (--max-length) is longer than the encoder's position embeddings, which take at most 64 "
        "tokens: the first longer input would stop encoding with an index error. Set --max-length to 64 or less, or "
        "use an encoder with more positions (max_position_embeddings in its config)."
    )


def test_load_encoder_refuses_a_max_length_beyond_the_positions_before_encoding(tokenizer, tmp_path):
    # `contrastive-hf evaluate --max-length` stopped with "index out of range in self" at the first long sentence
    from contrastive_hf.evaluation import load_encoder

    model = ContrastiveModel(ContrastiveConfig(encoder=tiny_bert_config(vocab_size=len(tokenizer))))
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=r"^max_length=100000 \(--max-length\) is longer .* at most 64 tokens"):
        load_encoder(tmp_path, max_length=100000, device="cpu")
    encoder = load_encoder(tmp_path, device="cpu")  # truncated at the 64 positions
    assert encoder.max_length == 64 and encoder.encode([" ".join(["word"] * 100)]).shape == (1, 32)
