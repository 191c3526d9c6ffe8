"""Settings in one place: docs/settings.md and trainables/settings.py list the same variables,
nothing else reads the environment, and nothing changes it on import."""
import ast
import re
import subprocess
import sys
from pathlib import Path

from trainables import settings

ROOT = Path(__file__).resolve().parents[2]


def test_the_docs_table_lists_exactly_the_variables_read():
    text = (ROOT / "docs" / "settings.md").read_text()
    documented = set(re.findall(r"^\| `([A-Z_]+)` \|", text, flags=re.MULTILINE))
    assert documented == set(settings.VARIABLES)


def test_only_the_settings_module_reads_the_environment():
    found = []
    for p in sorted([*(ROOT / "tuner").rglob("*.py"), *(ROOT / "trainables").rglob("*.py")]):
        if p.name == "settings.py":
            continue
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv") \
                    and isinstance(node.value, ast.Name) and node.value.id == "os":
                found.append(str(p.relative_to(ROOT)))
    # The rank launcher hands its children the whole environment (plus PYTHONPATH); the driver
    # applies Tune's knobs when a run starts; the CLI puts Ray's client in token mode for the
    # service verbs before Ray is imported: all write, none reads a setting.
    assert sorted(found) == ["trainables/runtime/ranks.py", "tuner/cli.py", "tuner/connect.py"], found


def test_importing_the_packages_leaves_the_environment_as_it_was():
    code = ("import os; before = dict(os.environ); import tuner.cli, tuner.run, tuner.report, tuner.export, "
            "trainables.loop, trainables.runtime.trainable; print(dict(os.environ) == before)")
    r = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.stdout.strip() == "True", r.stdout + r.stderr


def test_read_takes_defaults_and_values():
    s = settings.read({})
    assert s.storage is None and s.home.name == "tuner" and not s.in_ray_job and not s.triton_interpret
    s = settings.read({"TUNER_STORAGE": "s3://b/runs", "RAY_JOB_CONFIG_JSON_ENV_VAR": "{}", "TRITON_INTERPRET": "1",
                       "RAY_AUTH_MODE": "Disabled", "TUNER_HOME": "/h"})
    assert s.storage == "s3://b/runs" and s.in_ray_job and s.triton_interpret and s.ray_auth_disabled
    assert str(s.home) == "/h"


def test_trials_get_rays_knobs_the_users_values_and_a_named_plugin():
    env = settings.trial_env(local_ray=True, environ={"RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "1"})
    assert env == {"RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "1", "RAY_TRAIN_ENABLE_STATE_TRACKING": "1",
                   "RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S": "1800", "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "0"}
    env = settings.trial_env(local_ray=False, environ={"TUNER_TEST_PLUGIN": "/x.py::{}"})
    assert "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER" not in env and env["TUNER_TEST_PLUGIN"] == "/x.py::{}"
