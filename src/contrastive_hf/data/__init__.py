"""Text in, batches out: corpora (files, Hub, streaming), CLEAR's augmentations on token ids, synonyms, and the
collators that turn sentences into views.

``corpus`` (reading and tokenizing), ``augmentations`` and ``synonyms`` (views), ``collators`` (batches),
``seeding`` and ``token_batch`` (keyed random draws and padded arrays, shared by all of them).
"""

from __future__ import annotations

from .._lazy import lazy_exports

_EXPORTS = {
    **{
        name: ".corpus"
        for name in (
            "first_examples",
            "load_corpus",
            "tokenize_corpus",
            "text_stream",
            "text_shards",
            "split_into_sentences",
            "prepare_streaming",
            "special_token_frame",
            "resolve_text_column",
            "EmptyCorpusError",
        )
    },
    "ContrastiveDataCollator": ".collators",
    "PairCollator": ".collators",
    "EXAMPLE_INDEX_COLUMN": ".seeding",
    "add_del_token": ".augmentations",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = list(_EXPORTS)
