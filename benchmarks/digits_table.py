"""Make the digits table: real training runs of the quickstart model on scikit-learn's digits,
every epoch of every sampled configuration, with the epoch's measured time.

    .venv/bin/python benchmarks/digits_table.py --configs 1024 --procs 2   # ~20 min on 2 cores
    -> benchmarks/data/digits_table.json.gz

The configurations are a scrambled Sobol sequence (seed 0) over search_spaces/quickstart.yaml's
search space (choices by equal-width bins of their unit coordinate); each trains for EPOCHS
epochs with the quickstart's settings (convnet, width 1.0, cosine schedule over EPOCHS, val 30 %)
through the product's own training loop, on one torch thread, in-process.  Per epoch the table
holds val_loss, val_acc and the wall seconds of the epoch (training and validation).  A trial
that diverged ends early: its remaining epochs are absent, as they would be in a real search.

The frontier benchmark (search_frontier.py, frontier_peers.py) reads the table through
digits_bench.py: a configuration proposed anywhere in the space is answered by the nearest
configuration of the table, in the unit cube.
"""
from __future__ import annotations

import argparse
import gzip
import json
import math
import multiprocessing as mp
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

EPOCHS = 9
OUT = ROOT / "benchmarks" / "data" / "digits_table.json.gz"
# The quickstart's search space (search_spaces/quickstart.yaml), in a fixed order.
SPACE: dict[str, dict[str, Any]] = {
    "lr": {"type": "loguniform", "low": 1.0e-2, "high": 0.5},
    "micro_batch_size": {"type": "choice", "values": [32, 64, 128]},
    "weight_decay": {"type": "loguniform", "low": 1.0e-5, "high": 1.0e-2},
    "label_smoothing": {"type": "uniform", "low": 0.0, "high": 0.2},
    "optimizer": {"type": "choice", "values": ["sgd", "adamw"]},
}


def from_unit(u: np.ndarray) -> dict[str, Any]:
    """The configuration at a point of the unit cube (one coordinate per setting)."""
    out: dict[str, Any] = {}
    for x, (k, e) in zip(u, SPACE.items()):
        x = float(min(max(x, 0.0), 1.0))
        if e["type"] == "loguniform":
            out[k] = math.exp(math.log(e["low"]) + x * (math.log(e["high"]) - math.log(e["low"])))
        elif e["type"] == "uniform":
            out[k] = e["low"] + x * (e["high"] - e["low"])
        else:
            vals = e["values"]
            out[k] = vals[min(int(x * len(vals)), len(vals) - 1)]
    return out


def base_config(cache: str) -> dict[str, Any]:
    from tuner.config import parse
    text = (ROOT / "search_spaces" / "quickstart.yaml").read_text()
    exp = parse(text, overrides=[f"budget.max_epochs={EPOCHS}", f"train.cache_dir={cache}"])
    return {**exp.base_config(), "val_fraction": 0.3}


def warm_up(cache: str) -> None:
    """One epoch in each worker process before any is timed: imports, the data cache and the
    first allocations are not part of an epoch's time."""
    import torch

    from trainables.loop import train_loop
    from trainables.runtime.session import Session
    torch.set_num_threads(1)

    class Quiet(Session):
        def report(self, metrics: dict[str, Any], checkpoint_dir: str | None = None) -> None:
            pass
    train_loop({**base_config(cache), "epochs": 1}, Quiet())


def run_one(args: tuple[int, list[float], str]) -> dict[str, Any]:
    import torch

    from trainables.loop import train_loop
    from trainables.runtime.session import Session
    torch.set_num_threads(1)
    index, u, cache = args
    config = from_unit(np.asarray(u))
    rows: list[list[float]] = []
    clock = [time.perf_counter()]

    class Table(Session):
        def report(self, metrics: dict[str, Any], checkpoint_dir: str | None = None) -> None:
            now = time.perf_counter()
            if metrics.get("status", "ok") == "ok":
                rows.append([int(metrics["epoch"]), float(metrics["val_loss"]), float(metrics["val_acc"]),
                             round(now - clock[0], 4)])
            clock[0] = now

    train_loop({**base_config(cache), **config, "seed": index}, Table())
    return {"u": [round(x, 6) for x in u], "config": config, "epochs": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--configs", type=int, default=1024)
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--cache", default=str(ROOT / ".cache" / "tuner"))
    args = ap.parse_args()
    from scipy.stats import qmc
    points = qmc.Sobol(d=len(SPACE), scramble=True, seed=0).random(args.configs)
    jobs = [(i, [float(x) for x in p], args.cache) for i, p in enumerate(points)]
    t0 = time.monotonic()
    rows: list[dict[str, Any]] = []
    with mp.get_context("spawn").Pool(args.procs, initializer=warm_up, initargs=(args.cache,)) as pool:
        for n, row in enumerate(pool.imap(run_one, jobs), 1):
            rows.append(row)
            if n % 16 == 0 or n == len(jobs):
                print(f"{n}/{len(jobs)} configurations [{time.monotonic() - t0:.0f} s]", flush=True)
    table = {"epochs": EPOCHS, "space": SPACE, "metric": "val_loss", "mode": "min",
             "made_by": f"benchmarks/digits_table.py --configs {args.configs}",
             "seconds": round(time.monotonic() - t0), "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(args.out, "wt") as f:
        json.dump(table, f, separators=(",", ":"))
    print(f"{args.out}: {len(rows)} configurations, {sum(len(r['epochs']) for r in rows)} epochs, "
          f"{time.monotonic() - t0:.0f} s")


if __name__ == "__main__":
    main()
