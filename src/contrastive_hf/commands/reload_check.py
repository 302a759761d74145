"""The end of a run: the saved checkpoint reloaded as users will load it, its embeddings compared with the trained
model's (`trained_embeddings`, `verify_reload`), and the lines that tell how to load it (`loading_instructions`)."""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import torch
from transformers.integrations import unset_hf_deepspeed_config

__all__ = ["ReloadReference", "trained_embeddings", "verify_reload", "loading_instructions"]


@dataclass(frozen=True)
class ReloadReference:
    """What a saved checkpoint must reproduce: the trained model's embeddings of ``sentences``, computed on ``device``
    without autocast, from weights of ``weights_dtype`` (`trained_embeddings`)."""

    sentences: list[str]
    embeddings: np.ndarray  # (n, d) float32
    device: torch.device
    weights_dtype: torch.dtype

    def agreement(self, embeddings: np.ndarray) -> tuple[bool, str]:
        """Whether ``embeddings`` (of the reloaded checkpoint, on the same device) reproduce these, and how closely,
        in words. Float32 weights on both sides: the same arithmetic, to 1e-5. Weights trained in 16 bits (DeepSpeed
        with bf16 or fp16 keeps the model in them and saves its float32 master weights): the rounding of each weight
        to 16 bits stays, so each embedding within cosine 0.999 of the reloaded one, the tolerance of bf16 `encode`
        (docs/benchmarks.md)."""
        difference = float(np.abs(self.embeddings - embeddings).max()) if len(embeddings) else 0.0
        if self.weights_dtype == torch.float32:
            return bool(np.allclose(self.embeddings, embeddings, atol=1e-5)), f"max |difference| {difference:.1e}"
        norms = np.linalg.norm(self.embeddings, axis=1) * np.linalg.norm(embeddings, axis=1)
        cosine = float(((self.embeddings * embeddings).sum(axis=1) / np.maximum(norms, 1e-12)).min())
        closeness = f"lowest cosine {cosine:.5f}, max |difference| {difference:.1e}"
        return cosine >= 0.999, f"{closeness}, against trained weights in {self.weights_dtype}"


def trained_embeddings(model, sentences: list[str], tokenizer) -> ReloadReference:
    """The `ReloadReference` of a trained ``model`` (a sentence encoder with ``encode``): its embeddings computed on
    its own device without autocast, in float32 as sentence-transformers reloads a float32 checkpoint. Under
    DeepSpeed ZeRO-3 every process must call it (a forward pass needs every shard)."""
    parameter = next(model.parameters())
    embeddings = model.encode(sentences, tokenizer=tokenizer, bf16=False)
    return ReloadReference(list(sentences), np.asarray(embeddings), parameter.device, parameter.dtype)


def verify_reload(path: str, tokenizer, trained: ReloadReference) -> None:
    """Reload the saved checkpoint as users will, and compare its embeddings with the trained model's (``trained``,
    `trained_embeddings`), on the device they were computed on and without autocast, so that only the saved weights
    can differ (`ReloadReference.agreement`): `ContrastiveModel.from_pretrained`, and `SentenceTransformer` without
    remote code when the checkpoint carries sentence-transformers modules."""
    from ..models.masked_lm_checkpoint import masked_lm_head_left_unused
    from ..models.modeling_contrastive import ContrastiveModel
    from ..models.sentence_transformers_files import sentence_transformers_unsupported_reason

    # Load whole in this one process: after a DeepSpeed ZeRO-3 run, transformers would otherwise shard the reloaded
    # model across processes (zero.Init), a collective the other processes do not join.
    unset_hf_deepspeed_config()
    sentences = trained.sentences
    model = ContrastiveModel.from_pretrained(path).to(trained.device)
    reloaded = {"ContrastiveModel.from_pretrained": model.encode(sentences, tokenizer=tokenizer, bf16=False)}
    expressible = sentence_transformers_unsupported_reason(model) is None
    encoder_config = model.config.encoder  # as saved: a trained MLM head is saved with the encoder
    del model  # on the training device beside the trained model: one reloaded model there at a time
    if expressible and os.path.isfile(os.path.join(path, "modules.json")):
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError:  # not a requirement of this package
            print("sentence-transformers is not installed: its reload of the checkpoint was not checked.")
        else:
            # sentence-transformers takes the encoder alone: the MLM head beside it in model.safetensors is expected
            # to go unused (`masked_lm_head_left_unused`), and is not reported as transformers would
            with masked_lm_head_left_unused(encoder_config):
                sentence_transformer = SentenceTransformer(path, device=str(trained.device))
            reloaded["SentenceTransformer"] = sentence_transformer.encode(sentences)
    for loader, embeddings in reloaded.items():
        agrees, closeness = trained.agreement(np.asarray(embeddings))
        if not agrees:
            raise RuntimeError(f"{loader}({path!r}) does not reproduce the trained embeddings ({closeness}).")
        print(f"{loader} reload of {path} on {trained.device} gives the trained embeddings ({closeness}).")


def loading_instructions(path: str, dual_encoder: bool = False) -> str:
    """The lines a script prints at the end: how to load and use the checkpoint it saved in ``path`` (a
    `DualEncoderModel`'s with ``dual_encoder``: queries and documents through their own towers)."""
    if dual_encoder:
        return (
            f"\nSaved to {path}. Load it with sentence-transformers (no remote code; each tower is a route of its "
            "Router):\n\n"
            "    from sentence_transformers import SentenceTransformer\n"
            f"    model = SentenceTransformer({path!r})\n"
            "    questions = model.encode_query(['who wrote hamlet?'])\n"
            "    passages = model.encode_document(['Hamlet is a tragedy by Shakespeare.'])\n"
            "    scores = model.similarity(questions, passages)\n\n"
            "or with contrastive_hf (the whole model, e.g. to continue training):\n\n"
            "    from contrastive_hf import DualEncoderModel\n"
            f"    model = DualEncoderModel.from_pretrained({path!r})\n"
            "    questions = model.encode_query(['who wrote hamlet?'])\n"
        )
    return (
        f"\nSaved to {path}. Load it with sentence-transformers (no remote code; the pooling and any projection are "
        "in its modules):\n\n"
        "    from sentence_transformers import SentenceTransformer\n"
        f"    model = SentenceTransformer({path!r})\n"
        "    embeddings = model.encode(['A man is playing a guitar.'])\n\n"
        "or with contrastive_hf (the whole model, heads included, e.g. to continue training):\n\n"
        "    from contrastive_hf import ContrastiveModel\n"
        f"    model = ContrastiveModel.from_pretrained({path!r})\n"
        "    embeddings = model.encode(['A man is playing a guitar.'])\n\n"
        f"AutoModel.from_pretrained({path!r}) gives the encoder alone, in its own architecture.\n"
    )
