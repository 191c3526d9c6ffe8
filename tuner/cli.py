"""Command line: parsing and printing only; each verb calls one function."""
from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tuner", description="Hyperparameter tuning of PyTorch training on Ray Tune "
                                "(Optuna TPE searcher, ASHA early stopping).")
    sub = p.add_subparsers(dest="verb", required=True)
    t = sub.add_parser("train", help="train one config (no search)")
    t.add_argument("config", help="YAML file of training settings (e.g. an exported best_config.yaml)")
    t.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a setting")
    t.add_argument("--out", default=None, help="folder for checkpoints (default: none kept)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from .commands import run_verb
    return run_verb(args)


if __name__ == "__main__":
    sys.exit(main())
