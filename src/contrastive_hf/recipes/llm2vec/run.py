"""LLM2Vec's script (``examples/run_llm2vec.py``, ``python -m contrastive_hf.recipes llm2vec``): CLEAR's arguments
and build (`contrastive_hf.recipes.clear.run`), with LLM2Vec's masked next-token prediction as its defaults: the
paper's released MNTP settings for Llama and Qwen2 (20% of the tokens masked with ``_``, LoRA rank 16 on every
projection, 1000 steps of 32 sequences of up to 512 tokens), bidirectional attention, MNTP alone (no contrastive
loss: the views a CLEAR batch carries are the sentences themselves, and are not encoded)."""

from __future__ import annotations

from ..clear import run as clear

__all__ = ["DEFAULTS"]

ARGUMENTS = clear.ARGUMENTS
TRAINER_CLASS = clear.TRAINER_CLASS
build = clear.build

DEFAULTS = {
    "bidirectional_attention": True,
    "mlm_weight": 1.0,
    "cl_weight": 0.0,
    "augmentations": "dropout",  # the sentence itself: no view is encoded without L_CL
    "mlm_probability": 0.2,
    "mask_token": "_",
    "pooler_type": "mean",  # the embedding the end-of-run STS-B check scores, and the next step trains
    "projection_type": "none",
    "lora_r": 16,
    "lora_alpha": 32,
    "lora_dropout": 0.05,
    "lora_target_modules": "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj",
    "learning_rate": 5e-5,
    "per_device_train_batch_size": 32,
    "max_seq_length": 512,
    "max_steps": 1000,
    "output_dir": "outputs/llm2vec-mntp",
}
