"""The flat module paths of contrastive_hf 0.1, kept importable for one release after the move into wings.

``import contrastive_hf.collators`` (and a pickle naming ``contrastive_hf.training_args.ContrastiveTrainingArguments``,
as every ``training_args.bin`` of 0.1 does) still works: the old name is an alias of the module at its new place,
the same module object, and importing it warns once with the new path. Remove in 0.3.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

# old module -> its new place (one source of truth for the move; README's Layout table shows the new tree)
MOVED_MODULES = {
    "configuration_contrastive": "models.configuration_contrastive",
    "configuration_dual_encoder": "models.configuration_dual_encoder",
    "modeling_contrastive": "models.modeling_contrastive",
    "modeling_dual_encoder": "models.modeling_dual_encoder",
    "losses": "models.losses",
    "distributed": "models.distributed",
    "sentence_transformers_files": "models.sentence_transformers_files",
    "token_batch": "data.token_batch",
    "seeding": "data.seeding",
    "augmentations": "data.augmentations",
    "synonyms": "data.synonyms",
    "collators": "data.collators",
    "trainer": "training.trainer",
    "training_args": "training.training_args",
    "grad_cache": "training.grad_cache",
    "prebatch_queue": "training.prebatch_queue",
    "span_views": "recipes.declutr",
    "dual_encoder_data": "recipes.dpr",
    "sg_bert": "recipes.sg_bert",
    "multitask": "recipes.multitask",
    "multitask_trainer": "recipes.multitask.trainer",
    "pcgrad": "recipes.multitask.pcgrad",
    "model_card": "hub.model_card",
    "adapters": "hub.adapters",
    "cli": "commands.cli",
    "scripts": "commands.scripts",
    "loading": "commands.loading",
}
# `contrastive_hf.data` (0.1: the corpus module) is now the data package, which exports the same names.

_PACKAGE = __name__.rpartition(".")[0]


class _MovedModuleLoader(importlib.abc.Loader):
    def __init__(self, new_name: str):
        self.new_name = new_name

    def create_module(self, spec):
        old_name = spec.name
        warnings.warn(
            f"{old_name} moved to {self.new_name} in contrastive_hf 0.2; the old path will be removed in 0.3: "
            f"import from {self.new_name}.",
            FutureWarning,
            stacklevel=2,
        )
        return importlib.import_module(self.new_name)

    def exec_module(self, module) -> None:  # the module was executed at its new place
        pass


class _MovedModuleFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        package, _, name = fullname.rpartition(".")
        if package != _PACKAGE or name not in MOVED_MODULES:
            return None
        return importlib.util.spec_from_loader(fullname, _MovedModuleLoader(f"{_PACKAGE}.{MOVED_MODULES[name]}"))


def install() -> None:
    """Make the old flat paths importable (once per interpreter)."""
    if not any(isinstance(finder, _MovedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.append(_MovedModuleFinder())
