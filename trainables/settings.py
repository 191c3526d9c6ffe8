"""Every environment variable the project reads, in one typed place (docs/settings.md is its
table; tests/trainables/test_settings.py keeps the two in step).

`read()` takes the environment when it is called, never at import, and nothing here changes
`os.environ`.  What the driver hands its trials goes in the trial's config or in Ray's
`runtime_env` `env_vars` (`trial_env`); what only the driver needs is an argument.  This module
sits in trainables/ (which imports nothing from tuner/) so that both sides read the same one.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

# Variables a user sets.
HOME = "TUNER_HOME"                    # a Ray job's relative paths resolve under it (default ~/tuner)
STORAGE = "TUNER_STORAGE"              # replaces a relative storage_path: a shared folder or s3://, gs:// URI
CACHE = "TUNER_CACHE"                  # local copies of cloud experiments (default ~/.cache/tuner)
AUTOSCALER_CONFIG = "TUNER_AUTOSCALER_CONFIG"   # the autoscaler's config (default: `ray up`'s on the head)
# Set by the driver for its trials (runtime_env), never by a user.
PREFLIGHT = "TUNER_PREFLIGHT"          # "<marker path>\n<token>\n<python> <ray> <torch>": the node check
TEST_PLUGIN = "TUNER_TEST_PLUGIN"      # tests only: "<file.py>[::<argument>]", hooks every trial process loads
# Set by the service's dispatcher for a driver it starts, never by a user.
SERVICE_ID = "TUNER_SERVICE_ID"        # the experiment's registry id: the driver asks for its fair share
# Other tools' variables the project reads.
RAY_ADDRESS = "RAY_ADDRESS"            # Ray's: the cluster to join (else an embedded local Ray)
RAY_AUTH_MODE = "RAY_AUTH_MODE"        # Ray's: "disabled" turns token authentication off (refused locally)
RAY_JOB = "RAY_JOB_CONFIG_JSON_ENV_VAR"   # Ray's job supervisor sets it for a job's entrypoint
TRITON_INTERPRET = "TRITON_INTERPRET"  # Triton's: "1" runs kernels on the CPU (tests)

VARIABLES = (HOME, STORAGE, CACHE, AUTOSCALER_CONFIG, PREFLIGHT, TEST_PLUGIN, SERVICE_ID, RAY_ADDRESS, RAY_AUTH_MODE,
             RAY_JOB, TRITON_INTERPRET)   # every one read here; docs/settings.md has a row for each
BOOTSTRAP_CONFIG = "~/ray_bootstrap_config.yaml"   # where `ray up` leaves the autoscaler's config on the head

# Ray's and Tune's own knobs the service sets, with why.  Trial processes get TRIAL_RAY_ENV
# (and LOCAL_RAY_ENV on an embedded local Ray) through runtime_env; the driver's Tune reads
# DRIVER_TUNE_ENV from its own environment, set when a run starts.  A value the user set wins.
TRIAL_RAY_ENV = {
    # Ray Train's controller polls its workers this often (default 2 s); shorter ends a
    # TorchTrainer trial ~6 s sooner after its last report.
    "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.2",
    # The dashboard's Train view lists a run only with state tracking on where the
    # TorchTrainer is built: in the trial.
    "RAY_TRAIN_ENABLE_STATE_TRACKING": "1",
    # A TorchTrainer trial reserves its driver's share through Tune and its ranks through Train's
    # own placement group, asked for once the trial runs: when another experiment's trials hold
    # the CPUs/GPUs (two experiments sharing a cluster, a trial bigger than its share), the ranks
    # wait for them to end.  Train gives up after 60 s by default and counts a controller
    # failure; a trial then failed after a few minutes of waiting for a slot it was due.
    "RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S": "1800",
}
LOCAL_RAY_ENV = {
    # No spot instances on an embedded local Ray: skip Train's preemption watcher, one more
    # process per DDP trial (~1.5 s of CPU at start on a small machine).
    "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "0",
}
DRIVER_TUNE_ENV = {
    # A snapshot per checkpoint is what keeps the best and latest checkpoints safe; Tune
    # would warn about it every few seconds on short trials.
    "TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S": "0",
    # Tune keeps one trial pending at a time for a searcher it does not wrap in its
    # ConcurrencyLimiter (ours keep the slots themselves), so trials started one after another,
    # each waiting for its actor; and with short trials a finished trial's cached actor took over
    # the one pending trial first every time, cancelling the new actor it had asked for, so a run
    # could stay below its slots for good.  Our searchers (and Tune's own generator, given
    # max_concurrent_trials) already bound what is pending; Tune's limit must not be the bound.
    "TUNE_MAX_PENDING_TRIALS_PG": "10000",
}


@dataclass(frozen=True)
class Settings:
    home: Path                        # TUNER_HOME
    storage: str | None               # TUNER_STORAGE
    cache: Path                       # TUNER_CACHE
    autoscaler_config: Path           # TUNER_AUTOSCALER_CONFIG, else BOOTSTRAP_CONFIG
    preflight: str | None             # TUNER_PREFLIGHT
    test_plugin: str | None           # TUNER_TEST_PLUGIN
    service_id: str | None            # TUNER_SERVICE_ID
    ray_address: str | None           # RAY_ADDRESS
    ray_auth_disabled: bool           # RAY_AUTH_MODE == "disabled"
    in_ray_job: bool                  # RAY_JOB_CONFIG_JSON_ENV_VAR is set
    triton_interpret: bool            # TRITON_INTERPRET == "1"


def read(environ: Mapping[str, str] | None = None) -> Settings:
    env = os.environ if environ is None else environ

    def get(name: str) -> str | None:
        value = env.get(name, "").strip()
        return value or None
    return Settings(
        home=Path(get(HOME) or Path.home() / "tuner").expanduser(),
        storage=get(STORAGE),
        cache=Path(get(CACHE) or Path.home() / ".cache" / "tuner").expanduser(),
        autoscaler_config=Path(get(AUTOSCALER_CONFIG) or BOOTSTRAP_CONFIG).expanduser(),
        preflight=env.get(PREFLIGHT) or None,
        test_plugin=get(TEST_PLUGIN),
        service_id=get(SERVICE_ID),
        ray_address=get(RAY_ADDRESS),
        ray_auth_disabled=(get(RAY_AUTH_MODE) or "").lower() == "disabled",
        in_ray_job=bool(get(RAY_JOB)),
        triton_interpret=get(TRITON_INTERPRET) == "1",
    )


def trial_env(local_ray: bool, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """What every trial process gets through runtime_env: Ray's knobs (the user's values win)
    and, when a test names one, its plugin."""
    env = os.environ if environ is None else environ
    knobs = {**TRIAL_RAY_ENV, **(LOCAL_RAY_ENV if local_ray else {})}
    out = {k: env.get(k, v) for k, v in knobs.items()}
    plugin = read(env).test_plugin
    if plugin:
        out[TEST_PLUGIN] = plugin
    return out


def driver_env(verbose: bool, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Tune's knobs for the driver process (where the user has not set them), and Tune's output
    engine: its new one prints boxes even when silent, so only with --verbose."""
    env = os.environ if environ is None else environ
    return {**{k: v for k, v in DRIVER_TUNE_ENV.items() if k not in env}, "RAY_AIR_NEW_OUTPUT": "1" if verbose else "0"}
