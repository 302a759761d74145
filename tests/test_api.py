"""The API a user types: the main classes at the top level, imported on first use."""

from __future__ import annotations

import subprocess
import sys

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


def test_importing_the_package_does_not_import_the_trainer_datasets_or_the_evaluation_stack():
    """The trainer, datasets and evaluation modules load on first use, not with `import contrastive_hf`."""
    code = (
        "import sys, contrastive_hf\n"
        "heavy = ['contrastive_hf.training.trainer', 'datasets', 'contrastive_hf.evaluation', 'matplotlib']\n"
        "print([name for name in heavy if name in sys.modules])\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]", result.stdout
