"""CLEAR's pre-training model: a `ContrastiveModel` plus an MLM head, trained on MLM + a contrastive loss over the
views of each sentence (the model ``AutoModelForPreTraining`` gives for a "contrastive" config). A decoder's MLM is
LLM2Vec's masked next-token prediction, with the decoder's own language-model head. Its checkpoint is the same folder
as `ContrastiveModel`'s; a model that trained its MLM head (``mlm_weight > 0``) saves it with the encoder as the
architecture's masked-LM model (a decoder's causal-LM model: `masked_lm_checkpoint`), so that
``AutoModelForMaskedLM.from_pretrained`` and the fill-mask pipeline (``AutoModelForCausalLM``) predict with it.

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

from .checkpoint_contents import read_named_weights
from .configuration_contrastive import ContrastiveConfig
from .heads import MaskedLMHead, NextTokenHead
from .host_data import host_array, to_device
from .masked_lm_checkpoint import MaskedLMLayout, is_decoder, masked_lm_layout
from .modeling_contrastive import ContrastiveModel, ContrastivePreTrainedModel
from .objectives import ContrastiveLoss, build_loss, build_registered_loss, cached_gradient_surrogate

__all__ = ["ContrastiveForPreTraining", "ContrastivePreTrainingOutput"]

logger = logging.getLogger(__name__)


@dataclass
class ContrastivePreTrainingOutput(ModelOutput):
    """
    Output of [`ContrastiveForPreTraining`].

    Args:
        loss (`torch.FloatTensor` of shape `()`, *optional*):
            mlm_weight * mlm_loss + cl_weight * cl_loss.
        logits (`torch.FloatTensor` of shape `(batch_size, mlm_length, vocab_size)`, *optional*):
            The MLM head's scores of every token of `mlm_input_ids` (`(batch_size, num_views, mlm_length,
            vocab_size)` for a masked copy of each view), as `BertForMaskedLM` returns them: given when the model is
            not training (or with ``return_mlm_logits=True``), for the Trainer's ``compute_metrics``. Training scores
            the masked tokens only and returns none.
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
    logits: torch.FloatTensor | None = None  # second, as transformers' Trainer reads a model's predictions first
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

    With a decoder (Llama, Qwen2, GPT-2...) L_MLM is masked next-token prediction (BehnamGhader et al., 2024,
    "LLM2Vec", §2.2): the decoder's language-model head (`NextTokenHead`, loaded from its causal-LM checkpoint)
    predicts each masked token from the state of the position before it, the loss transformers' causal-LM models
    compute on the masked tokens' labels (`predicts_next_token`).
    """

    def __init__(self, config: ContrastiveConfig):
        super().__init__(config)
        self.contrastive = ContrastiveModel(config)
        self.config.encoder = self.contrastive.encoder.config
        self.mlm_head = self._new_mlm_head()
        # L_CL, built from the config (a loss nobody registered yet: the trainer builds it once it is, or refuses)
        self.loss_fn: ContrastiveLoss | None = build_registered_loss(config)
        self.post_init()

    def _new_mlm_head(self) -> MaskedLMHead | NextTokenHead:
        # the module's size, not its weight's shape: under ZeRO-3 the weight is an empty shard
        embedding_size = self.contrastive.get_input_embeddings().embedding_dim
        tied = getattr(self.config.encoder, "tie_word_embeddings", True)
        head = NextTokenHead if is_decoder(self.config.encoder) else MaskedLMHead
        return head(self.config.encoder, embedding_size, tied)

    @property
    def predicts_next_token(self) -> bool:
        """Whether L_MLM is masked next-token prediction (a decoder's: the state before a masked token predicts it),
        rather than BERT's MLM (the masked position's own state). Its collator then never masks a sentence's first
        token (`ContrastiveDataCollator`'s ``masked_next_token``)."""
        return isinstance(self.mlm_head, NextTokenHead)

    def set_encoder(self, encoder: PreTrainedModel, modality: str | None = None) -> None:
        self.contrastive.set_encoder(encoder, modality)
        self.config.encoder = encoder.config

    def get_input_embeddings(self) -> nn.Module:
        return self.contrastive.get_input_embeddings()

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.contrastive.set_input_embeddings(value)

    def resize_token_embeddings(self, new_num_tokens: int, **kwargs) -> nn.Embedding:
        """Resize the encoder's vocabulary (e.g. after adding CLEAR's [DEL] token) and the MLM head with it."""
        old = self.contrastive.get_input_embeddings().num_embeddings
        embeddings = self.contrastive.encoder.resize_token_embeddings(new_num_tokens, **kwargs)
        new = embeddings.num_embeddings
        if new != old:
            with torch.no_grad():
                if isinstance(self.mlm_head, MaskedLMHead):
                    bias = torch.zeros(new, dtype=self.mlm_head.bias.dtype, device=self.mlm_head.bias.device)
                    bias[: min(old, new)] = self.mlm_head.bias[: min(old, new)]
                    self.mlm_head.bias = nn.Parameter(bias)
                if self.mlm_head.decoder_weight is not None:
                    weight = self.mlm_head.decoder_weight
                    fresh = weight.new_empty(new, weight.shape[1]).normal_(std=0.02)
                    fresh[: min(old, new)] = weight[: min(old, new)]
                    self.mlm_head.decoder_weight = nn.Parameter(fresh)
        return embeddings

    def masked_lm_layout(self) -> MaskedLMLayout | None:
        """Where the encoder and the MLM head lie in a checkpoint of the encoder architecture's masked-LM model
        (`masked_lm_checkpoint.masked_lm_layout`); None for an architecture without one of this head's form."""
        head = {}
        if isinstance(self.mlm_head, MaskedLMHead):
            head = {
                "dense.weight": self.mlm_head.dense.weight,
                "dense.bias": self.mlm_head.dense.bias,
                "norm.weight": self.mlm_head.layer_norm.weight,
                "norm.bias": self.mlm_head.layer_norm.bias,
                "bias": self.mlm_head.bias,
            }
        if self.mlm_head.decoder_weight is not None:
            head["decoder.weight"] = self.mlm_head.decoder_weight
        parameter_names = {parameter: name for name, parameter in self.named_parameters(remove_duplicate=False)}
        # a parameter's whole shape: under DeepSpeed ZeRO-3 the module holds an empty shard (`ds_shape` is whole)
        parts = {
            part: (parameter_names[parameter], getattr(parameter, "ds_shape", parameter.shape))
            for part, parameter in head.items()
        }
        encoder = self.contrastive.encoder
        return masked_lm_layout(encoder.config, set(encoder.state_dict()), parts)

    def encoder_head_layout(self, name: str) -> MaskedLMLayout | None:
        return self.masked_lm_layout() if name == "encoder" else None

    def saved_encoder_head_layout(self, name: str) -> MaskedLMLayout | None:
        """The MLM head is saved with the encoder when it was trained (``mlm_weight > 0``): a model trained without
        MLM (SimCSE) would otherwise pass its untrained head for a fill-mask model."""
        return self.encoder_head_layout(name) if self.config.mlm_weight > 0 else None

    def load_heads_from_encoder_checkpoint(self, name_or_path: str | os.PathLike, **download) -> None:
        """The checkpoint's MLM head, when it has one (a ``*ForMaskedLM`` or ``*ForPreTraining`` checkpoint; a
        decoder's ``*ForCausalLM`` checkpoint, for its next-token head)."""
        if self.predicts_next_token:
            self.load_next_token_head_from(name_or_path, **download)
        else:
            self.load_mlm_head_from(name_or_path, **download)

    def load_next_token_head_from(self, name_or_path: str | os.PathLike, **download) -> bool:
        """Copy a decoder checkpoint's language-model head (``lm_head.weight`` of a ``*ForCausalLM`` checkpoint: the
        one tensor read, not the model) into our `NextTokenHead`; returns whether the head is the checkpoint's (a
        head tied to the input embeddings always is). A checkpoint of the bare decoder has none: the head starts at
        random, with a warning, as masked next-token prediction needs the pretrained head."""
        layout = self.masked_lm_layout()
        if layout is not None and not layout.head_names:
            return True  # tied to the input embeddings, loaded with the encoder
        if layout is not None:
            _, head = layout.from_checkpoint(read_named_weights(name_or_path, layout.head_names.values(), **download))
            if set(head) == set(layout.head_names):
                with torch.no_grad():
                    self.mlm_head.decoder_weight.copy_(head["mlm_head.decoder_weight"])
                return True
        # unused without MLM (SimCSE on a decoder): said only when masked next-token prediction trains it
        logger.log(
            logging.WARNING if self.config.mlm_weight > 0 else logging.INFO,
            "%s has no language-model head (a checkpoint of the bare decoder, not of its *ForCausalLM model): the "
            "next-token head starts at random. Masked next-token prediction is meant to start from the pretrained "
            "head: load the decoder's causal-LM checkpoint.",
            name_or_path,
        )
        return False

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
        self, embeddings: torch.Tensor, sentence_ids: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """L_CL on ``(B, S, d)`` view embeddings (S = 2: two views; more: anchor, positive, hard negatives), and the
        mean number of negatives per query: this model's ``loss_fn`` (`objectives.ContrastiveLoss`, built from the
        config's ``contrastive_loss``, temperature and Matryoshka dimensions, or the one `ContrastiveTrainer` was
        handed), which also gathers the views of every process and reads its pre-batch queue when it has one. With
        ``sentence_ids`` (``(B, S)``, the collators' content hashes), a sentence is never a negative of an identical
        one."""
        if self.loss_fn is None:  # registered since the model was built, or the registry's error naming the loss
            self.loss_fn = build_loss(self.config)
        return self.loss_fn(embeddings, sentence_ids)

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
        With `predicts_next_token`, each masked token is scored from the state of the position before it (a row's
        first token, which nothing precedes, is not scored), as a causal-LM model's loss scores its labels.

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
            if self.predicts_next_token:  # each state's label: the next token's
                mlm_labels = F.pad(mlm_labels[:, 1:], (0, 1), value=-100)
            labels = mlm_labels.reshape(-1) if packed is None else mlm_labels.reshape(-1)[packed.flat_index]
            masked = labels != -100
            if not masked.any():
                return self._no_masked_token(states)
            logits = self.mlm_head(states[masked], self.get_input_embeddings().weight)  # (n_masked, vocab)
            return F.cross_entropy(logits.float(), labels[masked])
        positions = host_array(mlm_positions)  # (M,) flat indices into the (rows, L) labels
        shift = int(self.predicts_next_token)  # a decoder's masked token is predicted by the state before it
        if shift:
            positions = positions[positions % width > 0]
        if len(positions) == 0:
            return self._no_masked_token(states)
        rows, columns = np.divmod(positions, width)
        at = (positions if packed is None else packed.host_starts[rows] + columns) - shift  # (M,) rows of `states`
        targets = mlm_labels.reshape(-1).index_select(0, to_device(positions, device))  # (M,)
        hidden = states.index_select(0, to_device(at, device))  # (M, h)
        logits = self.mlm_head(hidden, self.get_input_embeddings().weight)  # (M, vocab)
        return F.cross_entropy(logits.float(), targets)

    def mlm_logits(
        self, mlm_input_ids: torch.Tensor, mlm_attention_mask: torch.Tensor | None = None, mlm_lengths=None
    ) -> torch.Tensor:
        """The MLM head's scores of every token, ``(B, L, vocab)`` (``(B, S, L, vocab)`` for a masked copy of each
        view), as `BertForMaskedLM` returns them: what evaluation's metrics read (training scores the masked tokens
        only, `compute_mlm_loss`). Padding positions, whose labels are -100, hold the scores of a zero state when
        the batch is packed (`encoding_policy`), of the padding's state otherwise. With `predicts_next_token`, the
        scores at a position are those of the state before it (zeros at a row's first position), so that they are,
        as a masked-LM model's, the scores of the position's own token."""
        shape = mlm_input_ids.shape
        input_ids = mlm_input_ids.reshape(-1, shape[-1])  # (rows, L)
        attention_mask = None if mlm_attention_mask is None else mlm_attention_mask.reshape(-1, shape[-1])
        model = self.contrastive
        states, packed = model.encoding_policy().token_states(
            model.encoder, input_ids, attention_mask, None if mlm_lengths is None else host_array(mlm_lengths)
        )  # (T or rows * L, h)
        if packed is not None:  # the real tokens' states back at their padded positions, (rows * L, h)
            states = states.new_zeros(input_ids.numel(), states.shape[-1]).index_copy(0, packed.flat_index, states)
        logits = self.mlm_head(states, self.get_input_embeddings().weight)  # (rows * L, vocab)
        if self.predicts_next_token:  # the scores of each position's token, from the state before it
            logits = F.pad(logits.view(input_ids.shape[0], shape[-1], -1)[:, :-1], (0, 0, 1, 0))
        return logits.view(*shape, logits.shape[-1])

    def _mlm_loss_of_logits(self, logits: torch.Tensor, mlm_labels: torch.Tensor, mlm_positions=None) -> torch.Tensor:
        """Cross-entropy of `mlm_logits` on the masked tokens, the value `compute_mlm_loss` gives (0 without one)."""
        if self.predicts_next_token:  # a row's first token is not scored: no state precedes it
            mlm_labels = mlm_labels.clone()
            mlm_labels[..., 0] = -100
            if mlm_positions is not None:
                positions = host_array(mlm_positions)
                mlm_positions = positions[positions % mlm_labels.shape[-1] > 0]
        masked = len(host_array(mlm_positions)) if mlm_positions is not None else int((mlm_labels != -100).sum())
        if masked == 0:
            return logits.sum() * 0.0
        flat = logits.reshape(-1, logits.shape[-1]).float()  # (rows * L, vocab)
        return F.cross_entropy(flat, mlm_labels.reshape(-1), ignore_index=-100)

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
        cached_embedding_gradients: torch.Tensor | None = None,
        mlm_loss_share: float = 1.0,
        return_mlm_logits: bool | None = None,
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
        cached_embedding_gradients (`torch.FloatTensor` of shape `(batch_size, num_views, d)`, *optional*):
            GradCache's second pass (`ContrastiveTrainer` with ``grad_cache_chunk_size``): the gradient of L_CL with
            respect to these embeddings, computed on the whole batch. The returned ``loss`` is then
            ``cl_weight * sum(embeddings * gradients) + mlm_weight * mlm_loss_share * L_MLM``, whose parameter
            gradient is this chunk's share of the full batch's; ``mlm_loss_share`` is the chunk's fraction of the
            batch's masked tokens.
        return_mlm_logits (`bool`, *optional*):
            Return the MLM head's scores of every token of `mlm_input_ids` as ``logits`` (`mlm_logits`; L_MLM is
            then computed from them). Default: when the model is not training, as transformers' masked-LM models
            return them for evaluation; a training step scores the masked tokens only. `ContrastiveTrainer` turns
            them off for an evaluation that reports the loss only.
        """
        embeddings = None
        if not return_loss or self.config.cl_weight > 0 or cached_embedding_gradients is not None:
            # MLM alone (cl_weight 0) uses no view: it does not pay for their forward pass (`embeddings` is None)
            embeddings = self.embed_views(input_ids, attention_mask, token_type_ids, prompt_lengths, input_lengths)
        cl_loss = mlm_loss = loss = negatives_per_query = logits = None
        if return_mlm_logits is None:
            return_mlm_logits = not self.training
        if return_mlm_logits and mlm_input_ids is not None:
            logits = self.mlm_logits(mlm_input_ids, mlm_attention_mask, mlm_lengths)  # (B, L, vocab)
        if return_loss:
            loss = 0.0
            if cached_embedding_gradients is not None:
                loss = loss + self.config.cl_weight * cached_gradient_surrogate(embeddings, cached_embedding_gradients)
            elif self.config.cl_weight > 0:
                cl_loss, negatives_per_query = self.compute_contrastive_loss(embeddings, sentence_ids)
                loss = loss + self.config.cl_weight * cl_loss
            if self.config.mlm_weight > 0 and mlm_labels is not None:
                if logits is not None:  # from the scores of every token: one pass of the MLM copy
                    mlm_loss = self._mlm_loss_of_logits(logits, mlm_labels, mlm_positions)
                else:
                    mlm_loss = self.compute_mlm_loss(
                        mlm_input_ids, mlm_attention_mask, mlm_labels, mlm_lengths, mlm_positions
                    )
                mlm_loss = mlm_loss * mlm_loss_share
                loss = loss + self.config.mlm_weight * mlm_loss
            if not torch.is_tensor(loss):
                raise ValueError("mlm_weight > 0 needs mlm_labels, and cl_weight is 0: there is no loss to compute.")
        output = ContrastivePreTrainingOutput(
            loss=loss,
            logits=logits,
            cl_loss=cl_loss,
            mlm_loss=mlm_loss,
            embeddings=embeddings,
            negatives_per_query=negatives_per_query,
        )
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        return output if return_dict else output.to_tuple()
