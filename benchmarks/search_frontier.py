"""Asynchronous multi-fidelity search on a simulated clock: ours (ASHA stopping or promotion)
against Ray's stock OptunaSearch + ASHAScheduler and random search under ASHA, and the peers
that frontier_peers.py runs in their own environment (--peers).

    .venv/bin/python benchmarks/search_frontier.py --smoke      # 2 seeds, a quarter of the budget
    .venv/bin/python benchmarks/search_frontier.py --quick      # 10 seeds
    .venv/bin/python benchmarks/search_frontier.py --jobs 2     # 30 seeds, two processes

Every method runs through its Tune interfaces (Searcher.suggest / on_trial_result /
on_trial_complete, TrialScheduler.on_trial_result / choose_trial_to_run) in this process, driven
by a clock with WORKERS workers: each epoch of a trial takes that configuration's own time, a
trial that ASHA pauses gives its worker up and resumes where it stopped when promoted, and the
clock is the only source of order.

Benchmarks (frontier_bench.py): h6_bias and h6_good (Hartmann-6 with a 9-epoch fidelity whose
low fidelities mislead or help), mfh6_good and mfh6_bad (mf-prior-bench's multi-fidelity
Hartmann, 100 fidelities, through its own code in .venv-peers; skipped, and said so, when that
environment is absent) and digits (a table of real training runs).  Budgets, fixed before any
run: simulated time for 100 full-fidelity evaluations of an average configuration over 4
workers (`python benchmarks/frontier_bench.py` prints them).

Scored: normalized regret (of the best trial finished at full fidelity; 1 before any) against
simulated time, its area under the curve (mean over time, lower is better), the final regret,
and the time to reach a target regret; the ratio of mean areas ours/peer with a 95 % bootstrap
interval over seeds (paired).  On digits, warm start is measured too (warm_vs_cold).
Ends with one line `BENCH {json}`.
"""
from __future__ import annotations

import argparse
import heapq
import itertools
import json
import math
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

# Searches run one per process (--jobs for more): BLAS and OpenMP on one thread each, set before
# numpy loads them (the searcher limits its own proposals; this covers Ray's stock pair and the
# scoring too).  The clock is simulated, so threads change how long a run takes, not its curves.
for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(var, "1")

import numpy as np  # after the thread settings
import optuna

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import frontier_bench as fb
import frontier_peers as fp
import search_efficiency as se

from tuner.schema import Budget, SearchEntry
from tuner.searcher import RUNG_SAMPLER, make_searcher
from tuner.tuning import asha

WORKERS, BENCHMARKS = fb.WORKERS, fb.BENCHMARKS
TARGET_REGRET = 0.05
# Fewer paired seeds than this and a ratio's bootstrap interval is too narrow to mean anything (one
# seed: a point): such a method is shown but neither side counts as significantly ahead.
MIN_SEEDS_JUDGED = 10
GRID = 200   # points of the regret curve
# Ours: ours_{stopping|promotion}[_rm|_gp|_mix|_mixtop]: the ASHA kind, then the rung model's sampler
# (rm: TPE, gp: a Gaussian process, mix: the two in turn, the GP on the rung below the top where
# tuner/searcher.py's gp_rung finds it fit; mixtop: in turn, both on the top rung, the default
# before that; none: no rung model, TPE over the study).
RUNG = {"rm": "tpe", "gp": "gp", "mix": "mix", "mixtop": "mix"}
# The shipped default is the one judged: its ASHA kind, with the rung model (make_searcher's
# default wherever TPE proposes, as it does at this budget's num_samples) and its sampler for a
# space without branches (all five benchmarks').
DEFAULT_RUNG = next(k for k, v in RUNG.items() if v == RUNG_SAMPLER)
OURS = f"ours_{Budget.model_fields['asha'].default}_{DEFAULT_RUNG}"
# The two ASHA modes under the default's searcher (rung model and sampler): the pair that decides
# which mode ships (promotion_ahead_of_stopping).
MODES = tuple(f"ours_{mode}_{DEFAULT_RUNG}" for mode in ("stopping", "promotion"))
DEFAULT_METHODS = METHODS = tuple(dict.fromkeys(("ours_stopping", "ours_promotion", "ours_promotion_rm", *MODES, OURS,
                                                 "ray_optuna_asha", "random_asha")))


def space(bench: str) -> dict[str, SearchEntry]:
    """The searched space: Hartmann's six settings (search_efficiency.H_SPACE), or the digits
    table's (the quickstart's)."""
    if bench != "digits":
        return se.H_SPACE
    return {k: SearchEntry(**e) for k, e in fb.digits_table().space.items()}


def unit(bench: str, config: dict) -> np.ndarray:
    """The point of the unit cube a configuration maps to (a choice: the centre of its bin)."""
    if bench != "digits":
        return se.unit(config)
    out = []
    for k, e in fb.digits_table().space.items():
        v = config[k]
        if e["type"] == "choice":
            out.append((e["values"].index(v) + 0.5) / len(e["values"]))
        elif e["type"] == "loguniform":
            out.append(math.log(v / e["low"]) / math.log(e["high"] / e["low"]))
        else:
            out.append((v - e["low"]) / (e["high"] - e["low"]))
    return np.clip(np.array(out), 0.0, 1.0)


def space_point(bench: str, u: np.ndarray) -> dict:
    """The configuration at a point of the unit cube (the inverse of `unit`; digits only)."""
    from digits_table import from_unit  # the table was made over the same space
    return from_unit(u)


def cost(bench: str, config: dict, epoch: int) -> float:
    """Time of epoch `epoch` of this configuration (frontier_bench.py)."""
    return fb.epoch_cost(bench, unit(bench, config), epoch)


def value(bench: str, config: dict, epoch: int, rng: np.random.Generator) -> tuple[float, float]:
    """(the value reported at `epoch`, the true full-fidelity f): frontier_bench.py."""
    return fb.value(bench, unit(bench, config), epoch, rng)


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


def method(who: str, seed: int, budget: Budget, bench: str, warm: list | None = None):
    from ray.tune.schedulers import ASHAScheduler
    from ray.tune.search import ConcurrencyLimiter
    from ray.tune.search.optuna import OptunaSearch
    if who.startswith("ours"):   # with a rung model: proposals from the highest rung with enough points
        rung = RUNG.get(who.rsplit("_", 1)[1])
        s = make_searcher(space(bench), "value", "max", seed, budget, warm=bool(warm),
                          rung_model=rung is not None, rung_sampler=rung or "tpe", gp_lower=not who.endswith("_mixtop"))
        for t in warm or []:   # as tuner/tuning.py's build_tuner seeds the study
            s.study.add_trial(t)
        s.set_max_concurrency(WORKERS)
        sched = asha(budget, "value", "max", promotion="promotion" in who)
        return s, sched
    sampler = optuna.samplers.RandomSampler(seed=seed) if who == "random_asha" else None
    s = OptunaSearch(seed=None if sampler else seed, sampler=sampler)
    s.set_search_properties("value", "max", {k: se.tune_domain(e) for k, e in space(bench).items()})
    sched = ASHAScheduler(time_attr="epoch", metric="value", mode="max", max_t=budget.max_epochs, grace_period=1,
                          reduction_factor=3)
    return ConcurrencyLimiter(s, WORKERS), sched


def simulate(who: str, bench: str, seed: int, units: float, warm: list | None = None,
             study: list | None = None) -> list[tuple[float, float]]:
    """One search: (time, regret) at each change of the incumbent.  `warm`: an earlier search's
    study trials to seed ours with (tuner/warmstart.py's replay); `study`: a list that receives
    this search's study trials when it ends."""
    epochs = fb.EPOCHS[bench]
    budget = Budget(num_samples=100_000, max_epochs=epochs, grace_epochs=1, reduction_factor=3)
    searcher, sched = method(who, seed, budget, bench, warm)
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
            heapq.heappush(events, (now + cost(bench, t.config, t.epoch + 1), next(order), t.trial_id))

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
        if t.epoch == epochs and v > best_value:
            best_value = v
            curve.append((now, fb.regret(bench, f)))
        decision = sched.on_trial_result(ctl, t, result)
        if t.epoch >= epochs or decision == "STOP":
            end(t, result)
        elif decision == "PAUSE":
            t.status = "PAUSED"
            free += 1
        else:
            heapq.heappush(events, (now + cost(bench, t.config, t.epoch + 1), next(order), tid))
        fill()
    if study is not None:
        study.extend(searcher.study.get_trials(deepcopy=True))
    return curve


def one_run(job: tuple[str, str, int, float]) -> np.ndarray:
    """One search's regret on the time grid (a process pool's unit of work)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.simplefilter("ignore")
    who, bench, seed, units = job
    return on_grid(simulate(who, bench, seed, units), units)


def warm_vs_cold(bench: str, seeds: list[int], units: float, rng: np.random.Generator) -> dict:
    """Warm start measured: for each seed, an earlier search (ours, stopping, another seed, half
    the budget) and then two searches of the full budget paired by seed, one warm-started from
    the earlier one's study (through tuner.warmstart.replay, as `tuner run --warm-start` does),
    one cold.  Regret area and final regret, warm - cold, with 95 % bootstrap intervals."""
    from optuna.trial import TrialState

    from tuner.space import SearchSpace
    from tuner.warmstart import replay
    area: dict[str, list[float]] = {"warm": [], "cold": []}
    final: dict[str, list[float]] = {"warm": [], "cold": []}
    for seed in seeds:
        earlier: list = []
        simulate(OURS, bench, 10_000 + seed, units / 2, study=earlier)
        warm = [replay(t, SearchSpace(space(bench)), fb.EPOCHS[bench], 1.0, "earlier")
                for t in earlier if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
        for kind, w in (("warm", warm), ("cold", None)):
            g = on_grid(simulate(OURS, bench, seed, units, warm=w), units)
            area[kind].append(float(g.mean()))
            final[kind].append(float(g[-1]))
    diff = lambda a, b: [round(x, 4) for x in boot([x - y for x, y in zip(a, b)], rng)]
    return {"seeds": len(seeds), "area_warm": [round(x, 4) for x in boot(area["warm"], rng)],
            "area_cold": [round(x, 4) for x in boot(area["cold"], rng)],
            "area_warm_minus_cold": diff(area["warm"], area["cold"]),
            "final_warm_minus_cold": diff(final["warm"], final["cold"])}


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


def geometric_ratio(pairs: dict[str, tuple[list[float], list[float]]], rng: np.random.Generator,
                    n: int = 4000) -> tuple[float, float, float]:
    """The geometric mean over benchmarks of mean(a) / mean(b), each paired by seed, with a 95 %
    bootstrap interval (each replicate resamples every benchmark's seeds): one figure for "which
    is ahead over the benchmarks", each benchmark weighing alike."""
    logs, reps = [], np.zeros(n)
    for a, b in pairs.values():
        x, y = np.asarray(a), np.asarray(b)
        idx = rng.integers(0, len(x), (n, len(x)))
        logs.append(math.log(x.mean() / y.mean()))
        reps += np.log(x[idx].mean(axis=1) / y[idx].mean(axis=1))
    reps /= len(pairs)
    return (math.exp(sum(logs) / len(logs)), float(np.exp(np.percentile(reps, 2.5))),
            float(np.exp(np.percentile(reps, 97.5))))


def mode_ahead(per_bench: dict[str, list[float] | None], overall: tuple[float, float, float] | None) -> str:
    """Which ASHA mode the benchmark shows ahead, from the paired area ratios promotion / stopping
    (mid, low, high) per benchmark and over them (geometric_ratio): a mode significantly ahead on
    at least one benchmark and significantly behind on none; where each is significantly ahead
    somewhere, the one the geometric mean's interval favours; else "neither" (the default stays)."""
    got = [v for v in per_bench.values() if v is not None]
    promo, stop = any(v[2] < 1 for v in got), any(v[1] > 1 for v in got)
    if promo != stop:
        return "promotion" if promo else "stopping"
    if promo and overall is not None and (overall[2] < 1 or overall[1] > 1):
        return "promotion" if overall[2] < 1 else "stopping"
    return "neither"


# The peers the target names: Ray's stock pair (run here) and frontier_peers.py's METHODS.
PEERS = ("ray_optuna_asha", "random_asha", *fp.METHODS)
NEED = 2   # benchmarks on which ours must be significantly ahead of each peer


def verdict(table: dict[str, dict], benches: list[str], others: list[str], min_seeds: int) -> dict:
    """The target, judged from the table (area ratios ours / peer, paired by seed): met when every
    benchmark ran, every peer in PEERS was judged on each (min_seeds paired seeds or more), none is
    significantly ahead of ours anywhere, and ours is significantly ahead of each on NEED of them.
    A peer left out, or with too few seeds, leaves it unmet: nothing is met by default."""
    key = f"area_ratio_{OURS}_over_this"
    judged = {b: [w for w in others if key in table[b].get(w, {})] for b in benches}
    too_few = {b: [w for w in judged[b] if min(table[b][w]["seeds"], table[b][OURS]["seeds"]) < min_seeds]
               for b in benches}
    ratio = {b: {w: table[b][w][key] for w in judged[b] if w not in too_few[b]} for b in benches}
    beaten = {b: [w for w in ratio[b] if ratio[b][w][1] > 1] for b in benches}      # peer significantly ahead
    ahead = {w: [b for b in benches if w in ratio[b] and ratio[b][w][2] < 1] for w in others}   # ours ahead
    not_judged = {b: [w for w in PEERS if w not in ratio[b]] for b in benches}
    # Met only on every benchmark: one that could not run (mf-prior-bench absent) leaves it unmet.
    met = (set(benches) == set(BENCHMARKS) and not any(not_judged.values()) and not any(beaten.values())
           and all(len(ahead.get(w, [])) >= NEED for w in PEERS))
    return {"peers_significantly_ahead": beaten, "ours_significantly_ahead_on": ahead,
            "too_few_seeds_to_judge": too_few, "peers_not_judged": not_judged, "met": met}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=30)
    ap.add_argument("--first-seed", type=int, default=0,
                    help="seeds run are first-seed onward (a long run split over processes, joined with --peers "
                         "in seed order)")
    ap.add_argument("--quick", action="store_true", help="10 seeds")
    ap.add_argument("--smoke", action="store_true", help="2 seeds, a quarter of the budget: that it runs")
    ap.add_argument("--methods", default=",".join(DEFAULT_METHODS))
    ap.add_argument("--benchmarks", default=",".join(BENCHMARKS))
    ap.add_argument("--jobs", type=int, default=1, help="processes that run searches side by side")
    ap.add_argument("--warm-seeds", type=int, default=None,
                    help="seeds of the warm-start measurement on digits (default: as many as --seeds; 0: skip)")
    ap.add_argument("--min-seeds-judged", type=int, default=MIN_SEEDS_JUDGED,
                    help="a method with fewer paired seeds is shown, not judged (default %(default)s)")
    ap.add_argument("--plot", default=None, help="write the regret curves as a PNG here")
    ap.add_argument("--peers", nargs="*", default=[],
                    help="JSON written by frontier_peers.py (Syne Tune, DEHB) in their own environment, or by "
                         "--save: a method of ours found there with enough seeds is read, not run again")
    ap.add_argument("--save", default=None,
                    help="write the curves of the methods run here, in --peers' format (runs split by benchmark "
                         "or over machines, then joined by one run that reads them all)")
    args = ap.parse_args()
    seeds = list(range(args.first_seed, args.first_seed + (2 if args.smoke else 10 if args.quick else args.seeds)))
    share = 0.25 if args.smoke else 1.0
    benches = [b for b in args.benchmarks.split(",") if b]
    units_of = {b: fb.budget(b) * share for b in benches}
    if any(b.startswith("mfh") for b in benches) and not fb.mfh_available():
        print("skipped mfh6_good, mfh6_bad: mf-prior-bench is not installed (make peers-env)")
        benches = [b for b in benches if not b.startswith("mfh")]
    methods = args.methods.split(",")
    if OURS not in methods and not args.save:   # a piece saved for a later join may leave it out
        ap.error(f"--methods {args.methods}: the shipped default, {OURS}, is the one judged; include it "
                 "(or --save the curves for a run that joins them)")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.simplefilter("ignore")
    rng = np.random.default_rng(0)
    t0 = time.monotonic()
    table: dict[str, dict] = {}
    mode_area: dict[str, tuple[list[float], list[float]]] = {}
    curves: dict[str, dict[str, np.ndarray]] = {}
    ours = list(methods)
    peers: dict[str, dict[str, list]] = {}
    numbered: dict[str, dict[str, list]] = {}   # (seed number or None, curve) per method and benchmark
    for path in args.peers:
        got = fb.read_curves(path)
        for b, u in got["units"].items():
            if b in units_of and (abs(u - units_of[b]) > 1e-9 or got["grid"] != GRID):
                ap.error(f"--peers {path}: {b} written for a budget of {u} units, this run has {units_of[b]}")
        for w, by_bench in got["curves"].items():
            for b, c in by_bench.items():
                numbers = got.get("seeds", {}).get(w, {}).get(b) or [None] * len(c)   # older pieces: in file order
                numbered.setdefault(w, {}).setdefault(b, []).extend(zip(numbers, c))
    for w, by_bench in numbered.items():   # a method's seeds 0..n-1 in order, paired with ours by number
        for b, pairs in by_bench.items():
            got_seeds = [n for n, _ in pairs]
            if None not in got_seeds:
                if sorted(got_seeds) != list(range(len(got_seeds))):
                    missing = sorted(set(range(max(got_seeds) + 1)) - set(got_seeds))
                    ap.error(f"--peers: {w} on {b} has seeds {sorted(got_seeds)}: "
                             + (f"seed {missing[0]} is missing" if missing else "a seed is given twice")
                             + "; the curves are paired with ours by seed number, so give each of 0..n-1 once")
                pairs = sorted(pairs, key=lambda p: p[0])
            peers.setdefault(w, {})[b] = [c for _, c in pairs]
    saved = {w: peers.pop(w) for w in list(peers) if w in ours}   # ours, from an earlier --save
    all_methods = ours + list(peers)
    print("peers from their own libraries: " + (", ".join(
        f"{w} ({', '.join(f'{b} {len(c)}' for b, c in peers[w].items())} seeds)" for w in peers)
        or "none (see frontier_peers.py)"))
    ran: dict[str, dict[str, list]] = {}   # curves of the methods run here, for --save
    import multiprocessing as mp
    pool = mp.get_context("spawn").Pool(args.jobs) if args.jobs > 1 else None
    for bench in benches:
        units = units_of[bench]
        methods = ours + [w for w in peers if peers[w].get(bench)]   # ours' saved curves left peers above
        grids: dict[str, list] = {w: [] for w in methods}
        here = [w for w in ours if len(saved.get(w, {}).get(bench, [])) < len(seeds)]
        for w in set(ours) - set(here):
            grids[w] = [np.asarray(c) for c in saved[w][bench][:len(seeds)]]
            print(f"{bench}: {w} read from --peers ({len(grids[w])} seeds)")
        jobs = [(w, bench, seed, units) for seed in seeds for w in here]
        done = pool.imap(one_run, jobs) if pool else map(one_run, jobs)
        for seed in seeds if here else ():
            for w in here:
                grids[w].append(next(done))
            print(f"{bench} seed {seed}: " + ", ".join(f"{w} {grids[w][-1][-1]:.4f}" for w in here)
                  + f"  [{time.monotonic() - t0:.0f} s]", flush=True)
        for w in here:
            ran.setdefault(w, {})[bench] = [g.tolist() for g in grids[w]]
        for w, by_bench in peers.items():   # their seeds 0..n-1, paired with ours of the same number
            if by_bench.get(bench):
                grids[w] = [np.asarray(c) for c in by_bench[bench]]
        area = {w: [float(g.mean()) for g in grids[w]] for w in methods}
        if all(m in area for m in MODES):
            n = min(len(area[m]) for m in MODES)
            mode_area[bench] = (area[MODES[1]][:n], area[MODES[0]][:n])   # (promotion, stopping), by seed
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
            for ref in dict.fromkeys(("ours_stopping", "ours_promotion", *MODES, OURS)):
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
                  f"{r['reached_target']}/{r['seeds']} (median t {r['median_time_to_target']:.0f})")
        for w in methods:
            for k, v in rows[w].items():
                if k.startswith("area_ratio"):
                    few = f"  ({rows[w]['seeds']} seeds: not judged)" if rows[w]["seeds"] < args.min_seeds_judged else ""
                    print(f"  {k.replace('_over_this', '')} / {w}: {v[0]:.3f} [{v[1]:.3f}, {v[2]:.3f}]{few}")
        print()
    if args.save:
        fb.write_curves(args.save, {"units": {b: units_of[b] for b in benches}, "grid": GRID, "curves": ran,
                                    "seeds": {w: {b: seeds for b in by} for w, by in ran.items()}})
        print(f"curves of {', '.join(ran) or 'nothing'} written to {args.save}")
    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, axes = plt.subplots(1, len(benches), figsize=(6 * len(benches), 4))
        color = {w: plt.cm.tab20(i % 20) for i, w in enumerate(all_methods)}   # tab10 repeats past ten
        for ax, bench in zip(np.atleast_1d(axes), benches):
            for w, c in curves[bench].items():
                ax.plot(np.linspace(0, units_of[bench], GRID), c, label=w, color=color[w],
                        linewidth=2.5 if w == OURS else 1.2)
            ax.set(title=bench, xlabel="simulated time", ylabel="normalized regret (mean)", yscale="log")
            ax.legend()
        fig.tight_layout()
        fig.savefig(args.plot)
    if pool:
        pool.close()
    warm = None
    n_warm = len(seeds) if args.warm_seeds is None else args.warm_seeds
    if n_warm and "digits" in benches:
        warm = warm_vs_cold("digits", list(range(n_warm)), units_of["digits"], rng)
        warm["met"] = warm["area_warm_minus_cold"][2] < 0
        print(f"warm start on digits, {n_warm} seeds: regret area warm {warm['area_warm'][0]:.4f}, cold "
              f"{warm['area_cold'][0]:.4f}; warm - cold {warm['area_warm_minus_cold']} (area), "
              f"{warm['final_warm_minus_cold']} (final)  [{time.monotonic() - t0:.0f} s]")
    # Promotion ahead of stopping, both under the default's searcher (MODES): significantly ahead
    # on at least one benchmark and significantly behind on none (paired area ratios promotion /
    # stopping).  The default's mode is meant to be the one mode_ahead names.
    mode_ratio = {b: table[b].get(MODES[0], {}).get(f"area_ratio_{MODES[1]}_over_this") for b in benches}
    promotion_ahead = (all(v is not None and v[1] <= 1 for v in mode_ratio.values())
                       and any(v is not None and v[2] < 1 for v in mode_ratio.values()))
    overall = geometric_ratio(mode_area, rng) if mode_area else None
    ahead_mode = mode_ahead(mode_ratio, overall)
    if overall is not None:
        print(f"ASHA modes, promotion / stopping over {len(mode_area)} benchmarks (geometric mean of the paired "
              f"area ratios): {overall[0]:.3f} [{overall[1]:.3f}, {overall[2]:.3f}]; ahead: {ahead_mode}; "
              f"the default: {MODES[1].split('_')[1]}")
    others = [w for w in all_methods if not w.startswith("ours")]
    v = verdict(table, benches, others, args.min_seeds_judged) if OURS in ours else {"met": False}
    print(f"{time.monotonic() - t0:.0f} s; command: .venv/bin/python benchmarks/search_frontier.py"
          + (" --smoke" if args.smoke else " --quick" if args.quick else f" --seeds {args.seeds}"))
    print("BENCH " + json.dumps({"seeds": len(seeds), "budget_units": {b: units_of[b] for b in benches},
                                 "benchmarks_run": benches, "table": table,
                                 "promotion_ahead_of_stopping": promotion_ahead, "modes_compared": MODES,
                                 "promotion_over_stopping": mode_ratio, "ours": OURS,
                                 "promotion_over_stopping_overall": overall, "mode_ahead": ahead_mode,
                                 "target": "every peer judged on every benchmark, no peer's area significantly "
                                           "below ours (default mode) on any, ours significantly below each "
                                           f"peer's on {NEED} of them",
                                 "warm_start": warm, "min_seeds_judged": args.min_seeds_judged,
                                 "peers_run": sorted(peers), **v}))


if __name__ == "__main__":
    main()
