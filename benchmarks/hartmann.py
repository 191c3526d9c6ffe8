"""Hartmann-6 with an epoch fidelity, on the unit cube: numpy only, so that the peers' own
environment (benchmarks/frontier_peers.py) computes exactly what ours does.

f = -Hartmann-6 (maximum H_MAX).  The frontier benchmarks (search_frontier.py):
  h6_bias  value at epoch e = f + (1 - e/E) * bias: low fidelities flatter a corner far from the
           optimum (BIAS_AT).
  h6_good  value at epoch e = f * (0.6 + 0.4 e/E) + noise of sd 0.05 (1 - e/E): low fidelities
           rank nearly as the full one.
Each epoch of a configuration costs 0.5 to 2 time units (from u[5], like a batch size).
"""
from __future__ import annotations

import numpy as np

H_ALPHA = np.array([1.0, 1.2, 3.0, 3.2])
H_A = np.array([[10, 3, 17, 3.5, 1.7, 8], [0.05, 10, 17, 0.1, 8, 14],
                [3, 3.5, 1.7, 10, 17, 8], [17, 8, 0.05, 10, 0.1, 14]])
H_P = 1e-4 * np.array([[1312, 1696, 5569, 124, 8283, 5886], [2329, 4135, 8307, 3736, 1004, 9991],
                       [2348, 1451, 3522, 2883, 3047, 6650], [4047, 8828, 8732, 5743, 1091, 381]])
H_MAX = 3.32237   # of f = -Hartmann
BIAS_AT = np.array([0.9, 0.1, 0.9, 0.9, 0.1, 0.9])   # where the bias peaks: far from the optimum
BIAS_SCALE = 2.0

# The frontier benchmarks' setting, fixed before any run.
EPOCHS = 9
WORKERS = 4
MEAN_COST = 1.25
BUDGET_UNITS = 100 * EPOCHS * MEAN_COST / WORKERS   # 100 average full evaluations over 4 workers
BENCHMARKS = ("h6_bias", "h6_good")


def hartmann(u: np.ndarray) -> float:
    """f = -Hartmann-6 on the unit cube (maximum H_MAX)."""
    return float(np.sum(H_ALPHA * np.exp(-np.sum(H_A * (u - H_P) ** 2, axis=1))))


def bias(u: np.ndarray) -> float:
    """>= 0, smooth, BIAS_SCALE at BIAS_AT and fading away from it."""
    return BIAS_SCALE * float(np.exp(-2.0 * np.sum((u - BIAS_AT) ** 2)))


def cost(u: np.ndarray) -> float:
    """Time of one epoch of the configuration at u: 0.5 to 2 units."""
    return 0.5 + 1.5 * float(u[5])


def value(bench: str, u: np.ndarray, epoch: int, rng: np.random.Generator) -> tuple[float, float]:
    """(the value reported at `epoch` of EPOCHS, the true f)."""
    f = hartmann(u)
    frac = epoch / EPOCHS
    if bench == "h6_bias":
        return f + (1 - frac) * bias(u), f
    return f * (0.6 + 0.4 * frac) + float(rng.normal(0, 0.05 * (1 - frac))), f


def regret(f: float) -> float:
    """Normalized regret of a configuration whose true value is f."""
    return (H_MAX - f) / H_MAX
