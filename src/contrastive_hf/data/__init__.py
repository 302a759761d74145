"""Text in, batches out: corpora (files, Hub, streaming), CLEAR's augmentations on token ids, synonyms, and the
collators that turn sentences into views.

``reading``, ``streams`` and ``tokenizing`` (a corpus from files or the Hub, streamed text; ``corpus`` exports them;
``corpus_files``: what both readers know of the files), ``augmentations`` and ``synonyms`` (views), ``collators``
(batches), ``seeding`` and ``token_batch`` (keyed random draws and padded arrays, shared by all of them).
"""

from __future__ import annotations

from .._lazy import lazy_exports

_EXPORTS = {
    **dict.fromkeys(
        ("load_corpus", "first_examples", "resolve_text_column", "EmptyCorpusError"),
        ".reading",
    ),
    **dict.fromkeys(("text_stream", "text_shards", "prepare_streaming"), ".streams"),
    **dict.fromkeys(("tokenize_corpus", "split_into_sentences", "special_token_frame"), ".tokenizing"),
    "Collator": ".collator_protocol",
    "ContrastiveDataCollator": ".collators",
    "PairCollator": ".collators",
    "EXAMPLE_INDEX_COLUMN": ".seeding",
    "add_del_token": ".augmentations",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = list(_EXPORTS)
