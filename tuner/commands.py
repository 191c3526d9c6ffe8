"""One function per CLI verb: it calls the service and prints; user mistakes become one
clear message and a non-zero exit, never a traceback."""
from __future__ import annotations

import json
import logging
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from trainables.config import ConfigError
from trainables.runtime.preflight import PreflightError

from .schema import ExperimentError
from .text import params_text, sig4


def _err(msg: str) -> None:
    print(f"error: {msg}", file=sys.stderr)


def run_verb(args) -> int:
    from .cluster import ClusterError
    from .registry import RegistryError
    from .service import ServiceError
    try:
        return VERBS[args.verb](args)
    except ExperimentError as e:
        _err(str(e))
        return 2
    except (ConfigError, ClusterError, PreflightError, FileNotFoundError, RegistryError, ServiceError) as e:
        _err(str(e))
        return 2
    except Exception as e:
        # A checkpoint error comes only from the checkpoint module, loaded by then: the service
        # verbs (submit, queue, ...) start without torch, which it imports.
        ckpt = sys.modules.get("trainables.runtime.checkpoint")
        if ckpt is not None and isinstance(e, ckpt.CheckpointError):
            _err(str(e))
            return 2
        raise
    except KeyboardInterrupt:
        _err("interrupted; `tuner resume EXP_DIR` continues an experiment")
        return 130


def cmd_validate(args) -> int:
    from .config import load
    exp = load(args.file, args.set)
    names = [p.name for p in exp.searched]
    print(f"{args.file}: ok — {exp.name}: {exp.budget.num_samples} trials, {len(names)} searched settings "
          f"({', '.join(names) or 'none'}), metric {exp.metric} ({exp.mode})")
    return 0


def cmd_run(args) -> int:
    from .config import load
    from .run import run_experiment
    extra = (["train.profile=true"] if args.profile else []) + ([f"warm_start={args.warm_start}"] if args.warm_start else [])
    exp = load(args.file, args.set + extra)  # nothing starts on error
    return _print_summary(run_experiment(exp, args.address, allow_no_auth=args.allow_no_auth,
                                         verbose=args.verbose))


def _print_summary(summary: dict[str, Any]) -> int:
    """The end-of-run lines; the exit status: 130 (as for Ctrl-C) while trials are unfinished."""
    best, d = summary["best"], shlex.quote(summary["exp_dir"])
    print(f"\n{summary['trials']} trials; results in {d}")
    if summary["errors"]:
        print(f"{len(summary['errors'])} trial(s) errored, first: {summary['errors'][0]}")
    if best:
        print(f"best {best['metric']} = {sig4(best['value'])} at epoch {best['epoch']}: {params_text(best['params'])}")
    if summary["unfinished"]:
        print(f"{len(summary['unfinished'])} trial(s) unfinished; continue with: python -m tuner resume {d}")
    print(f"next: python -m tuner status {d}\n      python -m tuner report {d}\n      python -m tuner export {d} --out best/")
    return 130 if summary["unfinished"] else 0


def cmd_resume(args) -> int:
    from .run import resume_experiment
    return _print_summary(resume_experiment(args.exp_dir, args.address, allow_no_auth=args.allow_no_auth,
                                            verbose=args.verbose))


def _where(arg: str) -> str:
    """An experiment folder, or the folder of a service registry id."""
    from .service import experiment_location
    return experiment_location(arg)


def cmd_status(args) -> int:
    from .experiment import load_saved
    from .results import reserved_text, select, trials
    exp = load_saved(_where(args.exp_dir))
    rows = trials(exp)
    try:
        best = select(exp, rows)
    except ExperimentError:
        best = None
    if args.json:
        print(json.dumps({"experiment": exp.name, "metric": exp.metric, "mode": exp.mode,
                          "best": best.trial_id if best else None,
                          "trials": [{"trial_id": r.trial_id, "state": r.state, "status": r.status, "epoch": r.epoch,
                                      "reason": r.metrics.get("reason"), "actor_id": r.metrics.get("actor_id"),
                                      "reserved": r.reserved,
                                      "error": r.error or None,
                                      "error_file": r.error_file or None,
                                      exp.metric: r.metrics.get(exp.metric), "params": r.params} for r in rows]},
                         default=str, indent=1))
        return 0
    print(f"{exp.name}: {len(rows)} trials, metric {exp.metric} ({exp.mode}), max {exp.budget.max_epochs} epochs")
    print(f"{'trial':12s} {'state':11s} {'status':10s} {'epoch':>5s} {exp.metric:>10s}  {'reserved':14s} "
          f"{'actor':32s}  params")
    for r in rows:
        v = r.metrics.get(exp.metric)
        mark = " *" if best and r.trial_id == best.trial_id else ""
        print(f"{r.trial_id:12s} {r.state:11s} {r.status or '-':10s} {r.epoch:5d} {sig4(v) if v is not None else '-':>10s}"
              f"  {reserved_text(r.reserved):14s} {r.metrics.get('actor_id') or '-':32s}  {params_text(r.params)}{mark}")
        if r.status not in ("", "ok") and r.metrics.get("reason"):
            print(f"{'':12s} reason: {r.metrics['reason']}")
        if r.error:
            print(f"{'':12s} error: {r.error}\n{'':12s} error file: {r.error_file}")
    if best:
        print(f"best (*): {best.trial_id} {exp.metric}={sig4(best.metrics.get(exp.metric))}")
    return 0


def cmd_export(args) -> int:
    from .export import export
    m = export(_where(args.exp_dir), args.out, args.select, args.force)
    branch = f" (branch {', '.join(m['branch'])})" if m["branch"] else ""
    print(f"exported trial {m['trial_id']}{branch} to {args.out}: val_acc {m['val_acc']:.4f}, "
          f"test_acc {m['test_acc']:.4f}")
    print("files: " + ", ".join(m["files"]))
    return 0


def cmd_report(args) -> int:
    from .report import build
    if args.top_k < 1:
        raise ExperimentError(args.exp_dir, [f"--top-k {args.top_k}: give 1 or more trials"])
    r = build(_where(args.exp_dir), args.out, args.top_k)
    for w in r["warnings"]:
        print(f"warning: {w}")
    print(f"report: {r['html']}\nplots: {', '.join(Path(p).name for p in r['pngs'])}")
    print(f"next search: {r['next']}\n  python -m tuner run {r['next']}")
    return 0


def cmd_train(args) -> int:
    from trainables.loop import train_loop
    from trainables.runtime.session import PlainSession

    from .config import load_train_config
    cfg = load_train_config(args.config, args.set + (["profile=true"] if args.profile else []))
    if cfg.profile and not cfg.profile_dir:
        cfg = cfg.replace(profile_dir=str(Path(args.out or ".") / "profiles"))
    if (cfg.tb_histograms or cfg.tb_graph) and not cfg.tb_dir:
        cfg = cfg.replace(tb_dir=str(Path(args.out or ".") / "model-tensorboard"))
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
    session = PlainSession(cfg.device, storage=args.out)
    if cfg.workers > 1:
        # The DDP ranks a trial starts on its node, here without Ray: one process per rank.
        from trainables.runtime.ranks import RankError, run_ranks
        job = {"config": cfg.to_dict(), "device": cfg.device, "log": "INFO",
               "threads": max(1, (os.cpu_count() or 1) // cfg.workers)}
        try:
            run_ranks(cfg.workers, job, session, restarts=0)
        except RankError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        m = session.reports[-1] if session.reports else {}
    else:
        m = train_loop(cfg, session)
    print(json.dumps({k: m.get(k) for k in ("status", "epoch", "val_acc", "val_loss", "test_acc") if k in m}))
    if args.out:
        print(f"checkpoints in {args.out}")
    return 0 if m.get("status") == "ok" else 1


def cmd_service(args) -> int:
    from .service import start
    start(args.address, args.config)
    return 0


def cmd_submit(args) -> int:
    from .service import submit
    submit(args.file, args.set, args.address, args.priority, args.name)
    return 0


def _num(v) -> str:
    return "-" if v is None else sig4(v)


def cmd_queue(args) -> int:
    import getpass
    import time

    from .service import queue
    q = queue(args.address)
    if args.json:
        print(json.dumps(q, indent=1, default=str))
        return 0
    me = getpass.getuser()
    print(f"{'id':36s} {'name':16s} {'owner':10s} {'priority':8s} {'state':9s} {'done':>5s} {'run':>4s} "
          f"{'slots':>5s} {'best':>8s}  since")
    for r in q["experiments"]:
        since = time.strftime("%m-%d %H:%M", time.localtime(r["started"] or r["submitted"]))
        print(f"{r['id']:36s} {r['name'][:16]:16s} {r['owner'][:10]:10s} {r['priority']:8s} {r['state']:9s} "
              f"{_num(r['done_trials']):>5s} {r['running_trials']:4d} {r['slots']:5d} {_num(r['best']):>8s}  {since}"
              + (f"  ({r['message']})" if r.get("message") else ""))
    for u in q.get("unmanaged", []):
        print(f"{'job ' + u['job']:36s} {'(unmanaged)':16s} {'-':10s} {'-':8s} {'unmanaged':9s} {'-':>5s} "
              f"{u['trials']:4d} {'-':>5s} {'-':>8s}  {u['entrypoint'][:60]}")
    for line in q["refused"]:
        print(f"refused: {line}")
    cap = q["capacity"]
    outside = f", {cap['unmanaged']:g} held outside the service" if cap.get("unmanaged") else ""
    print(f"cluster: {cap['total']:g} {cap['resource']}{outside}, the rest shared by priority; you are {me}")
    return 0


def cmd_cancel(args) -> int:
    from .service import cancel
    r = cancel(args.id, args.address, args.force)
    print(f"cancelled {r['id']}; everything it wrote stays in {r['location']} "
          f"(continue it with: python -m tuner resume {shlex.quote(r['location'])})")
    return 0


def cmd_logs(args) -> int:
    from .service import logs
    return logs(args.id, args.address, follow=not args.no_follow)


VERBS = {"service": cmd_service, "submit": cmd_submit, "queue": cmd_queue, "cancel": cmd_cancel, "logs": cmd_logs,
         "validate": cmd_validate, "run": cmd_run, "resume": cmd_resume, "status": cmd_status,
         "export": cmd_export, "train": cmd_train, "report": cmd_report}
