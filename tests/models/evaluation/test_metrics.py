"""Spearman all vs mean on a constructed example, BCa bootstrap, SWER and the hard splits."""

from __future__ import annotations

import numpy as np
import pytest

from ctxsim.models.evaluation import metrics as M
from ctxsim.models.evaluation.dynamax import dynamax_jaccard


def test_all_vs_mean_conventions_differ_as_constructed():
    # each subset alone is perfectly ranked (rho = 100), but subset B's predictions are shifted
    # far below subset A's while its gold is higher, so the concatenation is anti-correlated.
    a = ([0.9, 0.91, 0.92, 0.93], [0.0, 1.0, 2.0, 3.0])
    b = ([0.1, 0.11, 0.12, 0.13], [4.0, 4.2, 4.4, 4.6])
    sc = M.sts_scores({"A": a, "B": b})
    assert sc["spearman_mean"] == pytest.approx(100.0)
    # concatenated: ranks pred = [5,6,7,8,1,2,3,4], gold = [1..8] -> rho by hand
    pr = np.array([5, 6, 7, 8, 1, 2, 3, 4.0])
    gr = np.arange(1, 9.0)
    rho = 1 - 6 * ((pr - gr) ** 2).sum() / (8 * (64 - 1))
    assert sc["spearman_all"] == pytest.approx(rho * 100)
    assert sc["n_pairs"] == 8


def test_bootstrap_ci_detects_a_better_system():
    rng = np.random.default_rng(0)
    gold = rng.uniform(0, 5, 300)
    good = gold + rng.normal(0, 0.5, 300)
    bad = gold + rng.normal(0, 3.0, 300)
    ci = M.bootstrap_diff_ci(gold, good, bad, n_resamples=500, seed=1)
    assert ci["ci_low"] <= ci["delta"] <= ci["ci_high"]
    assert ci["significant"] and ci["ci_low"] > 0
    same = M.bootstrap_diff_ci(gold, good, good, n_resamples=200, seed=1)
    assert same["delta"] == 0 and not same["significant"]


def test_swer_by_hand_and_negation():
    # "a b c" vs "a x c d": WER(h=s1, ref=s2) = 2/4, WER(h=s2, ref=s1) = 2/3
    assert M.swer("a b c", "a x c d") == pytest.approx(0.5 * 2 / 4 + 0.5 * 2 / 3)
    assert M.has_negation("It's not a good idea.") and M.has_negation("I don't know")
    assert not M.has_negation("Nothing here knots")


def test_hard_splits():
    s1 = ["a b c d", "a b c d", "w x y z", "p q r s", "it is not good", "e f g h"]
    s2 = ["a b c d", "k l m n", "w x y q", "t u v o", "it is good", "e f g h"]
    gold = [0.5, 4.5, 4.0, 0.2, 1.0, 5.0]
    sp = M.hard_splits(s1, s2, gold, quantile=0.34)
    assert set(sp["hard_high_gold"]) == {1}  # high gold, completely different words
    assert set(sp["hard_low_gold"]) == {0}  # low gold, identical words
    assert set(sp["negation"]) == {4}


def test_dynamax_by_hand():
    x = np.array([[1.0, 0.0]])
    y = np.array([[0.0, 1.0]])
    # U = [e1; e2]; fx = max(x U^T, 0) = [1, 0]; fy = [0, 1] -> jaccard 0
    assert dynamax_jaccard(x, y) == 0.0
    assert dynamax_jaccard(x, x) == pytest.approx(1.0)
    y2 = np.array([[1.0, 1.0]])
    # U = [e1; e1+e2; ... stacked]: fx = [1, 1], fy = [1, 2] -> 2/3
    assert dynamax_jaccard(x, y2) == pytest.approx(2 / 3)


def test_avg_diff_ci_is_the_mean_of_per_set_deltas_with_a_stratified_interval():
    from ctxsim.models.evaluation.metrics import bootstrap_avg_diff_ci, spearman

    rng = np.random.default_rng(1)
    sets = {}
    for name, n in (("A", 300), ("B", 120)):
        gold = rng.normal(size=n)
        good = gold + rng.normal(scale=0.5, size=n)
        poor = gold + rng.normal(scale=2.0, size=n)
        sets[name] = (gold, good, poor)
    ci = bootstrap_avg_diff_ci(sets, n_resamples=600, seed=0)
    want = np.mean([spearman(a, g) - spearman(b, g) for g, a, b in sets.values()])
    assert ci["delta"] == pytest.approx(want)
    assert 0 < ci["ci_low"] < ci["delta"] < ci["ci_high"] and ci["significant"]
    assert bootstrap_avg_diff_ci(sets, n_resamples=600, seed=0) == ci  # one seed, one interval
    same = {k: (g, a, a) for k, (g, a, _) in sets.items()}
    flat = bootstrap_avg_diff_ci(same, n_resamples=300)
    assert flat["delta"] == flat["ci_low"] == flat["ci_high"] == 0 and not flat["significant"]


def test_avg_diff_ci_names_the_set_whose_lengths_differ():
    from ctxsim.models.evaluation.metrics import bootstrap_avg_diff_ci

    with pytest.raises(ValueError, match="STS13: lengths differ"):
        bootstrap_avg_diff_ci({"STS13": ([1.0, 2.0, 3.0], [1.0, 2.0], [1.0, 2.0, 3.0])})
