"""The frontier benchmark's simulated clock (pausing, per-configuration costs) and its --smoke
run, and the searcher-scale benchmark at small sizes."""
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import frontier_bench as fb
import numpy as np
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
        curve = sf.simulate("ours_promotion", "h6_good", 0, fb.budget("h6_good") / 4)
    finally:
        sf.SimTrial = original
    states = {t.status for t in made}
    assert "PAUSED" in states and "TERMINATED" in states        # trials wait at rungs, some finish
    assert {t.epoch for t in made} >= {1, 3, 9}                  # promoted past rung 1 and rung 3
    assert sum(t.status == "RUNNING" for t in made) <= sf.WORKERS
    assert curve[0] == (0.0, 1.0) and all(0 <= r <= 1 for _, r in curve)
    times = [t for t, _ in curve]
    assert times == sorted(times) and times[-1] <= fb.budget("h6_good") / 4
    cheap, dear = {"x5": 0.5}, {"x5": 2.0}
    base = {"x0": 0.01, "x1": 0.1, "x2": 0.5, "x3": 0.0, "x4": 5.0}
    assert sf.cost("h6_good", {**base, **cheap}, 3) == pytest.approx(0.5)
    assert sf.cost("h6_good", {**base, **dear}, 3) == pytest.approx(2.0)


@pytest.mark.timeout(180)
def test_frontier_smoke_run_prints_a_bench_line():
    """Every method on every benchmark, two seeds, a quarter of the budget.  MF-Hartmann needs
    mf-prior-bench from .venv-peers: where it is missing (CI) the run says it skipped those two
    benchmarks; where it is there they are left out here, so the run takes the same time on any
    machine (test_mf_hartmann_values_are_mf_prior_bench_own covers them)."""
    mfh = fb.mfh_available()
    benches = [b for b in sf.BENCHMARKS if not (mfh and b.startswith("mfh"))]
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "search_frontier.py"), "--smoke",
                        "--benchmarks", ",".join(benches)],
                       capture_output=True, text=True, timeout=170, cwd=ROOT, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    bench = json.loads(r.stdout.strip().splitlines()[-1].removeprefix("BENCH "))
    ran = {b for b in benches if not b.startswith("mfh")}
    assert set(bench["table"]) == ran
    assert ("skipped mfh6_good, mfh6_bad: mf-prior-bench is not installed" in r.stdout) is not mfh
    assert bench["met"] is False   # met is judged on every benchmark, and two were not run
    assert bench["warm_start"]["seeds"] == 2
    for rows in bench["table"].values():
        assert set(rows) == set(sf.DEFAULT_METHODS)
        assert all(0 <= row["area"][0] <= 1 for row in rows.values())
    assert isinstance(bench["promotion_ahead_of_stopping"], bool)
    assert bench["mode_ahead"] in ("promotion", "stopping", "neither")
    lo, mid, hi = sorted(bench["promotion_over_stopping_overall"])
    assert mid == pytest.approx(bench["promotion_over_stopping_overall"][0])
    # The modes are compared under the default's own searcher, on every benchmark run.
    assert bench["modes_compared"] == [sf.OURS.replace("promotion", "stopping"), sf.OURS] == list(sf.MODES)
    assert set(bench["promotion_over_stopping"]) == ran
    for b, (mid, lo, hi) in bench["promotion_over_stopping"].items():
        assert lo <= mid <= hi and mid == bench["table"][b][sf.MODES[0]][f"area_ratio_{sf.OURS}_over_this"][0]


def test_the_mode_ahead_is_the_one_significantly_ahead_somewhere_and_behind_nowhere_else_the_overall_one():
    """Ratios are promotion / stopping (mid, low, high): below 1, promotion is ahead.  Where each
    mode is significantly ahead on some benchmark, the geometric mean over benchmarks decides, and
    where its interval holds 1 neither is ahead (the default stays)."""
    level, promo, stop = [1.0, 0.9, 1.1], [0.8, 0.7, 0.9], [1.2, 1.1, 1.3]
    assert sf.mode_ahead({"a": promo, "b": level}, None) == "promotion"
    assert sf.mode_ahead({"a": stop, "b": level, "c": None}, None) == "stopping"
    assert sf.mode_ahead({"a": level, "b": level}, (1.0, 0.9, 1.1)) == "neither"
    assert sf.mode_ahead({"a": promo, "b": stop}, (0.9, 0.85, 0.95)) == "promotion"
    assert sf.mode_ahead({"a": promo, "b": stop}, (1.1, 1.05, 1.2)) == "stopping"
    assert sf.mode_ahead({"a": promo, "b": stop}, (1.0, 0.9, 1.1)) == "neither"
    assert sf.mode_ahead({"a": promo, "b": stop}, None) == "neither"
    rng = np.random.default_rng(0)
    b = list(rng.uniform(0.2, 0.6, 30))
    twice, half = [2 * x for x in b], [x / 2 for x in b]
    mid, lo, hi = sf.geometric_ratio({"x": (twice, b), "y": (half, b)}, rng)   # 2 and 1/2: level
    assert mid == pytest.approx(1.0) and lo == pytest.approx(1.0) and hi == pytest.approx(1.0)
    noisy = [x * f for x, f in zip(b, rng.uniform(0.6, 1.0, 30))]
    mid, lo, hi = sf.geometric_ratio({"x": (noisy, b), "y": ([0.8 * x for x in b], b)}, rng)
    assert lo < mid < hi < 1 and mid == pytest.approx(math.sqrt(np.mean(noisy) / np.mean(b) * 0.8))


def test_the_target_is_met_only_with_every_peer_judged_on_every_benchmark():
    """A table with no peers in it met the target once (every condition held for an empty set):
    each peer the issue names must be judged on every benchmark, none ahead of ours, ours ahead of
    each on two."""
    key = f"area_ratio_{sf.OURS}_over_this"
    ahead, level, behind = [0.8, 0.7, 0.9], [1.0, 0.9, 1.1], [1.2, 1.1, 1.3]

    def table(peers, ratio=lambda w, b: ahead if b in ("h6_good", "digits") else level, seeds=30):
        return {b: {sf.OURS: {"seeds": 30}, **{w: {key: ratio(w, b), "seeds": seeds} for w in peers}}
                for b in sf.BENCHMARKS}

    benches, peers = list(sf.BENCHMARKS), list(sf.PEERS)
    assert sf.verdict(table(peers), benches, peers, 10)["met"] is True
    empty = sf.verdict(table([]), benches, [], 10)
    assert empty["met"] is False and empty["peers_not_judged"]["digits"] == peers
    few = sf.verdict(table(peers, seeds=5), benches, peers, 10)
    assert few["met"] is False and few["too_few_seeds_to_judge"]["h6_bias"] == peers
    one_ahead = sf.verdict(table(peers, lambda w, b: behind if (w, b) == ("dehb", "mfh6_bad") else ahead),
                           benches, peers, 10)
    assert one_ahead["met"] is False and one_ahead["peers_significantly_ahead"]["mfh6_bad"] == ["dehb"]
    once = sf.verdict(table(peers, lambda w, b: ahead if b == "digits" else level), benches, peers, 10)
    assert once["met"] is False and once["ours_significantly_ahead_on"]["syne_bohb"] == ["digits"]
    short = table(peers)
    del short["mfh6_good"]["syne_mobster"]
    missing = sf.verdict(short, benches, peers, 10)
    assert missing["met"] is False and missing["peers_not_judged"]["mfh6_good"] == ["syne_mobster"]
    assert sf.verdict(table(peers), benches[:-1], peers, 10)["met"] is False   # a benchmark not run


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
    """frontier_peers.py writes curves on the same grid (gzipped where the name ends in .gz); a peer
    that never finds anything (regret 1 throughout) is one ours is significantly ahead of on both
    benchmarks.  A file written for another budget is refused."""
    benches = ("h6_bias", "h6_good")
    units = {b: fb.budget(b) / 4 for b in benches}   # --smoke's
    flat = {b: [[1.0] * sf.GRID for _ in range(2)] for b in benches}
    fb.write_curves(tmp_path / "p.json.gz", {"units": units, "grid": sf.GRID, "curves": {"never": flat}})   # gzipped,
    assert (tmp_path / "p.json.gz").read_bytes()[:2] == b"\x1f\x8b"   # as the committed pieces are
    assert not list(tmp_path.glob("*.part"))
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "search_frontier.py"), "--smoke", "--methods",
                        f"ours_stopping,{sf.OURS}", "--benchmarks", ",".join(benches), "--peers",
                        str(tmp_path / "p.json.gz"), "--min-seeds-judged", "2"],   # judged at --smoke's two seeds
                       capture_output=True, text=True, timeout=170, cwd=ROOT, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    bench = json.loads(r.stdout.strip().splitlines()[-1].removeprefix("BENCH "))
    assert bench["peers_run"] == ["never"] and "never (h6_bias 2, h6_good 2 seeds)" in r.stdout
    for b in benches:
        row = bench["table"][b]["never"]
        assert row["area"][0] == 1.0 and row["seeds"] == 2 and row[f"area_ratio_{sf.OURS}_over_this"][2] < 1
    assert bench["ours_significantly_ahead_on"]["never"] == list(benches)
    assert bench["met"] is False   # three benchmarks were not run
    (tmp_path / "q.json").write_text(json.dumps({"units": {"h6_bias": 1.0}, "grid": sf.GRID, "curves": {"never": flat}}))
    bad = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "search_frontier.py"), "--smoke", "--benchmarks",
                          "h6_bias", "--peers", str(tmp_path / "q.json")],
                         capture_output=True, text=True, timeout=60, cwd=ROOT, check=False)
    assert bad.returncode == 2 and "h6_bias written for a budget of 1.0 units" in bad.stderr
    # Pieces name their seeds; a gap would pair every later curve with the wrong seed of ours.
    for n, seeds in (("s0.json", [0]), ("s2.json", [2])):
        (tmp_path / n).write_text(json.dumps({"units": {"h6_bias": units["h6_bias"]}, "grid": sf.GRID,
                                              "curves": {"never": {"h6_bias": flat["h6_bias"][:1]}},
                                              "seeds": {"never": {"h6_bias": seeds}}}))
    gap = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "search_frontier.py"), "--smoke", "--benchmarks",
                          "h6_bias", "--peers", str(tmp_path / "s2.json"), str(tmp_path / "s0.json")],
                         capture_output=True, text=True, timeout=60, cwd=ROOT, check=False)
    assert gap.returncode == 2 and "never on h6_bias has seeds [0, 2]: seed 1 is missing" in gap.stderr, gap.stderr


def test_the_digits_table_answers_each_of_its_configurations_with_its_own_row():
    """The table (benchmarks/data/digits_table.json.gz) holds >= 500 real configurations with every
    epoch; a configuration of the table is answered with its own loss and epoch time, a point
    between rows with its nearest one, and regret is 0 at the table's best and 1 at its median."""
    t = fb.digits_table()
    assert len(t.u) >= 500 and t.loss.shape == (len(t.u), 9) and (t.seconds > 0).all()
    for i in (0, 17, len(t.u) - 1):
        config = sf.space_point("digits", t.u[i])
        assert fb.digits_table().row(sf.unit("digits", config)) == i or np.allclose(
            t.loss[fb.digits_table().row(sf.unit("digits", config))], t.loss[i])
        v, f = sf.value("digits", config, 3, np.random.default_rng(0))
        assert v == pytest.approx(-t.loss[i, 2]) and f == pytest.approx(-t.loss[i, -1])
        assert sf.cost("digits", config, 3) == pytest.approx(t.seconds[i, 2])
    best = int(np.argmin(t.loss[:, -1]))
    assert fb.regret("digits", -t.loss[best, -1]) == 0.0
    assert fb.regret("digits", -(t.best + t.scale)) == pytest.approx(1.0)
    assert fb.budget("digits") == pytest.approx(100 * t.seconds.sum(axis=1).mean() / 4)


def test_mf_hartmann_values_are_mf_prior_bench_own():
    """Through the helper in .venv-peers, the values are what mf-prior-bench's own benchmark
    object answers for the same configuration and fidelity; cost is cumulative."""
    if not fb.mfh_available():
        pytest.skip("mf-prior-bench lives in .venv-peers (make peers-env), which this machine lacks")
    code = ("import json, sys, mfpbench\n"
            "b = mfpbench.get(sys.argv[1])\n"
            "for z in (1, 9, 100):\n"
            "    c = type(b.sample()).from_dict({f'X_{i}': x for i, x in enumerate([0.2, 0.15, 0.48, 0.28, 0.31, 0.66])})\n"
            "    print(json.dumps([z, float(b.query(c, at=z).value.value)]))\n")
    py = fb.HERE.parent / ".venv-peers" / "bin" / "python"
    u = np.array([0.2, 0.15, 0.48, 0.28, 0.31, 0.66])
    for name in ("mfh6_good", "mfh6_bad"):
        out = subprocess.run([str(py), "-c", code, name], capture_output=True, text=True, check=True, timeout=120)
        for line in out.stdout.splitlines():
            z, theirs = json.loads(line)
            assert fb.value(name, u, z, np.random.default_rng(0))[0] == pytest.approx(-theirs)
    assert sum(fb.epoch_cost("mfh6_good", u, e) for e in range(1, 101)) == pytest.approx(1.0)
    assert fb.cost_to("mfh6_good", u, 1) == pytest.approx(0.05 + 0.95 * 1e-4)


def test_warm_start_measurement_pairs_a_warm_and_a_cold_search_by_seed():
    """The earlier search's study trials reach the warm search through tuner.warmstart.replay; the
    two searches of a seed differ only by them."""
    got = sf.warm_vs_cold("h6_good", [0, 1], fb.budget("h6_good") / 8, np.random.default_rng(0))
    assert got["seeds"] == 2 and len(got["area_warm_minus_cold"]) == 3
    assert 0 <= got["area_warm"][0] <= 1 and 0 <= got["area_cold"][0] <= 1
    assert got["area_warm"][0] != got["area_cold"][0]


@pytest.mark.timeout(180)
def test_curves_saved_by_one_run_are_read_back_by_the_next_instead_of_run_again(tmp_path):
    """--save writes the curves of the methods run; a run given that file reads them (the table is
    the same, nothing of ours is run again), so a long run can be split by benchmark and joined."""
    cmd = [sys.executable, str(ROOT / "benchmarks" / "search_frontier.py"), "--smoke", "--benchmarks", "h6_bias",
           "--methods", f"ours_stopping,{sf.OURS}"]
    first = subprocess.run([*cmd, "--save", str(tmp_path / "ours.json")], capture_output=True, text=True,
                           timeout=170, cwd=ROOT, check=False)
    assert first.returncode == 0, first.stderr[-3000:]
    saved = json.loads((tmp_path / "ours.json").read_text())
    assert set(saved["curves"]) == {"ours_stopping", sf.OURS} and len(saved["curves"][sf.OURS]["h6_bias"]) == 2
    again = subprocess.run([*cmd, "--peers", str(tmp_path / "ours.json")], capture_output=True, text=True,
                           timeout=170, cwd=ROOT, check=False)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"h6_bias: {sf.OURS} read from --peers (2 seeds)" in again.stdout and "h6_bias seed 0" not in again.stdout
    line = lambda r: json.loads(r.stdout.strip().splitlines()[-1].removeprefix("BENCH "))
    assert line(again)["table"]["h6_bias"] == line(first)["table"]["h6_bias"] and line(again)["peers_run"] == []
    # A peer with one seed (a point, not an interval) is shown but not judged either way.
    worst = {"units": saved["units"], "grid": saved["grid"], "curves": {"worst": {"h6_bias": [[1.0] * saved["grid"]]}}}
    (tmp_path / "worst.json").write_text(json.dumps(worst))
    judged = subprocess.run([*cmd, "--peers", str(tmp_path / "ours.json"), str(tmp_path / "worst.json")],
                            capture_output=True, text=True, timeout=170, cwd=ROOT, check=False)
    assert judged.returncode == 0, judged.stderr[-3000:]
    verdict = line(judged)
    assert verdict["table"]["h6_bias"]["worst"][f"area_ratio_{sf.OURS}_over_this"][2] < 1   # a point below 1
    assert verdict["too_few_seeds_to_judge"]["h6_bias"] == ["worst"] and verdict["ours_significantly_ahead_on"]["worst"] == []
    assert "(1 seeds: not judged)" in judged.stdout
    # A piece of a split run: seeds from --first-seed on, the default left out (it saves for a join).
    part = subprocess.run([*cmd[:-1], "ours_stopping", "--first-seed", "1", "--save", str(tmp_path / "part.json")],
                          capture_output=True, text=True, timeout=170, cwd=ROOT, check=False)
    assert part.returncode == 0, part.stderr[-3000:]
    assert "h6_bias seed 1:" in part.stdout and "h6_bias seed 0:" not in part.stdout
    piece = json.loads((tmp_path / "part.json").read_text())["curves"]["ours_stopping"]["h6_bias"]
    assert piece[0] == saved["curves"]["ours_stopping"]["h6_bias"][1]   # seed 1 is seed 1 wherever it runs
    assert line(part)["met"] is False
    alone = subprocess.run([*cmd[:-1], "ours_stopping"], capture_output=True, text=True, timeout=60, cwd=ROOT,
                           check=False)
    assert alone.returncode == 2 and f"{sf.OURS}, is the one judged" in alone.stderr
