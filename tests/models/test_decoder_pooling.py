"""Decoder LLMs as encoders, pooled by their last token: the `last_token` pooler on tiny decoders built in code (one
per family that rotates its positions: Llama, Mistral, Qwen2, Qwen3, Phi-3) against sentence-transformers'
``lasttoken`` Pooling on the same weights, with the tokenizer padding on the right and on the left.

The tokenizer is a word-level one trained here on the repository's Wikipedia sample, with an end-of-sequence and a
padding token and no [CLS]/[SEP], as decoder tokenizers are.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sentence_transformers import SentenceTransformer
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import (
    LlamaConfig,
    MistralConfig,
    Phi3Config,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen3Config,
)

from contrastive_hf import ContrastiveConfig, ContrastiveModel

from conftest import DEMO_DATA

SENTENCES = [
    "A man is playing a guitar.",
    "The cat sleeps.",
    "Stocks fell sharply on Monday after the report was published.",
    "Rain.",
]
SIZE = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
DECODERS = {
    "llama": LlamaConfig,
    "mistral": MistralConfig,
    "qwen2": Qwen2Config,
    "qwen3": lambda **size: Qwen3Config(head_dim=8, **size),
    "phi3": Phi3Config,
}


@pytest.fixture(scope="module")
def decoder_tokenizer() -> PreTrainedTokenizerFast:
    words = Tokenizer(models.WordLevel(unk_token="<unk>"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.WordLevelTrainer(vocab_size=4000, special_tokens=["<pad>", "<unk>", "</s>"])
    words.train_from_iterator((DEMO_DATA / "wiki1m_sample.txt").read_text().splitlines(), trainer)
    return PreTrainedTokenizerFast(tokenizer_object=words, pad_token="<pad>", unk_token="<unk>", eos_token="</s>")


def decoder_model(family: str, vocab_size: int) -> ContrastiveModel:
    torch.manual_seed(0)
    encoder = DECODERS[family](vocab_size=vocab_size, max_position_embeddings=128, pad_token_id=0, **SIZE)
    config = ContrastiveConfig(encoder=encoder, pooler_type="last_token", projection_type="none")
    return ContrastiveModel(config).eval()


@pytest.mark.parametrize("family", list(DECODERS))
def test_last_token_pooling_of_a_decoder_is_sentence_transformers_lasttoken_with_either_padding_side(
    family, decoder_tokenizer, tmp_path
):
    model = decoder_model(family, len(decoder_tokenizer))
    embeddings = {}
    for side in ("right", "left"):
        decoder_tokenizer.padding_side = side
        batch = decoder_tokenizer(SENTENCES, padding=True, return_tensors="pt")
        assert (batch["attention_mask"][:, 0 if side == "left" else -1] == 0).any()  # padded on that side
        with torch.no_grad():
            embeddings[side] = model(**batch).pooler_output.numpy()
        # each sentence's vector is its last real token's state, wherever the padding is
        with torch.no_grad():
            states = model.encoder(**batch).last_hidden_state
        last = [row.nonzero()[-1, 0] for row in batch["attention_mask"]]
        np.testing.assert_allclose(
            embeddings[side], torch.stack([s[i] for s, i in zip(states, last, strict=True)]).numpy()
        )
    # rotary positions: a left-padded sentence is the right-padded one shifted, which attention does not see
    np.testing.assert_allclose(embeddings["left"], embeddings["right"], rtol=0, atol=1e-5)

    decoder_tokenizer.padding_side = "right"
    model.save_pretrained(tmp_path)
    decoder_tokenizer.save_pretrained(tmp_path)
    served = SentenceTransformer(str(tmp_path), device="cpu")
    assert served[1].pooling_mode == "lasttoken"
    reloaded = ContrastiveModel.from_pretrained(tmp_path)
    assert reloaded.config.pooler_type == "last_token"
    # both read the folder's tokenizer (for a qwen2 folder transformers picks Qwen2Tokenizer, which cuts otherwise)
    np.testing.assert_allclose(served.encode(SENTENCES), reloaded.encode(SENTENCES), rtol=0, atol=1e-5)
    mine = reloaded.encode(SENTENCES, tokenizer=decoder_tokenizer)
    np.testing.assert_allclose(mine, embeddings["right"], rtol=0, atol=1e-5)
