"""Command line: parsing and printing only; each verb calls one function."""
from __future__ import annotations

import argparse
import sys

EPILOG = """examples:
  python -m tuner validate search_spaces/quickstart.yaml
  python -m tuner run search_spaces/quickstart.yaml            # embedded local Ray
  python -m tuner run search_spaces/cifar.yaml --address auto  # an existing cluster
  python -m tuner status runs/quickstart
  python -m tuner resume runs/quickstart
  python -m tuner report runs/quickstart
  python -m tuner export runs/quickstart --out best/
  python -m tuner train best/best_config.yaml
  python -m tuner service start                                # a local head and the tuning service
  python -m tuner submit search_spaces/quickstart.yaml --priority high
  python -m tuner queue
"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tuner", epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
                                description="Hyperparameter tuning of PyTorch training on Ray Tune "
                                            "(Optuna searcher: TPE, or a Sobol sequence below 24 trials; "
                                            "ASHA early stopping; DDP trials).")
    sub = p.add_subparsers(dest="verb", required=True)
    r = sub.add_parser("run", help="validate an experiment file, then run its search", description="validate an experiment file, then run its search")
    r.add_argument("file", help="experiment YAML (see search_spaces/)")
    r.add_argument("--address", default=None, help="Ray address to join (default: RAY_ADDRESS, else a local Ray)")
    r.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a setting: train.lr=0.1, budget.num_samples=4, or a bare training setting")
    r.add_argument("--allow-no-auth", action="store_true",
                   help="start a local Ray even though RAY_AUTH_MODE=disabled is set (not recommended)")
    r.add_argument("--warm-start", default=None, metavar="EXP_DIR",
                   help="seed the search with an earlier experiment's trials (same metric, mode and dataset)")
    r.add_argument("--verbose", action="store_true",
                   help="also Tune's trial boxes and status tables, and Ray's and Optuna's INFO lines")
    r.add_argument("--profile", action="store_true",
                   help="profile 5 steps of the first trial (train.profile=true): EXP_DIR/profiles/trace.json")
    v = sub.add_parser("validate", help="report every problem in an experiment file; exit 2 if any", description="report every problem in an experiment file; exit 2 if any")
    v.add_argument("file")
    v.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    s = sub.add_parser("status", help="trials, their states and the best so far", description="trials, their states and the best so far")
    s.add_argument("exp_dir")
    s.add_argument("--json", action="store_true", help="machine-readable output")
    re_ = sub.add_parser("resume", help="continue an interrupted experiment from its checkpoints", description="continue an interrupted experiment from its checkpoints")
    re_.add_argument("exp_dir")
    re_.add_argument("--address", default=None)
    re_.add_argument("--allow-no-auth", action="store_true", help="as for run")
    re_.add_argument("--verbose", action="store_true", help="Ray's and Optuna's INFO lines")
    e = sub.add_parser("export", help="best config, checkpoint, weights, torch.export and TorchScript models", description="best config, checkpoint, weights, torch.export and TorchScript models")
    e.add_argument("exp_dir")
    e.add_argument("--out", required=True, help="folder to write (must be empty unless --force)")
    e.add_argument("--select", default=None,
                   help="METRIC:min|max (best on that metric; Pareto-optimal with two objectives) or trial:ID")
    e.add_argument("--force", action="store_true", help="write into a non-empty --out")
    rp = sub.add_parser("report", help="report.html and PNGs (curves, importance, ...) and next.yaml for a next search", description="report.html and PNGs (curves, importance, ...) and next.yaml for a next search")
    rp.add_argument("exp_dir")
    rp.add_argument("--out", default=None, help="folder to write (default EXP_DIR/report)")
    rp.add_argument("--top-k", type=int, default=5, help="trials whose span next.yaml keeps (default 5)")
    t = sub.add_parser("train", help="train one config (no search), e.g. an exported best_config.yaml", description="train one config (no search), e.g. an exported best_config.yaml")
    t.add_argument("config", help="YAML of training settings")
    t.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a training setting")
    t.add_argument("--out", default=None, help="folder for per-epoch checkpoints")
    t.add_argument("--profile", action="store_true",
                   help="profile 5 steps: trace.json and top_ops.txt in profile_dir (default OUT/profiles or ./profiles)")
    sv = sub.add_parser("service", help="the tuning service on a cluster: start it", description="the tuning service on a cluster (docs/service.md)")
    svs = sv.add_subparsers(dest="action", required=True)
    st = svs.add_parser("start", help="start (or restart) the dispatcher; without --address also a local persistent head",
                        description="start (or restart) the dispatcher; without --address also a local persistent head")
    st.add_argument("--address", default=None, help="the cluster (default: RAY_ADDRESS, else a local head)")
    st.add_argument("--config", default=None, help="service.yaml: storage, max_running, max_retries, weights")
    sb = sub.add_parser("submit", help="queue an experiment on the tuning service", description="validate an experiment file, check it fits the cluster, then queue it on the tuning service")
    sb.add_argument("file")
    sb.add_argument("--address", default=None, help="the cluster (default: RAY_ADDRESS, else the local head)")
    sb.add_argument("--priority", default="normal", help="high, normal or low (default normal): its share of the cluster")
    sb.add_argument("--name", default=None, help="the experiment's name (default: the file's name:)")
    sb.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="as for run")
    q = sub.add_parser("queue", help="the experiments of the tuning service", description="the experiments of the tuning service: state, trials, best so far, slots now")
    q.add_argument("--address", default=None)
    q.add_argument("--json", action="store_true", help="machine-readable output")
    c = sub.add_parser("cancel", help="stop a submitted experiment (it stays resumable)", description="stop a submitted experiment; everything written stays (resumable)")
    c.add_argument("id")
    c.add_argument("--address", default=None)
    c.add_argument("--force", action="store_true", help="cancel another user's experiment")
    lg = sub.add_parser("logs", help="follow a submitted experiment's driver log", description="print a submitted experiment's driver log, following it while it runs")
    lg.add_argument("id")
    lg.add_argument("--address", default=None)
    lg.add_argument("--no-follow", action="store_true", help="print what is there and return")
    return p


SERVICE_VERBS = ("service", "submit", "queue", "cancel", "logs")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.verb in SERVICE_VERBS:   # before Ray is imported (tuner/service.py)
        import os

        from trainables import settings
        if not settings.read().ray_auth_disabled:
            os.environ.setdefault(settings.RAY_AUTH_MODE, "token")
    from .commands import run_verb
    return run_verb(args)


if __name__ == "__main__":
    sys.exit(main())
