"""The `contrastive-hf` command and what every example script shares: reading arguments, logging, building the model
to train, and the end of a run (evaluation, model card, push, reload check)."""
