"""SimCSE's batches: dropout views of sentences (``unsup``), NLI rows (``sup``), or several datasets in one run."""

from __future__ import annotations

from ...data.seeding import EXAMPLE_INDEX_COLUMN

__all__ = ["build_collator", "prepare_pairs", "build_mixture", "describe_views"]


def build_collator(
    mode: str,
    tokenizer,
    max_length: int = 32,
    pair_columns: list[str] | None = None,
    do_mlm: bool = False,
    mlm_probability: float = 0.15,
    mask_token: str | None = None,
    masked_next_token: bool = False,
    seed: int | None = None,
    prompts: dict[str, str] | None = None,
    include_prompt: bool = True,
):
    """SimCSE's batches: two copies of each sentence (``unsup``; the encoder's dropout makes the views differ) or
    (anchor, positive[, hard negatives]) rows (``sup``), with an MLM copy of the anchors when ``do_mlm``; ``sup``
    prefixes the anchors with the ``query`` prompt and the other columns with the ``document`` one (the model
    config's ``prompts`` and ``include_prompt``). ``mask_token`` and ``masked_next_token``: the MLM copy's mask token,
    and a decoder's masked next-token prediction (`ContrastiveDataCollator`)."""
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
            mask_token=mask_token,
            masked_next_token=masked_next_token,
            max_length=max_length,
            seed=seed,
        )
    return PairCollator(
        tokenizer,
        columns=pair_columns,
        max_length=max_length,
        mlm=do_mlm,
        mlm_probability=mlm_probability,
        mask_token=mask_token,
        masked_next_token=masked_next_token,
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
