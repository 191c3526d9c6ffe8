"""The report's figures (matplotlib, headless): curves, best so far, parallel coordinates,
importance, Pareto front, throughput."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from .history import Trial, better, final_known, final_value, ranked
from .importance import entries
from .next_space import position
from .schema import Experiment
from .text import finite, sig4

THROUGHPUT_SETTINGS = ("num_workers", "pin_memory", "micro_batch_size", "accumulation_steps", "loader")


def _plt():
    import matplotlib
    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt
    return plt


def _figure(w: float = 7.0, h: float = 4.0):
    return _plt().subplots(figsize=(w, h), dpi=100)


def _panels(n: int, w: float, h: float):
    return _plt().subplots(1, n, figsize=(w * n, h), dpi=100, squeeze=False)


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, format="png")
    _plt().close(fig)
    return path


def plot_curves(exp: Experiment, ts: list[Trial], out: Path) -> Path:
    fig, ax = _figure()
    for t in ts:
        pts = [(r["epoch"], r[exp.metric]) for r in t.history if r.get("status") == "ok" and finite(r.get(exp.metric))]
        if not pts:
            continue
        xs, ys = zip(*pts)
        line, = ax.plot(xs, ys, lw=1, alpha=0.8)
        if t.row.status == "ok" and t.row.epoch < exp.budget.max_epochs:
            ax.plot(xs[-1], ys[-1], "x", color=line.get_color(), ms=7)
    ax.plot([], [], "kx", label="stopped by ASHA")
    from matplotlib.ticker import MaxNLocator
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("epoch")
    ax.set_ylabel(exp.metric)
    ax.set_title("learning curves (x: where ASHA stopped the trial)")
    ax.legend(loc="best", fontsize=8)
    return _save(fig, out / "curves.png")


def plot_best_so_far(exp: Experiment, ts: list[Trial], out: Path) -> Path:
    ends = []
    for t in ts:
        v = final_value(t, exp.metric)
        if v is not None and t.history:
            ends.append((t.history[-1].get("timestamp", 0), v))
    fig, ax = _figure()
    if ends:
        ends.sort()
        t0 = min(r.get("timestamp", 0) - r.get("time_total_s", 0) for t in ts for r in t.history[:1]) if ts else 0
        best, xs, ys = None, [], []
        for when, v in ends:
            best = v if best is None or better(v, best, exp.mode) else best
            xs.append(max(0.0, when - t0))
            ys.append(best)
        ax.step(xs, ys, where="post")
        ax.plot(xs, ys, "o", ms=3)
    ax.set_xlabel("wall time since the first trial started (s)")
    ax.set_ylabel(f"best {exp.metric} so far")
    ax.set_title("best so far (each point: a trial ended)")
    return _save(fig, out / "best_so_far.png")


def plot_parallel(exp: Experiment, ts: list[Trial], out: Path) -> Path | None:
    ok = ranked(exp, ts)
    search = entries(exp)
    names = list(search)
    if not ok or not names:
        return None
    from matplotlib import cm
    vals = [final_known(t, exp.metric) for t in ok]
    vlo, vhi = min(vals), max(vals)
    fig, ax = _figure(max(6.0, 1.4 * (len(names) + 1)), 4.5)

    def y(name: str, v: Any) -> float:
        e = search[name]
        if v is None:  # a branch this trial did not take
            return float("nan")
        if e.type == "choice":
            options = list(e.values or [])
            return options.index(v) / max(1, len(options) - 1) if v in options else 0.5
        return position(e, float(v))
    for t, v in sorted(zip(ok, vals), key=lambda p: p[1], reverse=exp.mode == "min"):
        shade = (v - vlo) / (vhi - vlo) if vhi > vlo else 1.0
        shade = shade if exp.mode == "max" else 1 - shade
        ys = [y(n, t.row.params.get(n)) for n in names] + [(v - vlo) / (vhi - vlo) if vhi > vlo else 0.5]
        ax.plot(range(len(names) + 1), ys, color=cm.viridis(shade), alpha=0.8, lw=1.2)
    for i, n in enumerate(names):
        e = search[n]
        options = e.values or [""]
        lo, hi = (str(options[0]), str(options[-1])) if e.type == "choice" else (sig4(e.low), sig4(e.high))
        ax.text(i, -0.08, lo, ha="center", va="top", fontsize=7)
        ax.text(i, 1.06, hi, ha="center", va="bottom", fontsize=7)
    ax.text(len(names), -0.08, sig4(vlo), ha="center", va="top", fontsize=7)
    ax.text(len(names), 1.06, sig4(vhi), ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(names) + 1), names + [exp.metric], rotation=20, fontsize=8)
    ax.set_yticks([])
    ax.set_ylim(-0.2, 1.2)
    for i in range(len(names) + 1):
        ax.axvline(i, color="grey", lw=0.5)
    ax.set_title(f"parallel coordinates (colour: {exp.metric}, brighter is better; log axes for loguniform)")
    return _save(fig, out / "parallel.png")


def plot_importance(entries: list[dict[str, Any]], out: Path) -> Path | None:
    done = [e for e in entries if e["importance"]]
    if not done:
        return None
    fig, axes = _panels(len(done), 4.0, 3.5)
    for ax, e in zip(axes[0], done):
        names = list(e["importance"])[::-1]
        ax.barh(names, [e["importance"][n] for n in names])
        ax.set_title(f"epoch {e['rung']} (n={e['n']})", fontsize=9)
        ax.set_xlim(0, 1)
        ax.tick_params(labelsize=8)
    fig.suptitle("parameter importance (PED-ANOVA) per ASHA rung", fontsize=10)
    return _save(fig, out / "importance.png")


def plot_pareto(exp: Experiment, ts: list[Trial], out: Path) -> Path | None:
    if exp.second_objective is None:
        return None
    from .results import pareto_front
    rows = [t.row for t in ts if t.row.status == "ok" and all(finite(t.row.metrics.get(m)) for m in exp.metrics)]
    if not rows:
        return None
    m1, m2 = exp.metrics
    front = sorted(pareto_front(rows, exp.metrics, exp.modes), key=lambda r: r.metrics[m1])
    fig, ax = _figure(6, 4.5)
    ax.scatter([r.metrics[m1] for r in rows], [r.metrics[m2] for r in rows], s=14, color="grey", label="trials")
    ax.plot([r.metrics[m1] for r in front], [r.metrics[m2] for r in front], "o-", color="C3", label="Pareto front")
    ax.set_xlabel(f"{m1} ({exp.modes[0]})")
    ax.set_ylabel(f"{m2} ({exp.modes[1]})")
    ax.legend(fontsize=8)
    ax.set_title("two objectives")
    return _save(fig, out / "pareto.png")


def plot_throughput(exp: Experiment, ts: list[Trial], out: Path) -> Path | None:
    names = [n for n in THROUGHPUT_SETTINGS if n in entries(exp)]
    points: dict[str, list[tuple[Any, float]]] = {n: [] for n in names}
    for t in ts:
        sps = [r["samples_per_s"] for r in t.history if r.get("status") == "ok" and finite(r.get("samples_per_s"))]
        if sps:
            for n in names:
                points[n].append((t.row.params.get(n), sum(sps) / len(sps)))
    names = [n for n in names if points[n]]
    if not names:
        return None
    fig, axes = _panels(len(names), 3.6, 3.2)
    for ax, n in zip(axes[0], names):
        labels = sorted({str(v) for v, _ in points[n]}, key=lambda s: (len(s), s))
        ax.scatter([labels.index(str(v)) for v, _ in points[n]], [s for _, s in points[n]], s=14)
        ax.set_xticks(range(len(labels)), labels, fontsize=8)
        ax.set_xlabel(n)
        ax.set_ylabel("samples/s (trial mean)")
    fig.suptitle("throughput against the data-loading settings searched", fontsize=10)
    return _save(fig, out / "throughput.png")

