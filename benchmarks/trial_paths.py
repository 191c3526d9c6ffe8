"""Each way a trial can train, measured through `tuner run` end to end, side by side.

    .venv/bin/python benchmarks/trial_paths.py [--reps 3] [--only quickstart,workers,ddp]

Rows, each run `--reps` times, the two sides of a pair alternating so that the machine's
drift falls on both alike; every run is `python -m tuner run` in its own process with an
embedded local Ray (its start included), into a temporary folder:
  quickstart   search_spaces/quickstart.yaml (trials share one reservation, Tune reuses
               their actors): the fork server on, against TUNER_FORK_SERVER=off
  workers      the quickstart with the torch loader's num_workers searched over 0 and 1
               (reservations differ, so Tune starts new actors): fork server on against off
  ddp          the quickstart as 2-rank DDP trials (6 trials of at most 6 epochs, one at a
               time): ranks started by the trial (resources.ddp local) against Ray
               Train's TorchTrainer (resources.ddp train)
The decision rules the figures feed: the fork server stays only if it saves 10 % or more of
the wall time in the quickstart or the workers row; local ranks stay only if they save 10 %
or more against TorchTrainer.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "search_spaces" / "quickstart.yaml"
WORKERS = ["--set", "search.num_workers={type: choice, values: [0, 1]}", "--set", "train.loader=torch"]
DDP = ["--set", "resources.workers=2", "--set", "budget.num_samples=6", "--set", "budget.max_epochs=6",
       "--set", "budget.max_concurrent_trials=1"]
ROWS = {
    "quickstart": (("fork server", [], {}), ("no fork server", [], {"TUNER_FORK_SERVER": "off"})),
    "workers": (("fork server", WORKERS, {}), ("no fork server", WORKERS, {"TUNER_FORK_SERVER": "off"})),
    "ddp": (("local ranks", DDP + ["--set", "resources.ddp=local"], {}),
            ("TorchTrainer", DDP + ["--set", "resources.ddp=train"], {})),
}


def one(args: list[str], env: dict[str, str]) -> float:
    folder = tempfile.mkdtemp(prefix="tuner-paths-")
    t0 = time.perf_counter()
    run = subprocess.run([sys.executable, "-m", "tuner", "run", str(SPEC), "--set", f"storage_path={folder}", *args],
                         capture_output=True, text=True, cwd=ROOT, env={**os.environ, **env})
    wall = time.perf_counter() - t0
    if run.returncode != 0:
        sys.exit(f"`tuner run {' '.join(args)}` failed:\n{run.stdout[-2000:]}\n{run.stderr[-2000:]}")
    return wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--only", default=",".join(ROWS))
    a = ap.parse_args()
    out = {}
    for row in a.only.split(","):
        (name_a, args_a, env_a), (name_b, args_b, env_b) = ROWS[row]
        walls: dict[str, list[float]] = {name_a: [], name_b: []}
        for _ in range(a.reps):
            walls[name_a].append(one(args_a, env_a))
            walls[name_b].append(one(args_b, env_b))
            print(row, {k: [round(x, 1) for x in v] for k, v in walls.items()}, flush=True)
        ma, mb = statistics.mean(walls[name_a]), statistics.mean(walls[name_b])
        saving = 1 - ma / mb
        out[row] = {name_a: [round(x, 1) for x in walls[name_a]], name_b: [round(x, 1) for x in walls[name_b]],
                    "mean_a_s": round(ma, 1), "mean_b_s": round(mb, 1), "saving": round(saving, 3)}
        print(f"{row}: {name_a} {ma:.1f} s, {name_b} {mb:.1f} s (means of {a.reps}): {name_a} saves "
              f"{100 * saving:.1f} % of the wall time", flush=True)
    keep_server = any(out[r]["saving"] >= 0.10 for r in ("quickstart", "workers") if r in out)
    keep_local = out["ddp"]["saving"] >= 0.10 if "ddp" in out else None
    print("BENCH " + json.dumps({"bench": "trial_paths", "reps": a.reps, "rows": out, "target_saving": 0.10,
                                 "fork_server_earns_its_place": keep_server, "local_ranks_earn_their_place": keep_local,
                                 "met": keep_server and bool(keep_local)}))


if __name__ == "__main__":
    main()
