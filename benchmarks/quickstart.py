"""The shipped quickstart over seeds 0-4: wall time, best validation accuracy, exported test accuracy.

    .venv/bin/python benchmarks/quickstart.py [--seeds 5] [--set KEY=VALUE ...]

Each seed runs search_spaces/quickstart.yaml as `make demo` does (`python -m tuner run` in its
own process with an embedded local Ray, its start included), with the search's seed and the
training seed set to the seed, into a temporary folder; then `python -m tuner export` of the
best trial measures the exported weights on the held-out test split (never used to choose).
`--set` changes the quickstart for every seed (a lever under test: `--set train.width=1.0`).
Targets on 2 cores: every run <= 180 s; mean best val_acc >= 0.97; mean test_acc >= 0.98.
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "search_spaces" / "quickstart.yaml"


def one(seed: int, sets: list[str]) -> dict:
    folder = Path(tempfile.mkdtemp(prefix=f"tuner-qs{seed}-"))
    t0 = time.perf_counter()
    run = subprocess.run([sys.executable, "-m", "tuner", "run", str(SPEC), "--set", f"seed={seed}",
                          "--set", f"train.seed={seed}", "--set", f"storage_path={folder}",
                          *(a for kv in sets for a in ("--set", kv))],
                         check=False, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    if run.returncode != 0:
        sys.exit(f"seed {seed}: `tuner run` failed:\n{run.stdout[-2000:]}\n{run.stderr[-2000:]}")
    best = float(re.search(r"best val_acc = ([0-9.]+)", run.stdout).group(1))
    out = subprocess.run([sys.executable, "-m", "tuner", "export", str(folder / "quickstart"), "--out",
                          str(folder / "best")], check=False, capture_output=True, text=True, cwd=ROOT)
    if out.returncode != 0:
        sys.exit(f"seed {seed}: `tuner export` failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    metrics = json.loads((folder / "best" / "metrics.json").read_text())
    row = {"seed": seed, "wall_s": round(wall, 1), "best_val_acc": best, "test_acc": metrics["test_acc"],
           "epoch": metrics["reported"].get("epoch"), "params": metrics["params"]}
    print(json.dumps(row), flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a change to the quickstart for every seed, as `tuner run --set` takes it")
    args = ap.parse_args()
    rows = [one(s, args.set) for s in range(args.seeds)]
    val = statistics.mean(r["best_val_acc"] for r in rows)
    test = statistics.mean(r["test_acc"] for r in rows)
    worst = max(r["wall_s"] for r in rows)
    print(f"quickstart over seeds 0-{args.seeds - 1}: mean best val_acc {val:.4f} (target >= 0.97), mean exported "
          f"test_acc {test:.4f} (>= 0.98), slowest run {worst:.1f} s (<= 180 s)")
    print("BENCH " + json.dumps({"bench": "quickstart", "seeds": args.seeds, "sets": args.set, "mean_best_val_acc": round(val, 4),
                                 "mean_test_acc": round(test, 4), "max_wall_s": worst,
                                 "runs": [{k: r[k] for k in ("seed", "wall_s", "best_val_acc", "test_acc")} for r in rows],
                                 "targets": {"mean_best_val_acc": 0.97, "mean_test_acc": 0.98, "wall_s": 180},
                                 "met": val >= 0.97 and test >= 0.98 and worst <= 180}))


if __name__ == "__main__":
    main()
