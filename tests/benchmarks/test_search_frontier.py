"""The frontier benchmark's simulated clock (pausing, per-configuration costs) and its --smoke
run, and the searcher-scale benchmark at small sizes."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import search_frontier as sf


def test_the_clock_pauses_and_promotes_and_every_epoch_costs_its_configurations_time():
    made = []

    class Counted(sf.SimTrial):
        def __init__(self, *a):
            super().__init__(*a)
            made.append(self)

    original = sf.SimTrial
    sf.SimTrial = Counted
    try:
        curve = sf.simulate("ours_promotion", "h6_good", 0, sf.BUDGET_UNITS / 4)
    finally:
        sf.SimTrial = original
    states = {t.status for t in made}
    assert "PAUSED" in states and "TERMINATED" in states        # trials wait at rungs, some finish
    assert {t.epoch for t in made} >= {1, 3, 9}                  # promoted past rung 1 and rung 3
    assert sum(t.status == "RUNNING" for t in made) <= sf.WORKERS
    assert curve[0] == (0.0, 1.0) and all(0 <= r <= 1 for _, r in curve)
    times = [t for t, _ in curve]
    assert times == sorted(times) and times[-1] <= sf.BUDGET_UNITS / 4
    cheap, dear = {"x5": 0.5}, {"x5": 2.0}
    base = {"x0": 0.01, "x1": 0.1, "x2": 0.5, "x3": 0.0, "x4": 5.0}
    assert sf.cost({**base, **cheap}) == pytest.approx(0.5) and sf.cost({**base, **dear}) == pytest.approx(2.0)


@pytest.mark.timeout(180)
def test_frontier_smoke_run_prints_a_bench_line():
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "search_frontier.py"), "--smoke"],
                       capture_output=True, text=True, timeout=170, cwd=ROOT, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    bench = json.loads(r.stdout.strip().splitlines()[-1].removeprefix("BENCH "))
    assert set(bench["table"]) == set(sf.BENCHMARKS)
    for rows in bench["table"].values():
        assert set(rows) == set(sf.METHODS)
        assert all(0 <= row["area"][0] <= 1 for row in rows.values())
    assert isinstance(bench["met"], bool) and isinstance(bench["promotion_ahead_of_stopping"], bool)


@pytest.mark.timeout(120)
def test_searcher_scale_times_suggestions_at_each_size():
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "searcher_scale.py"), "--sizes", "20,40",
                        "--probes", "3"], capture_output=True, text=True, timeout=110, cwd=ROOT, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    bench = json.loads(r.stdout.strip().splitlines()[-1].removeprefix("BENCH "))
    assert set(bench["sizes"]) == {"20", "40"} and bench["met"] is False   # 5,000 trials not reached
    assert all(v["suggest"]["median_ms"] > 0 for v in bench["sizes"].values())


@pytest.mark.timeout(180)
def test_peers_curves_from_their_own_environment_are_merged_paired_by_seed(tmp_path):
    """frontier_peers.py writes curves on the same grid; a peer that never finds anything (regret
    1 throughout) is one ours is significantly ahead of on both benchmarks.  A file written for
    another budget is refused."""
    units = sf.BUDGET_UNITS / 4   # --smoke's
    flat = {b: [[1.0] * sf.GRID for _ in range(2)] for b in sf.BENCHMARKS}
    (tmp_path / "p.json").write_text(json.dumps({"units": units, "grid": sf.GRID, "curves": {"never": flat}}))
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "search_frontier.py"), "--smoke", "--methods",
                        "ours_stopping,ours_promotion", "--peers", str(tmp_path / "p.json")],
                       capture_output=True, text=True, timeout=170, cwd=ROOT, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    bench = json.loads(r.stdout.strip().splitlines()[-1].removeprefix("BENCH "))
    assert bench["peers_run"] == ["never"] and "never (2 seeds)" in r.stdout
    for b in sf.BENCHMARKS:
        row = bench["table"][b]["never"]
        assert row["area"][0] == 1.0 and row["seeds"] == 2 and row["area_ratio_ours_stopping_over_this"][2] < 1
    assert bench["ours_significantly_ahead_on"]["never"] == list(sf.BENCHMARKS)
    (tmp_path / "q.json").write_text(json.dumps({"units": 1.0, "grid": sf.GRID, "curves": {"never": flat}}))
    bad = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "search_frontier.py"), "--smoke", "--peers",
                          str(tmp_path / "q.json")], capture_output=True, text=True, timeout=60, cwd=ROOT, check=False)
    assert bad.returncode == 2 and "written for a budget of 1.0 units" in bad.stderr
