"""CLEAR's pre-training model: a `ContrastiveModel` plus an MLM head, trained on MLM + a contrastive loss over the
views of each sentence (the model ``AutoModelForPreTraining`` gives for a "contrastive" config). Its checkpoint is the
same folder as `ContrastiveModel`'s, with the MLM head among the heads.

This module imports torch, transformers and its siblings only.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoConfig, AutoModelForMaskedLM, PreTrainedModel
from transformers.utils import ModelOutput

from .configuration_contrastive import ContrastiveConfig
from .heads import MaskedLMHead
from .host_data import host_array, to_device
from .modeling_contrastive import ContrastiveModel, ContrastivePreTrainedModel
from .objectives import cached_gradient_surrogate, in_batch_loss

__all__ = ["ContrastiveForPreTraining", "ContrastivePreTrainingOutput"]

logger = logging.getLogger(__name__)


@dataclass
class ContrastivePreTrainingOutput(ModelOutput):
    """
    Output of [`ContrastiveForPreTraining`].

    Args:
        loss (`torch.FloatTensor` of shape `()`, *optional*):
            mlm_weight * mlm_loss + cl_weight * cl_loss.
        cl_loss (`torch.FloatTensor` of shape `()`, *optional*):
            The contrastive loss (NT-Xent or InfoNCE).
        mlm_loss (`torch.FloatTensor` of shape `()`, *optional*):
            The masked-language-modelling loss on the MLM copy of the batch.
        embeddings (`torch.FloatTensor` of shape `(batch_size, num_views, projection_dim)`):
            The projected embeddings of every view, on which the contrastive loss is computed (None when
            ``cl_weight`` is 0 and the losses were computed: MLM alone encodes no view).
        negatives_per_query (`torch.FloatTensor` of shape `()`, *optional*):
            How many negatives each query was contrasted with, on average (after leaving out duplicates).
    """

    loss: torch.FloatTensor | None = None
    cl_loss: torch.FloatTensor | None = None
    mlm_loss: torch.FloatTensor | None = None
    embeddings: torch.FloatTensor | None = None
    negatives_per_query: torch.FloatTensor | None = None


class ContrastiveForPreTraining(ContrastivePreTrainedModel):
    r"""
    CLEAR's pre-training model: a [`ContrastiveModel`] plus an MLM head, trained on

        L = mlm_weight * L_MLM + cl_weight * L_CL

    (Wu et al., 2020, "CLEAR: Contrastive Learning for Sentence Representation", §3.1-3.2). L_CL is NT-Xent over the
    two augmented views of each sentence (`contrastive_loss="nt_xent"`), or SimCSE's InfoNCE with optional hard
    negatives (`contrastive_loss="info_nce"`); L_MLM is computed on a separately masked copy of the original batch.
    """

    def __init__(self, config: ContrastiveConfig):
        super().__init__(config)
        self.contrastive = ContrastiveModel(config)
        self.config.encoder = self.contrastive.encoder.config
        self.mlm_head = self._new_mlm_head()
        self.post_init()

    def _new_mlm_head(self) -> MaskedLMHead:
        # the module's size, not its weight's shape: under ZeRO-3 the weight is an empty shard
        embedding_size = self.contrastive.get_input_embeddings().embedding_dim
        tied = getattr(self.config.encoder, "tie_word_embeddings", True)
        return MaskedLMHead(self.config.encoder, embedding_size, tied)

    def set_encoder(self, encoder: PreTrainedModel, modality: str | None = None) -> None:
        self.contrastive.set_encoder(encoder, modality)
        self.config.encoder = encoder.config

    def get_input_embeddings(self) -> nn.Module:
        return self.contrastive.get_input_embeddings()

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.contrastive.set_input_embeddings(value)

    def resize_token_embeddings(self, new_num_tokens: int, **kwargs) -> nn.Embedding:
        """Resize the encoder's vocabulary (e.g. after adding CLEAR's [DEL] token) and the MLM head with it."""
        old = self.mlm_head.bias.shape[0]
        embeddings = self.contrastive.encoder.resize_token_embeddings(new_num_tokens, **kwargs)
        new = embeddings.num_embeddings
        if new != old:
            with torch.no_grad():
                bias = torch.zeros(new, dtype=self.mlm_head.bias.dtype, device=self.mlm_head.bias.device)
                bias[: min(old, new)] = self.mlm_head.bias[: min(old, new)]
                self.mlm_head.bias = nn.Parameter(bias)
                if self.mlm_head.decoder_weight is not None:
                    weight = self.mlm_head.decoder_weight
                    fresh = weight.new_empty(new, weight.shape[1]).normal_(std=0.02)
                    fresh[: min(old, new)] = weight[: min(old, new)]
                    self.mlm_head.decoder_weight = nn.Parameter(fresh)
        return embeddings

    def load_heads_from_encoder_checkpoint(self, name_or_path: str | os.PathLike, **download) -> None:
        """The checkpoint's MLM head, when it has one (a ``*ForMaskedLM`` or ``*ForPreTraining`` checkpoint)."""
        self.load_mlm_head_from(name_or_path, **download)

    def load_mlm_head_from(self, name_or_path: str | os.PathLike, **download) -> bool:
        """Copy the MLM head of a pretrained ``*ForMaskedLM`` checkpoint into ours; returns whether it was found.

        The head is found by structure (the dense layer, LayerNorm and output bias outside the base model), which
        covers BERT, RoBERTa, DistilBERT, ALBERT and ELECTRA generators.
        """
        architectures = getattr(AutoConfig.from_pretrained(name_or_path, **download), "architectures", None) or []
        if not any(name.endswith(("ForMaskedLM", "ForPreTraining")) for name in architectures):
            logger.info(
                "%s has no MLM head (architectures %s); the MLM head starts at random.", name_or_path, architectures
            )
            return False
        source = AutoModelForMaskedLM.from_pretrained(name_or_path, **download)
        prefix = source.base_model_prefix
        head_modules = [module for name, module in source.named_modules() if name and not name.split(".")[0] == prefix]
        output = source.get_output_embeddings()
        dense = next(
            (
                m
                for m in head_modules
                if isinstance(m, nn.Linear) and m.weight.shape == self.mlm_head.dense.weight.shape
            ),
            None,
        )
        norm = next((m for m in head_modules if isinstance(m, nn.LayerNorm)), None)
        bias = output.bias if output is not None and output.bias is not None else None
        if dense is None or norm is None or bias is None or bias.shape != self.mlm_head.bias.shape:
            logger.warning("Could not map the MLM head of %s onto ours; it starts at random.", name_or_path)
            return False
        with torch.no_grad():
            self.mlm_head.dense.load_state_dict(dense.state_dict())
            self.mlm_head.layer_norm.load_state_dict(norm.state_dict())
            self.mlm_head.bias.copy_(bias)
            if self.mlm_head.decoder_weight is not None:
                self.mlm_head.decoder_weight.copy_(output.weight)
        return True

    # The batch entries `embed_views` takes, each with the batch in dim 0 (GradCache slices them into chunks).
    view_input_names = ("input_ids", "attention_mask", "token_type_ids", "prompt_lengths", "input_lengths")

    def embed_views(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        prompt_lengths=None,
        input_lengths=None,
    ) -> torch.Tensor:
        """The projected embeddings of the views, ``(B, S, L) -> (B, S, d)``, encoded as the config's
        ``sub_batch_size`` says (`encoding_policy.EncodingPolicy`).

        ``prompt_lengths`` ``(B, S)``: how many leading tokens of each view are its prompt, left out of the pooling
        (``include_prompt=False``, as `encode` leaves them out). ``input_lengths`` ``(B, S)``: each view's real
        tokens, on the host (`host_data`).
        """
        if input_ids is None or input_ids.dim() != 3:
            raise ValueError(
                "ContrastiveForPreTraining needs input_ids of shape (batch, num_views, length); build batches with "
                "contrastive_hf.ContrastiveDataCollator."
            )
        model = self.contrastive
        return model.encoding_policy().embed(
            model.encoder,
            model.pooler,
            model.projection,
            input_ids,
            attention_mask,
            token_type_ids,
            prompt_lengths,
            input_lengths,
        )

    def compute_contrastive_loss(
        self,
        embeddings: torch.Tensor,
        sentence_ids: torch.Tensor | None = None,
        extra_negatives: torch.Tensor | None = None,
        extra_negative_ids: torch.Tensor | None = None,
        gather_across_devices: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """L_CL on ``(B, S, d)`` view embeddings (S = 2: two views; more: anchor, positive, hard negatives), and the
        mean number of negatives per query (`objectives.in_batch_loss` with this model's loss settings).

        With ``gather_across_devices`` (and several processes), the views of every process are gathered with a
        differentiable all-gather: this process's views are scored against the global batch, and the mean of the
        per-process losses (which DDP/DeepSpeed's gradient averaging takes) is the global batch's loss, exactly.
        With ``sentence_ids`` (``(B, S)``, the collators' content hashes; ``extra_negative_ids`` for the queue), a
        sentence is never a negative of an identical one.
        """
        return in_batch_loss(
            embeddings,
            loss=self.config.contrastive_loss,
            temperature=self.config.temperature,
            hard_negative_weight=self.config.hard_negative_weight,
            sentence_ids=sentence_ids,
            extra_negatives=extra_negatives,
            extra_negative_ids=extra_negative_ids,
            gather_across_devices=gather_across_devices,
            matryoshka_dims=self.config.matryoshka_dims,
            matryoshka_weights=self.config.matryoshka_weights,
        )

    def compute_mlm_loss(
        self,
        mlm_input_ids: torch.Tensor,
        mlm_attention_mask: torch.Tensor | None,
        mlm_labels: torch.Tensor,
        mlm_lengths=None,
        mlm_positions=None,
    ) -> torch.Tensor:
        """Cross-entropy of the MLM head on the masked positions only (the logits of other tokens are never built).
        A ``(batch, num_views, length)`` batch (a masked copy of each view) counts as ``batch * num_views`` rows.

        ``mlm_lengths`` (each row's real tokens) and ``mlm_positions`` (the masked tokens as flat indices into
        ``mlm_labels``), on the host (`host_data`): the collators give them, and then nothing is read back from the
        device; without them the masked positions are found on the device, and read back."""
        width = mlm_input_ids.shape[-1]
        if mlm_input_ids.dim() == 3:
            mlm_input_ids, mlm_labels = mlm_input_ids.flatten(0, 1), mlm_labels.flatten(0, 1)
            mlm_attention_mask = None if mlm_attention_mask is None else mlm_attention_mask.flatten(0, 1)
        model = self.contrastive
        device = mlm_input_ids.device
        states, packed = model.encoding_policy().token_states(
            model.encoder, mlm_input_ids, mlm_attention_mask, None if mlm_lengths is None else host_array(mlm_lengths)
        )  # (T or B * L, h)
        if mlm_positions is None:  # found on the device: a boolean mask, whose size is read back
            labels = mlm_labels.reshape(-1) if packed is None else mlm_labels.reshape(-1)[packed.flat_index]
            masked = labels != -100
            if not masked.any():
                return self._no_masked_token(states)
            logits = self.mlm_head(states[masked], self.get_input_embeddings().weight)  # (n_masked, vocab)
            return F.cross_entropy(logits.float(), labels[masked])
        positions = host_array(mlm_positions)  # (M,) flat indices into the (rows, L) labels
        if len(positions) == 0:
            return self._no_masked_token(states)
        rows, columns = np.divmod(positions, width)
        at = positions if packed is None else packed.host_starts[rows] + columns  # (M,) rows of `states`
        targets = mlm_labels.reshape(-1).index_select(0, to_device(positions, device))  # (M,)
        hidden = states.index_select(0, to_device(at, device))  # (M, h)
        logits = self.mlm_head(hidden, self.get_input_embeddings().weight)  # (M, vocab)
        return F.cross_entropy(logits.float(), targets)

    def _no_masked_token(self, states: torch.Tensor) -> torch.Tensor:
        """The MLM loss of a batch without a masked token: a zero that keeps every parameter (the head too) in the
        graph."""
        return self.mlm_head(states[:1], self.get_input_embeddings().weight).sum() * 0.0

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        mlm_input_ids: torch.Tensor | None = None,
        mlm_attention_mask: torch.Tensor | None = None,
        mlm_labels: torch.Tensor | None = None,
        prompt_lengths: torch.Tensor | None = None,
        sentence_ids: torch.Tensor | None = None,
        input_lengths=None,
        mlm_lengths=None,
        mlm_positions=None,
        return_loss: bool = True,
        gather_across_devices: bool = False,
        extra_negatives: torch.Tensor | None = None,
        extra_negative_ids: torch.Tensor | None = None,
        cached_embedding_gradients: torch.Tensor | None = None,
        mlm_loss_share: float = 1.0,
        return_dict: bool | None = None,
    ) -> ContrastivePreTrainingOutput | tuple:
        r"""
        input_ids (`torch.LongTensor` of shape `(batch_size, num_views, sequence_length)`):
            The views of each sentence: 2 (positive pairs) or 2 + k (anchor, positive, k hard negatives).
        mlm_input_ids, mlm_attention_mask, mlm_labels (`torch.LongTensor` of shape `(batch_size, mlm_length)`):
            The masked copy of the batch and its labels (-100 where nothing is predicted), for L_MLM; or of shape
            `(batch_size, num_views, mlm_length)`, a masked copy of each view (CLEAR's "Double MLM" control).
        prompt_lengths (`torch.LongTensor` of shape `(batch_size, num_views)`, *optional*):
            How many leading tokens of each view are its prompt, left out of the pooling
            (``config.include_prompt=False``, as at inference; `PairCollator` gives them).
        sentence_ids (`torch.LongTensor` of shape `(batch_size, num_views)`, *optional*):
            An id of each view's sentence (the collators give content hashes): views of identical sentences are
            never made each other's negatives.
        input_lengths, mlm_lengths, mlm_positions (numpy arrays, *optional*):
            What the collators know on the host: the real tokens of each view and of each MLM row, and the masked
            tokens as flat indices into `mlm_labels` (`host_data`). With them a training step reads nothing back
            from the device; without them the same values are read from the tensors.
        return_loss (`bool`, defaults to `True`):
            Compute the losses; otherwise only the view embeddings are returned. With ``cl_weight`` 0 the losses
            need no view, so none is encoded and ``embeddings`` is None.
        gather_across_devices (`bool`, defaults to `False`):
            Use the views of every process as negatives (see `compute_contrastive_loss`).
        extra_negatives (`torch.FloatTensor` of shape `(num_negatives, projection_dim)`, *optional*):
            More negatives for every anchor, e.g. a pre-batch queue of earlier batches' keys (InfoNCE only), and
            ``extra_negative_ids`` their sentence ids.
        cached_embedding_gradients (`torch.FloatTensor` of shape `(batch_size, num_views, d)`, *optional*):
            GradCache's second pass (`ContrastiveTrainer` with ``grad_cache_chunk_size``): the gradient of L_CL with
            respect to these embeddings, computed on the whole batch. The returned ``loss`` is then
            ``cl_weight * sum(embeddings * gradients) + mlm_weight * mlm_loss_share * L_MLM``, whose parameter
            gradient is this chunk's share of the full batch's; ``mlm_loss_share`` is the chunk's fraction of the
            batch's masked tokens.
        """
        embeddings = None
        if not return_loss or self.config.cl_weight > 0 or cached_embedding_gradients is not None:
            # MLM alone (cl_weight 0) uses no view: it does not pay for their forward pass (`embeddings` is None)
            embeddings = self.embed_views(input_ids, attention_mask, token_type_ids, prompt_lengths, input_lengths)
        cl_loss = mlm_loss = loss = negatives_per_query = None
        if return_loss:
            loss = 0.0
            if cached_embedding_gradients is not None:
                loss = loss + self.config.cl_weight * cached_gradient_surrogate(embeddings, cached_embedding_gradients)
            elif self.config.cl_weight > 0:
                cl_loss, negatives_per_query = self.compute_contrastive_loss(
                    embeddings, sentence_ids, extra_negatives, extra_negative_ids, gather_across_devices
                )
                loss = loss + self.config.cl_weight * cl_loss
            if self.config.mlm_weight > 0 and mlm_labels is not None:
                mlm_loss = self.compute_mlm_loss(
                    mlm_input_ids, mlm_attention_mask, mlm_labels, mlm_lengths, mlm_positions
                )
                mlm_loss = mlm_loss * mlm_loss_share
                loss = loss + self.config.mlm_weight * mlm_loss
            if not torch.is_tensor(loss):
                raise ValueError("mlm_weight > 0 needs mlm_labels, and cl_weight is 0: there is no loss to compute.")
        output = ContrastivePreTrainingOutput(
            loss=loss,
            cl_loss=cl_loss,
            mlm_loss=mlm_loss,
            embeddings=embeddings,
            negatives_per_query=negatives_per_query,
        )
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        return output if return_dict else output.to_tuple()
