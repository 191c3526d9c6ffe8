"""The experiment schema: YAML -> validated Experiment, every problem reported at once.

The training settings are not redeclared here: their pydantic model is generated from
trainables.config.TrainConfig, and the rules every training config obeys come from
trainables.config.problems_of.  This module adds the experiment around them (metric,
budget, resources, search entries) and the checks that span both.
"""
from __future__ import annotations

import dataclasses
import difflib
import itertools
import math
import os
import re
import typing
from pathlib import Path
from typing import Any, Literal, Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from trainables.config import TORCH_LOADER_FIELDS, TrainConfig, problems_of, range_text
from trainables.config import branch_name as qualified
from trainables.runtime import storage

STRICT = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)  # no .inf/.nan anywhere
# Known training-set sizes, to check that a global batch fits (None: unknown until loaded).
TRAIN_SIZES = {"digits": 1437, "cifar10": 50000}
MAX_COMBINATIONS = 4096


class ExperimentError(ValueError):
    """Every problem found in an experiment file, one per line."""

    def __init__(self, source: str, problems: list[str]):
        self.source, self.problems = source, problems
        super().__init__(f"{source}: {len(problems)} problem(s)\n" + "\n".join(f"  - {p}" for p in problems))


# ---------------------------------------------------------------- the schema


def _train_settings_model() -> type[BaseModel]:
    """The training settings' schema, ranges included, from TrainConfig's own fields."""
    hints = typing.get_type_hints(TrainConfig)
    fields = {f.name: (hints[f.name], Field(f.default, **f.metadata.get("bounds", {})))
              for f in dataclasses.fields(TrainConfig)}
    return create_model("TrainSettings", __config__=STRICT, **fields)


TrainSettings = _train_settings_model()
TRAIN_FIELDS = [f.name for f in dataclasses.fields(TrainConfig)]
TRAIN_BOUNDS = {f.name: f.metadata["bounds"] for f in dataclasses.fields(TrainConfig) if "bounds" in f.metadata}
RANGE_ERRORS = {"greater_than", "greater_than_equal", "less_than", "less_than_equal", "finite_number"}


class Objective(BaseModel):
    model_config = STRICT
    metric: str
    mode: Literal["min", "max"]


class Budget(BaseModel):
    model_config = STRICT
    num_samples: int = Field(8, ge=1)           # trials to run
    max_epochs: int = Field(10, ge=1)           # ASHA max_t, and each trial's epochs
    grace_epochs: int = Field(1, ge=1)          # ASHA grace period, in epochs
    reduction_factor: float = Field(3.0, gt=1)  # ASHA eta
    max_concurrent_trials: int = Field(0, ge=0) # 0 = as many as the cluster holds
    time_limit_s: Optional[float] = Field(None, gt=0)  # wall-clock limit of the whole search


class Resources(BaseModel):
    model_config = STRICT
    workers: int = Field(1, ge=1)                 # DDP workers per trial (>= 2: Ray Train)
    cpus_per_worker: float = Field(1.0, gt=0)
    gpus_per_worker: float = Field(0.0, ge=0)     # fractions allowed for 1-worker trials
    accelerator: Optional[str] = Field(None, pattern=r"^[A-Za-z0-9_-]+$")  # GPU type, e.g. A100 -> accelerator_type:A100
    max_failures: int = Field(1, ge=0)            # times Tune retries a failed trial (from its checkpoint)
    worker_failures: int = Field(1, ge=0)         # times a DDP trial's ranks are restarted together
    # Where a DDP trial's workers go; PACK (fewest nodes) is right for training. STRICT_SPREAD
    # (one per node) is how the tests put ranks on different nodes.
    placement_strategy: Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"] = "PACK"
    # How a DDP trial's ranks start: "local" = processes the trial starts on its own node
    # (seconds), "train" = a Ray Train TorchTrainer (ranks on any nodes, ~14 s to start, the
    # dashboard's Train view), "auto" = local when one node can hold all of a trial's ranks.
    ddp: Literal["auto", "local", "train"] = "auto"


class SearchEntry(BaseModel):
    model_config = STRICT
    type: Literal["loguniform", "uniform", "int", "choice"]
    low: Optional[float] = None
    high: Optional[float] = None
    q: Optional[float] = None
    values: Optional[list[Any]] = None
    # A choice's sub-spaces: option -> the settings searched only when that option is drawn
    # (e.g. optimizer: sgd -> lr and momentum; adamw -> its own lr range).
    branches: Optional[dict[str, dict[str, "SearchEntry"]]] = None


SearchEntry.model_rebuild()


@dataclasses.dataclass(frozen=True)
class Searched:
    """One searched setting of a (possibly conditional) space, as the searcher sees it."""
    name: str                            # Optuna's parameter name: `lr`, or `lr[optimizer=sgd]` in a branch
    setting: str                         # the training setting it sets: `lr`
    entry: SearchEntry
    when: tuple[tuple[str, Any], ...]    # the branch: ((choice setting, option), ...), outermost first
    at: str                              # its YAML path: search.optimizer.branches.sgd.lr


def branch_of(option: Any, entry: SearchEntry) -> dict[str, SearchEntry]:
    """The sub-space of a choice's option ({} when it has none): branches are keyed by the
    option as YAML text, so `128` and `"128"` name the same option."""
    return (entry.branches or {}).get(str(option).lower() if isinstance(option, bool) else str(option), {})


def flatten(search: dict[str, SearchEntry], when: tuple = (), at: str = "search") -> list[Searched]:
    """Every searched setting of a space, each branch's under its own name, outer ones first."""
    out = []
    for key, e in search.items():
        out.append(Searched(qualified(key, when), key, e, when, f"{at}.{key}"))
        if e.type == "choice" and e.branches:
            options = list(e.values or [])
            # a branch named after no option is refused by validation, which checks its contents too
            named = {str(o).lower() if isinstance(o, bool) else str(o) for o in options}
            options += [o for o in e.branches if o not in named]
            for option in options:
                out += flatten(branch_of(option, e), when + ((key, option),), f"{at}.{key}.branches.{option}")
    return out


def scenarios(search: dict[str, SearchEntry]) -> list[tuple[dict[str, SearchEntry], str]]:
    """The space as flat spaces, one per combination of branches taken: (setting -> entry, with
    each branching choice narrowed to its option; a text naming the branches)."""
    out: list[tuple[dict[str, SearchEntry], str]] = [({}, "")]
    for key, e in search.items():
        if not (e.type == "choice" and e.branches):
            out = [({**flat, key: e}, label) for flat, label in out]
            continue
        grown = []
        for option in e.values or []:
            one = e.model_copy(update={"values": [option], "branches": None})
            for sub, sub_label in scenarios(branch_of(option, e)):
                tag = f"{key}={option}" + (f", {sub_label}" if sub_label else "")
                grown += [({**flat, key: one, **sub}, f"{label}, {tag}" if label else tag) for flat, label in out]
        out = grown
    return out


def branch_taken(search: dict[str, SearchEntry], config: dict[str, Any]) -> list[str]:
    """The branches a trial's config took, as `optimizer=sgd` texts (outermost first)."""
    out = []
    for key, e in search.items():
        if e.type == "choice" and e.branches and key in config:
            out.append(f"{key}={config[key]}")
            out += branch_taken(branch_of(config[key], e), config)
    return out


class Experiment(BaseModel):
    model_config = STRICT
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    storage_path: str = "./runs"
    metric: str = "val_acc"
    mode: Literal["min", "max"] = "max"
    second_objective: Optional[Objective] = None
    seed: int = 0
    budget: Budget = Budget()
    resources: Resources = Resources()
    train: TrainSettings = TrainSettings()  # type: ignore[valid-type]
    search: dict[str, SearchEntry] = {}

    @property
    def searched(self) -> list[Searched]:
        """Every searched setting, branches included, by the searcher's parameter name."""
        return flatten(self.search)

    def params_of(self, config: dict[str, Any]) -> dict[str, Any]:
        """A trial's searched values by parameter name, the branches it did not take left out."""
        return {s.name: config[s.name] for s in self.searched if s.name in config}

    @property
    def remote(self) -> bool:
        """storage_path is a cloud URI (s3://, gs://): Ray and the tuner write through pyarrow."""
        return storage.is_uri(self.storage_path)

    @property
    def location(self) -> str:
        """The experiment folder as the user names it: a local path or a URI."""
        return storage.join(self.storage_path, self.name) if self.remote else str(self.exp_dir)

    @property
    def exp_dir(self) -> Path:
        """The experiment folder on this machine: for cloud storage, the local copy of it (the
        driver's own files, and what `status`/`export`/`report` download)."""
        if self.remote:
            return storage.local_copy(self.location)
        return Path(self.storage_path).expanduser().resolve() / self.name

    @property
    def metrics(self) -> list[str]:
        return [self.metric] + ([self.second_objective.metric] if self.second_objective else [])

    @property
    def modes(self) -> list[str]:
        return [self.mode] + ([self.second_objective.mode] if self.second_objective else [])

    def base_config(self) -> dict[str, Any]:
        """Fixed training settings as a flat dict, with the experiment's budget and resources."""
        cfg = TrainConfig.from_dict(self.train.model_dump()).to_dict()
        cfg.update(epochs=self.budget.max_epochs, workers=self.resources.workers)
        if self.resources.gpus_per_worker == 0 and cfg["device"] == "auto":
            cfg["device"] = "cpu"
        if cfg["profile"] and not cfg["profile_dir"]:
            cfg["profile_dir"] = str(self.exp_dir / "profiles")
        return cfg


# ---------------------------------------------------------------- YAML loading


class _Bool:
    """A YAML 1.1 boolean written as yes/no/on/off/y/n: kept aside so the schema can refuse it."""

    def __init__(self, text: str):
        self.text = text


class _Loader(yaml.SafeLoader):
    pass


def _construct_mapping(loader: _Loader, node: yaml.MappingNode, deep: bool = False):
    seen: dict[Any, Any] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (first at line {seen[key] + 1}); YAML would keep only the last",
                key_node.start_mark)
        seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=deep)


def _construct_bool(loader: _Loader, node: yaml.ScalarNode):
    text = loader.construct_scalar(node)
    return text.lower() == "true" if text.lower() in ("true", "false") else _Bool(text)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_Loader.add_constructor("tag:yaml.org,2002:bool", _construct_bool)
# YAML 1.1 wants a dot in a float, so PyYAML reads an unquoted 1e-3 as a string; resolve
# it as the number it looks like (a quoted "1e-3" stays text).
_Loader.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+$"),
                              list("-+0123456789"))

_DROP = object()  # a value already reported as a problem: left out so it is not reported twice


def _clean(node: Any, path: str, problems: list[str]) -> Any:
    """yes/no/on/off booleans are refused (each reported once, its key left out)."""
    if isinstance(node, dict):
        out = {k: _clean(v, f"{path}.{k}" if path else str(k), problems) for k, v in node.items()}
        return {k: v for k, v in out.items() if v is not _DROP}
    if isinstance(node, list):
        return [_clean(v, f"{path}[{i}]", problems) for i, v in enumerate(node)]
    if isinstance(node, _Bool):
        problems.append(f"{path}: {node.text!r} is read by YAML as a boolean; write true/false for a "
                        f"switch, or quote it (\"{node.text}\") for text")
        return _DROP
    return node


def _read_yaml(text: str, source: str) -> dict[str, Any]:
    try:
        raw = yaml.load(text, Loader=_Loader)  # a SafeLoader: no Python objects
    except yaml.YAMLError as e:
        raise ExperimentError(source, [f"not valid YAML: {e}"]) from None
    if not isinstance(raw, dict):
        raise ExperimentError(source, ["the file must be a mapping of settings (name:, train:, search: ...)"])
    return raw


# ---------------------------------------------------------------- validation


def _did_you_mean(word: str, options: list[str]) -> str:
    close = difflib.get_close_matches(str(word), options, n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def _allowed_keys(loc: tuple) -> list[str]:
    """The keys allowed where an unknown key `loc[-1]` was found."""
    section = {(): Experiment, ("budget",): Budget, ("resources",): Resources,
               ("second_objective",): Objective, ("train",): TrainSettings}.get(tuple(loc[:-1]))
    if section is None and loc[:1] == ("search",) and len(loc) % 3 == 0:  # search.KEY[.branches.OPTION.KEY]*.FIELD
        section = SearchEntry
    return list(section.model_fields) if section is not None else []


def _schema_problems(err: ValidationError) -> list[str]:
    out = []
    for e in err.errors():
        loc = tuple(e["loc"])
        path = ".".join(str(p) for p in loc)
        if e["type"] == "extra_forbidden":
            out.append(f"{path}: unknown key{_did_you_mean(loc[-1], _allowed_keys(loc))} "
                       f"(allowed here: {', '.join(_allowed_keys(loc))})")
        elif loc[:1] == ("train",) and len(loc) == 2 and loc[1] in TRAIN_BOUNDS and e["type"] in RANGE_ERRORS:
            out.append(f"{path}: {e['input']!r} is out of range: {e['msg'].lower()}; "
                       f"it must be {range_text(TRAIN_BOUNDS[loc[1]])}")
        else:
            out.append(f"{path}: {e['input']!r} is not valid: {e['msg']}")
    return out


def _tuples(train: dict) -> dict:
    """YAML has no tuples: lists given for tuple-valued settings become tuples."""
    tuple_fields = {f.name for f in dataclasses.fields(TrainConfig) if isinstance(f.default, tuple)}
    return {k: tuple(v) if k in tuple_fields and isinstance(v, list) else v for k, v in train.items()}


def _finite(v: Any) -> bool:
    return not isinstance(v, float) or math.isfinite(v)


def _search_problems(exp: Experiment, raw_train: dict) -> tuple[list[str], set[str]]:
    """(problems of the search entries, branches included; the settings they concern)."""
    p, broken = [], set()
    for s in exp.searched:
        key, e, at = s.setting, s.entry, s.at
        found = _entry_problems(key, e, at, raw_train)
        outer = [k for k, _ in s.when]
        if key in outer:
            found.append(f"{at}: {key!r} is searched inside a branch of its own choice; remove it from the branch")
        elif any(o.setting == key and o.when == s.when[:len(o.when)] and len(o.when) < len(s.when)
                 for o in exp.searched):
            found.append(f"{at}: {key!r} is also searched outside this branch; search it in one place only")
        p += found
        if found:
            broken.add(key)
    return p, broken


def _entry_problems(key: str, e: SearchEntry, at: str, raw_train: dict) -> list[str]:
    p = []
    if key not in TRAIN_FIELDS:
        return [f"{at}: {key!r} is not a training setting{_did_you_mean(key, TRAIN_FIELDS)}"]
    if key in raw_train:
        p.append(f"{at}: {key!r} is both fixed (train.{key}: {raw_train[key]!r}) and searched; remove one")
    if key in ("epochs", "workers"):
        p.append(f"{at}: {key} is set by the budget/resources, not searched")
    if e.branches is not None and e.type != "choice":
        p.append(f"{at}.branches: only a choice has branches (this is {e.type}); make it a choice or remove branches")
    if e.type == "choice":
        if not e.values:
            p.append(f"{at}.values: an empty choice; list at least one value")
        elif not all(_finite(v) for v in e.values):
            p.append(f"{at}.values: {e.values!r} holds a non-finite number; use finite values")
        if e.low is not None or e.high is not None:
            p.append(f"{at}: a choice takes values:, not low/high")
        options = [str(v).lower() if isinstance(v, bool) else str(v) for v in e.values or []]
        for option in e.branches or {}:
            if option not in options:
                p.append(f"{at}.branches.{option}: {option!r} is not one of the values {e.values!r}; "
                         f"a branch is named after the option it belongs to{_did_you_mean(option, options)}")
        return p
    if e.values is not None:
        p.append(f"{at}: {e.type} takes low/high, not values: (use type: choice)")
    if e.low is None or e.high is None:
        p.append(f"{at}: {e.type} needs both low and high")
        return p
    if not (_finite(e.low) and _finite(e.high)):
        p.append(f"{at}: low={e.low!r}, high={e.high!r} must be finite numbers")
        return p
    if e.type == "loguniform" and e.low <= 0:
        p.append(f"{at}.low: {e.low!r} must be > 0 for a log scale; use a small positive number such as 1.0e-6")
    if e.low >= e.high:
        p.append(f"{at}: low < high must hold, but got (low={e.low}, high={e.high}); swap or widen them")
    if e.q is not None and (not _finite(e.q) or e.q <= 0):
        p.append(f"{at}.q: {e.q!r} must be a positive step")
    return p


def _candidates(e: SearchEntry) -> list[Any]:
    if e.type == "choice":
        return list(e.values or [])
    lo, hi = e.low, e.high
    if e.type == "int":
        return [int(lo), int(hi)]
    return [lo, hi]


def _rules(cfg: TrainConfig, has_gpu: bool) -> list[str]:
    """The training rules, judged against the GPUs the experiment declares, plus the ones
    only an experiment can judge (a global batch that fits the data set, Triton without GPUs)."""
    rules = [r + " (resources.gpus_per_worker is 0)" if "needs a CUDA GPU" in r else r
             for r in problems_of(cfg, has_gpu)]
    if cfg.kernels == "triton" and not has_gpu and os.environ.get("TRITON_INTERPRET") != "1":
        rules.append("kernels='triton' needs a GPU and resources.gpus_per_worker is 0; use kernels: auto")
    size = cfg.synthetic_size if cfg.dataset == "synthetic" else TRAIN_SIZES.get(cfg.dataset)
    if cfg.train_subset:
        size = min(size or cfg.train_subset, cfg.train_subset)
    if size is not None:
        train_size = int(size * (1 - cfg.val_fraction))
        if cfg.global_batch_size > train_size:
            rules.append(f"global batch {cfg.global_batch_size} (micro_batch_size {cfg.micro_batch_size} x "
                         f"accumulation_steps {cfg.accumulation_steps} x workers {cfg.workers}) exceeds the "
                         f"{train_size} training samples; lower micro_batch_size or accumulation_steps")
    return rules


def _combination_problems(exp: Experiment, skip: set[str] = frozenset()) -> list[str]:
    """Apply the training rules to every combination of searched values (choices and
    range ends) in every branch, so a trial that would break one is caught before anything
    starts."""
    base = exp.base_config()
    has_gpu = exp.resources.gpus_per_worker > 0
    found: dict[str, str] = {}
    try:  # rules broken by the fixed settings alone are reported without a combination
        for r in _rules(TrainConfig.from_dict(base), has_gpu):
            found[r] = ""
    except Exception:
        pass
    for flat, _ in scenarios(exp.search):
        keys = [k for k in flat if k in TRAIN_FIELDS and k not in skip]
        grids = [_candidates(flat[k]) for k in keys]
        combos = itertools.product(*grids) if math.prod(len(g) for g in grids) <= MAX_COMBINATIONS else \
            (tuple(g[0] for g in grids),)
        for combo in combos:
            values = dict(zip(keys, combo))
            where = ", ".join(f"{k}={v!r}" for k, v in values.items())
            try:
                cfg = TrainConfig.from_dict({**base, **values})
            except Exception as e:  # a value of the wrong type for its setting
                found.setdefault(str(e), where)
                continue
            for r in _rules(cfg, has_gpu):
                found.setdefault(r, where)
    p = []
    for rule, where in found.items():
        p.append(f"train: {rule}" + (f" (with searched {where})" if where else ""))
    if exp.search:
        searched = list(dict.fromkeys(s.setting for s in exp.searched))
        searched_loader = [k for k in searched if k in TORCH_LOADER_FIELDS]
        if searched_loader and base["loader"] == "device" and "loader" not in searched:
            p.append(f"search: {', '.join(searched_loader)} searched while train.loader is 'device'; "
                     "set train.loader: torch to tune DataLoader settings")
    return p


def _experiment_problems(exp: Experiment) -> list[str]:
    p = []
    b = exp.budget
    if b.grace_epochs > b.max_epochs:
        p.append(f"budget.grace_epochs: {b.grace_epochs} exceeds budget.max_epochs {b.max_epochs}")
    if exp.resources.workers > 1 and 0 < exp.resources.gpus_per_worker < 1:
        p.append(f"resources.gpus_per_worker: {exp.resources.gpus_per_worker} — a fraction of a GPU only works for "
                 "1-worker trials; use whole GPUs with DDP workers")
    if exp.resources.ddp == "local" and exp.resources.placement_strategy in ("SPREAD", "STRICT_SPREAD"):
        p.append(f"resources.ddp: 'local' starts every rank on the trial's node, but resources.placement_strategy "
                 f"is {exp.resources.placement_strategy}; use ddp: train to spread the ranks, or PACK")
    if exp.second_objective and exp.second_objective.metric == exp.metric:
        p.append("second_objective.metric: must differ from metric")
    if exp.resources.accelerator and exp.resources.gpus_per_worker == 0:
        p.append(f"resources.accelerator: {exp.resources.accelerator!r} names a GPU type but resources.gpus_per_worker "
                 "is 0; set gpus_per_worker, or remove accelerator")
    return p


def parse(text: str, source: str = "<experiment>", overrides: list[str] | None = None) -> Experiment:
    """YAML text -> Experiment; raises ExperimentError listing every problem."""
    raw = _read_yaml(text, source)
    problems: list[str] = []
    for item in overrides or []:
        _apply_override(raw, item, problems)
    raw = _clean(raw, "", problems)
    if isinstance(raw.get("train"), dict):
        raw["train"] = _tuples(raw["train"])
    try:
        exp = Experiment.model_validate(raw)
    except ValidationError as e:
        problems += _schema_problems(e)
        exp = _without_errors(raw, e)  # so the remaining checks still run and report too
        if exp is None:
            raise ExperimentError(source, problems) from None
    raw_train = raw.get("train") or {}
    search_problems, broken = _search_problems(exp, raw_train)
    problems += _experiment_problems(exp) + search_problems
    problems += _combination_problems(exp, skip=broken)
    if problems:
        raise ExperimentError(source, problems)
    return exp


def _without_errors(raw: dict, err: ValidationError) -> Experiment | None:
    """The experiment with every key that failed the schema left out, or None."""
    import copy
    pruned = copy.deepcopy(raw)
    for e in err.errors():
        node, loc = pruned, e["loc"]
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
    node[parts[-1]] = yaml.load(value, Loader=_Loader)


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
    raw = _read_yaml(text, str(path))
    problems: list[str] = []
    for item in overrides or []:
        k, _, v = item.partition("=")
        raw[k.strip()] = yaml.load(v, Loader=_Loader)
    raw = _tuples(_clean(raw, "", problems))
    try:
        settings = TrainSettings.model_validate(raw)
    except ValidationError as e:
        raise ExperimentError(str(path), problems + _schema_problems(e)) from None
    cfg = TrainConfig.from_dict(settings.model_dump())
    import torch
    problems += problems_of(cfg, has_gpu=torch.cuda.is_available())
    if problems:
        raise ExperimentError(str(path), problems)
    return cfg
