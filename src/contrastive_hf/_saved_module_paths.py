"""Module paths of contrastive_hf 0.1 that files saved by it name: kept only so that those files load.

No code imports through these paths (tests/test_api.py checks that the package, its tests, examples and benchmarks
never do); each is a module holding only the classes such files name, taken from the module that defines them now.
Two kinds of saved file name a module of the package:

* ``training_args.bin`` pickles the run's arguments under the module of their class: 0.1's runs name
  ``contrastive_hf.training_args`` (CLEAR, SimCSE, DeCLUTR, DPR), ``contrastive_hf.sg_bert`` and
  ``contrastive_hf.multitask_trainer``, which a ``torch.load(path, weights_only=False)`` imports. (Resuming reads
  these files without importing anything: `training.resume_changes`.)
* a peft adapter's ``adapter_config.json`` names the adapted model's class and module (``auto_mapping``), which
  ``AutoPeftModel.from_pretrained(path, import_allowlist=["contrastive_hf"])`` imports: 0.1's adapters name
  ``contrastive_hf.modeling_contrastive`` (or ``contrastive_hf.modeling_dual_encoder``).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

# saved module path -> {class name a saved file gives: the module that defines the class}
SAVED_MODULE_PATHS = {
    "contrastive_hf.training_args": {"ContrastiveTrainingArguments": "contrastive_hf.training.training_args"},
    "contrastive_hf.sg_bert": {"SelfGuidedTrainingArguments": "contrastive_hf.recipes.sg_bert.trainer"},
    "contrastive_hf.multitask_trainer": {"MultitaskTrainingArguments": "contrastive_hf.recipes.multitask.trainer"},
    "contrastive_hf.modeling_contrastive": {
        "ContrastiveModel": "contrastive_hf.models.modeling_contrastive",
        "ContrastiveForPreTraining": "contrastive_hf.models.modeling_contrastive_pretraining",
        "ContrastiveForSequenceClassification": "contrastive_hf.models.modeling_contrastive",
    },
    "contrastive_hf.modeling_dual_encoder": {"DualEncoderModel": "contrastive_hf.models.modeling_dual_encoder"},
}


class _SavedPathLoader(importlib.abc.Loader):
    def create_module(self, spec):
        return None  # a plain module, filled by exec_module

    def exec_module(self, module) -> None:
        for name, home in SAVED_MODULE_PATHS[module.__name__].items():
            setattr(module, name, getattr(importlib.import_module(home), name))


class _SavedPathFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname not in SAVED_MODULE_PATHS:
            return None
        return importlib.util.spec_from_loader(fullname, _SavedPathLoader())


def install() -> None:
    """Make the saved module paths importable (once per interpreter)."""
    if not any(isinstance(finder, _SavedPathFinder) for finder in sys.meta_path):
        sys.meta_path.append(_SavedPathFinder())
