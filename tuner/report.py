"""`tuner report EXP_DIR`: what a finished (or running) experiment found, as PNGs and one
self-contained report.html (every image inline as a data: PNG, no network reference), and
next.yaml: the experiment again with each numeric range narrowed around the best trials.

Reads only the experiment folder: tuner-experiment.yaml, each trial's result.json and
error.txt, through tuner.results.
"""
from __future__ import annotations

import base64
import html
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .results import TrialRow, asha_rungs, trials
from .schema import TRAIN_BOUNDS, Experiment, SearchEntry
from .text import params_text, sig4

TOP_K = 5                  # trials whose span next.yaml keeps
PAD = 0.25                 # next.yaml pads the top-k span by this share of it on each side (in the setting's scale)
ZERO_SPAN_PAD = 0.05       # ... or by this share of the searched range when the top-k agree on one value
WIDEN = 0.5                # a best value at an edge moves that edge out by this share of the range (its scale)
EDGE = 0.05                # "at the edge": within this share of the range from a bound (its scale)
MIN_RUNG_TRIALS = 8        # parameter importance is computed for a rung only with at least this many trials
THROUGHPUT_SETTINGS = ("num_workers", "pin_memory", "micro_batch_size", "accumulation_steps", "loader")
FAILED = ("diverged", "infeasible", "storage_error")


@dataclass
class Trial:
    row: TrialRow
    history: list[dict[str, Any]] = field(default_factory=list)   # result.json rows, by epoch

    def value_at(self, epoch: int, metric: str) -> float | None:
        for r in self.history:
            if r.get("epoch") == epoch and r.get("status") == "ok":
                v = r.get(metric)
                return float(v) if _finite(v) else None
        return None


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def load(exp: Experiment) -> list[Trial]:
    out = []
    for row in trials(exp):
        history = []
        path = Path(row.path) / "result.json" if row.path else None
        if path and path.is_file():
            for line in path.read_text().splitlines():
                if line.strip():
                    history.append(json.loads(line))
        history.sort(key=lambda r: (r.get("timestamp", 0), r.get("epoch", 0)))
        out.append(Trial(row, history))
    return out


def _better(a: float, b: float, mode: str) -> bool:
    return a > b if mode == "max" else a < b


def final_value(t: Trial, metric: str) -> float | None:
    v = t.row.metrics.get(metric)
    return float(v) if t.row.status == "ok" and _finite(v) else None


def ranked(exp: Experiment, ts: list[Trial]) -> list[Trial]:
    """Trials with status ok and a finite last value, best first."""
    ok = [t for t in ts if final_value(t, exp.metric) is not None]
    return sorted(ok, key=lambda t: final_value(t, exp.metric), reverse=exp.mode == "max")


# ---------------------------------------------------------------- the search space's scale


def _log(e: SearchEntry) -> bool:
    return e.type == "loguniform"


def position(e: SearchEntry, v: float) -> float:
    """Where v lies in the searched range, 0..1, in the range's own scale."""
    lo, hi = float(e.low), float(e.high)
    if _log(e):
        lo, hi, v = math.log(lo), math.log(hi), math.log(max(v, 1e-300))
    return 0.5 if hi == lo else (v - lo) / (hi - lo)


def at_edge(e: SearchEntry, v: Any) -> str | None:
    if e.type == "choice" or not _finite(v):
        return None
    p = position(e, float(v))
    return "lower" if p <= EDGE else "upper" if p >= 1 - EDGE else None


# ---------------------------------------------------------------- next.yaml


def common_rung(exp: Experiment, ts: list[Trial], k: int) -> int:
    """The highest epoch among ASHA's rungs and the last epoch that at least k trials reached
    with status ok (all of them when fewer than k finished their first rung)."""
    levels = asha_rungs(exp.budget.max_epochs, exp.budget.grace_epochs, int(exp.budget.reduction_factor))
    levels = sorted(set(levels + [exp.budget.max_epochs]), reverse=True)
    for r in levels:
        if sum(t.value_at(r, exp.metric) is not None for t in ts) >= k:
            return r
    return levels[-1]


def top_k(exp: Experiment, ts: list[Trial], k: int = TOP_K) -> tuple[int, list[Trial]]:
    rung = common_rung(exp, ts, k)
    there = [t for t in ts if t.value_at(rung, exp.metric) is not None]
    there.sort(key=lambda t: t.value_at(rung, exp.metric), reverse=exp.mode == "max")
    return rung, there[:k]


def _clip_to_setting(name: str, lo: float, hi: float) -> tuple[float, float]:
    """[lo, hi] inside the setting's valid range (an open bound is kept a hair's width away)."""
    b = TRAIN_BOUNDS.get(name, {})
    if "ge" in b:
        lo = max(lo, b["ge"])
    if "le" in b:
        hi = min(hi, b["le"])
    if "gt" in b and lo <= b["gt"]:
        lo = b["gt"] + (hi - b["gt"]) * 1e-3
    if "lt" in b and hi >= b["lt"]:
        hi = b["lt"] - (b["lt"] - lo) * 1e-3
    return lo, hi


def narrowed(name: str, e: SearchEntry, values: list[float], best: float) -> tuple[SearchEntry, str]:
    """The range of `name` around `values` (the top-k trials'), padded by PAD, kept inside the
    searched range unless the best sits at one of its edges, and inside the setting's bounds."""
    to = (lambda v: math.log(v)) if _log(e) else (lambda v: v)
    back = (lambda v: math.exp(v)) if _log(e) else (lambda v: v)
    lo0, hi0 = to(float(e.low)), to(float(e.high))
    lo, hi = min(to(v) for v in values), max(to(v) for v in values)
    pad = PAD * (hi - lo) if hi > lo else ZERO_SPAN_PAD * (hi0 - lo0)
    lo, hi = max(lo - pad, lo0), min(hi + pad, hi0)
    edge = at_edge(e, best)
    if edge == "lower":
        lo = lo0 - WIDEN * (hi0 - lo0)
    elif edge == "upper":
        hi = hi0 + WIDEN * (hi0 - lo0)
    new_lo, new_hi = _clip_to_setting(name, back(lo), back(hi))
    if e.type == "int":
        new_lo, new_hi = math.floor(new_lo), math.ceil(new_hi)
    else:
        new_lo, new_hi = float(f"{new_lo:.4g}"), float(f"{new_hi:.4g}")
        new_lo, new_hi = min(new_lo, min(values)), max(new_hi, max(values))  # rounding never drops a top-k value
    if not new_lo < new_hi:
        return e, "kept (the top trials leave no range)"
    how = f"widened at the {edge} edge (the best is there)" if edge else "narrowed to the top trials"
    return e.model_copy(update={"low": new_lo, "high": new_hi}), how


def next_experiment(exp: Experiment, ts: list[Trial], k: int = TOP_K) -> tuple[dict[str, Any], list[str], int, list[Trial]]:
    """(the experiment for a next search, as YAML data; one note per searched setting; the rung
    and trials it was drawn from)."""
    rung, top = top_k(exp, ts, k)
    data = exp.model_dump(mode="json", exclude_unset=True)
    data["name"] = f"{exp.name}-next"
    data.pop("storage_path", None)
    data["storage_path"] = exp.storage_path
    notes = []
    if not top:
        return data, ["no trial finished a rung with status ok: the space is kept as it was"], rung, top
    data["search"] = _next_space(exp.search, (), top, notes)
    return data, notes, rung, top


def _next_space(search: dict[str, SearchEntry], when: tuple, top: list[Trial], notes: list[str]) -> dict[str, Any]:
    """A space (a branch's, inside) with each numeric range narrowed to the top trials that
    drew it; a branch no top trial took is kept as it was."""
    from trainables.config import branch_name as qualified

    from .schema import branch_of
    out: dict[str, Any] = {}
    for key, e in search.items():
        name = qualified(key, when)
        if e.type == "choice":
            out[key] = e.model_dump(exclude_none=True, exclude={"branches"})
            notes.append(f"{name}: choice kept ({', '.join(map(str, e.values))})")
            if e.branches:
                out[key]["branches"] = {str(o): _next_space(branch_of(o, e), when + ((key, o),), top, notes)
                                        for o in e.values or [] if branch_of(o, e)}
            continue
        drew = [t for t in top if _finite(t.row.params.get(name))]
        if not drew:
            out[key] = e.model_dump(exclude_none=True)
            continue
        new, how = narrowed(name, e, [float(t.row.params[name]) for t in drew], float(drew[0].row.params[name]))
        out[key] = new.model_dump(exclude_none=True)
        notes.append(f"{name}: [{sig4(e.low)}, {sig4(e.high)}] -> [{sig4(new.low)}, {sig4(new.high)}], {how}")
    return out


def write_next(exp: Experiment, ts: list[Trial], path: Path, k: int = TOP_K) -> list[str]:
    from .config import parse
    data, notes, rung, top = next_experiment(exp, ts, k)
    text = yaml.safe_dump(data, sort_keys=False)
    parse(text, str(path))  # what we write validates, or nothing is written
    head = (f"# The next search after {exp.name}: each numeric range narrowed to the top {len(top)} trials at "
            f"epoch {rung}\n# (padded by {PAD:.0%} of their span, widened only where the best sits at an edge).\n"
            f"#   python -m tuner run {path}\n" + "".join(f"#   {n}\n" for n in notes))
    path.write_text(head + text)
    return notes


# ---------------------------------------------------------------- plots


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
        pts = [(r["epoch"], r[exp.metric]) for r in t.history if r.get("status") == "ok" and _finite(r.get(exp.metric))]
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
            best = v if best is None or _better(v, best, exp.mode) else best
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
    import matplotlib.cm as cm
    vals = [final_value(t, exp.metric) for t in ok]
    vlo, vhi = min(vals), max(vals)
    fig, ax = _figure(max(6.0, 1.4 * (len(names) + 1)), 4.5)

    def y(name: str, v: Any) -> float:
        e = search[name]
        if v is None:  # a branch this trial did not take
            return float("nan")
        if e.type == "choice":
            options = list(e.values)
            return options.index(v) / max(1, len(options) - 1) if v in options else 0.5
        return position(e, float(v))
    for t, v in sorted(zip(ok, vals), key=lambda p: p[1], reverse=exp.mode == "min"):
        shade = (v - vlo) / (vhi - vlo) if vhi > vlo else 1.0
        shade = shade if exp.mode == "max" else 1 - shade
        ys = [y(n, t.row.params.get(n)) for n in names] + [(v - vlo) / (vhi - vlo) if vhi > vlo else 0.5]
        ax.plot(range(len(names) + 1), ys, color=cm.viridis(shade), alpha=0.8, lw=1.2)
    for i, n in enumerate(names):
        e = search[n]
        lo, hi = (str(e.values[0]), str(e.values[-1])) if e.type == "choice" else (sig4(e.low), sig4(e.high))
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


def entries(exp: Experiment) -> dict[str, SearchEntry]:
    """The searched settings by parameter name (a branch's as `lr[optimizer=sgd]`)."""
    return {p.name: p.entry for p in exp.searched}


def distributions(exp: Experiment) -> dict[str, Any]:
    from .space import distribution
    return {n: distribution(e) for n, e in entries(exp).items()}


def importance_by_rung(exp: Experiment, ts: list[Trial]) -> list[dict[str, Any]]:
    """PED-ANOVA importance per ASHA rung, from an in-memory study per rung whose COMPLETE trials
    are every trial that reached the rung, valued there.  Rungs with fewer than
    MIN_RUNG_TRIALS trials are listed as skipped."""
    import optuna
    from optuna.importance import PedAnovaImportanceEvaluator
    optuna.logging.set_verbosity(optuna.logging.WARNING)   # no line per in-memory study
    dists = distributions(exp)
    levels = sorted(set(asha_rungs(exp.budget.max_epochs, exp.budget.grace_epochs, int(exp.budget.reduction_factor))
                        + [exp.budget.max_epochs]))
    out = []
    for r in levels:
        reached = [(t, t.value_at(r, exp.metric)) for t in ts]
        reached = [(t, v) for t, v in reached if v is not None]
        entry: dict[str, Any] = {"rung": r, "n": len(reached), "importance": None, "skipped": ""}
        if len(reached) < MIN_RUNG_TRIALS:
            entry["skipped"] = f"{len(reached)} trial(s) < {MIN_RUNG_TRIALS}"
        else:
            study = optuna.create_study(direction="maximize" if exp.mode == "max" else "minimize")
            for t, v in reached:
                # A conditional space: each trial has the parameters of the branches it took;
                # the importance covers those every trial has.
                params = {n: (int(t.row.params[n]) if isinstance(d, optuna.distributions.IntDistribution)
                              else t.row.params[n]) for n, d in dists.items() if n in t.row.params}
                study.add_trial(optuna.trial.create_trial(params=params, distributions={n: dists[n] for n in params},
                                                          value=v))
            try:
                entry["importance"] = optuna.importance.get_param_importances(
                    study, evaluator=PedAnovaImportanceEvaluator(), normalize=True)
            except Exception as e:  # noqa: BLE001 - too little variety for the evaluator
                entry["skipped"] = f"PED-ANOVA could not rank: {e}"
        out.append(entry)
    return out


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
    rows = [t.row for t in ts if t.row.status == "ok" and all(_finite(t.row.metrics.get(m)) for m in exp.metrics)]
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
    points = {n: [] for n in names}
    for t in ts:
        sps = [r["samples_per_s"] for r in t.history if r.get("status") == "ok" and _finite(r.get("samples_per_s"))]
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


# ---------------------------------------------------------------- the report


def _table(head: list[str], rows: list[list[Any]]) -> str:
    th = "".join(f"<th>{html.escape(str(h))}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{th}</tr>{body}</table>"


def _img(path: Path, alt: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    return f'<figure><img alt="{html.escape(alt)}" src="data:image/png;base64,{data}"></figure>'


def build(exp_dir: str | Path, out: str | Path | None = None, k: int = TOP_K) -> dict[str, Any]:
    """Write the PNGs, report.html and next.yaml into `out` (default EXP_DIR/report)."""
    from .experiment import load_saved
    exp = load_saved(exp_dir)
    out = Path(out) if out else exp.exp_dir / "report"
    out.mkdir(parents=True, exist_ok=True)
    return render(exp, load(exp), out, k)


def render(exp: Experiment, ts: list[Trial], out: Path, k: int = TOP_K) -> dict[str, Any]:
    best = ranked(exp, ts)
    importance = importance_by_rung(exp, ts)
    figures = [(plot_curves(exp, ts, out), "learning curves"), (plot_best_so_far(exp, ts, out), "best so far"),
               (plot_parallel(exp, ts, out), "parallel coordinates"),
               (plot_importance(importance, out), "parameter importance"), (plot_pareto(exp, ts, out), "Pareto front"),
               (plot_throughput(exp, ts, out), "throughput")]
    figures = [(p, alt) for p, alt in figures if p is not None]
    notes = write_next(exp, ts, out / "next.yaml", k)

    warnings = []
    if best:
        for n, e in entries(exp).items():
            edge = at_edge(e, best[0].row.params.get(n))
            if edge:
                warnings.append(f"the best trial's {n}={sig4(best[0].row.params[n])} is at the {edge} edge of "
                                f"[{sig4(e.low)}, {sig4(e.high)}]: the optimum may lie outside; widen the range")
    failed = [[t.row.trial_id, t.row.state, t.row.status or "-", t.row.epoch,
               t.row.metrics.get("reason") or t.row.error or "-", t.row.error_file or ""]
              for t in ts if t.row.status in FAILED or t.row.state == "ERROR"]
    top_rows = [[t.row.trial_id, sig4(final_value(t, exp.metric)), t.row.epoch, params_text(t.row.params)]
                for t in best[:10]]
    rung_rows = [[e["rung"], e["n"], ", ".join(f"{n} {sig4(v)}" for n, v in e["importance"].items())
                  if e["importance"] else f"skipped: {e['skipped']}"] for e in importance]
    done = sum(t.row.state in ("TERMINATED", "ERROR") for t in ts)
    parts = [
        f"<h1>{html.escape(exp.name)}</h1>",
        f"<p>{len(ts)} trials ({done} ended), metric {html.escape(exp.metric)} ({exp.mode}), ASHA over "
        f"{exp.budget.max_epochs} epochs (grace {exp.budget.grace_epochs}, eta {sig4(exp.budget.reduction_factor)}).</p>",
    ]
    if best:
        b = best[0]
        parts.append(f"<p class=best>best: trial {html.escape(b.row.trial_id)}, {html.escape(exp.metric)} "
                     f"{sig4(final_value(b, exp.metric))} at epoch {b.row.epoch}: {html.escape(params_text(b.row.params))}</p>")
    parts += [f"<p class=warn>warning: {html.escape(w)}</p>" for w in warnings]
    parts.append("<h2>Top trials</h2>" + _table(["trial", exp.metric, "epoch", "searched settings"], top_rows))
    parts += [f"<h2>{html.escape(alt.capitalize())}</h2>{_img(p, alt)}" for p, alt in figures]
    parts.append(f"<h2>Parameter importance per rung</h2><p>PED-ANOVA on every trial that reached the rung, "
                 f"valued there; rungs with fewer than {MIN_RUNG_TRIALS} trials are skipped.</p>"
                 + _table(["epoch", "trials", "importance"], rung_rows))
    parts.append("<h2>Failed, diverged and infeasible trials</h2>"
                 + (_table(["trial", "state", "status", "epoch", "reason", "error file"], failed) if failed else "<p>none</p>"))
    parts.append("<h2>next.yaml</h2><ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in notes) + "</ul>")
    style = ("body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}"
             "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 6px;text-align:left}"
             "img{max-width:100%}.warn{color:#a40}.best{font-weight:bold}")
    page = (f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>{html.escape(exp.name)} report</title>"
            f"<style>{style}</style></head><body>{''.join(parts)}</body></html>")
    (out / "report.html").write_text(page)
    return {"out": str(out), "html": str(out / "report.html"), "next": str(out / "next.yaml"),
            "pngs": [str(p) for p, _ in figures], "warnings": warnings, "importance": importance}
