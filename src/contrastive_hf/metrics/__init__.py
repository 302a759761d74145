"""`evaluate` metric modules shipped with contrastive_hf, loadable offline with ``evaluate.load(path)``.

```python
import evaluate
from contrastive_hf.metrics import STS_CORRELATION_PATH

metric = evaluate.load(STS_CORRELATION_PATH)
metric.compute(predictions=cosine_similarities, references=gold_scores)  # {"spearman": ..., "pearson": ...}
```
"""

from __future__ import annotations

import os

__all__ = ["STS_CORRELATION_PATH", "load_sts_correlation"]

# The folder holding sts_correlation.py; `evaluate.load` takes the folder or the file.
STS_CORRELATION_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sts_correlation")


def load_sts_correlation(**kwargs):
    """``evaluate.load`` of the STS correlation metric shipped in this package (no network)."""
    import evaluate

    return evaluate.load(STS_CORRELATION_PATH, **kwargs)
