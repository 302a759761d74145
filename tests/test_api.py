"""The API a user types: the main classes at the top level, imported on first use."""

from __future__ import annotations

import contrastive_hf


def test_the_public_pieces_import_from_the_package():
    from contrastive_hf import (  # noqa: F401
        ContrastiveDataCollator,
        ContrastiveForPreTraining,
        ContrastiveModel,
        ContrastiveTrainer,
        ContrastiveTrainingArguments,
        DualEncoderModel,
        MultitaskTrainer,
        PairCollator,
        QueryPassageCollator,
        SelfGuidedTrainer,
        SpanViewCollator,
        evaluate_sts,
        load_corpus,
        read_stsbenchmark,
    )

    assert set(contrastive_hf.__all__) <= set(dir(contrastive_hf))
    for name in contrastive_hf.__all__:
        assert getattr(contrastive_hf, name) is not None, name
