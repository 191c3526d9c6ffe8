"""The search benchmark: its workload's maths, its scoring, and its --smoke run end to end."""
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

_env = dict(os.environ)
import search_efficiency as se

# Importing the benchmark leaves Tune's file loggers on for the rest of the suite (it turns them off in main()).
assert os.environ.get("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS") == _env.get("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS")


def settings(u):
    """A point of the unit cube as the benchmark space's settings."""
    return {k: e.low * (e.high / e.low) ** x if e.type == "loguniform" else e.low + x * (e.high - e.low)
            for (k, e), x in zip(se.H_SPACE.items(), u)}


def test_hartmann_has_its_known_maximum_and_the_bias_fades_by_the_last_epoch():
    optimum = np.array([0.20169, 0.150011, 0.476874, 0.275332, 0.311652, 0.6573])
    assert se.hartmann(optimum) == pytest.approx(se.H_MAX, abs=1e-4)
    rng = np.random.default_rng(0)
    points = rng.random((2000, 6))
    assert max(se.hartmann(u) for u in points) < se.H_MAX          # the maximum, never beaten
    assert all(0 <= se.bias(u) <= se.BIAS_SCALE for u in points) and se.bias(se.BIAS_AT) == se.BIAS_SCALE
    # The space round-trips: the unit cube's optimum, written as settings, maps back to it.
    config = settings(optimum)
    assert np.allclose(se.unit(config), optimum)
    # Early epochs flatter the bias's corner by (1 - e/E) * BIAS_SCALE, and nothing at epoch E.
    corner = settings(se.BIAS_AT)
    v1, f = se.hartmann_value(corner, 1, 9)
    assert v1 - f == pytest.approx(8 / 9 * se.BIAS_SCALE) and se.hartmann_value(corner, 9, 9)[0] == f
    first, f = se.hartmann_value(config, 1, 9)
    last, f2 = se.hartmann_value(config, 9, 9)
    assert f == f2 == pytest.approx(se.H_MAX, abs=1e-4) and last == pytest.approx(f) and first > last


def test_the_recommendation_is_the_best_finished_trial_within_the_budget():
    rows = [("a", 1, 0.5, 0.4), ("b", 1, 0.2, 0.1), ("a", 2, 0.3, 0.4), ("b", 2, 0.05, 0.1), ("c", 2, 0.01, 0.0)]
    assert se.best_within(rows, 2, 2) == math.inf          # nothing finished epoch 2 in the first two results
    assert se.best_within(rows, 2, 3) == 0.4
    assert se.best_within(rows, 2, 4) == 0.1                # b's value at epoch 2 beats a's
    assert se.best_within(rows, 2, 99) == 0.0
    assert se.best_within(rows, 2, 4, "max") == 0.4              # by the reported value, largest first
    assert se.regret([("a", 2, 1.0, 3.0)], 2, 1) == pytest.approx(se.H_MAX - 3.0)
    m, lo, hi = se.interval([1.0, 2.0, 3.0, 4.0])
    assert m == 2.5 and lo < m < hi and hi - m == pytest.approx(3.182446 * math.sqrt(5 / 3) / 2, rel=1e-4)


@pytest.mark.integration
@pytest.mark.timeout(400)
def test_smoke_run_compares_every_peer_and_ends_with_its_bench_line(ray_address):
    """45-50 s on 2 cores: the benchmark's own process imports Ray, Tune and torch, then runs a
    small search for each of the five searchers on both workloads (2 Hartmann seeds, 1 digits
    seed) through Tune; fewer would not exercise every peer."""
    env = {**os.environ, "RAY_ADDRESS": ray_address, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "search_efficiency.py"), "--smoke"],
                       check=False, capture_output=True, text=True, timeout=380, env=env, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    last = r.stdout.strip().splitlines()[-1]
    assert last.startswith("BENCH "), r.stdout[-2000:]
    bench = json.loads(last[len("BENCH "):])
    assert bench["smoke"] is True and isinstance(bench["met"], bool)
    for name, budget in (("hartmann", 5 * 3), ("digits", 3 * 3)):
        table = bench[name]["table"]
        assert list(table) == list(se.SEARCHERS), table
        assert table["fifo"]["epochs"] == budget                     # FIFO trains every trial to the end
        for who, row in table.items():
            ci = row["regret" if name == "hartmann" else "val_loss"]
            assert ci[1] <= ci[0] <= ci[2] and math.isfinite(ci[0]), (who, ci)
            assert row["epochs"] <= budget, (who, row)
            assert (row["paired_vs_ours"] is None) == (who == "ours")
        # met follows from the intervals it printed
        peers = [w for w in se.SEARCHERS if w != "ours"]
        if name == "hartmann":
            assert bench[name]["no_peer_ahead"] == all(table[w]["paired_vs_ours"][1] <= 0 for w in peers)
        else:
            assert bench[name]["no_peer_better"] == all(table[w]["paired_vs_ours"][1] <= 0 for w in peers)
    assert bench["met"] == (bench["hartmann"]["met"] and bench["digits"]["met"])


def test_the_screen_replays_tunes_asha_with_two_trials_in_flight():
    import search_screen

    from tuner.schema import Budget
    budget = Budget(num_samples=12, max_epochs=9, grace_epochs=1, reduction_factor=3, asha="stopping")
    for who in ("ours", "random"):
        rows = search_screen.replay(who, 0, budget)
        epochs: dict[str, list[int]] = {}
        for tid, e, value, f in rows:
            epochs.setdefault(tid, []).append(e)
            assert value >= f and (e < 9 or value == f)    # the bias flatters early epochs, none at E
        assert len(epochs) == 12
        for tid, es in epochs.items():
            assert es == list(range(1, len(es) + 1)) and len(es) in (1, 3, 9), (who, tid, es)   # stopped at a rung or finished
        assert len(epochs["t0000"]) == 9            # the first arrival at every rung goes through unjudged
        assert 12 < len(rows) < 12 * 9              # some were cut, some promoted
        # Never more than two trials in flight: a trial starts only after another has ended.
        live, most = set(), 0
        for tid, e, _, _ in rows:
            live.add(tid)
            most = max(most, len(live))
            if len(epochs[tid]) == e:
                live.discard(tid)
        assert most <= 2
    # The same seed and searcher replay to the same rows: no scheduling noise.
    assert search_screen.replay("ours", 3, budget) == search_screen.replay("ours", 3, budget)
