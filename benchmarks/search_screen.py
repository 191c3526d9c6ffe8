"""Screening searcher settings on the Hartmann workload in seconds instead of minutes.

    .venv/bin/python benchmarks/search_screen.py                                  # 30 seeds, 48 trials
    .venv/bin/python benchmarks/search_screen.py --trials 32 --searchers ours,optuna_search,random,ours_s15
    .venv/bin/python benchmarks/search_screen.py --seed-offset 30                 # seeds 30-59: a second look

The searchers themselves (ours and its VARIANTS from search_efficiency.py, Ray's OptunaSearch,
random search as OptunaSearch over Optuna's RandomSampler) and Tune's own ASHAScheduler run in
this process, driven through their Tune interfaces (suggest / on_trial_result /
on_trial_complete) by a clock with `concurrency` slots where every epoch of every trial takes
the same time: the order results arrive in is the one two equally fast trial actors give,
without Ray's scheduling noise.  Nothing here makes a claim: search_efficiency.py, through the
real Tune machinery, does; this finds which settings are worth its time.  Scored as there:
regret at each seed's full budget (the fewest trial-epochs any searcher in the run used).
"""
from __future__ import annotations

import argparse
import heapq
import json
import statistics
import time
import warnings
from dataclasses import dataclass

import optuna
import search_efficiency as se
from levers import variant_searcher

from tuner.schema import Budget
from tuner.tuning import asha


@dataclass
class _Trial:          # what Tune's ASHA reads of a trial
    trial_id: str


def searcher_for(who: str, seed: int, budget: Budget):
    from ray.tune.search.optuna import OptunaSearch
    if who.startswith("ours"):
        return variant_searcher(se.H_SPACE, "value", "max", seed, budget, **se.searcher_options(who))
    sampler = optuna.samplers.RandomSampler(seed=seed) if who == "random" else None
    s = OptunaSearch(seed=None if sampler else seed, sampler=sampler)
    s.set_search_properties("value", "max", {k: se.tune_domain(e) for k, e in se.H_SPACE.items()})
    return s


def replay(who: str, seed: int, budget: Budget, concurrency: int = se.CONCURRENCY) -> list[tuple]:
    """One search: the rows (trial, epoch, value, f) in the order they arrived."""
    searcher, scheduler = searcher_for(who, seed, budget), asha(budget, "value", "max", cutoff=se.ASHA_CUTOFF)
    rows: list[tuple] = []
    events: list[tuple] = []         # (time, slot, trial id)
    state: dict[str, tuple[dict, int]] = {}
    started = 0

    def start(slot: int, now: int) -> None:
        nonlocal started
        if started == budget.num_samples:
            return
        tid = f"t{started:04d}"
        started += 1
        state[tid] = (searcher.suggest(tid), 0)
        scheduler.on_trial_add(None, _Trial(tid))
        heapq.heappush(events, (now + 1, slot, tid))

    for slot in range(concurrency):
        start(slot, 0)
    while events:
        now, slot, tid = heapq.heappop(events)
        config, done = state[tid]
        epoch = done + 1
        value, f = se.hartmann_value(config, epoch, budget.max_epochs)
        result = {"value": value, "f": f, "epoch": epoch, "training_iteration": epoch}   # as Tune adds
        rows.append((tid, epoch, value, f))
        searcher.on_trial_result(tid, result)
        if scheduler.on_trial_result(None, _Trial(tid), result) == "STOP":
            searcher.on_trial_complete(tid, result)
            scheduler.on_trial_remove(None, _Trial(tid))
            start(slot, now)
        else:
            state[tid] = (config, epoch)
            heapq.heappush(events, (now + 1, slot, tid))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=30)
    ap.add_argument("--seed-offset", type=int, default=0)
    ap.add_argument("--trials", type=int, default=48)
    ap.add_argument("--searchers", default="ours,optuna_search,random",
                    help=f"comma-separated, ours first; variants: {', '.join(se.VARIANTS)}")
    ap.add_argument("--asha-cutoff", choices=("ranked", "interpolated"), help="ASHA's rung cutoff (default: tuner's)")
    args = ap.parse_args()
    se.ASHA_CUTOFF = args.asha_cutoff or se.ASHA_CUTOFF
    searchers = args.searchers.split(",")
    allowed = {"optuna_search", "random", *(v for v, o in se.VARIANTS.items() if "space" not in o)}
    if searchers[0] != "ours" or not set(searchers) <= allowed:
        ap.error(f"--searchers: ours first, then any of {', '.join(sorted(allowed))}")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.simplefilter("ignore")   # Optuna's experimental-feature warnings, once per study
    budget = Budget(num_samples=args.trials, max_epochs=9, grace_epochs=1, reduction_factor=3, asha="stopping")
    seeds = list(range(args.seed_offset, args.seed_offset + args.seeds))
    t0 = time.monotonic()
    runs = {w: [replay(w, s, budget) for s in seeds] for w in searchers}
    full = [min(len(runs[w][i]) for w in searchers) for i in range(len(seeds))]
    regrets = {w: [se.regret(runs[w][i], budget.max_epochs, full[i]) for i in range(len(seeds))] for w in searchers}
    print(f"Hartmann-6 replayed: seeds {seeds[0]}-{seeds[-1]}, {args.trials} trials, ASHA grace 1 eta 3 E 9, "
          f"concurrency {se.CONCURRENCY}; regret at each seed's full budget (mean {statistics.mean(full):.1f})")
    out = {}
    for w in searchers:
        paired = None if w == "ours" else se.interval([a - b for a, b in zip(regrets["ours"], regrets[w])])
        epochs = statistics.mean(len(r) for r in runs[w])
        versus = f"ours - {w}: {se.fmt(paired, 3)}" if paired else "(the reference)"
        print(f"{w:14s} {se.fmt(se.interval(regrets[w]), 3):24s} {epochs:7.1f} ep  {versus}")
        out[w] = {"regret": [round(x, 4) for x in se.interval(regrets[w])], "epochs": round(epochs, 1),
                  "paired_vs_ours": paired and [round(x, 4) for x in paired]}
    print(f"{time.monotonic() - t0:.1f} s")
    print("SCREEN " + json.dumps({"seeds": [seeds[0], seeds[-1]], "trials": args.trials, "table": out}))


if __name__ == "__main__":
    main()
