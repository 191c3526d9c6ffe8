"""What `stage_shm` (copy the HDF5 cache to /dev/shm and read it from there) saves in a trial's
data load, the only time it acts on: the arrays are in memory afterwards either way, so the
epochs are the same.

    .venv/bin/python benchmarks/shm_staging.py            # a CIFAR-10-sized cache, about a minute

One cache of CIFAR-10's size (50,000 + 10,000 images of 3x32x32 uint8, 184 MB), loaded by
load_arrays with stage_shm off and on, interleaved, after one warm-up load of each (a later
trial on the same host: the file is in the page cache, the /dev/shm copy exists).  The cold
first load is timed too (the copy is made then).  Target: staging saves 10 % or more of the
warm load time.
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from trainables.config import DataConfig
from trainables.data import sources as D

TARGET = 0.10


def _timed(cfg: DataConfig) -> float:
    t = time.perf_counter()
    D.load_arrays(cfg)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--train", type=int, default=50_000)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="tuner-shm-bench-"))
    try:
        plain = DataConfig(dataset="digits", cache_dir=str(root))
        staged = DataConfig(dataset="digits", cache_dir=str(root), stage_shm=True)
        key, _ = D._digits_key(plain)  # noqa: SLF001 - the cache's key, so load_arrays takes the big file
        g = np.random.default_rng(0)
        arrays = {"train_x": g.integers(0, 256, (args.train, 3, 32, 32), dtype=np.uint8),
                  "train_y": g.integers(0, 10, args.train),
                  "test_x": g.integers(0, 256, (args.train // 5, 3, 32, 32), dtype=np.uint8),
                  "test_y": g.integers(0, 10, args.train // 5)}
        D.write_h5_atomic(D.cache_path(plain), arrays, {"content_key": key, "dataset": "digits"})
        size = D.cache_path(plain).stat().st_size
        cold = {"off": _timed(plain), "on (copy made)": _timed(staged)}
        times: dict[str, list[float]] = {"off": [], "on": []}
        for _ in range(args.reps):
            times["off"].append(_timed(plain))
            times["on"].append(_timed(staged))
        med = {k: statistics.median(v) for k, v in times.items()}
        saving = 1 - med["on"] / med["off"]
        print(f"cache {size / 2**20:.0f} MiB; first load: off {cold['off']:.3f} s, on {cold['on (copy made)']:.3f} s")
        for k, v in times.items():
            print(f"  stage_shm {k:3s}: median {med[k]:.3f} s over {len(v)} loads ({', '.join(f'{x:.3f}' for x in v)})")
        print(f"saving of the warm load: {saving:+.1%} (target >= {TARGET:.0%})")
        print("reproduce: .venv/bin/python benchmarks/shm_staging.py")
        print("BENCH " + json.dumps({"bench": "shm_staging", "cache_mib": round(size / 2**20),
                                     "load_off_s": round(med["off"], 4), "load_on_s": round(med["on"], 4),
                                     "first_off_s": round(cold["off"], 4), "first_on_s": round(cold["on (copy made)"], 4),
                                     "saving": round(saving, 4), "target": TARGET, "met": saving >= TARGET}))
    finally:
        shutil.rmtree(root, ignore_errors=True)
        for p in Path("/dev/shm").glob("tuner-*-digits.h5"):
            p.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
