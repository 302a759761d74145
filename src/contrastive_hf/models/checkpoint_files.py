"""The files of a saved checkpoint, laid out so that the embedding ecosystem takes it as it is.

A contrastive_hf checkpoint is, at its root, a plain checkpoint of its encoder in the encoder's own architecture
(``config.json`` says ``bert``, ``roberta``...; ``model.safetensors`` holds the encoder's weights under their usual
names), as SimCSE's published checkpoints are. So ``AutoModel.from_pretrained(path)`` gives the encoder,
``SentenceTransformer(path)`` reads the pooling (and projection) from the sentence-transformers files beside it
without remote code, and tools that read the architecture from ``config.json`` (Text Embeddings Inference, ONNX
exporters, the Hub's widget) serve it. What only contrastive_hf needs lies beside them:

* ``contrastive_config.json`` (or ``dual_encoder_config.json``): the model's own configuration without the encoder
  (pooler, projection, temperature, loss weights...) and the class that saved it;
* ``contrastive_heads.safetensors``: the weights outside the encoder (the projection head, a classifier, an MLM
  head not saved with the encoder), under the names the saving model gives them, less a leading ``contrastive.``.

A model that trained an MLM head saves it with its encoder, as the encoder architecture's masked-LM model
(`masked_lm_checkpoint`: ``config.json`` names ``BertForMaskedLM``, ``model.safetensors`` holds ``bert.*`` and the
head under BERT's names), so that ``AutoModelForMaskedLM`` and the fill-mask pipeline predict with it; ``AutoModel``
and sentence-transformers take the encoder from the same file.

This module imports only the standard library, torch, safetensors, transformers and this folder, as every module of
`models/` does (see its `__init__`).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from contextvars import ContextVar

import torch
from safetensors.torch import load_file
from transformers.utils import CONFIG_NAME

from .checkpoint_contents import read_heads, read_named_weights, weight_files, what_the_path_holds
from .checkpoint_diagnostics import check_whole_weights, naming_damaged_files, refuse_non_finite
from .checkpoint_names import (
    CONTRASTIVE_CONFIG_NAME,
    HEADS_WEIGHTS_NAME,
    LOADING_KWARGS,
    TOKENIZER_CONFIG_NAME,
    download_kwargs,
)
from .checkpoint_writes import save_safetensors, transformers_saves_replacing
from .masked_lm_checkpoint import MaskedLMLayout
from .sentence_transformers_files import write_json, write_sentence_transformers_files

logger = logging.getLogger(__name__)

__all__ = [
    "save_tokenizer",
    "make_tokenizer_config_portable",
    "encoders_to_be_loaded",
    "encoder_building_device",
    "loaded_dtype",
    "write_heads",
    "split_state_dict",
]

# Arguments the Auto classes pass to `from_pretrained` besides the user's, which the saved layout does not use.
_AUTO_CLASS_KWARGS = ("adapter_kwargs", "code_revision")


def save_tokenizer(tokenizer, save_directory: str | os.PathLike) -> None:
    """Save ``tokenizer`` so that transformers 4.x and 5 both read it (`make_tokenizer_config_portable`): optimum,
    sentence-transformers' ONNX route, installs only beside transformers 4.x."""
    tokenizer.save_pretrained(save_directory)
    make_tokenizer_config_portable(save_directory)


def make_tokenizer_config_portable(save_directory: str | os.PathLike) -> None:
    """Rewrite ``tokenizer_config.json`` in ``save_directory`` (if any) so that transformers 4.x reads it too.

    transformers 5 writes extra special tokens (CLEAR's ``[DEL]``) as a list under ``extra_special_tokens``, which
    transformers 4.x takes for a name -> token dict and fails on (``'list' object has no attribute 'keys'``). Both
    read the list under its 4.x name, ``additional_special_tokens``, and keep the tokens special."""
    path = os.path.join(save_directory, TOKENIZER_CONFIG_NAME)
    if not os.path.isfile(path):
        return
    with open(path, encoding="utf-8") as handle:
        config = json.load(handle)
    extra = config.get("extra_special_tokens")
    if not isinstance(extra, list):
        return
    additional = config.get("additional_special_tokens") or []
    config["additional_special_tokens"] = list(dict.fromkeys([*additional, *extra]))
    del config["extra_special_tokens"]
    write_json(path, config)


def loaded_dtype(dtype: str | torch.dtype | None, encoders) -> torch.dtype:
    """The one dtype a loaded model computes in: ``dtype`` when given (transformers' loading argument), else (None or
    ``"auto"``) the dtype the encoders were loaded in, which transformers 5 takes from the checkpoint; float32 when
    they differ. The heads follow it: a checkpoint saved in bf16 reloads as a bf16 model, never a bf16 encoder under
    float32 heads, whose matrix products refuse mixed inputs."""
    if dtype is not None and dtype != "auto":
        return getattr(torch, dtype) if isinstance(dtype, str) else dtype
    found = {parameter.dtype for encoder in encoders for parameter in encoder.parameters()}
    found = {candidate for candidate in found if candidate.is_floating_point}
    return found.pop() if len(found) == 1 else torch.float32


def weights_dtype(state_dict: dict[str, torch.Tensor]) -> torch.dtype | None:
    """The one floating dtype of a state dict's weights; None when they have several, or none."""
    floating = {tensor.dtype for tensor in state_dict.values() if tensor.is_floating_point()}
    return floating.pop() if len(floating) == 1 else None


def record_saved_dtype(folder: str, dtype: torch.dtype | None) -> None:
    """Make the ``dtype`` of ``folder``'s config.json the dtype of the weights written there (`weights_dtype`).
    transformers records the live model's dtype, which the loaders then take by default (``dtype="auto"``,
    sentence-transformers): a DeepSpeed bf16 run, whose live model is bf16, saves float32 master weights that would
    reload cast to bf16."""
    path = os.path.join(folder, CONFIG_NAME)
    if dtype is None or not os.path.isfile(path):
        return
    with open(path, encoding="utf-8") as handle:
        config = json.load(handle)
    saved = str(dtype).removeprefix("torch.")
    if config.get("dtype", saved) != saved:
        config["dtype"] = saved
        write_json(path, config)


def record_architecture(folder: str, architecture: str) -> None:
    """Make ``architecture`` the one ``architectures`` entry of ``folder``'s config.json: the model its weights are
    (an encoder saved with its MLM head is its architecture's masked-LM model, `masked_lm_checkpoint`)."""
    path = os.path.join(folder, CONFIG_NAME)
    with open(path, encoding="utf-8") as handle:
        config = json.load(handle)
    if config.get("architectures") != [architecture]:
        config["architectures"] = [architecture]
        write_json(path, config)


def write_heads(save_directory: str | os.PathLike, state: dict[str, torch.Tensor]) -> None:
    """Save the weights outside the encoder; removes a stale file when there are none."""
    path = os.path.join(save_directory, HEADS_WEIGHTS_NAME)
    if not state:
        if os.path.exists(path):
            os.remove(path)
        return
    # contiguous CPU copies; tied tensors (an MLM head sharing the input embeddings) are not among them
    save_safetensors({name: tensor.detach().cpu().contiguous() for name, tensor in state.items()}, path)


def split_state_dict(
    state_dict: dict[str, torch.Tensor], encoder_prefixes: dict[str, str], strip: str = ""
) -> tuple[dict[str, dict[str, torch.Tensor]], dict[str, torch.Tensor]]:
    """Split a model's state dict into each encoder's own weights and the rest.

    Args:
        state_dict: the saving model's state dict (e.g. DeepSpeed's consolidated one).
        encoder_prefixes: ``{name: prefix}`` of each encoder in it, e.g. ``{"encoder": "contrastive.encoder."}``.
        strip: a prefix removed from the names of the other weights (``"contrastive."``), so that a checkpoint's head
            names do not depend on which model class saved it.

    Returns:
        ``({name: encoder state dict under the encoder's own names}, other weights)``.
    """
    encoders: dict[str, dict[str, torch.Tensor]] = {name: {} for name in encoder_prefixes}
    rest = {}
    for key, tensor in state_dict.items():
        owner = next((name for name, prefix in encoder_prefixes.items() if key.startswith(prefix)), None)
        if owner is not None:
            encoders[owner][key[len(encoder_prefixes[owner]) :]] = tensor
        else:
            rest[key[len(strip) :] if strip and key.startswith(strip) else key] = tensor
    return encoders, rest


_ENCODERS_TO_BE_LOADED: ContextVar[bool] = ContextVar("contrastive_hf_encoders_to_be_loaded", default=False)


@contextmanager
def encoders_to_be_loaded() -> Iterator[None]:
    """While a model is built whose encoders are loaded next (`EmbeddingCheckpointMixin.assemble`): the encoders it
    builds from their configs are empty, on the meta device (`encoder_building_device`)."""
    token = _ENCODERS_TO_BE_LOADED.set(True)
    try:
        yield
    finally:
        _ENCODERS_TO_BE_LOADED.reset(token)


def encoder_building_device():
    """The context a model builds an encoder from its config in: the meta device inside `encoders_to_be_loaded` (the
    encoder is replaced by a loaded one; nothing is allocated or drawn for it), else none. Under DeepSpeed ZeRO-3,
    none either: transformers builds the encoder inside ``deepspeed.zero.Init`` there, which shards real tensors."""
    if not _ENCODERS_TO_BE_LOADED.get():
        return nullcontext()
    from transformers.integrations import is_deepspeed_zero3_enabled

    return nullcontext() if is_deepspeed_zero3_enabled() else torch.device("meta")


class EmbeddingCheckpointMixin:
    """`save_pretrained` / `from_pretrained` in the layout of this module, for a `PreTrainedModel` made of
    transformers encoders and small heads. A model family provides:

    - ``checkpoint_config_name``: the file of its own configuration;
    - `checkpoint_encoders`: ``{name: (folder, state-dict prefix, encoder)}``, folder ``""`` for the root;
    - `checkpoint_config` / `config_from_checkpoint`: its configuration without the encoders, and back;
    - `saved_encoder_folders`: where a saved configuration puts each encoder;
    - `load_pretrained_encoder` / `install_encoders`: load one encoder from a checkpoint, and put loaded encoders into
      a freshly built model;
    - `sentence_transformers_stacks`: its embedding as sentence-transformers modules.
    """

    checkpoint_config_name = CONTRASTIVE_CONFIG_NAME
    # removed from the names of the weights outside the encoders, so that they do not depend on the saving class
    head_prefix = "contrastive."

    def encoder_head_layout(self, name: str) -> MaskedLMLayout | None:
        """Where encoder ``name``'s weights file holds heads of this model too, when a save put them there (the
        encoder architecture's masked-LM model: `masked_lm_checkpoint.MaskedLMLayout`); None when it never does.
        Loading reads the heads there whenever the file holds them."""
        return None

    def saved_encoder_head_layout(self, name: str) -> MaskedLMLayout | None:
        """The `encoder_head_layout` a save writes encoder ``name`` in, or None: the encoder alone, every head
        beside it in `HEADS_WEIGHTS_NAME`."""
        return None

    # ---------------------------------------------------------------------------------------------------------
    # Saving
    # ---------------------------------------------------------------------------------------------------------

    def save_pretrained(
        self,
        save_directory: str | os.PathLike,
        is_main_process: bool = True,
        state_dict: dict | None = None,
        push_to_hub: bool = False,
        max_shard_size: int | str = "5GB",
        safe_serialization: bool = True,
        **kwargs,
    ) -> None:
        """Save the encoder(s) in their own architecture, the heads, this model's configuration and the
        sentence-transformers files (module docstring), safetensors only. ``state_dict``: the model's weights when
        they are not in the model (e.g. DeepSpeed ZeRO-3's consolidated copy). ``push_to_hub``: then upload the
        folder to ``repo_id`` (default: the folder's name) with ``token``, ``private`` and ``commit_message``."""
        if not safe_serialization:
            raise ValueError("contrastive_hf saves safetensors only: leave safe_serialization=True.")
        hub = {name: kwargs.pop(name) for name in ("repo_id", "token", "private", "commit_message") if name in kwargs}
        kwargs.pop("save_function", None)  # torch.save is never used: safetensors only
        if kwargs:
            raise TypeError(f"save_pretrained() got unexpected argument(s) {sorted(kwargs)}.")
        if is_main_process:
            self._write_checkpoint(os.fspath(save_directory), state_dict, max_shard_size)
        if push_to_hub and is_main_process:
            from huggingface_hub import create_repo, upload_folder

            repo_id = hub.get("repo_id") or os.path.basename(os.path.normpath(os.fspath(save_directory)))
            create_repo(repo_id, token=hub.get("token"), private=hub.get("private"), exist_ok=True)
            upload_folder(
                repo_id=repo_id,
                folder_path=save_directory,
                token=hub.get("token"),
                commit_message=hub.get("commit_message") or "Upload model",
            )

    def _write_checkpoint(self, save_directory: str, state_dict: dict | None, max_shard_size) -> None:
        from importlib.metadata import PackageNotFoundError, version

        # Every file below is written from this one state dict (under DeepSpeed ZeRO-3, the consolidated copy the
        # Trainer passes): the live parameters may be shards. Checked whole before the first file is touched.
        state_dict = self.state_dict() if state_dict is None else state_dict
        check_whole_weights(self, state_dict, save_directory)
        encoders = self.checkpoint_encoders()
        towers = [folder for folder, _, _ in encoders.values() if folder]
        if towers and self.tokenizer is None:
            # sentence-transformers loads each tower's tokenizer from the tower's folder: without one it builds an
            # empty vocabulary and embeds every text as unknown tokens, silently
            raise ValueError(
                f"Not saving {save_directory}: a {type(self).__name__} with two towers is saved as a "
                f"sentence-transformers Router, and each tower's folder ({', '.join(towers)}) needs the tokenizer. "
                "Set model.tokenizer = tokenizer before save_pretrained (ContrastiveTrainer does so from its "
                "processing_class)."
            )
        os.makedirs(save_directory, exist_ok=True)
        prefixes = {name: prefix for name, (_, prefix, _) in encoders.items()}
        encoder_states, heads = split_state_dict(state_dict, prefixes, strip=self.head_prefix)
        for name, (folder, _, encoder) in encoders.items():
            location, state = os.path.join(save_directory, folder), encoder_states[name]
            layout = self.saved_encoder_head_layout(name)
            if layout is not None:  # its head goes with it, out of the heads' file
                state = layout.to_checkpoint(state, heads)
            saved_dtype = weights_dtype(state)  # transformers empties the state dict as it writes
            with transformers_saves_replacing():  # each weights file replaced once written whole
                encoder.save_pretrained(location, state_dict=state, max_shard_size=max_shard_size)
            record_saved_dtype(location, saved_dtype)
            if layout is not None:
                record_architecture(location, layout.architecture)
            if folder:  # a tower in a sub-folder carries its tokenizer
                save_tokenizer(self.tokenizer, os.path.join(save_directory, folder))
        write_heads(save_directory, heads)
        try:
            package_version = version("contrastive_hf")
        except PackageNotFoundError:
            package_version = None
        saved = {**self.checkpoint_config(), "architectures": [type(self).__name__]}
        saved["contrastive_hf_version"] = package_version
        write_json(os.path.join(save_directory, self.checkpoint_config_name), saved)
        write_sentence_transformers_files(
            save_directory,
            self.sentence_transformers_stacks(),
            state_dict,
            similarity=self.similarity_fn_name,
            prompts=getattr(self.config, "prompts", None),
            default_prompt_name=getattr(self.config, "default_prompt_name", None),
            truncate_dim=getattr(self.config, "truncate_dim", None),
            tower_folders={
                "query" if name.startswith("query") else "document": folder
                for name, (folder, _, _) in encoders.items()
            },
        )

    # ---------------------------------------------------------------------------------------------------------
    # Loading
    # ---------------------------------------------------------------------------------------------------------

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | os.PathLike, *model_args, **kwargs):
        """Load a checkpoint saved in this layout, or one saved by contrastive_hf 0.1 (transformers' own layout).

        Takes transformers' loading arguments (``dtype``, ``revision``, ``token``, ``cache_dir``,
        ``attn_implementation``, ``local_files_only``, ``subfolder``...); any other keyword sets a field of the
        model's configuration, and an unknown one is an error listing the valid names.

        A plain pretrained encoder (``bert-base-uncased``: no contrastive_hf configuration) is wrapped with new heads
        as ``from_encoder_pretrained`` does, as ``BertForSequenceClassification.from_pretrained`` puts a new head on
        BERT: the base peft's ``AutoPeftModel`` rebuilds from an adapter's ``base_model_name_or_path``. A
        sentence-transformers folder (all-MiniLM-L6-v2) loads as the model its modules compute: its pooling, Dense
        layers, normalisation and prompts (`sentence_transformers_folders`).

        A weights file cut short or unreadable is named (`DamagedCheckpointError`), not left to the loader's error.
        """
        with naming_damaged_files(pretrained_model_name_or_path):
            return cls._load_pretrained(pretrained_model_name_or_path, *model_args, **kwargs)

    @classmethod
    def _load_pretrained(cls, pretrained_model_name_or_path: str | os.PathLike, *model_args, **kwargs):
        holds, saved = what_the_path_holds(
            pretrained_model_name_or_path, cls.checkpoint_config_name, **download_kwargs(kwargs)
        )
        wrap = getattr(cls, "from_encoder_pretrained", None)
        if holds in ("encoder", "sentence_transformers") and wrap is not None:
            return wrap(pretrained_model_name_or_path, *model_args, **kwargs)
        if holds != "saved":  # the layout of contrastive_hf 0.1: a config.json of our model type
            return super().from_pretrained(pretrained_model_name_or_path, *model_args, **kwargs)
        if model_args:
            raise TypeError("from_pretrained takes no positional model arguments besides the path.")
        kwargs.pop("config", None)  # AutoModel passes the root config.json's config; ours is the saved file
        for name in [name for name in kwargs if name.startswith("_") or name in _AUTO_CLASS_KWARGS]:
            kwargs.pop(name)  # what the Auto classes pass along for transformers' own loader
        loading = {name: kwargs.pop(name) for name in LOADING_KWARGS if name in kwargs}
        overrides = cls.check_config_overrides(kwargs)
        download = download_kwargs(loading)
        from transformers import AutoConfig

        encoder_configs = {}
        for name, folder in cls.saved_encoder_folders(saved).items():
            location = {**download, "subfolder": os.path.join(download.get("subfolder", ""), folder)}
            encoder_configs[name] = AutoConfig.from_pretrained(
                pretrained_model_name_or_path,
                trust_remote_code=loading.get("trust_remote_code", False),
                **{key: value for key, value in location.items() if value != ""},
            )
        config = cls.config_from_checkpoint(saved, encoder_configs, overrides)
        sources = {
            name: (pretrained_model_name_or_path, folder) for name, folder in cls.saved_encoder_folders(saved).items()
        }
        model = cls.assemble(config, sources, loading)
        heads = read_heads(pretrained_model_name_or_path, **download)
        encoder_heads = model.read_encoder_heads(pretrained_model_name_or_path, **download)
        model.load_heads({**heads, **encoder_heads})
        model.refuse_non_finite_weights(
            os.path.join(os.fspath(pretrained_model_name_or_path), download.get("subfolder") or ""),
            heads,
            encoder_heads,
        )
        model.config._name_or_path = str(pretrained_model_name_or_path)
        return model

    @classmethod
    def assemble(cls, config, sources: dict[str, tuple[str, str]], loading: dict):
        """A model of ``config`` whose encoders are loaded from ``sources`` (``{name: (path or Hub id, folder)}``)
        with transformers' ``loading`` arguments; its other weights are fresh (the caller loads them). The model is
        built with empty encoders on the meta device (`encoders_to_be_loaded`), as transformers' ``from_pretrained``
        builds a model before loading its weights: no encoder's worth of random weights drawn only to be replaced."""
        loading = dict(loading)
        dtype = loading.pop("dtype", None) or loading.pop("torch_dtype", None)
        with encoders_to_be_loaded():
            model = cls(config)
        encoders = {}
        for name, (source, folder) in sources.items():
            kwargs = dict(loading)
            subfolder = os.path.join(kwargs.pop("subfolder", "") or "", folder)
            if subfolder:
                kwargs["subfolder"] = subfolder
            if dtype is not None:
                kwargs["dtype"] = dtype
            with naming_damaged_files(source):  # a pretrained encoder (from_encoder_pretrained) too
                encoders[name] = model.load_pretrained_encoder(name, source, **kwargs)
        model.install_encoders(encoders)
        empty = [name for name, tensor in [*model.named_parameters(), *model.named_buffers()] if tensor.is_meta]
        if empty:  # a family whose install_encoders left an encoder out
            raise RuntimeError(f"{cls.__name__}: weights left empty after loading the encoders: {', '.join(empty)}.")
        return model.to(loaded_dtype(dtype, encoders.values()))

    @classmethod
    def check_config_overrides(cls, overrides: dict) -> dict:
        """``overrides`` when each names a field of the model's configuration; else a TypeError listing the valid
        configuration fields and loading arguments."""
        fields = cls.config_field_names()
        unknown = sorted(set(overrides) - set(fields))
        if unknown:
            raise TypeError(
                f"Unknown argument(s) {', '.join(unknown)} for {cls.__name__}: give fields of "
                f"{cls.config_class.__name__} ({', '.join(fields)}) or transformers' loading arguments "
                f"({', '.join(LOADING_KWARGS)})."
            )
        return overrides

    def load_heads(self, heads: dict[str, torch.Tensor]) -> None:
        """Load the saved weights outside the encoders. Weights this model does not have (an MLM head loaded into
        a `ContrastiveModel`) are skipped; weights it has but the checkpoint lacks, or whose shape changed (a
        projection overridden at load time), keep their fresh values and are reported."""
        own = self.state_dict()
        matched, mismatched = {}, []
        for name, tensor in heads.items():
            target = name if name in own else self.head_prefix + name
            if target not in own:
                continue
            if own[target].shape != tensor.shape:
                mismatched.append(f"{name} {tuple(tensor.shape)} -> {tuple(own[target].shape)}")
                continue
            matched[target] = tensor
        self.load_state_dict(matched, strict=False)
        encoder_prefixes = tuple(prefix for _, prefix, _ in self.checkpoint_encoders().values())
        missing = sorted(name for name in own if not name.startswith(encoder_prefixes) and name not in matched)
        if missing or mismatched:
            logger.warning(
                "%s: weights not in the checkpoint, initialised afresh: %s%s",
                type(self).__name__,
                ", ".join(missing) or "none",
                f"; of another shape in the checkpoint (skipped): {', '.join(mismatched)}" if mismatched else "",
            )

    def read_encoder_heads(self, name_or_path: str | os.PathLike, **download) -> dict[str, torch.Tensor]:
        """The heads a checkpoint (a folder or a Hub id) holds in its encoders' weight files
        (`encoder_head_layout`), under this model's names; {} when it holds none there (its heads are in
        `HEADS_WEIGHTS_NAME`, as every checkpoint before 0.3 has them)."""
        heads = {}
        for name, (folder, _, _) in self.checkpoint_encoders().items():
            layout = self.encoder_head_layout(name)
            if layout is None:
                continue
            subfolder = os.path.join(download.get("subfolder") or "", folder)
            location = {**download, **({"subfolder": subfolder} if subfolder else {})}
            _, head = layout.from_checkpoint(read_named_weights(name_or_path, layout.head_names.values(), **location))
            heads.update(head)
        return heads

    def load_saved_weights(self, folder: str | os.PathLike) -> None:
        """Load every weight of a checkpoint folder saved in this layout into this model (a Trainer resuming, or
        loading its best checkpoint): the encoders strictly (with a head saved in their weight files:
        `encoder_head_layout`), then the heads."""
        folder = os.fspath(folder)
        encoder_heads = {}
        for name, (folder_name, _, encoder) in self.checkpoint_encoders().items():
            location = os.path.join(folder, folder_name)
            files = weight_files(location)
            if not files:
                raise FileNotFoundError(f"{location} has no model.safetensors: not a complete checkpoint.")
            layout, expected, loaded = self.encoder_head_layout(name), set(encoder.state_dict()), set()
            for weights in files:  # shard after shard, as transformers' `load_sharded_checkpoint` reads them
                try:
                    state = load_file(weights, device="cpu")
                except Exception as error:  # safetensors' own errors for truncated files
                    raise OSError(
                        f"{weights} cannot be read ({type(error).__name__}: {error}); it is truncated or corrupt: "
                        "resume from an earlier checkpoint."
                    ) from error
                if layout is not None:
                    state, head = layout.from_checkpoint(state)
                    encoder_heads.update(head)
                unexpected = sorted(set(state) - expected)
                if unexpected:
                    raise RuntimeError(f"{weights} holds weights {type(encoder).__name__} has not: {unexpected[:5]}.")
                encoder.load_state_dict(state, strict=False)
                loaded.update(state)
            missing = sorted(expected - loaded)
            if missing:
                raise RuntimeError(f"{location} lacks weights of {type(encoder).__name__}: {missing[:5]}.")
        heads = read_heads(folder)
        self.load_heads({**heads, **encoder_heads})
        self.refuse_non_finite_weights(folder, heads, encoder_heads)

    def refuse_non_finite_weights(
        self, folder: str, heads: dict[str, torch.Tensor], encoder_heads: dict[str, torch.Tensor] | None = None
    ) -> None:
        """After loading the checkpoint in ``folder`` (its ``heads`` as read, and those read from its encoders'
        weight files, ``encoder_heads``): a `ValueError` (`refuse_non_finite`) naming the first weights file that
        holds NaN or infinite values, and those tensors under its own names."""
        for folder_name, _, encoder in self.checkpoint_encoders().values():
            refuse_non_finite(encoder.state_dict(), os.path.join(folder, folder_name, "model.safetensors"))
        refuse_non_finite(encoder_heads or {}, os.path.join(folder, "model.safetensors"))
        refuse_non_finite(heads, os.path.join(folder, HEADS_WEIGHTS_NAME))
