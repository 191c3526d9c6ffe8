"""Asynchronous multi-fidelity search on a simulated clock: ours (ASHA stopping or promotion)
against Ray's stock OptunaSearch + ASHAScheduler and random search under ASHA.

    .venv/bin/python benchmarks/search_frontier.py --smoke      # 2 seeds, a short budget (~1 min)
    .venv/bin/python benchmarks/search_frontier.py --quick      # 10 seeds
    .venv/bin/python benchmarks/search_frontier.py              # 30 seeds

Every method runs through its Tune interfaces (Searcher.suggest / on_trial_result /
on_trial_complete, TrialScheduler.on_trial_result / choose_trial_to_run) in this process, driven
by a clock with WORKERS workers: each epoch of a trial takes that configuration's own time
(COST: 0.5 to 2 units, from one of its settings), a trial that ASHA pauses gives its worker up
and resumes where it stopped when promoted, and the clock is the only source of order.

Benchmarks (Hartmann-6 with an epoch fidelity, `search_efficiency.H_SPACE`):
  h6_bias  the value at epoch e is f + (1 - e/E) * bias, a bias that peaks far from the optimum:
           low fidelities mislead.
  h6_good  the value at epoch e is f * (0.6 + 0.4 e/E) plus noise that shrinks with e: low
           fidelities rank configurations nearly as the full one does.
Budget, fixed for both: simulated time for 100 full-fidelity evaluations of an average
configuration (E = 9 epochs, mean cost 1.25) spread over 4 workers = 281.25 units.

Scored: normalized regret (H_MAX - f of the best trial finished at E epochs, / H_MAX; 1 before
any) against simulated time, its area under the curve (mean over time, lower is better), the
final regret, and the time to reach a target regret; the ratio of mean areas ours/peer with a 95 %
bootstrap interval over seeds (paired).  Peers that live in other libraries (Syne Tune, DEHB) are not run here.
Ends with one line `BENCH {json}`.
"""
from __future__ import annotations

import argparse
import heapq
import itertools
import json
import math
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import optuna

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import hartmann as hm
import search_efficiency as se

from tuner.schema import Budget
from tuner.searcher import make_searcher
from tuner.tuning import asha

WORKERS, EPOCHS, BUDGET_UNITS, BENCHMARKS = hm.WORKERS, hm.EPOCHS, hm.BUDGET_UNITS, hm.BENCHMARKS   # 4, 9, 281.25
TARGET_REGRET = 0.05
METHODS = ("ours_stopping", "ours_promotion", "ours_stopping_rm", "ours_promotion_rm", "ray_optuna_asha",
           "random_asha")
GRID = 200   # points of the regret curve


def cost(config: dict) -> float:
    """Time of one epoch of this configuration: 0.5 to 2 units, from x5 (like a batch size)."""
    return hm.cost(se.unit(config))


def value(bench: str, config: dict, epoch: int, rng: np.random.Generator) -> tuple[float, float]:
    """(the value reported at `epoch`, the true f): benchmarks/hartmann.py on the unit cube."""
    return hm.value(bench, se.unit(config), epoch, rng)


class SimTrial:
    """What Tune's schedulers read of a trial: its id and status."""

    def __init__(self, trial_id: str, config: dict):
        self.trial_id, self.config, self.status, self.epoch = trial_id, config, "PENDING", 0

    def set_status(self, status: str) -> None:
        self.status = status


class Algorithm:   # Tune's SearchGenerator holds the searcher as `.searcher`
    def __init__(self, searcher):
        self.searcher, self.finished = searcher, False

    def is_finished(self) -> bool:
        return self.finished


class Controller:
    """The part of Tune's controller a scheduler uses."""

    def __init__(self, searcher):
        self.trials: list[SimTrial] = []
        self.search_alg = Algorithm(searcher)
        self.ended: list[SimTrial] = []

    def get_trials(self):
        return self.trials

    def stop_trial(self, t: SimTrial) -> None:
        t.status = "TERMINATED"
        self.search_alg.searcher.on_trial_complete(t.trial_id)
        self.ended.append(t)

    def _mark_trial_to_checkpoint(self, t: SimTrial) -> None:
        pass


def method(who: str, seed: int, budget: Budget):
    from ray.tune.schedulers import ASHAScheduler
    from ray.tune.search import ConcurrencyLimiter
    from ray.tune.search.optuna import OptunaSearch
    if who.startswith("ours"):   # _rm: the searcher models the highest rung with enough points
        s = make_searcher(se.H_SPACE, "value", "max", seed, budget, rung_model=who.endswith("_rm"))
        s.set_max_concurrency(WORKERS)
        sched = asha(budget, "value", "max", promotion="promotion" in who)
        return s, sched
    sampler = optuna.samplers.RandomSampler(seed=seed) if who == "random_asha" else None
    s = OptunaSearch(seed=None if sampler else seed, sampler=sampler)
    s.set_search_properties("value", "max", {k: se.tune_domain(e) for k, e in se.H_SPACE.items()})
    sched = ASHAScheduler(time_attr="epoch", metric="value", mode="max", max_t=EPOCHS, grace_period=1,
                          reduction_factor=3)
    return ConcurrencyLimiter(s, WORKERS), sched


def simulate(who: str, bench: str, seed: int, units: float) -> list[tuple[float, float]]:
    """One search: (time, regret) at each change of the incumbent."""
    budget = Budget(num_samples=100_000, max_epochs=EPOCHS, grace_epochs=1, reduction_factor=3)
    searcher, sched = method(who, seed, budget)
    ctl = Controller(searcher)
    rng = np.random.default_rng(seed + 1000)
    events: list[tuple[float, int, str]] = []
    by_id: dict[str, SimTrial] = {}
    free, now, n = WORKERS, 0.0, 0
    order = itertools.count()   # ties in time: first scheduled, first served
    best_value, curve = -math.inf, [(0.0, 1.0)]

    def fill() -> None:
        nonlocal free, n
        while free > 0:
            if not any(t.status == "PENDING" for t in ctl.trials):
                tid = f"t{n:05d}"
                config = searcher.suggest(tid)
                if config is not None:
                    n += 1
                    t = by_id[tid] = SimTrial(tid, config)
                    ctl.trials.append(t)
                    sched.on_trial_add(ctl, t)
            t = sched.choose_trial_to_run(ctl)
            if t is None:
                return
            t.status = "RUNNING"
            free -= 1
            heapq.heappush(events, (now + cost(t.config), next(order), t.trial_id))

    def end(t: SimTrial, result: dict) -> None:
        nonlocal free
        t.status = "TERMINATED"
        searcher.on_trial_complete(t.trial_id, result)
        sched.on_trial_complete(ctl, t, result)
        free += 1

    fill()
    while events:
        now, _, tid = heapq.heappop(events)
        if now > units:
            break
        t = by_id[tid]
        t.epoch += 1
        v, f = value(bench, t.config, t.epoch, rng)
        result = {"value": v, "epoch": t.epoch, "training_iteration": t.epoch, "status": "ok"}
        searcher.on_trial_result(tid, result)
        if t.epoch == EPOCHS and v > best_value:
            best_value = v
            curve.append((now, hm.regret(f)))
        decision = sched.on_trial_result(ctl, t, result)
        if t.epoch >= EPOCHS or decision == "STOP":
            end(t, result)
        elif decision == "PAUSE":
            t.status = "PAUSED"
            free += 1
        else:
            heapq.heappush(events, (now + cost(t.config), next(order), tid))
        fill()
    return curve


def on_grid(curve: list[tuple[float, float]], units: float) -> np.ndarray:
    times = np.linspace(0, units, GRID)
    out, i = np.empty(GRID), 0
    for j, x in enumerate(times):
        while i + 1 < len(curve) and curve[i + 1][0] <= x:
            i += 1
        out[j] = curve[i][1]
    return out


def boot(xs: list[float], rng: np.random.Generator, n: int = 2000) -> tuple[float, float, float]:
    a = np.asarray(xs)
    means = a[rng.integers(0, len(a), (n, len(a)))].mean(axis=1)
    return float(a.mean()), float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def ratio_of_means(a: list[float], b: list[float], rng: np.random.Generator,
                   n: int = 4000) -> tuple[float, float, float]:
    """mean(a) / mean(b), paired by seed, with a 95 % bootstrap interval over the seeds (the
    ratio of b to a is its reciprocal, interval included)."""
    x, y = np.asarray(a), np.asarray(b)
    idx = rng.integers(0, len(x), (n, len(x)))
    ratios = x[idx].mean(axis=1) / y[idx].mean(axis=1)
    return float(x.mean() / y.mean()), float(np.percentile(ratios, 2.5)), float(np.percentile(ratios, 97.5))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=30)
    ap.add_argument("--quick", action="store_true", help="10 seeds")
    ap.add_argument("--smoke", action="store_true", help="2 seeds, a quarter of the budget: that it runs")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--plot", default=None, help="write the regret curves as a PNG here")
    ap.add_argument("--peers", nargs="*", default=[],
                    help="JSON written by frontier_peers.py (Syne Tune, DEHB) in their own environment")
    args = ap.parse_args()
    seeds = list(range(2 if args.smoke else 10 if args.quick else args.seeds))
    units = BUDGET_UNITS / 4 if args.smoke else BUDGET_UNITS
    methods = args.methods.split(",")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.simplefilter("ignore")
    rng = np.random.default_rng(0)
    t0 = time.monotonic()
    table: dict[str, dict] = {}
    curves: dict[str, dict[str, np.ndarray]] = {}
    ours = list(methods)
    peers: dict[str, dict[str, list]] = {}
    for path in args.peers:
        got = json.loads(Path(path).read_text())
        if abs(got["units"] - units) > 1e-9 or got["grid"] != GRID:
            ap.error(f"--peers {path}: written for a budget of {got['units']} units, this run has {units}")
        for w, by_bench in got["curves"].items():
            peers[w] = by_bench
    methods = ours + [w for w in peers if w not in ours]
    print("peers from their own libraries: " + (", ".join(f"{w} ({len(peers[w][BENCHMARKS[0]])} seeds)" for w in peers)
                                                 or "none (see frontier_peers.py)"))
    for bench in BENCHMARKS:
        grids = {w: [] for w in methods}
        for seed in seeds:
            for w in ours:
                grids[w].append(on_grid(simulate(w, bench, seed, units), units))
            print(f"{bench} seed {seed}: " + ", ".join(f"{w} {grids[w][-1][-1]:.4f}" for w in ours)
                  + f"  [{time.monotonic() - t0:.0f} s]", flush=True)
        for w, by_bench in peers.items():   # their seeds 0..n-1, paired with ours of the same number
            grids[w] = [np.asarray(c) for c in by_bench[bench]]
        area = {w: [float(g.mean()) for g in grids[w]] for w in methods}
        final = {w: [float(g[-1]) for g in grids[w]] for w in methods}
        grid_t = np.linspace(0, units, GRID)
        reach = {w: [float(grid_t[np.argmax(g <= TARGET_REGRET)]) if (g <= TARGET_REGRET).any() else math.inf
                     for g in grids[w]] for w in methods}
        rows = {}
        for w in methods:
            row = {"area": [round(x, 4) for x in boot(area[w], rng)],
                   "final": [round(x, 4) for x in boot(final[w], rng)],
                   "reached_target": sum(math.isfinite(x) for x in reach[w]),
                   "median_time_to_target": statistics.median(reach[w])}
            for ref in ("ours_stopping", "ours_promotion"):
                if ref in methods and w != ref:
                    n = min(len(area[ref]), len(area[w]))
                    row[f"area_ratio_{ref}_over_this"] = [round(x, 3) for x in
                                                          ratio_of_means(area[ref][:n], area[w][:n], rng)]
            row["seeds"] = len(area[w])
            rows[w] = row
        table[bench] = rows
        curves[bench] = {w: np.mean(grids[w], axis=0) for w in methods}
        print(f"\n{bench}: normalized regret, {len(seeds)} seeds, budget {units:g} units on {WORKERS} workers")
        print(f"{'method':18s} {'area (mean, 95% CI)':28s} {'final regret':28s} reached {TARGET_REGRET}")
        for w in methods:
            r = rows[w]
            a, f = r["area"], r["final"]
            print(f"{w:18s} {a[0]:.4f} [{a[1]:.4f}, {a[2]:.4f}]    {f[0]:.4f} [{f[1]:.4f}, {f[2]:.4f}]    "
                  f"{r['reached_target']}/{len(seeds)} (median t {r['median_time_to_target']:.0f})")
        for w in methods:
            for k, v in rows[w].items():
                if k.startswith("area_ratio"):
                    print(f"  {k.replace('_over_this', '')} / {w}: {v[0]:.3f} [{v[1]:.3f}, {v[2]:.3f}]")
        print()
    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, axes = plt.subplots(1, len(BENCHMARKS), figsize=(6 * len(BENCHMARKS), 4))
        for ax, bench in zip(np.atleast_1d(axes), BENCHMARKS):
            for w, c in curves[bench].items():
                ax.plot(np.linspace(0, units, GRID), c, label=w)
            ax.set(title=bench, xlabel="simulated time", ylabel="normalized regret (mean)", yscale="log")
            ax.legend()
        fig.tight_layout()
        fig.savefig(args.plot)
    # Which ASHA mode is ahead: promotion's area below stopping's on every benchmark (interval
    # of the paired ratio below 1) makes it the one to ship.
    ahead = {b: table[b].get("ours_stopping", {}).get("area_ratio_ours_promotion_over_this") for b in BENCHMARKS}
    promotion_ahead = all(v is not None and v[2] < 1 for v in ahead.values())
    others = [w for w in methods if not w.startswith("ours")]
    ratio = {b: {w: table[b][w]["area_ratio_ours_stopping_over_this"] for w in others} for b in BENCHMARKS}
    beaten = {b: [w for w in others if ratio[b][w][1] > 1] for b in BENCHMARKS}      # peer significantly ahead
    ahead = {w: [b for b in BENCHMARKS if ratio[b][w][2] < 1] for w in others}      # ours significantly ahead
    need = min(2, len(BENCHMARKS))
    met = all(not v for v in beaten.values()) and all(len(v) >= need for v in ahead.values())
    print(f"{time.monotonic() - t0:.0f} s; command: .venv/bin/python benchmarks/search_frontier.py"
          + (" --smoke" if args.smoke else " --quick" if args.quick else f" --seeds {args.seeds}"))
    print("BENCH " + json.dumps({"seeds": len(seeds), "budget_units": units, "table": table,
                                 "promotion_ahead_of_stopping": promotion_ahead,
                                 "target": "no peer's area significantly below ours (default mode) on any "
                                           f"benchmark, ours significantly below each peer's on {need} of them",
                                 "peers_significantly_ahead": beaten, "ours_significantly_ahead_on": ahead,
                                 "peers_run": sorted(peers), "met": met}))


if __name__ == "__main__":
    main()
