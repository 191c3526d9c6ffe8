"""Each way a trial can train, measured through `tuner run` end to end.

    .venv/bin/python benchmarks/trial_paths.py [--reps 3] [--only quickstart,workers,ddp]

Every run is `python -m tuner run` in its own process with an embedded local Ray (its start
included), into a temporary folder, each at most RUN_LIMIT_S:
  quickstart   search_spaces/quickstart.yaml: one-worker trials in their trial's process,
               sharing one reservation (Tune reuses their actors)
  workers      the quickstart with the torch loader's num_workers searched over 0 and 1
               (reservations differ, so Tune starts new actors)
  ddp          the quickstart as 2-rank DDP trials (6 trials of 6 epochs, one at a time, none
               stopped early: with ASHA stopping TorchTrainer trials a later trial's workers
               never reported, see BENCHMARKS.md), side by side, alternating: ranks started
               by the trial (resources.ddp local) against Ray Train's TorchTrainer (train)
The rule the ddp row feeds: local ranks stay only if they save 10 % or more against
TorchTrainer.  (The fork server that once forked trials' processes was measured with this
script at revision afe16ce, its rows side by side with TUNER_FORK_SERVER=off, and removed:
BENCHMARKS.md, "Trial paths".)
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
       "--set", "budget.grace_epochs=6", "--set", "budget.max_concurrent_trials=1"]
ROWS = {
    "quickstart": (("in-process", [], {}),),
    "workers": (("in-process, reservations differ", WORKERS, {}),),
    "ddp": (("local ranks", DDP + ["--set", "resources.ddp=local"], {}),
            ("TorchTrainer", DDP + ["--set", "resources.ddp=train"], {})),
}
RUN_LIMIT_S = 600


def one(args: list[str], env: dict[str, str]) -> float:
    folder = tempfile.mkdtemp(prefix="tuner-paths-")
    t0 = time.perf_counter()
    try:
        run = subprocess.run([sys.executable, "-m", "tuner", "run", str(SPEC), "--set", f"storage_path={folder}", *args],
                             check=False, capture_output=True, text=True, cwd=ROOT, env={**os.environ, **env}, timeout=RUN_LIMIT_S)
    except subprocess.TimeoutExpired:
        sys.exit(f"`tuner run {' '.join(args)}` did not end within {RUN_LIMIT_S} s")
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
        sides = ROWS[row]
        walls: dict[str, list[float]] = {name: [] for name, _, _ in sides}
        for _ in range(a.reps):
            for name, args, env in sides:
                walls[name].append(one(args, env))
            print(row, {k: [round(x, 1) for x in v] for k, v in walls.items()}, flush=True)
        out[row] = {name: {"runs_s": [round(x, 1) for x in v], "mean_s": round(statistics.mean(v), 1)}
                    for name, v in walls.items()}
        if len(sides) == 2:
            (na, _, _), (nb, _, _) = sides
            saving = 1 - statistics.mean(walls[na]) / statistics.mean(walls[nb])
            out[row]["saving"] = round(saving, 3)
            print(f"{row}: {na} saves {100 * saving:.1f} % of {nb}'s wall time (means of {a.reps})", flush=True)
    keep_local = out["ddp"]["saving"] >= 0.10 if "ddp" in out else None
    print("BENCH " + json.dumps({"bench": "trial_paths", "reps": a.reps, "rows": out, "target_saving": 0.10,
                                 "local_ranks_earn_their_place": keep_local, "met": bool(keep_local)}))


if __name__ == "__main__":
    main()
