"""SimCSE (Gao, Yao & Chen, EMNLP 2021, "SimCSE: Simple Contrastive Learning of Sentence Embeddings").

* ``unsup``: each sentence is encoded twice; the two dropout masks make the two views (the ``dropout``
  augmentation of `ContrastiveDataCollator`), and the other sentences of the batch are the negatives.
* ``sup``: natural language inference triples (premise, entailment hypothesis, contradiction hypothesis): the
  entailment is the positive and the contradiction the anchor's hard negative (`PairCollator`, SimCSE's NLI format
  ``sent0,sent1,hard_neg``).

Both train InfoNCE at temperature 0.05 on the [CLS] vector through SimCSE's MLP head (one dense layer and tanh):
in training only for ``unsup``, kept at inference for ``sup``. This module holds the recipe's defaults (its paper's
§3-4 and Appendix A, and its released ``run_unsup_example.sh`` / ``run_sup_example.sh``), its model configuration,
its batches and its model-card texts, in the shape of every recipe (`contrastive_hf.recipes`);
``examples/run_simcse.py`` is the command.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

from ...data.seeding import EXAMPLE_INDEX_COLUMN
from .. import register_recipe

__all__ = [
    "MODEL_CARDS",
    "DEFAULTS",
    "MODES",
    "SIMCSE_HEAD",
    "argument_defaults",
    "mode_defaults",
    "model_config",
    "build_collator",
    "prepare_pairs",
    "build_mixture",
    "describe_views",
]

logger = logging.getLogger(__name__)

MODES = ("unsup", "sup")
# The model configuration of both modes: InfoNCE at tau 0.05 on the [CLS] hidden state under SimCSE's MLP. SimCSE's
# encoder has no pooler layer, hence "cls_before_pooler" (the raw [CLS] state) under the MLP.
SIMCSE_HEAD = {"projection_layers": 1, "projection_activation": "tanh", "projection_output_activation": True}
_MODEL = {
    "pooler_type": "cls_before_pooler",
    "projection_type": "mlp",
    "temperature": 0.05,
    "contrastive_loss": "info_nce",
    "hard_negative_weight": 0.0,
}
# Each mode's hyper-parameters for BERT-base, as run_simcse.py's arguments (`argument_defaults`), except "batch_size",
# the global batch: each process gets batch_size / WORLD_SIZE (--per_device_train_batch_size); max length 32 in both.
DEFAULTS = {
    "unsup": {
        **_MODEL,
        "batch_size": 64,
        "learning_rate": 3e-5,
        "num_train_epochs": 1,
        "max_seq_length": 32,
        "projection_at_inference": False,
        "mlm_weight": 0.1,  # SimCSE's auxiliary MLM (--do_mlm), off unless asked for
    },
    # 512 on 4 GPUs x 128 in SimCSE; the MLP stays in the embeddings (no --mlp_only_train for supervised SimCSE)
    "sup": {
        **_MODEL,
        "batch_size": 512,
        "learning_rate": 5e-5,
        "num_train_epochs": 3,
        "max_seq_length": 32,
        "projection_at_inference": True,
        "mlm_weight": 0.1,
    },
}

_BIBTEX = (
    "@inproceedings{gao2021simcse,\n  title={SimCSE: Simple Contrastive Learning of Sentence Embeddings},\n"
    "  author={Gao, Tianyu and Yao, Xingcheng and Chen, Danqi},\n  booktitle={EMNLP},\n  year={2021}\n}"
)
MODEL_CARDS = {
    "SimCSE": {
        "name": "SimCSE",
        "description": "Unsupervised SimCSE contrasts two encodings of the same sentence that differ only by "
        "dropout, with the other sentences of the batch as negatives.",
        "citation_short": "Gao et al., 2021",
        "bibtex": _BIBTEX,
    },
    "Supervised SimCSE": {
        "name": "Supervised SimCSE",
        "description": "Supervised SimCSE trains on natural language inference pairs: each premise's entailment "
        "hypothesis is its positive and its contradiction hypothesis a hard negative, with the other sentences of "
        "the batch as further negatives.",
        "citation_short": "Gao et al., 2021",
        "bibtex": _BIBTEX,
    },
}


def argument_defaults(given: Mapping[str, Any]) -> dict:
    """run_simcse.py's defaults for the settings ``given`` on its command line or in its settings file: the table of
    their ``mode`` (`mode_defaults`), for `commands.arguments.parse_arguments`."""
    return mode_defaults(given.get("mode"))


def mode_defaults(mode: str | None, world_size: int | None = None) -> dict:
    """SimCSE's defaults for ``mode`` as argument values: model configuration, ``per_device_train_batch_size`` (the
    global batch over ``world_size`` processes; default: ``WORLD_SIZE`` as `accelerate launch` sets it), learning
    rate, epochs, max length. {} for a missing or unknown mode (an argument parser then reports it)."""
    if mode not in DEFAULTS:
        return {}
    defaults = dict(DEFAULTS[mode])
    world_size = world_size or int(os.environ.get("WORLD_SIZE", "1"))
    defaults["per_device_train_batch_size"] = max(1, defaults.pop("batch_size") // world_size)
    return defaults


def model_config(mode: str, do_mlm: bool = False, **overrides) -> dict:
    """`ContrastiveConfig` keyword arguments of SimCSE's model for ``mode`` (``overrides`` win): the MLP head, InfoNCE,
    and with ``do_mlm`` its auxiliary MLM term."""
    if mode not in MODES:
        raise ValueError(f"Unknown SimCSE mode {mode!r}: choose one of {', '.join(MODES)}.")
    config = {name: DEFAULTS[mode][name] for name in (*_MODEL, "projection_at_inference", "mlm_weight")}
    config.update(SIMCSE_HEAD, cl_weight=1.0, **overrides)
    if not do_mlm:
        config["mlm_weight"] = 0.0
    return config


def build_collator(
    mode: str,
    tokenizer,
    max_length: int = 32,
    pair_columns: list[str] | None = None,
    do_mlm: bool = False,
    mlm_probability: float = 0.15,
    seed: int | None = None,
    prompts: dict[str, str] | None = None,
    include_prompt: bool = True,
):
    """SimCSE's batches: two copies of each sentence (``unsup``; the encoder's dropout makes the views differ) or
    (anchor, positive[, hard negatives]) rows (``sup``), with an MLM copy of the anchors when ``do_mlm``; ``sup``
    prefixes the anchors with the ``query`` prompt and the other columns with the ``document`` one (the model
    config's ``prompts`` and ``include_prompt``)."""
    from ...data.collators import ContrastiveDataCollator, PairCollator

    if mode == "unsup":
        if prompts:
            raise ValueError(
                f"Prompts {prompts} are applied to supervised pairs (--mode sup), whose columns have roles; the "
                "dropout views of --mode unsup take none. Drop --query_prompt / --document_prompt."
            )
        return ContrastiveDataCollator(
            tokenizer,
            augmentation="dropout",
            mlm=do_mlm,
            mlm_probability=mlm_probability,
            max_length=max_length,
            seed=seed,
        )
    return PairCollator(
        tokenizer,
        columns=pair_columns,
        max_length=max_length,
        mlm=do_mlm,
        mlm_probability=mlm_probability,
        seed=seed,
        prompts=prompts,
        include_prompt=include_prompt,
    )


def prepare_pairs(corpus, collator, num_proc: int | None = None):
    """Supervised SimCSE's training rows: the collator's columns resolved from ``corpus`` (and fixed on the
    collator, so that every batch uses the same), rows missing any of them dropped and counted, and each row numbered
    (`EXAMPLE_INDEX_COLUMN`, from which its MLM masks are drawn). The texts stay text: the collator tokenizes each
    batch."""
    from ...data.reading import drop_incomplete_rows

    columns = collator.resolve_columns({name: name for name in corpus.column_names})  # by the names present
    collator.columns = columns
    corpus = drop_incomplete_rows(corpus, columns, num_proc)
    corpus = corpus.map(
        lambda batch, indices: {EXAMPLE_INDEX_COLUMN: indices}, batched=True, with_indices=True, desc="Numbering"
    )
    return corpus


def build_mixture(
    files: dict[str, str],
    tokenizer,
    schedule: str = "proportional",
    max_length: int = 32,
    max_train_samples: int | None = None,
    num_proc: int | None = None,
    cache_dir: str | None = None,
    **collator_options,
):
    """Several training files in one run, one dataset per batch (`data.mixture`): ``(DatasetMixture,
    MixtureCollator)``. A text file (one sentence per line) gives unsupervised SimCSE's dropout views of its
    sentences; a csv or json file, (anchor, positive, hard negatives) rows with its own columns (`prepare_pairs`).
    ``collator_options`` go to `build_collator` (``do_mlm``, ``mlm_probability``, ``seed``, ``prompts``...); each
    dataset is cut to its first ``max_train_samples`` examples."""
    from ...data.mixture import DatasetMixture, MixtureCollator
    from ...data.reading import first_examples, load_corpus
    from ...data.tokenizing import tokenize_corpus

    datasets, collators = {}, {}
    for name, path in files.items():
        corpus = load_corpus(path, cache_dir=cache_dir)
        if corpus.column_names == ["text"]:  # sentences: dropout views
            collators[name] = build_collator("unsup", tokenizer, max_length=max_length, **collator_options)
            dataset = tokenize_corpus(corpus, tokenizer, max_seq_length=max_length, num_proc=num_proc)
        else:
            collators[name] = build_collator("sup", tokenizer, max_length=max_length, **collator_options)
            dataset = prepare_pairs(corpus, collators[name], num_proc)
        datasets[name] = first_examples(dataset, max_train_samples)
    return DatasetMixture(datasets, schedule=schedule), MixtureCollator(collators)


def describe_views(mode: str, columns) -> str:
    """The card's "positive pairs" line."""
    if mode == "unsup":
        return "dropout"
    views = f"NLI: {columns[0]} -> {columns[1]} (entailment)"
    if len(columns) == 3:
        return views + f", hard negative {columns[2]} (contradiction)"
    return views + (f", hard negatives {', '.join(columns[2:])}" if len(columns) > 3 else "")


def runs_simcse(facts) -> bool:
    """A sentence encoder trained on dropout views alone, no MLM (`ContrastiveDataCollator`'s default views)."""
    sentence_encoder = facts.get("model_type") != "dual_encoder"
    return sentence_encoder and facts.get("augmentation") == "dropout" and not facts.get("mlm")


def runs_supervised_simcse(facts) -> bool:
    """A sentence encoder trained on (anchor, positive[, negatives]) pairs (`PairCollator`)."""
    return facts.get("model_type") != "dual_encoder" and bool(facts.get("pairs"))


register_recipe(__name__, claims={"SimCSE": runs_simcse, "Supervised SimCSE": runs_supervised_simcse})
