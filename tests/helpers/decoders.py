"""Tiny decoders and their tokenizers, built in code (no download): a config of each decoder family, a Qwen2
tokenizer as Qwen2's own loads and a 2-layer Qwen2 saved with it, as a pretrained decoder's folder. Importable without
the tests' conftest, so that benchmarks/gpu_check.py builds the same decoder for its recipe step."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import (
    AutoModel,
    AutoModelForCausalLM,
    Gemma2Config,
    Gemma3TextConfig,
    GemmaConfig,
    GPT2Config,
    LlamaConfig,
    MistralConfig,
    Phi3Config,
    Qwen2Config,
    Qwen2Tokenizer,
    Qwen3Config,
)

# SimCSE's Wikipedia sentences, shipped with the repository
DEMO_DATA = Path(__file__).resolve().parents[2] / "examples" / "demo" / "data"

# One tiny config per decoder family, 2 layers of hidden size 32
SIZE = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
DECODERS = {  # rotary positions
    "llama": LlamaConfig,
    "mistral": MistralConfig,
    "qwen2": Qwen2Config,
    "qwen3": lambda **size: Qwen3Config(head_dim=8, **size),
    "phi3": Phi3Config,
}
OTHER_DECODERS = {
    "gemma": lambda **size: GemmaConfig(head_dim=8, **size),
    "gemma2": lambda **size: Gemma2Config(head_dim=8, **size),
    "gemma3_text": lambda **size: Gemma3TextConfig(head_dim=8, **size),
    "gpt2": lambda vocab_size, max_position_embeddings, pad_token_id, **size: GPT2Config(
        vocab_size=vocab_size, n_positions=max_position_embeddings, n_embd=32, n_layer=2, n_head=4
    ),
}


def decoder_config(family: str, vocab_size: int):
    build = {**DECODERS, **OTHER_DECODERS}[family]
    return build(vocab_size=vocab_size, max_position_embeddings=128, pad_token_id=0, **SIZE)


def qwen2_tokenizer() -> Qwen2Tokenizer:
    """A Qwen2 tokenizer as Qwen2's own loads (byte-level BPE, <|endoftext|>, no BOS, no EOS appended), its merges
    trained here on the repository's Wikipedia sample."""
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=["<|endoftext|>"], initial_alphabet=alphabet)
    bpe.train_from_iterator((DEMO_DATA / "wiki1m_sample.txt").read_text().splitlines()[:2000], trainer)
    state = json.loads(bpe.to_str())["model"]
    merges = [tuple(merge.split(" ")) if isinstance(merge, str) else tuple(merge) for merge in state["merges"]]
    return Qwen2Tokenizer(vocab=state["vocab"], merges=merges, eos_token="<|endoftext|>", pad_token="<|endoftext|>",
                          unk_token=None, bos_token=None)  # fmt: skip


def save_tiny_qwen2(folder, causal_lm: bool = False) -> Path:
    """A 2-layer, hidden-32 Qwen2 from random weights saved with `qwen2_tokenizer`: a pretrained decoder's folder,
    of the bare decoder, or with ``causal_lm`` of its causal-LM model (with its language-model head, as the Hub's
    decoders are saved)."""
    tokenizer = qwen2_tokenizer()
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)  # fmt: skip
    (AutoModelForCausalLM if causal_lm else AutoModel).from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return Path(folder)
