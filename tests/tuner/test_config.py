"""The experiment schema: every shipped YAML validates; every bad input gets its message."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tuner.config import load, parse
from tuner.schema import ExperimentError

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted((ROOT / "search_spaces").glob("*.yaml"))

GOOD = """
name: t
budget: {num_samples: 2, max_epochs: 2}
train: {dataset: digits, lr: 0.1}
search:
  weight_decay: {type: loguniform, low: 1.0e-5, high: 1.0e-3}
"""


def problems(text: str) -> list[str]:
    with pytest.raises(ExperimentError) as e:
        parse(text)
    return e.value.problems


def one(text: str, *needles: str) -> str:
    found = [p for p in problems(text) if all(n in p for n in needles)]
    assert found, (needles, problems(text))
    return found[0]


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_every_shipped_search_space_validates_and_says_how_to_run_it(path):
    exp = load(path)
    assert exp.search
    head = path.read_text().splitlines()[:12]
    assert head[0].startswith("#") and any("python -m tuner run" in line for line in head)


def test_shipped_set_is_complete():
    assert {p.name for p in SHIPPED} >= {"quickstart.yaml", "cifar.yaml", "cifar-fast.yaml", "cifar-smoke.yaml"}


def test_good_file_parses():
    exp = parse(GOOD)
    assert exp.name == "t" and exp.base_config()["lr"] == 0.1


def test_unknown_key_with_did_you_mean():
    assert "did you mean 'metric'" in one(GOOD + "metrc: val_acc\n", "metrc")
    assert "did you mean 'micro_batch_size'" in one(GOOD.replace("lr: 0.1", "micro_batch: 4"), "train.micro_batch")
    assert "did you mean 'lr'" in one(GOOD + "  lrr: {type: uniform, low: 0.1, high: 0.2}\n", "search.lrr")


def test_log_bound_must_be_positive():
    one(GOOD.replace("low: 1.0e-5", "low: 0"), "search.weight_decay.low", "> 0")


def test_low_must_be_below_high():
    one(GOOD.replace("high: 1.0e-3", "high: 1.0e-6"), "search.weight_decay", "low < high")


def test_empty_choice():
    one(GOOD + "  optimizer: {type: choice, values: []}\n", "search.optimizer.values", "empty choice")


def test_non_finite_numbers():
    one(GOOD.replace("high: 1.0e-3", "high: .inf"), "search.weight_decay", "finite")
    one(GOOD + "  momentum: {type: choice, values: [0.9, .nan]}\n", "search.momentum", "non-finite")


def test_yaml_1e_minus_3_is_taken_as_a_number():
    exp = parse(GOOD.replace("lr: 0.1", "lr: 1e-3").replace("low: 1.0e-5", "low: 1e-5"))
    assert exp.base_config()["lr"] == 0.001 and isinstance(exp.search["weight_decay"].low, float)


def test_yaml_yes_off_booleans_are_refused():
    one(GOOD.replace("lr: 0.1", "lr: 0.1, scheduler: off"), "train.scheduler", "boolean", "quote")


def test_duplicate_keys():
    assert "duplicate key 'lr'" in one(GOOD.replace("lr: 0.1", "lr: 0.1, lr: 0.2"), "duplicate")


def test_field_fixed_and_searched():
    one(GOOD + "  lr: {type: uniform, low: 0.01, high: 0.2}\n", "search.lr", "both fixed")


def test_fp16_without_gpus():
    one(GOOD.replace("lr: 0.1", "lr: 0.1, precision: fp16"), "fp16")
    exp = parse(GOOD.replace("lr: 0.1", "lr: 0.1, precision: fp16") + "resources: {gpus_per_worker: 1}\n")
    assert exp.train.precision == "fp16"  # a GPU experiment validates on a laptop


def test_dataloader_settings_searched_with_the_device_loader():
    text = GOOD + "  num_workers: {type: choice, values: [0, 2]}\n"
    one(text, "num_workers", "loader")
    parse(text.replace("lr: 0.1", "lr: 0.1, loader: torch"))


def test_a_searched_combination_that_breaks_a_rule():
    text = GOOD + ("  micro_batch_size: {type: choice, values: [64, 512]}\n"
                   "  accumulation_steps: {type: choice, values: [1, 4]}\n")
    msg = one(text, "global batch 2048")
    assert "micro_batch_size=512" in msg and "accumulation_steps=4" in msg


def test_every_problem_is_reported_at_once():
    text = (GOOD.replace("lr: 0.1", "lr: 0.1, precision: fp16")
            + "  lrr: {type: uniform, low: 2, high: 1}\n  momentum: {type: uniform, low: 0.9, high: 0.1}\n"
            + "metrc: x\n")
    found = problems(text)
    for needle in ("metrc", "search.lrr", "search.momentum", "fp16"):
        assert any(needle in p for p in found), (needle, found)


def test_set_overrides_apply():
    exp = parse(GOOD, overrides=["train.lr=0.2", "budget.num_samples=5", "momentum=0.8"])
    assert exp.base_config()["lr"] == 0.2 and exp.budget.num_samples == 5 and exp.base_config()["momentum"] == 0.8
    # `seed` is the experiment's own key (the search's seed); the training seed is train.seed
    exp = parse(GOOD, overrides=["seed=7", "train.seed=3"])
    assert exp.seed == 7 and exp.base_config()["seed"] == 3


def _cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "tuner", *args], check=False, capture_output=True, text=True, cwd=cwd,
                          timeout=120)


def test_cli_validate_lists_problems_and_run_starts_nothing(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(GOOD.replace("lr: 0.1", "lr: 0.1, precision: fp16") + f"storage_path: {tmp_path / 'runs'}\n"
                   "metrc: x\n")
    v = _cli("validate", str(bad), cwd=tmp_path)
    h = _cli("validate", "--help", cwd=tmp_path)
    assert v.returncode == 2 and f"exit {v.returncode} if any" in h.stdout, h.stdout   # the help says what it does
    assert "metrc" in v.stderr and "fp16" in v.stderr and "Traceback" not in v.stderr
    r = _cli("run", str(bad), cwd=tmp_path)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "Ray" not in r.stdout and not (tmp_path / "runs").exists()


def test_cli_user_mistakes_are_one_line_without_traceback(tmp_path):
    for args in (["status", str(tmp_path / "nope")], ["run", str(tmp_path / "missing.yaml")],
                 ["export", str(tmp_path), "--out", str(tmp_path / "o")]):
        r = _cli(*args, cwd=tmp_path)
        assert r.returncode != 0 and "Traceback" not in r.stderr and r.stderr.startswith("error:"), r.stderr


def test_cli_help():
    r = subprocess.run([sys.executable, "-m", "tuner", "--help"], check=False, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and all(v in r.stdout for v in ("run", "validate", "status", "resume", "export", "train"))


def test_a_trial_that_cannot_fit_the_cluster_is_refused_and_concurrency_is_capped():
    from tuner.cluster import ClusterError, fitting_concurrency
    exp = parse(GOOD + "resources: {workers: 2, cpus_per_worker: 2, gpus_per_worker: 1}\n")
    with pytest.raises(ClusterError, match="needs 2 GPU"):
        fitting_concurrency(exp, {"CPU": 16.0, "GPU": 1.0})
    assert fitting_concurrency(exp, {"CPU": 16.0, "GPU": 8.0}) == 2  # capped by num_samples
    exp = parse(GOOD.replace("num_samples: 2", "num_samples: 10"))
    assert fitting_concurrency(exp, {"CPU": 3.0}) == 3


def test_quoted_numbers_stay_text():
    exp = parse(GOOD.replace("name: t", 'name: "2024"'))
    assert exp.name == "2024"


# ---------------------------------------------------------------- ranges, declared once per field

def _numeric_fields():
    import dataclasses

    from trainables.config import TrainConfig
    return [f for f in dataclasses.fields(TrainConfig) if type(f.default) in (int, float)]


def _outside(limits: dict, kind: type) -> list:
    """One value past each end of a range."""
    out = []
    if "ge" in limits:
        out.append(kind(limits["ge"] - 1))
    if "gt" in limits:
        out.append(kind(limits["gt"]))
    if "le" in limits:
        out.append(kind(limits["le"] + 1))
    if "lt" in limits:
        out.append(kind(limits["lt"]))
    return out


def test_every_numeric_setting_declares_its_range():
    missing = [f.name for f in _numeric_fields() if not f.metadata.get("bounds")]
    assert not missing, f"numeric training settings without bounds(...): {missing}"
    # An upper bound too: a typo (epochs: 1e9) is refused before a run starts.
    unbounded = [f.name for f in _numeric_fields() if not {"le", "lt"} & set(f.metadata["bounds"])]
    assert not unbounded, f"numeric training settings without an upper bound: {unbounded}"


def _experiment_numbers():
    """(YAML path, pydantic field) of every numeric field of the experiment outside train:."""
    from tuner.schema import Budget, Experiment, Resources
    out = []
    for prefix, model in (("", Experiment), ("budget.", Budget), ("resources.", Resources)):
        for name, f in model.model_fields.items():
            if f.annotation in (int, float, int | None, float | None):
                out.append((prefix + name, f))
    return out


def test_every_numeric_experiment_field_has_an_upper_bound_and_refuses_a_value_past_it():
    import annotated_types
    fields = _experiment_numbers()
    assert {"seed", "budget.num_samples", "budget.max_epochs", "resources.workers", "resources.gpus_per_worker"} \
        <= {path for path, _ in fields}
    for path, f in fields:
        upper = [m for m in f.metadata if isinstance(m, (annotated_types.Le, annotated_types.Lt))]
        assert upper, f"{path} has no upper bound"
        past = getattr(upper[0], "le", None)
        past = past + 1 if past is not None else upper[0].lt
        section, _, key = path.rpartition(".")
        text = f"name: t\n{section}: {{{key}: {past!r}}}\n" if section else f"name: t\n{key}: {past!r}\n"
        msg = one(text, path)
        assert repr(past) in msg and "out of range" in msg, msg


@pytest.mark.parametrize("seed", [-1, 2**32])
def test_a_seed_outside_32_bits_is_refused_before_anything_starts(seed):
    msg = one(f"name: t\nseed: {seed}\n", "seed")
    assert str(seed) in msg and "out of range" in msg, msg
    one(f"name: t\ntrain: {{seed: {seed}}}\n", "train.seed", str(seed))
    assert parse(f"name: t\nseed: {2**32 - 1}\n").seed == 2**32 - 1


def test_gpus_per_worker_is_whole_or_a_fraction_below_one():
    msg = one("name: t\nresources: {gpus_per_worker: 1.5}\n", "resources.gpus_per_worker", "1.5")
    assert "whole number" in msg, msg
    assert parse("name: t\nresources: {gpus_per_worker: 0.5}\ntrain: {device: auto}\n").resources.gpus_per_worker == 0.5
    assert parse("name: t\nresources: {gpus_per_worker: 2.0}\n").resources.gpus_per_worker == 2.0


@pytest.mark.parametrize("shape", ["[3, 32]", "[3, 2, 2]", "[0, 32, 32]", "[3, 32, 2000]", "[3, 32.5, 32]"])
def test_a_synthetic_shape_that_cannot_be_an_image_is_refused(shape):
    msg = one(f"name: t\ntrain: {{dataset: synthetic, synthetic_shape: {shape}}}\n", "synthetic_shape")
    assert "channels 1-16" in msg, msg


def test_a_synthetic_shape_that_can_be_an_image_is_taken():
    exp = parse("name: t\ntrain: {dataset: synthetic, synthetic_shape: [1, 16, 24]}\n")
    assert tuple(exp.base_config()["synthetic_shape"]) == (1, 16, 24)


# 13 two-value choices: 8,192 combinations, more than are checked one by one.
WIDE = "".join(f"  {k}: {{type: choice, values: [{a}, {b}]}}\n" for k, a, b in (
    ("dropout", 0.0, 0.1), ("momentum", 0.8, 0.9), ("weight_decay", 0.0, 1.0e-4), ("label_smoothing", 0.0, 0.1),
    ("width", 0.5, 1.0), ("grad_clip", 0.0, 1.0), ("crop_padding", 0, 1), ("sync_every", 8, 16),
    ("max_nonfinite_steps", 3, 5), ("checkpoint_every", 1, 2), ("prune_amount", 0.0, 0.1),
    ("prune_start_epoch", 1, 2)))


def test_beyond_4096_combinations_each_searched_value_is_still_checked_on_its_own():
    # lr 50 breaks its range; it is no setting's first value.
    text = f"name: t\nbudget: {{max_epochs: 2}}\nsearch:\n{WIDE}  lr: {{type: choice, values: [0.1, 50]}}\n"
    one(text, "lr=50", "searched")


def test_beyond_4096_combinations_the_extreme_pairs_are_checked():
    # Neither 700 nor accumulation 2 breaks a rule alone; together the global batch (1,400) is
    # more than the 1,293 training samples of digits.
    text = (f"name: t\nbudget: {{max_epochs: 2}}\nsearch:\n{WIDE}"
            "  micro_batch_size: {type: choice, values: [32, 700]}\n"
            "  accumulation_steps: {type: choice, values: [1, 2]}\n")
    one(text, "global batch 1400", "searched")


@pytest.mark.parametrize("field", _numeric_fields(), ids=lambda f: f.name)
def test_a_value_outside_each_range_is_refused_by_the_rules_and_the_schema(field):
    from trainables.config import TrainConfig, problems_of
    for bad in _outside(field.metadata["bounds"], type(field.default)):
        rules = problems_of(TrainConfig(**{field.name: bad}), has_gpu=False)
        assert any(r.startswith(f"{field.name}={bad!r} must be") for r in rules), (bad, rules)
        msg = one(f"name: t\ntrain: {{{field.name}: {bad!r}}}\n", f"train.{field.name}")
        assert repr(bad) in msg, msg


def test_the_settings_the_issue_found_are_refused_with_field_value_and_range():
    text = ("name: t\ntrain: {width: -1, dropout: 1.5, momentum: -1, warmup_epochs: -2, crop_padding: -3,\n"
            "        grad_clip: -1, max_nonfinite_steps: 0, synthetic_size: 0}\n")
    found = problems(text)
    for key in ("width", "dropout", "momentum", "warmup_epochs", "crop_padding", "grad_clip",
                "max_nonfinite_steps", "synthetic_size"):
        assert any(p.startswith(f"train.{key}:") and ("greater" in p or "less" in p) for p in found), (key, found)


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf"])
def test_non_finite_fixed_settings_are_refused(value):
    one(f"name: t\ntrain: {{lr: {value}}}\n", "train.lr", "finite")
    one(f"name: t\nbudget: {{reduction_factor: {value}}}\n", "budget.reduction_factor")


def test_cross_field_rules_against_the_epoch_budget():
    one("name: t\nbudget: {max_epochs: 3}\ntrain: {warmup_epochs: 3}\n", "warmup_epochs=3", "< epochs=3")
    one("name: t\nbudget: {max_epochs: 3}\ntrain: {prune_amount: 0.5, prune_end_epoch: 4}\n",
        "prune_end_epoch=4", "<= epochs=3")
    one("name: t\nbudget: {max_epochs: 3}\ntrain: {lr: 0.1}\nsearch:\n  warmup_epochs: {type: uniform, low: 0, high: 5}\n",
        "warmup_epochs=5", "searched")


def test_a_profile_goes_into_the_experiment_folder_unless_named(tmp_path):
    assert parse(GOOD).base_config()["profile_dir"] == ""
    exp = parse(GOOD.replace("lr: 0.1}", "lr: 0.1, profile: true}"))
    assert exp.base_config()["profile_dir"] == str(exp.exp_dir / "profiles")
    named = parse(GOOD.replace("lr: 0.1}", f"lr: 0.1, profile: true, profile_dir: {tmp_path}}}"))
    assert named.base_config()["profile_dir"] == str(tmp_path)


def test_train_profile_flag_writes_the_trace_under_out(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"dataset: digits\ncache_dir: {tmp_path / 'cache'}\nepochs: 1\nmax_steps_per_epoch: 6\n"
                   "micro_batch_size: 32\nwidth: 0.5\nflip: false\ncrop_padding: 1\n")
    r = subprocess.run([sys.executable, "-m", "tuner", "train", str(cfg), "--profile", "--out", str(tmp_path / "out")],
                       check=False, capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (tmp_path / "out" / "profiles" / "trace.json").is_file() and "top operators" in r.stdout


def test_a_trial_reserves_what_its_config_uses():
    from trainables.runtime.trainable import ACCELERATOR_SHARE, DRIVER_CPU, trial_resources, worker_resources
    assert worker_resources({"loader": "torch", "num_workers": 4}, 1, 0) == {"CPU": 5.0}       # 4 loaders + itself
    assert worker_resources({"loader": "torch", "num_workers": 4}, 8, 0) == {"CPU": 8}         # cpus_per_worker larger
    assert worker_resources({"loader": "device", "num_workers": 4}, 1, 0.5) == {"CPU": 1, "GPU": 0.5}
    assert worker_resources({}, 2, 1, "A100") == {"CPU": 2, "GPU": 1, "accelerator_type:A100": ACCELERATOR_SHARE}
    assert trial_resources(2, 1, 1, {"loader": "torch", "num_workers": 2}) == {"CPU": 6 + DRIVER_CPU, "GPU": 2}


def test_feasibility_and_concurrency_use_the_largest_draw_and_what_is_free():
    from tuner.cluster import ClusterError, fitting_concurrency, largest_need
    exp = parse("""
name: r
budget: {num_samples: 8}
train: {dataset: digits, loader: torch}
search:
  num_workers: {type: choice, values: [0, 2, 5]}
  lr: {type: uniform, low: 0.01, high: 0.1}
""")
    assert largest_need(exp) == {"CPU": 6.0}
    assert fitting_concurrency(exp, {"CPU": 16.0}) == 2
    assert fitting_concurrency(exp, {"CPU": 16.0}, free={"CPU": 7.0}) == 1      # another experiment holds the rest
    assert fitting_concurrency(exp, {"CPU": 16.0}, free={"CPU": 0.0}) == 1      # waits for it
    with pytest.raises(ClusterError, match=r"needs 6 CPU .*num_workers.* the cluster has 4"):
        fitting_concurrency(exp, {"CPU": 4.0})


def test_accelerator_needs_gpus_and_a_plain_name():
    with pytest.raises(ExperimentError) as e:
        parse("name: a\nresources: {accelerator: A100}\n")
    assert "resources.accelerator: 'A100' names a GPU type but resources.gpus_per_worker is 0" in str(e.value)
    with pytest.raises(ExperimentError, match="resources.accelerator"):
        parse("name: a\nresources: {accelerator: 'A100; rm', gpus_per_worker: 1}\n")
    exp = parse("name: a\nresources: {accelerator: A100, gpus_per_worker: 1, workers: 2, max_failures: 3}\n")
    assert exp.resources.max_failures == 3 and exp.resources.worker_failures == 1


def test_ddp_ranks_start_in_the_trial_when_one_node_holds_them_else_on_ray_train(monkeypatch, tmp_path):
    import ray

    from trainables.runtime.trainable import DRIVER_CPU
    from trainables.settings import AUTOSCALER_CONFIG as AUTOSCALER_CONFIG_ENV
    from tuner.cluster import ClusterError, largest_need, resolve_ddp
    spec = "name: d\nresources: {workers: 2, cpus_per_worker: 2, gpus_per_worker: 1%s}\n"
    exp = parse(spec % "")
    assert exp.resources.ddp == "auto" and largest_need(exp) == {"CPU": 4 + DRIVER_CPU, "GPU": 2}
    monkeypatch.setenv(AUTOSCALER_CONFIG_ENV, str(tmp_path / "none.yaml"))
    two_gpu_node = [{"Alive": True, "Resources": {"CPU": 8.0, "GPU": 2.0}}]
    one_gpu_nodes = [{"Alive": True, "Resources": {"CPU": 8.0, "GPU": 1.0}}] * 2
    monkeypatch.setattr(ray, "nodes", lambda: two_gpu_node)
    local = resolve_ddp(exp)
    assert local.resources.ddp == "local" and exp.resources.ddp == "auto"     # what the user wrote is kept
    assert largest_need(local) == {"CPU": 4.0, "GPU": 2.0}                      # one bundle, no Train driver
    assert resolve_ddp(parse(spec % ", placement_strategy: STRICT_SPREAD")).resources.ddp == "train"
    assert resolve_ddp(parse(spec % ", ddp: train")).resources.ddp == "train"
    monkeypatch.setattr(ray, "nodes", lambda: one_gpu_nodes + [{"Alive": False, "Resources": {"CPU": 8.0, "GPU": 4.0}}])
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 16.0, "GPU": 2.0})
    assert resolve_ddp(exp).resources.ddp == "train"                            # ranks on two nodes: Ray Train
    with pytest.raises(ClusterError, match=r"resources.ddp: local needs one node with 4 CPU, 2 GPU .*ddp: auto"):
        resolve_ddp(parse(spec % ", ddp: local"))
    # A node type the autoscaler can start holds them: the nodes up now still come first...
    (tmp_path / "auto.yaml").write_text("head_node_type: head\navailable_node_types:\n  head: {resources: {CPU: 2}}\n"
                                        "  gpu2: {resources: {CPU: 16, GPU: 2}, max_workers: 2}\n")
    monkeypatch.setenv(AUTOSCALER_CONFIG_ENV, str(tmp_path / "auto.yaml"))
    assert resolve_ddp(exp).resources.ddp == "train"
    assert resolve_ddp(parse(spec % ", ddp: local")).resources.ddp == "local"
    # ...and when they cannot hold a trial, the ranks wait for that node type, on one node.
    monkeypatch.setattr(ray, "nodes", list)
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 2.0})
    assert resolve_ddp(exp).resources.ddp == "local"


def test_local_ddp_cannot_spread_its_ranks():
    with pytest.raises(ExperimentError) as e:
        parse("name: d\nresources: {workers: 2, ddp: local, placement_strategy: STRICT_SPREAD}\n")
    assert "resources.ddp: 'local' starts every rank on the trial's node" in str(e.value)
    with pytest.raises(ExperimentError, match="resources.ddp"):
        parse("name: d\nresources: {workers: 2, ddp: threads}\n")


def test_train_of_a_ddp_config_runs_its_ranks_without_ray(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"dataset: digits\ncache_dir: {tmp_path / 'cache'}\nepochs: 2\nmax_steps_per_epoch: 3\n"
                   "micro_batch_size: 32\nwidth: 0.5\nflip: false\ncrop_padding: 1\nworkers: 2\n")
    r = subprocess.run([sys.executable, "-m", "tuner", "train", str(cfg), "--out", str(tmp_path / "out")],
                       check=False, capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert json.loads(r.stdout.strip().splitlines()[-2])["epoch"] == 2, r.stdout
    # Rank 0's epoch lines only (one per epoch, not one per rank), and its checkpoints.
    assert [ln.split()[1] for ln in r.stdout.splitlines() if ln.startswith("epoch ")] == ["1/2", "2/2"], r.stdout
    assert sorted(p.name for p in (tmp_path / "out").glob("checkpoint_*")) == ["checkpoint_000001", "checkpoint_000002"]
    assert "ray" not in r.stderr.lower(), r.stderr[-2000:]


def test_validating_an_experiment_does_not_import_torch():
    code = ("import sys; from tuner.config import load; load('search_spaces/quickstart.yaml'); "
            "print('torch' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.stdout.strip() == "False", r.stdout + r.stderr


def test_stage_shm_is_gone_from_the_yaml_but_old_trial_configs_still_load():
    from trainables.config import TrainConfig
    one("name: t\ntrain: {stage_shm: true}\n", "train.stage_shm", "unknown key")
    assert "stage_shm" not in TrainConfig.from_dict({"stage_shm": True, "lr": 0.1}).to_dict()


def test_asha_defaults_to_promotion_unless_the_experiment_rules_it_out(tmp_path):
    """Left out, budget.asha is promotion; with a time limit, or a checkpoint interval that
    misses a rung, it is stopping (nothing refused); written, it stays as written.  The saved
    file holds the kind the search started with, and a folder saved before promotion was the
    default (no asha in it) loads as stopping, which it ran."""
    import shutil

    from tuner.experiment import EXPERIMENT_FILE, load_saved, save_experiment
    base = "name: a\nbudget: {num_samples: 30, max_epochs: 9%s}\n%s"
    assert parse(base % ("", "")).budget.asha == "promotion"
    assert parse(base % (", time_limit_s: 60", "")).budget.asha == "stopping"
    assert parse(base % ("", "train: {checkpoint_every: 2}\n")).budget.asha == "stopping"   # rungs 1 and 3
    assert parse(base % ("", "train: {checkpoint_every: 3}\n")).budget.asha == "stopping"   # misses rung 1
    assert parse(base % (", asha: stopping", "")).budget.asha == "stopping"
    ddp = "resources: {workers: 2, ddp: %s}\n"
    assert parse(base % ("", ddp % "train")).budget.asha == "stopping"
    assert parse(base % ("", ddp % "auto")).budget.asha == "stopping"
    assert parse(base % ("", ddp % "local")).budget.asha == "promotion"
    one(base % (", asha: promotion, time_limit_s: 60", ""), "budget.time_limit_s", "asha: stopping")
    one(base % (", asha: promotion", ddp % "train"), "resources.ddp: 'train'", "use ddp: local")
    assert parse(base % (", asha: promotion", ddp % "local")).budget.asha == "promotion"
    exp = parse(base % ("", "") + f"storage_path: {tmp_path}\n")
    save_experiment(exp)
    assert "asha: promotion" in (exp.exp_dir / EXPERIMENT_FILE).read_text()
    assert load_saved(exp.exp_dir).budget.asha == "promotion"
    old = shutil.copytree(ROOT / "tests" / "fixtures" / "written-by-0.1.0", tmp_path / "old")
    assert "asha" not in (old / EXPERIMENT_FILE).read_text()
    assert load_saved(old).budget.asha == "stopping"


def test_the_rung_model_proposes_wherever_tpe_does():
    from tuner.searcher import GUIDED_FROM, make_searcher
    exp = parse(GOOD)
    for n, warm, expected in ((GUIDED_FROM - 1, False, False), (GUIDED_FROM, False, True), (4, True, True)):
        budget = exp.budget.model_copy(update={"num_samples": n})
        s = make_searcher(exp.search, "val_acc", "max", 0, budget, warm=warm)
        assert bool(s.model_rungs) is expected, (n, warm)
