"""The training progress bar: transformers' own (steps, elapsed time, ETA), with the latest losses on it."""

from __future__ import annotations

import logging

from transformers import ProgressCallback
from transformers.utils import logging as transformers_logging

__all__ = ["LossProgressCallback", "show_losses_on_progress_bar"]


class LossProgressCallback(ProgressCallback):
    """transformers' training progress bar, which shows the latest of the ``shown`` figures (e.g. the loss and its
    parts) at its end instead of printing every logged dict under it, so that the log stays readable however often
    a run logs (every 2% of the steps by default in `ContrastiveTrainingArguments`). Evaluation results are printed
    as transformers prints them; at log level INFO or lower (``--log_level info``) every training log and the
    end-of-training summary are printed too. All of them are kept in ``trainer_state.json`` either way."""

    def __init__(self, shown: tuple[str, ...] = ("loss",)):
        super().__init__()
        self.shown = shown

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = logs or {}
        quiet = transformers_logging.get_verbosity() > logging.INFO
        if "loss" in logs and self.training_bar is not None:
            shown = {name: f"{logs[name]:.4g}" for name in self.shown if isinstance(logs.get(name), (int, float))}
            self.training_bar.set_postfix(shown, refresh=False)
            if quiet:
                return
        if quiet and "train_runtime" in logs:
            return
        super().on_log(args, state, control, logs=logs, **kwargs)


def show_losses_on_progress_bar(trainer, shown: tuple[str, ...] = ("loss",)) -> None:
    """Replace ``trainer``'s progress bar (there unless ``--disable_tqdm``) by a `LossProgressCallback` that shows
    the ``shown`` figures."""
    if trainer.pop_callback(ProgressCallback) is not None:
        trainer.add_callback(LossProgressCallback(shown))
