"""`tuner report EXP_DIR`: what a finished (or running) experiment found, as PNGs and one
self-contained report.html (every image inline as a data: PNG, no network reference), and
next.yaml: the experiment again with each numeric range narrowed around the best trials.

Reads only the experiment folder: tuner-experiment.yaml, each trial's result.json and
error.txt, through tuner.results.
"""
from __future__ import annotations

import base64
import html
from pathlib import Path
from typing import Any

from .history import Trial, final_value, load, ranked
from .importance import MIN_RUNG_TRIALS, MIN_TOP_TRIALS, TARGET_QUANTILE, entries, importance_by_rung
from .next_space import TOP_K, at_edge, write_next
from .plots import (
    plot_best_so_far,
    plot_curves,
    plot_importance,
    plot_parallel,
    plot_pareto,
    plot_throughput,
)
from .schema import Experiment
from .text import params_text, sig4

FAILED = ("diverged", "infeasible", "storage_error")


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
    shown = [(p, alt) for p, alt in figures if p is not None]
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
    rung_rows = [[e["rung"], e["n"], e["top"] if e["importance"] else "",
                  ", ".join(f"{n} {sig4(v)}" for n, v in e["importance"].items())
                  if e["importance"] else f"skipped: {e['skipped']}"] for e in importance]
    done = sum(t.row.state in ("TERMINATED", "ERROR") for t in ts)
    parts = [
        f"<h1>{html.escape(exp.name)}</h1>",
        (f"<p>{len(ts)} trials ({done} ended), metric {html.escape(exp.metric)} ({exp.mode}), ASHA over "
        f"{exp.budget.max_epochs} epochs (grace {exp.budget.grace_epochs}, eta {sig4(exp.budget.reduction_factor)}).</p>"),
    ]
    if best:
        b = best[0]
        parts.append(f"<p class=best>best: trial {html.escape(b.row.trial_id)}, {html.escape(exp.metric)} "
                     f"{sig4(final_value(b, exp.metric))} at epoch {b.row.epoch}: {html.escape(params_text(b.row.params))}</p>")
    parts += [f"<p class=warn>warning: {html.escape(w)}</p>" for w in warnings]
    parts.append("<h2>Top trials</h2>" + _table(["trial", exp.metric, "epoch", "searched settings"], top_rows))
    parts += [f"<h2>{html.escape(alt.capitalize())}</h2>{_img(p, alt)}" for p, alt in shown]
    parts.append(f"<h2>Parameter importance per rung</h2><p>PED-ANOVA on every trial that reached the rung, "
                 f"valued there: how much each setting tells its top trials (the best {TARGET_QUANTILE:.0%}, at least "
                 f"{MIN_TOP_TRIALS}) from the rest; rungs with fewer than {MIN_RUNG_TRIALS} trials are skipped.</p>"
                 + _table(["epoch", "trials", "top set", "importance"], rung_rows))
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
            "pngs": [str(p) for p, _ in shown], "warnings": warnings, "importance": importance}

