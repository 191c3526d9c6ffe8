"""Validation beyond the schema: the search entries, the training rules on every combination of
searched values, and the cross-field rules of the experiment; each problem names its YAML path."""
from __future__ import annotations

import dataclasses
import difflib
import itertools
import math
from typing import Any

from pydantic import BaseModel, ValidationError

from trainables import settings
from trainables.config import TORCH_LOADER_FIELDS, TrainConfig, problems_of, range_text
from tuner.schema import (
    MAX_COMBINATIONS,
    RANGE_ERRORS,
    TRAIN_BOUNDS,
    TRAIN_FIELDS,
    TRAIN_SIZES,
    Budget,
    Experiment,
    Objective,
    Resources,
    SearchEntry,
    TrainSettings,
    scenarios,
)


def _did_you_mean(word: str, options: list[str]) -> str:
    close = difflib.get_close_matches(str(word), options, n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def _allowed_keys(loc: tuple) -> list[str]:
    """The keys allowed where an unknown key `loc[-1]` was found."""
    sections: dict[tuple, type[BaseModel]] = {(): Experiment, ("budget",): Budget, ("resources",): Resources,
                                              ("second_objective",): Objective, ("train",): TrainSettings}
    section = sections.get(tuple(loc[:-1]))
    if section is None and loc[:1] == ("search",) and len(loc) % 3 == 0:  # search.KEY[.branches.OPTION.KEY]*.FIELD
        section = SearchEntry
    return list(section.model_fields) if section is not None else []


def schema_problems(err: ValidationError) -> list[str]:
    out = []
    for e in err.errors():
        loc = tuple(e["loc"])
        path = ".".join(str(p) for p in loc)
        if e["type"] == "extra_forbidden":
            out.append(f"{path}: unknown key{_did_you_mean(str(loc[-1]), _allowed_keys(loc))} "
                       f"(allowed here: {', '.join(_allowed_keys(loc))})")
        elif loc[:1] == ("train",) and len(loc) == 2 and loc[1] in TRAIN_BOUNDS and e["type"] in RANGE_ERRORS:
            out.append(f"{path}: {e['input']!r} is out of range: {e['msg'].lower()}; "
                       f"it must be {range_text(TRAIN_BOUNDS[loc[1]])}")
        elif e["type"] in RANGE_ERRORS:
            out.append(f"{path}: {e['input']!r} is out of range: {e['msg'].lower()}; use a value in range")
        else:
            out.append(f"{path}: {e['input']!r} is not valid: {e['msg']}")
    return out


def tuples(train: dict) -> dict:
    """YAML has no tuples: lists given for tuple-valued settings become tuples."""
    tuple_fields = {f.name for f in dataclasses.fields(TrainConfig) if isinstance(f.default, tuple)}
    return {k: tuple(v) if k in tuple_fields and isinstance(v, list) else v for k, v in train.items()}


def _not_nan_or_inf(v: Any) -> bool:
    """Anything but a NaN or infinite float (choice values may be text)."""
    return not isinstance(v, float) or math.isfinite(v)


def search_problems(exp: Experiment, raw_train: dict) -> tuple[list[str], set[str]]:
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
        elif not all(_not_nan_or_inf(v) for v in e.values):
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
    if not (_not_nan_or_inf(e.low) and _not_nan_or_inf(e.high)):
        p.append(f"{at}: low={e.low!r}, high={e.high!r} must be finite numbers")
        return p
    if e.type == "loguniform" and e.low <= 0:
        p.append(f"{at}.low: {e.low!r} must be > 0 for a log scale; use a small positive number such as 1.0e-6")
    if e.low >= e.high:
        p.append(f"{at}: low < high must hold, but got (low={e.low}, high={e.high}); swap or widen them")
    if e.q is not None and (not _not_nan_or_inf(e.q) or e.q <= 0):
        p.append(f"{at}.q: {e.q!r} must be a positive step")
    return p


def candidates(e: SearchEntry) -> list[Any]:
    if e.type == "choice":
        return list(e.values or [])
    if e.type == "int":
        return [int(e.lo), int(e.hi)]
    return [e.low, e.high]


def _rules(cfg: TrainConfig, has_gpu: bool) -> list[str]:
    """The training rules, judged against the GPUs the experiment declares, plus the ones
    only an experiment can judge (a global batch that fits the data set, Triton without GPUs)."""
    rules = [r + " (resources.gpus_per_worker is 0)" if "needs a CUDA GPU" in r else r
             for r in problems_of(cfg, has_gpu)]
    if cfg.kernels == "triton" and not has_gpu and not settings.read().triton_interpret:
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


def _ends(values: list[Any]) -> list[Any]:
    """A setting's extreme values: the smallest and largest of numbers, every option otherwise."""
    if values and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return list(dict.fromkeys([min(values), max(values)]))
    return list(values)


def _combinations(grids: list[list[Any]]):
    """Every combination while there are at most MAX_COMBINATIONS; beyond, each value on its own
    (the others at their first), every pair of two settings' extremes, and the all-smallest and
    all-largest corners: the rules relate at most a few settings, monotonically in each."""
    if math.prod(len(g) for g in grids) <= MAX_COMBINATIONS:
        yield from itertools.product(*grids)
        return
    first = [g[0] for g in grids]
    for i, g in enumerate(grids):
        for v in g:
            yield tuple(first[:i] + [v] + first[i + 1:])
    ends = [_ends(g) for g in grids]
    for i, j in itertools.combinations(range(len(grids)), 2):
        for a, b in itertools.product(ends[i], ends[j]):
            combo = list(first)
            combo[i], combo[j] = a, b
            yield tuple(combo)
    yield tuple(e[0] for e in ends)
    yield tuple(e[-1] for e in ends)


def combination_problems(exp: Experiment, skip: frozenset[str] | set[str] = frozenset()) -> list[str]:
    """Apply the training rules to every combination of searched values (choices and
    range ends) in every branch, so a trial that would break one is caught before anything
    starts."""
    base = exp.base_config()
    has_gpu = exp.resources.gpus_per_worker > 0
    found: dict[str, str] = {}
    try:  # rules broken by the fixed settings alone are reported without a combination
        for r in _rules(TrainConfig.from_dict(base), has_gpu):
            found[r] = ""
    except Exception:  # noqa: BLE001, S110 - a bad value of its own is reported by the schema already
        pass
    for flat, _ in scenarios(exp.search):
        keys = [k for k in flat if k in TRAIN_FIELDS and k not in skip]
        grids = [candidates(flat[k]) for k in keys]
        for combo in _combinations(grids):
            values = dict(zip(keys, combo))
            where = ", ".join(f"{k}={v!r}" for k, v in values.items())
            try:
                cfg = TrainConfig.from_dict({**base, **values})
            except Exception as e:  # noqa: BLE001 - a value of the wrong type for its setting
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


def experiment_problems(exp: Experiment) -> list[str]:
    p = []
    b = exp.budget
    if b.grace_epochs > b.max_epochs:
        p.append(f"budget.grace_epochs: {b.grace_epochs} exceeds budget.max_epochs {b.max_epochs}")
    if exp.resources.workers > 1 and 0 < exp.resources.gpus_per_worker < 1:
        p.append(f"resources.gpus_per_worker: {exp.resources.gpus_per_worker} — a fraction of a GPU only works for "
                 "1-worker trials; use whole GPUs with DDP workers")
    g = exp.resources.gpus_per_worker
    if g >= 1 and g != int(g):
        p.append(f"resources.gpus_per_worker: {g} — use a whole number of GPUs, or a fraction below 1 to share "
                 f"one GPU among 1-worker trials (e.g. {int(g)} or 0.5)")
    if exp.resources.ddp == "local" and exp.resources.placement_strategy in ("SPREAD", "STRICT_SPREAD"):
        p.append(f"resources.ddp: 'local' starts every rank on the trial's node, but resources.placement_strategy "
                 f"is {exp.resources.placement_strategy}; use ddp: train to spread the ranks, or PACK")
    if b.asha == "promotion":
        p += promotion_problems(exp)
    if exp.reproducible and b.max_concurrent_trials > 1:
        p.append(f"budget.max_concurrent_trials: {b.max_concurrent_trials} with reproducible: true, which runs one "
                 "trial at a time (what several at once report first depends on timing); set it to 1, or "
                 "reproducible: false")
    if exp.reproducible and b.time_limit_s:
        p.append(f"budget.time_limit_s: {b.time_limit_s:g} with reproducible: true: a time limit ends the search "
                 "after however many trials fit in it; remove time_limit_s, or reproducible: false")
    if exp.second_objective and exp.second_objective.metric == exp.metric:
        p.append("second_objective.metric: must differ from metric")
    if exp.resources.accelerator and exp.resources.gpus_per_worker == 0:
        p.append(f"resources.accelerator: {exp.resources.accelerator!r} names a GPU type but resources.gpus_per_worker "
                 "is 0; set gpus_per_worker, or remove accelerator")
    return p


def promotion_problems(exp: Experiment) -> list[str]:
    """A trial paused at a rung resumes from the checkpoint it wrote there: every value of
    train.checkpoint_every must divide every rung epoch."""
    rungs = exp.budget.rungs
    values = {exp.base_config().get("checkpoint_every", 1)}
    for flat, _ in scenarios(exp.search):
        e = flat.get("checkpoint_every")
        if e is not None:   # every whole number of a range, not only its ends
            values.update(range(int(e.lo), int(e.hi) + 1) if e.type == "int" else candidates(e))
    bad = sorted(v for v in values if isinstance(v, int) and any(r % v for r in rungs))
    out = []
    if exp.budget.time_limit_s:
        # Tune's time limit ends the trials waiting at a rung without telling the scheduler, and
        # saves them as paused: the search would end with trials neither promoted nor finished.
        out.append(f"budget.time_limit_s: {exp.budget.time_limit_s:g} with budget.asha: promotion, whose search ends "
                   "when num_samples trials have started and the trials waiting at a rung are finished; bound the "
                   "search with num_samples, or use budget.asha: stopping")
    r = exp.resources
    if r.workers > 1 and r.ddp != "local":
        # Seen with Ray 2.60: a paused TorchTrainer trial's resume waited for its worker group until
        # Train's start timeout (60 s then), and the trial failed.
        out.append(f"resources.ddp: {r.ddp!r} with workers: {r.workers} may run trials as Ray Train TorchTrainer "
                   "runs, whose resume after a pause at a rung waits for its worker group; with budget.asha: "
                   "promotion use ddp: local (the trial starts its ranks itself), or budget.asha: stopping")
    if bad:
        out.append(f"train.checkpoint_every: {bad[0]} writes no checkpoint at every rung epoch {list(rungs)}, where "
                   "budget.asha: promotion pauses trials and later resumes them from a checkpoint; use a value that "
                   "divides every rung (1 always does), or budget.asha: stopping")
    return out
