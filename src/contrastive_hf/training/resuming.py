"""`CheckedResume`: what every trainer of the package guarantees about its checkpoints and resumes, written once.

* a checkpoint is marked incomplete until every process has written it, and only then pushed or counted by
  ``save_total_limit`` (`checkpoints.saving_checkpoint`, `checkpoints.rotate_checkpoints`);
* ``resume_from_checkpoint=True`` resumes the newest complete checkpoint, and a folder named that is incomplete is
  refused listing what is wrong (`checkpoints.resolve_resume_checkpoint`);
* a resume that would train other rows than the run saved (another data layout, other data, other views, another
  seed) is refused before training, or with ``resume_with_changed_data`` goes on saying how many rows the epoch
  skips or repeats (`resume_changes.DataLayout`); other changed settings are warned about;
* the best checkpoint a resumed state names is found beside the checkpoint resumed (`SecretFreeOutputs` saves it by
  its folder name).

`ContrastiveTrainer` (and so SG-BERT's and DPR's trainers) and `MultitaskTrainer` put it first among their bases.
"""

from __future__ import annotations

import logging
import os

from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from ..models.checkpoint_files import EmbeddingCheckpointMixin
from .checkpoints import (
    CheckpointLayout,
    recorded_best_checkpoint,
    resolve_resume_checkpoint,
    rotate_checkpoints,
    saving_checkpoint,
)
from .resume_changes import DataLayout, refuse_changed_data_layout, warn_of_changed_settings
from .training_args import arguments_set

__all__ = ["CheckedResume"]

logger = logging.getLogger(__name__)


class CheckedResume:
    """Trainer mixin (before `transformers.Trainer` among the bases): checkpoints that are whole or say so, and
    resumes that train the rows the saved run would have (see the module docstring). A subclass names the files its
    checkpoints add (`checkpoint_extra_files`) and writes them (`save_checkpoint_extras`)."""

    def saved_model(self):
        """The model `save_model` writes: the trained model itself here; a trainer whose training model wraps the
        one it saves (SG-BERT) returns the saved one."""
        return self.accelerator.unwrap_model(self.model)

    def checkpoint_extra_files(self) -> tuple[str, ...]:
        """Files a checkpoint of this trainer holds beside the Trainer's (e.g. the pre-batch queue)."""
        return ()

    def save_checkpoint_extras(self, folder: str) -> None:
        """Write `checkpoint_extra_files` into ``folder`` (on the process that saves), inside the checkpoint's save."""

    def checkpoint_layout(self) -> CheckpointLayout:
        """What this trainer's checkpoints hold: the Trainer's files (the weights where the saved model puts its
        encoders) and `checkpoint_extra_files`."""
        saved = self.saved_model()
        folders = (
            [folder for folder, _, _ in saved.checkpoint_encoders().values()]
            if isinstance(saved, EmbeddingCheckpointMixin)
            else [""]
        )
        return CheckpointLayout(
            self.is_deepspeed_enabled, self.checkpoint_extra_files(), weight_folders=tuple(folders)
        )

    def train(self, resume_from_checkpoint: str | bool | None = None, trial=None, **kwargs):
        """`Trainer.train`, resuming only from a complete checkpoint, and only onto the rows it would have trained
        (`resume_changes.refuse_changed_data_layout`), warning of other changed settings."""
        resume_from_checkpoint = resolve_resume_checkpoint(
            resume_from_checkpoint, self.args.output_dir, self.checkpoint_layout()
        )
        # recorded in each checkpoint; the model card lists what a resume with changed data changed
        self.data_layout = DataLayout.of(self.args, self.train_dataset, self.data_collator)
        self.remove_callback(DataLayout)
        self.add_callback(self.data_layout)
        refuse_changed_data_layout(
            resume_from_checkpoint,
            self.data_layout,
            resume_anyway=bool(getattr(self.args, "resume_with_changed_data", False)),
            log=self.args.should_log,
        )
        warn_of_changed_settings(resume_from_checkpoint, self.saved_model(), self.args)
        self._resumed_best_checkpoint = recorded_best_checkpoint(resume_from_checkpoint)
        return super().train(resume_from_checkpoint, trial=trial, **kwargs)

    def _load_callback_state(self) -> None:
        """The resumed state's callbacks, and its best checkpoint: saved states name it by its folder alone (no local
        path in a saved file), which the Trainer, looking for it from the working directory, drops as gone; it is
        the folder of that name beside the checkpoint resumed (`checkpoints.recorded_best_checkpoint`)."""
        best = getattr(self, "_resumed_best_checkpoint", None)
        if best is not None and self.state.best_model_checkpoint is None:
            self.state.best_model_checkpoint = best
            logger.info("The best checkpoint so far is %s (score %s): kept.", best, self.state.best_metric)
        super()._load_callback_state()

    def _save_checkpoint(self, model, trial) -> None:
        """The Trainer's checkpoint, marked incomplete until every process has written it; the push and the
        ``save_total_limit`` rotation come after, so that neither sees (nor keeps instead of a complete one) a
        half-written checkpoint."""
        run_dir = self._get_output_dir(trial=trial)
        folder = os.path.join(run_dir, f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
        layout = self.checkpoint_layout()
        with saving_checkpoint(
            folder, layout, is_saver=self.args.should_save, wait_for_everyone=self.accelerator.wait_for_everyone
        ):
            with arguments_set(self.args, push_to_hub=False, save_total_limit=None):
                super()._save_checkpoint(model, trial)
            if self.args.should_save:
                self.save_checkpoint_extras(folder)
        if self.args.push_to_hub:
            self._push_from_checkpoint(folder)
        if self.args.should_save:
            rotate_checkpoints(run_dir, self.args.save_total_limit, (folder, self.state.best_model_checkpoint), layout)
