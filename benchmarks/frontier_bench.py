"""The frontier benchmarks as functions of a point u of the unit cube: numpy only, so that the
peers' own environment (benchmarks/frontier_peers.py) computes exactly what ours
(search_frontier.py) does.  Every value is "higher is better"; the score is a normalized regret.

  h6_bias    Hartmann-6, f = -Hartmann (maximum H_MAX), 9 epochs: value at epoch e is
             f + (1 - e/E) * bias, a bias that peaks far from the optimum (low fidelities mislead).
  h6_good    the same, value f * (0.6 + 0.4 e/E) + noise of sd 0.05 (1 - e/E) (low fidelities rank
             nearly as the full one).  Each epoch of these two costs 0.5 to 2 units (from u[5]).
  mfh6_good  mf-prior-bench's multi-fidelity Hartmann-6 (`mfh6_good`, `mfh6_bad`), computed by
  mfh6_bad   mf-prior-bench's own code: fidelity z = 1..100 is the epoch, its cost
             0.05 + 0.95 (z/100)^2 is cumulative (an epoch costs the difference), noise and bias
             fade with log z.  mf-prior-bench pins numpy below 2, so it lives in .venv-peers
             (`make peers-env`); ours reaches it through a helper process there (mfh_oracle.py).
  digits     a table of real training runs (benchmarks/digits_table.py: the quickstart convnet on
             scikit-learn's digits, 1,024 configurations x 9 epochs, val_loss and measured epoch
             seconds); a point is answered by the table's nearest configuration in the unit cube.

Budgets, fixed before any run: simulated time for 100 full-fidelity evaluations of an average
configuration spread over WORKERS workers (stated per benchmark in BUDGET).
"""
from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from functools import cache, lru_cache
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
WORKERS = 4

# ------------------------------------------------------------------ Hartmann-6 with an epoch fidelity

H_ALPHA = np.array([1.0, 1.2, 3.0, 3.2])
H_A = np.array([[10, 3, 17, 3.5, 1.7, 8], [0.05, 10, 17, 0.1, 8, 14],
                [3, 3.5, 1.7, 10, 17, 8], [17, 8, 0.05, 10, 0.1, 14]])
H_P = 1e-4 * np.array([[1312, 1696, 5569, 124, 8283, 5886], [2329, 4135, 8307, 3736, 1004, 9991],
                       [2348, 1451, 3522, 2883, 3047, 6650], [4047, 8828, 8732, 5743, 1091, 381]])
H_MAX = 3.32237   # of f = -Hartmann
BIAS_AT = np.array([0.9, 0.1, 0.9, 0.9, 0.1, 0.9])   # where the bias peaks: far from the optimum
BIAS_SCALE = 2.0
MEAN_COST = 1.25   # mean epoch cost of h6_*

# Epochs (the full fidelity) and the budget in time units, per benchmark.
EPOCHS = {"h6_bias": 9, "h6_good": 9, "mfh6_good": 100, "mfh6_bad": 100, "digits": 9}
MFH_MAX_Z = 100
BENCHMARKS = tuple(EPOCHS)


def hartmann(u: np.ndarray) -> float:
    """f = -Hartmann-6 on the unit cube (maximum H_MAX)."""
    return float(np.sum(H_ALPHA * np.exp(-np.sum(H_A * (u - H_P) ** 2, axis=1))))


def bias(u: np.ndarray) -> float:
    """>= 0, smooth, BIAS_SCALE at BIAS_AT and fading away from it."""
    return BIAS_SCALE * float(np.exp(-2.0 * np.sum((u - BIAS_AT) ** 2)))


def h6_cost(u: np.ndarray) -> float:
    """Time of one epoch of the configuration at u on h6_*: 0.5 to 2 units."""
    return 0.5 + 1.5 * float(u[5])


# ------------------------------------------------------------------ mf-prior-bench's MF-Hartmann

def mfh_cost(z: int) -> float:
    """mf-prior-bench's cost of fidelity z (cumulative: training to z from nothing)."""
    return 0.05 + 0.95 * (z / MFH_MAX_Z) ** 2


class MfhOracle:
    """mf-prior-bench's MFHartmann6 generators, in this process when mfpbench imports here,
    else through benchmarks/mfh_oracle.py in .venv-peers (one line per query)."""

    def __init__(self):
        self.local: dict | None = None
        self.proc: subprocess.Popen | None = None
        try:
            from mfh_oracle import generators
            self.local = generators()
        except ImportError:
            pass

    def start(self) -> None:
        python = os.environ.get("FRONTIER_PEERS_PYTHON", str(HERE.parent / ".venv-peers" / "bin" / "python"))
        if not Path(python).is_file():
            raise FileNotFoundError(f"{python}: mf-prior-bench lives in .venv-peers (make peers-env)")
        self.proc = subprocess.Popen([python, str(HERE / "mfh_oracle.py")], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, bufsize=1)

    def __call__(self, name: str, z: int, u: np.ndarray) -> float:
        xs = tuple(float(x) for x in u)
        if self.local is not None:
            return float(self.local[name](z=z, Xs=xs))
        if self.proc is None:
            self.start()
        assert self.proc is not None and self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(json.dumps([name, z, xs]) + "\n")
        return float(self.proc.stdout.readline())


@cache
def mfh_oracle() -> MfhOracle:
    return MfhOracle()


@lru_cache(maxsize=100_000)
def mfh_final(bench: str, xs: tuple[float, ...]) -> float:
    return -mfh_oracle()(bench, MFH_MAX_Z, np.asarray(xs))


def mfh_available() -> bool:
    try:
        mfh_oracle()("mfh6_good", MFH_MAX_Z, np.full(6, 0.5))
        return True
    except (FileNotFoundError, OSError, ValueError):
        return False


# ------------------------------------------------------------------ the digits table

TABLE = HERE / "data" / "digits_table.json.gz"


class DigitsTable:
    def __init__(self, path: Path = TABLE):
        with gzip.open(path, "rt") as f:
            t = json.load(f)
        self.epochs = t["epochs"]
        self.space = t["space"]
        rows = t["rows"]
        self.u = np.array([r["u"] for r in rows])
        worst = max(v for r in rows for _, v, _, _ in r["epochs"] if np.isfinite(v))
        # loss[i, e-1], seconds[i, e-1]; a run that ended early (diverged) keeps its last loss
        # for the epochs it did not reach, at its mean epoch time.
        self.loss = np.full((len(rows), self.epochs), worst)
        self.seconds = np.zeros((len(rows), self.epochs))
        for i, r in enumerate(rows):
            got = {int(e): (v if np.isfinite(v) else worst, s) for e, v, _, s in r["epochs"]}
            last, mean_s = worst, float(np.mean([s for _, s in got.values()])) if got else 0.3
            for e in range(1, self.epochs + 1):
                if e in got:
                    last = got[e][0]
                self.loss[i, e - 1] = last
                self.seconds[i, e - 1] = got[e][1] if e in got else mean_s
        self.bins = self.binned(self.u)   # the rows as `row` compares them, made once
        final = self.loss[:, -1]
        self.best = float(final.min())
        self.scale = float(np.median(final) - self.best)   # regret 1: the median configuration

    def binned(self, u: np.ndarray) -> np.ndarray:
        """Points with each choice's coordinate replaced by its bin (so a choice matches or not)."""
        d = np.array(u, dtype=float, ndmin=2)
        for j, e in enumerate(self.space.values()):
            if e["type"] == "choice":
                n = len(e["values"])
                d[:, j] = np.minimum((d[:, j] * n).astype(int), n - 1) / max(n - 1, 1)
        return d

    def row(self, u: np.ndarray) -> int:
        """The table's configuration nearest to u (choices compare by their bins)."""
        return int(np.argmin(((self.bins - self.binned(u)) ** 2).sum(axis=1)))


@cache
def digits_table() -> DigitsTable:
    return DigitsTable()


def dims(bench: str) -> int:
    return len(digits_table().space) if bench == "digits" else 6


# ------------------------------------------------------------------ one interface for all

def epoch_cost(bench: str, u: np.ndarray, epoch: int) -> float:
    """Time of epoch `epoch` (1-based) of the configuration at u, continuing from epoch - 1."""
    if bench.startswith("h6"):
        return h6_cost(u)
    if bench.startswith("mfh"):
        return mfh_cost(epoch) - (mfh_cost(epoch - 1) if epoch > 1 else 0.0)
    t = digits_table()
    return float(t.seconds[t.row(u), epoch - 1])


def cost_to(bench: str, u: np.ndarray, epoch: int) -> float:
    """Time to train the configuration at u from nothing to `epoch`."""
    if bench.startswith("mfh"):
        return mfh_cost(epoch)
    return float(sum(epoch_cost(bench, u, e) for e in range(1, epoch + 1)))


def value(bench: str, u: np.ndarray, epoch: int, rng: np.random.Generator) -> tuple[float, float]:
    """(the value reported at `epoch`, higher is better; the true full-fidelity value f)."""
    if bench.startswith("h6"):
        f = hartmann(u)
        frac = epoch / EPOCHS[bench]
        if bench == "h6_bias":
            return f + (1 - frac) * bias(u), f
        return f * (0.6 + 0.4 * frac) + float(rng.normal(0, 0.05 * (1 - frac))), f
    if bench.startswith("mfh"):
        # mf-prior-bench minimizes -Hartmann + bias + noise; at z = 100 both are zero.
        v = -mfh_oracle()(bench, epoch, u)
        return v, (v if epoch == MFH_MAX_Z else mfh_final(bench, tuple(float(x) for x in u)))
    t = digits_table()
    i = t.row(u)
    return -float(t.loss[i, epoch - 1]), -float(t.loss[i, -1])


def regret(bench: str, f: float) -> float:
    """Normalized regret of a configuration whose true full-fidelity value is f: 0 at the optimum
    (Hartmann's maximum; the table's best final val_loss), 1 at nothing (Hartmann) or at the
    table's median final val_loss (a typical configuration), clipped to [0, 1]."""
    if bench == "digits":
        t = digits_table()
        r = (-f - t.best) / t.scale
    else:
        r = (H_MAX - f) / H_MAX
    return float(min(max(r, 0.0), 1.0))


@cache
def budget(bench: str) -> float:
    """Simulated time for 100 full-fidelity evaluations of an average configuration over WORKERS."""
    if bench.startswith("h6"):
        full = EPOCHS[bench] * MEAN_COST
    elif bench.startswith("mfh"):
        full = mfh_cost(MFH_MAX_Z)
    else:
        full = float(digits_table().seconds.sum(axis=1).mean())
    return 100 * full / WORKERS


# ------------------------------------------------------------------ curve files

def read_curves(path: str | Path) -> dict:
    """A curves file (frontier_peers.py --out, search_frontier.py --save): JSON, gzipped where
    the name ends in .gz (as the committed pieces in data/frontier_pieces/ are)."""
    path = Path(path)
    if path.suffix == ".gz":
        with gzip.open(path, "rt") as f:
            return json.load(f)
    return json.loads(path.read_text())


def write_curves(path: str | Path, curves: dict) -> None:
    """Writes what read_curves reads; gzipped where the name ends in .gz (a step curve on a
    200-point grid repeats its values, so it packs about 15 to 1). Written whole, then renamed,
    so an interrupted run leaves the previous file, not half of one."""
    path = Path(path)
    tmp = path.with_name(path.name + ".part")
    text = json.dumps(curves)
    if path.suffix == ".gz":
        with gzip.open(tmp, "wt") as f:
            f.write(text)
    else:
        tmp.write_text(text)
    tmp.replace(path)


if __name__ == "__main__":   # the budgets, as the docs state them
    for b in BENCHMARKS:
        print(b, EPOCHS[b], "epochs,", round(budget(b), 3), "units", file=sys.stdout)
