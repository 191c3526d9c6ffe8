"""Wall time of the shipped quickstart, from start to best result, on this machine.

    .venv/bin/python benchmarks/quickstart.py

Runs search_spaces/quickstart.yaml exactly as `make demo` does (embedded local Ray),
into a temporary folder.  Target on 2 cores: <= 180 s with a best val_acc >= 0.97.
"""
from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

from tuner.config import load
from tuner.run import run_experiment

SPEC = Path(__file__).resolve().parents[1] / "search_spaces" / "quickstart.yaml"


def main() -> None:
    t0 = time.perf_counter()
    exp = load(SPEC, [f"storage_path={tempfile.mkdtemp(prefix='tuner-qs-')}"])
    summary = run_experiment(exp, echo=lambda s: print(s, file=sys.stderr))
    wall = time.perf_counter() - t0
    best = summary["best"]["value"] if summary["best"] else 0.0
    print(f"quickstart: {summary['trials']} trials, best val_acc {best:.4f}, wall {wall:.1f} s "
          f"(targets: <= 180 s, >= 0.97)")
    print("BENCH " + json.dumps({"bench": "quickstart", "wall_s": round(wall, 1), "best_val_acc": round(best, 4),
                                 "trials": summary["trials"], "targets": {"wall_s": 180, "best_val_acc": 0.97},
                                 "met": wall <= 180 and best >= 0.97}))


if __name__ == "__main__":
    main()
