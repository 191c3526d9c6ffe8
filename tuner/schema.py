"""The experiment schema (pydantic, extra="forbid"): metric, budget, resources, search entries and
the training settings, whose model is generated from trainables.config.TrainConfig (never a copy)."""
from __future__ import annotations

import dataclasses
import math
import typing
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

from trainables.config import TrainConfig
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


def _train_settings_model() -> type[BaseModel]:
    """The training settings' schema, ranges included, from TrainConfig's own fields."""
    hints = typing.get_type_hints(TrainConfig)
    fields = {f.name: (hints[f.name], Field(f.default, **f.metadata.get("bounds", {})))
              for f in dataclasses.fields(TrainConfig)}
    return create_model("TrainSettings", __config__=STRICT, **fields)  # type: ignore[call-overload]


if typing.TYPE_CHECKING:
    class TrainSettings(BaseModel):
        """For the type checker only: the fields are TrainConfig's, made at run time."""

        def __getattr__(self, name: str) -> Any: ...
else:
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
    num_samples: int = Field(8, ge=1, le=100_000)          # trials to run
    max_epochs: int = Field(10, ge=1, le=10_000)           # ASHA max_t, and each trial's epochs
    grace_epochs: int = Field(1, ge=1, le=10_000)          # ASHA grace period, in epochs
    reduction_factor: float = Field(3.0, gt=1, le=100)     # ASHA eta
    max_concurrent_trials: int = Field(0, ge=0, le=10_000) # 0 = as many as the cluster holds
    time_limit_s: float | None = Field(None, gt=0, le=31_536_000)  # seconds, wall clock of the whole search (<= a year)
    # ASHA's kind (tuner/scheduler.py): "stopping" ends a trial below the rung's cutoff for
    # good; "promotion" pauses it at the rung and resumes it from its checkpoint once it ranks
    # in the rung's top 1/eta.  The default is promotion, measured ahead of stopping
    # (BENCHMARKS.md, "Asynchronous multi-fidelity search"), except where the experiment rules
    # it out (Experiment.default_asha).
    asha: Literal["stopping", "promotion"] = "promotion"

    @property
    def rungs(self) -> tuple[int, ...]:
        """The epochs where ASHA compares trials: the one place they are computed (scheduler's
        check, searcher, console and report all read them here)."""
        return asha_rungs(self.max_epochs, self.grace_epochs, self.reduction_factor)


def asha_rungs(max_epochs: int, grace_epochs: int, eta: float) -> tuple[int, ...]:
    """grace * eta^k below max_epochs, each as the first whole epoch at or past it (Ray's ASHA
    records a trial at the first result whose epoch reaches the milestone; eta may be 2.5)."""
    out, r = [], float(grace_epochs)
    while r < max_epochs:
        out.append(math.ceil(r - 1e-9))
        r *= eta
    return tuple(dict.fromkeys(out))


class Resources(BaseModel):
    model_config = STRICT
    workers: int = Field(1, ge=1, le=1_024)       # DDP workers per trial (>= 2: Ray Train)
    cpus_per_worker: float = Field(1.0, gt=0, le=1_024)   # logical CPUs
    gpus_per_worker: float = Field(0.0, ge=0, le=64)      # whole GPUs, or a fraction below 1 for 1-worker trials
    accelerator: str | None = Field(None, pattern=r"^[A-Za-z0-9_-]+$")  # GPU type, e.g. A100 -> accelerator_type:A100
    max_failures: int = Field(1, ge=0, le=1_000)  # times Tune retries a failed trial (from its checkpoint)
    worker_failures: int = Field(1, ge=0, le=1_000)  # times a DDP trial's ranks are restarted together
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
    low: float | None = None
    high: float | None = None
    q: float | None = None
    values: list[Any] | None = None
    # A choice's sub-spaces: option -> the settings searched only when that option is drawn
    # (e.g. optimizer: sgd -> lr and momentum; adamw -> its own lr range).
    branches: dict[str, dict[str, SearchEntry]] | None = None

    @property
    def lo(self) -> float:
        """`low` of a range entry (checked present by tuner.checks before anything uses it)."""
        return float(self.low if self.low is not None else math.nan)

    @property
    def hi(self) -> float:
        return float(self.high if self.high is not None else math.nan)


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
    second_objective: Objective | None = None
    seed: int = Field(0, ge=0, lt=2**32)   # numpy's and Optuna's seeds are 32-bit
    budget: Budget = Budget()
    resources: Resources = Resources()
    train: TrainSettings = TrainSettings()
    search: dict[str, SearchEntry] = {}
    # An earlier experiment folder (or URI) whose study trials seed this search (tuner/warmstart.py).
    warm_start: str | None = None
    # One trial at a time, deterministic training: a rerun with the same seed makes the same
    # proposals and the same rung decisions (docs/search.md, "Reproducible runs").
    reproducible: bool = False

    @model_validator(mode="after")
    def default_asha(self) -> Experiment:
        """Left unset, budget.asha is promotion unless the experiment rules it out (a time
        limit, a checkpoint interval that misses a rung, trials that may run as Ray Train DDP:
        tuner/checks.py says why).  Then stopping, as before promotion was the default.
        Written, it is checked as written."""
        if "asha" in self.budget.model_fields_set or self.budget.asha != "promotion":
            return self
        from .checks import promotion_problems
        if promotion_problems(self):
            self.budget = self.budget.model_copy(update={"asha": "stopping"})
        return self

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
        return [str(self.mode)] + ([self.second_objective.mode] if self.second_objective else [])

    def base_config(self) -> dict[str, Any]:
        """Fixed training settings as a flat dict, with the experiment's budget and resources."""
        cfg = TrainConfig.from_dict(self.train.model_dump()).to_dict()
        cfg.update(epochs=self.budget.max_epochs, workers=self.resources.workers)
        if self.resources.gpus_per_worker == 0 and cfg["device"] == "auto":
            cfg["device"] = "cpu"
        if self.reproducible:
            cfg["deterministic"] = True
        if cfg["profile"] and not cfg["profile_dir"]:
            cfg["profile_dir"] = str(self.exp_dir / "profiles")
        return cfg

