"""Several training datasets in one run (sentence-transformers' dataset dictionaries, FlagEmbedding's several data
files): text for augmented views, pairs and triplets side by side, each batch drawn from one dataset.

One dataset per batch keeps in-batch negatives within a dataset: an NLI premise is never contrasted with a
Wikipedia sentence that is an easy negative, and a dataset's columns (and so its views per example) can differ from
another's. Batches are scheduled by `data.batch_groups.GroupedBatchSampler`, as a function of the seed and the epoch:

* ``proportional``: the batches of every dataset in a random order, so each dataset's share of the steps is its
  share of the examples, and every example is seen once per epoch;
* ``round_robin``: one batch of each dataset in turn (a dataset that has run out is skipped).

With several processes every process draws the same dataset at a step (each takes its slice of the step's global
batch), and a resumed run sees the batches of the uninterrupted one. `ContrastiveTrainer` takes a `DatasetMixture`
as its ``train_dataset`` with a `MixtureCollator`, and logs each dataset's contrastive loss as ``cl_loss_<name>``.

Example:

```python
>>> mixture = DatasetMixture({"nli": nli_triplets, "wiki": wiki_sentences}, schedule="proportional")
>>> collator = MixtureCollator({"nli": PairCollator(tokenizer), "wiki": ContrastiveDataCollator(tokenizer, "dropout")})
>>> trainer = ContrastiveTrainer(model=model, args=args, train_dataset=mixture, data_collator=collator)
```
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .batch_groups import GroupedBatchSampler, GroupedDataset, grouped_dataloader
from .collators import CollatorEpochCallback

__all__ = [
    "DATASET_KEY",
    "MIXTURE_SCHEDULES",
    "DatasetMixture",
    "MixtureBatchSampler",
    "MixtureCollator",
    "mixture_dataloader",
    "parse_named_files",
]

# The batch (and example) entry naming the dataset a batch was drawn from.
DATASET_KEY = "dataset"
# The mixture's schedules, as `GroupedBatchSampler` names them.
MIXTURE_SCHEDULES = {"proportional": "random", "round_robin": "round_robin"}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class DatasetMixture(GroupedDataset):
    """Named training datasets behind one index, trained one dataset per batch under ``schedule``
    (`MIXTURE_SCHEDULES`: ``proportional`` or ``round_robin``). Each example comes back with its dataset's name under
    `DATASET_KEY`; names appear in logged metric names (``cl_loss_<name>``), so they are letters, digits, ``_``,
    ``-`` and ``.``."""

    group_key = DATASET_KEY

    def __init__(self, datasets: Mapping[str, Sequence], schedule: str = "proportional"):
        if schedule not in MIXTURE_SCHEDULES:
            raise ValueError(f"Unknown dataset schedule {schedule!r}: choose one of {', '.join(MIXTURE_SCHEDULES)}.")
        bad = [name for name in datasets if not _NAME.match(str(name))]
        if bad:
            raise ValueError(
                f"Dataset names {bad} name logged metrics (cl_loss_<name>): use letters, digits, '_', '-' and '.'."
            )
        super().__init__(datasets)
        self.schedule = schedule


class MixtureBatchSampler(GroupedBatchSampler):
    """The batches of a `DatasetMixture`: one dataset per (global) batch, ordered by the mixture's schedule."""

    noun = "dataset"


class MixtureCollator:
    """Collates a batch of one dataset of a `DatasetMixture` with that dataset's collator (or one collator for
    all), and names the dataset in the batch under `DATASET_KEY` (which `ContrastiveTrainer` takes out before the
    model's forward, to log the dataset's loss). ``set_epoch`` reaches every collator that draws per epoch."""

    def __init__(self, collators: Mapping[str, Callable] | Callable):
        self.collators = collators

    def collator_of(self, name: str) -> Callable:
        if not isinstance(self.collators, Mapping):
            return self.collators
        if name not in self.collators:
            raise ValueError(f"No collator for dataset {name!r}; the MixtureCollator has {sorted(self.collators)}.")
        return self.collators[name]

    def set_epoch(self, epoch: int) -> None:
        collators = self.collators.values() if isinstance(self.collators, Mapping) else [self.collators]
        for collator in collators:
            if hasattr(collator, "set_epoch"):
                collator.set_epoch(epoch)

    def card_description(self) -> dict:
        """What a model card says about these batches: each dataset's views (`hub.model_card`)."""
        if not isinstance(self.collators, Mapping):
            described = getattr(self.collators, "card_description", dict)()
            return {**described, "views": f"one dataset per batch: {described.get('views', 'as collated')}"}
        parts = {name: getattr(collator, "card_description", dict)() for name, collator in self.collators.items()}
        return {
            "parts": list(parts.values()),  # each dataset's own description, whose method the card names
            "views": "one dataset per batch: " + "; ".join(f"{n}: {p.get('views', '?')}" for n, p in parts.items()),
            "hard_negatives": max((int(part.get("hard_negatives", 0)) for part in parts.values()), default=0),
        }

    def hard_negatives_in_batches(self, dataset) -> None:
        """Whether a batch gives each query hard negatives (`training.sanity` asks): each dataset's collator knows
        for its own batches, and which dataset a step draws is not known before training: None."""
        return None

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        names = {feature.get(DATASET_KEY) for feature in features}
        if len(names) != 1 or None in names:
            raise ValueError(
                f"A mixture batch must hold examples of one dataset, got {sorted(map(str, names))}: draw batches with "
                "MixtureBatchSampler (ContrastiveTrainer does for a DatasetMixture train_dataset)."
            )
        name = names.pop()
        batch = self.collator_of(name)(features)
        batch[DATASET_KEY] = name
        return batch


def mixture_dataloader(trainer):
    """A Trainer's training dataloader over its `DatasetMixture`: `MixtureBatchSampler` batches of
    ``per_device_train_batch_size`` per process, under the mixture's schedule, seeded by ``data_seed`` (else
    ``seed``); the sampler's epoch follows the trainer's, also in a resumed epoch."""
    mixture: DatasetMixture = trainer.train_dataset
    args = trainer.args
    sampler = MixtureBatchSampler(
        mixture.sizes,
        trainer._train_batch_size,
        schedule=MIXTURE_SCHEDULES[mixture.schedule],
        seed=args.data_seed if args.data_seed is not None else args.seed,
        num_processes=trainer.accelerator.num_processes,
        process_index=trainer.accelerator.process_index,
        drop_last=args.dataloader_drop_last,
    )
    # the Trainer cannot reach a batch sampler inside a resumed epoch's skipping loader: a callback sets its epoch
    for callback in list(trainer.callback_handler.callbacks):
        if isinstance(callback, CollatorEpochCallback) and isinstance(callback.collator, MixtureBatchSampler):
            trainer.remove_callback(callback)
    trainer.add_callback(CollatorEpochCallback(sampler))
    return grouped_dataloader(trainer, sampler)


def parse_named_files(text: str | Mapping[str, str] | Sequence[str]) -> dict[str, str]:
    """``"nli=data/nli.csv,wiki=data/wiki.txt"`` (a flag; or a list of ``name=path``, or a mapping from a JSON
    settings file) as ``{name: path}``, in order."""
    if isinstance(text, Mapping):
        return {str(name): str(path) for name, path in text.items()}
    parts = text.split(",") if isinstance(text, str) else list(text)
    files = {}
    for part in (part.strip() for part in parts):
        name, separator, path = part.partition("=")
        if not separator or not name.strip() or not path.strip():
            raise ValueError(f"--train_files takes name=path pairs separated by commas, got {part!r} in {text!r}.")
        if name.strip() in files:
            raise ValueError(f"Dataset name {name.strip()!r} is given twice in --train_files.")
        files[name.strip()] = path.strip()
    return files
