"""The STS correlation metric; `sts_correlation.py` is the `evaluate` module script."""
