"""The experiment schema: YAML -> validated Experiment, every problem reported at once.

The training settings are not redeclared here: their pydantic model is generated from
trainables.config.TrainConfig, and the rules every training config obeys come from
trainables.config.problems_of.  This module adds the experiment around them (metric,
budget, resources, search entries) and the checks that span both.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from trainables.config import TrainConfig, problems_of
from tuner.checks import (
    combination_problems,
    experiment_problems,
    schema_problems,
    search_problems,
    tuples,
)
from tuner.schema import TRAIN_FIELDS, Experiment, ExperimentError, TrainSettings
from tuner.yamlfile import Loader, clean, read_yaml


def parse(text: str, source: str = "<experiment>", overrides: list[str] | None = None) -> Experiment:
    """YAML text -> Experiment; raises ExperimentError listing every problem."""
    raw = read_yaml(text, source)
    problems: list[str] = []
    for item in overrides or []:
        _apply_override(raw, item, problems)
    raw = clean(raw, "", problems)
    if isinstance(raw.get("train"), dict):
        raw["train"] = tuples(raw["train"])
    try:
        exp = Experiment.model_validate(raw)
    except ValidationError as e:
        problems += schema_problems(e)
        pruned = _without_errors(raw, e)  # so the remaining checks still run and report too
        if pruned is None:
            raise ExperimentError(source, problems) from None
        exp = pruned
    raw_train = raw.get("train") or {}
    in_search, broken = search_problems(exp, raw_train)
    problems += experiment_problems(exp) + in_search
    problems += combination_problems(exp, skip=broken)
    if problems:
        raise ExperimentError(source, problems)
    return exp


def _without_errors(raw: dict, err: ValidationError) -> Experiment | None:
    """The experiment with every key that failed the schema left out, or None."""
    import copy
    pruned = copy.deepcopy(raw)
    for e in err.errors():
        node: Any = pruned
        loc = e["loc"]
        for part in loc[:-1]:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(loc[-1], None)
    try:
        return Experiment.model_validate(pruned)
    except ValidationError:
        return None


def _apply_override(raw: dict, item: str, problems: list[str]) -> None:
    """`--set key=value`: a dotted path into the file (train.lr=0.1, budget.num_samples=4);
    a bare training setting means train.<key>, unless the experiment itself has that key
    (`seed`: the search's seed; the training seed is train.seed)."""
    if "=" not in item:
        problems.append(f"--set {item!r}: write KEY=VALUE, e.g. --set train.lr=0.1")
        return
    key, value = item.split("=", 1)
    parts = key.strip().split(".")
    if len(parts) == 1 and parts[0] in TRAIN_FIELDS and parts[0] not in Experiment.model_fields:
        parts = ["train", parts[0]]
    node = raw
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            problems.append(f"--set {key}: {part} is not a section")
            return
    node[parts[-1]] = yaml.load(value, Loader=Loader)


def load(path: str | Path, overrides: list[str] | None = None) -> Experiment:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise ExperimentError(str(path), [f"cannot read the file: {e.strerror}"]) from None
    return parse(text, str(path), overrides)


def load_train_config(path: str | Path, overrides: list[str] | None = None) -> TrainConfig:
    """A flat YAML of training settings (e.g. an exported best_config.yaml), validated."""
    text = Path(path).read_text()
    raw = read_yaml(text, str(path))
    problems: list[str] = []
    for item in overrides or []:
        k, _, v = item.partition("=")
        raw[k.strip()] = yaml.load(v, Loader=Loader)
    raw = tuples(clean(raw, "", problems))
    try:
        settings = TrainSettings.model_validate(raw)
    except ValidationError as e:
        raise ExperimentError(str(path), problems + schema_problems(e)) from None
    cfg = TrainConfig.from_dict(settings.model_dump())
    import torch
    problems += problems_of(cfg, has_gpu=torch.cuda.is_available())
    if problems:
        raise ExperimentError(str(path), problems)
    return cfg

