"""The frontier benchmark's peers, each through its own library, in their own environment.

    make peers-env     # .venv-peers: syne-tune 0.13.0, DEHB 0.1.2, mf-prior-bench 1.10.0
    .venv-peers/bin/python benchmarks/frontier_peers.py --seeds 0-9 --out /tmp/peers.json
    (--out F.json.gz writes it gzipped, as the pieces committed in data/frontier_pieces/ are)

Syne Tune 0.13.0's promotion-type ASHA, asynchronous BOHB, MOBSTER and Hyper-Tune run on its own
simulated backend (UserBlackboxBackend with a Blackbox of frontier_bench.py's objective: a paused
trial resumes where it stopped, time is the cumulative cost of its epochs; the real seconds its
scheduler spends deciding are not added to that clock, as ours are not to ours); DEHB 0.1.2 through its
ask/tell interface on a clock with the same workers (each job trains from scratch to its
fidelity, as DEHB assumes).  The space is the unit cube, which is what tuner's search space maps
to (log ranges are uniform there; a choice of n values is n equal bins).  Budgets, benchmarks,
workers and the regret are frontier_bench.py's, the same as search_frontier.py's.  Writes, per
method, benchmark and seed, the regret curve on search_frontier's time grid, as JSON;
search_frontier.py --peers reads it.  Imports nothing of tuner: syne-tune 0.13.0 pins numpy below 2.
BOHB is Syne Tune 0.13.0's (the issue named 0.16's: the same asynchronous BOHB, a KDE searcher
in its Hyperband scheduler; one environment holds every Syne Tune peer).
"""
from __future__ import annotations

import argparse
import heapq
import itertools
import logging
import math
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import frontier_bench as fb

GRID = 200
SYNE = ("syne_asha_promotion", "syne_bohb", "syne_mobster", "syne_hypertune")
METHODS = (*SYNE, "dehb")
SHARE = 1.0   # of each benchmark's budget


def on_grid(curve: list[tuple[float, float]], units: float) -> list[float]:
    times = np.linspace(0, units, GRID)
    out, i = [], 0
    for x in times:
        while i + 1 < len(curve) and curve[i + 1][0] <= x:
            i += 1
        out.append(curve[i][1])
    return out


def incumbent_curve(bench: str, rows: list[tuple[float, float, float]]) -> list[tuple[float, float]]:
    """(time, regret) each time a better value arrives at full fidelity; rows: (time, value, f)."""
    best, curve = -math.inf, [(0.0, 1.0)]
    for t, v, f in sorted(rows):
        if v > best:
            best = v
            curve.append((t, fb.regret(bench, f)))
    return curve


def noise_rng(u: np.ndarray, seed: int) -> np.random.Generator:
    """The same noise for the same configuration and seed, whoever asks."""
    return np.random.default_rng([seed, *np.round(u * 1e9).astype(np.int64).tolist()])


# ---------------------------------------------------------------- Syne Tune

def syne_run(method: str, bench: str, seed: int) -> list[tuple[float, float]]:
    from syne_tune import StoppingCriterion, Tuner
    from syne_tune.backend.simulator_backend.simulator_callback import SimulatorCallback
    from syne_tune.blackbox_repository.blackbox import Blackbox
    from syne_tune.blackbox_repository.simulated_tabular_backend import UserBlackboxBackend
    from syne_tune.config_space import randint, uniform
    from syne_tune.experiments import load_experiment
    from syne_tune.optimizer.baselines import ASHA, BOHB, MOBSTER, HyperTune

    names = [f"x{i}" for i in range(fb.dims(bench))]
    epochs, units = fb.EPOCHS[bench], fb.budget(bench) * SHARE

    class Hartmann(Blackbox):
        def __init__(self):
            super().__init__(configuration_space={k: uniform(0.0, 1.0) for k in names},
                             fidelity_space={"epoch": randint(1, epochs)},
                             objectives_names=["value", "elapsed_time", "f"])

        @property
        def fidelity_values(self):
            return np.arange(1, epochs + 1)

        def _objective_function(self, configuration, fidelity=None, seed=None):
            u = np.array([configuration[k] for k in names])
            rng = noise_rng(u, 0 if seed is None else seed)
            rows = []
            spent = 0.0
            for e in range(1, epochs + 1):
                v, f = fb.value(bench, u, e, rng)
                spent += fb.epoch_cost(bench, u, e)
                rows.append([v, spent, f])
            rows = np.array(rows)
            if fidelity is None:
                return rows
            return dict(zip(self.objectives_names, rows[int(fidelity["epoch"]) - 1]))

    config_space = {**{k: uniform(0.0, 1.0) for k in names}, "epochs": epochs}
    common = {"metric": "value", "mode": "max", "resource_attr": "epoch", "max_resource_attr": "epochs",
              "random_seed": seed}
    if method == "syne_asha_promotion":
        scheduler = ASHA(config_space, type="promotion", **common)
    elif method == "syne_bohb":
        scheduler = BOHB(config_space, type="promotion", **common)
    elif method == "syne_mobster":
        scheduler = MOBSTER(config_space, **common)
    else:
        scheduler = HyperTune(config_space, **common)
    # Syne Tune's simulator counts in seconds: the tuner polls every 5 s and each start, report and
    # stop takes 0.05 s by default, which next to epochs of 0.5-2 units would leave workers idle
    # most of the time (seen: 334 epochs in a budget that holds about 900).  Here a poll is 0.01
    # units and each delay 0.001, what ours pays: nothing.
    from syne_tune.backend.simulator_backend.simulator_backend import SimulatorConfig

    class EpochClock(UserBlackboxBackend):
        """Syne Tune's simulator moves its clock on by the real seconds its scheduler spent
        deciding since the backend was last called.  On this scale (a unit is about one epoch, the
        budget 25-281 units) that charged a Gaussian-process peer a large share of its budget
        (MOBSTER on mfh6_good: 28 s of compute in a 25-unit run, about 100 trials started against
        promotion ASHA's 900), while ours and Ray's are charged nothing for deciding: the clock
        counts epochs, delays and polls only, for every method alike."""

        def _advance_by_outside_time(self):
            pass

    quick = SimulatorConfig(delay_on_trial_result=0.001, delay_complete_after_final_report=0.001,
                            delay_complete_after_stop=0.001, delay_start=0.001, delay_stop=0.001)
    backend = EpochClock(blackbox=Hartmann(), elapsed_time_attr="elapsed_time", max_resource_attr="epochs",
                         seed=seed, tuner_sleep_time=0.01, simulator_config=quick)
    name = f"peers-{method}-{bench}-{seed}".replace("_", "-")
    tuner = Tuner(trial_backend=backend, scheduler=scheduler, n_workers=fb.WORKERS, sleep_time=0,
                  stop_criterion=StoppingCriterion(max_wallclock_time=units),
                  callbacks=[SimulatorCallback()], results_update_interval=1e9, print_update_interval=1e9,
                  save_tuner=False, tuner_name=name, metadata={"seed": seed})
    tuner.run()
    df = load_experiment(tuner.name).results
    full = df[df["epoch"] == epochs]
    rows = [(float(t), float(v), float(f)) for t, v, f in zip(full["st_tuner_time"], full["value"], full["f"])
            if t <= units]
    return incumbent_curve(bench, rows)


# ---------------------------------------------------------------- DEHB

def dehb_run(bench: str, seed: int) -> list[tuple[float, float]]:
    from dehb import DEHB
    out = tempfile.mkdtemp(prefix="dehb-")
    epochs, units = fb.EPOCHS[bench], fb.budget(bench) * SHARE
    opt = DEHB(f=None, dimensions=fb.dims(bench), configspace=False, min_fidelity=1, max_fidelity=epochs, eta=3,
               n_workers=1, seed=seed, output_path=out)   # ask/tell only: no Dask cluster of its own
    events: list[tuple[float, int, dict]] = []
    order = itertools.count()
    rows = []
    for _ in range(fb.WORKERS):
        job = opt.ask()
        u = np.clip(np.asarray(job["config"], dtype=float), 0, 1)
        heapq.heappush(events, (fb.cost_to(bench, u, round(job["fidelity"])), next(order), job))
    while events:
        now, _, job = heapq.heappop(events)
        if now > units:
            break
        u = np.clip(np.asarray(job["config"], dtype=float), 0, 1)
        epoch = round(job["fidelity"])
        v, f = fb.value(bench, u, epoch, noise_rng(u, seed))
        opt.tell(job, {"fitness": -v, "cost": fb.cost_to(bench, u, epoch)})
        if epoch == epochs:
            rows.append((now, v, f))
        nxt = opt.ask()
        un = np.clip(np.asarray(nxt["config"], dtype=float), 0, 1)
        heapq.heappush(events, (now + fb.cost_to(bench, un, round(nxt["fidelity"])), next(order), nxt))
    return incumbent_curve(bench, rows)


def seeds_of(text: str) -> list[int]:
    lo, _, hi = text.partition("-")
    return list(range(int(lo), int(hi or lo) + 1))


def main() -> None:
    global SHARE
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", default="0-9", help="a range, e.g. 0-29")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--benchmarks", default=",".join(fb.BENCHMARKS))
    ap.add_argument("--share", type=float, default=1.0, help="of each benchmark's budget (search_frontier --smoke: 0.25)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)
    os.environ.setdefault("SYNETUNE_FOLDER", tempfile.mkdtemp(prefix="syne-"))
    SHARE = args.share
    benches = args.benchmarks.split(",")
    out: dict = {"units": {b: fb.budget(b) * SHARE for b in benches}, "grid": GRID, "curves": {}, "seeds": {},
                 "seconds": {}}
    seeds = list(seeds_of(args.seeds))
    t0 = time.monotonic()
    for method in args.methods.split(","):
        for bench in benches:
            t = time.monotonic()
            curves = [on_grid(dehb_run(bench, s) if method == "dehb" else syne_run(method, bench, s),
                              out["units"][bench]) for s in seeds]
            out["curves"].setdefault(method, {})[bench] = curves
            out["seeds"].setdefault(method, {})[bench] = seeds   # the join pairs by these
            out["seconds"].setdefault(method, {})[bench] = round(time.monotonic() - t, 1)
            print(f"{method} {bench}: final regret {np.mean([c[-1] for c in curves]):.4f} over {len(curves)} seeds "
                  f"({time.monotonic() - t:.0f} s) [{time.monotonic() - t0:.0f} s]", flush=True)
            fb.write_curves(args.out, out)

if __name__ == "__main__":
    main()
