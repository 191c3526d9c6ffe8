"""`tuner report`: PNGs, a self-contained report.html (checked in a real headless Chromium when
one is installed) and next.yaml, from a small finished experiment."""
import base64
import io
import math
import os
import re
import shutil
from pathlib import Path

import pytest

from tuner.config import parse
from tuner.next_space import narrowed
from tuner.schema import SearchEntry

SPEC = """
name: rep
storage_path: {storage}
metric: val_acc
mode: max
seed: 1
budget: {{num_samples: 10, max_epochs: 3, grace_epochs: 1, reduction_factor: 3, max_concurrent_trials: 2}}
resources: {{workers: 1, cpus_per_worker: 1}}
train: {{dataset: digits, cache_dir: {cache}, model: convnet, width: 0.5, flip: false, crop_padding: 1,
         max_steps_per_epoch: 3, tb_histograms: true}}
search:
  lr: {{type: loguniform, low: 1.0e-3, high: 0.5}}
  micro_batch_size: {{type: choice, values: [32, 64]}}
  weight_decay: {{type: loguniform, low: 1.0e-5, high: 1.0e-2}}
  label_smoothing: {{type: uniform, low: 0.0, high: 0.2}}
"""


def test_a_range_narrows_to_the_top_trials_padded_inside_the_searched_range():
    e = SearchEntry(type="loguniform", low=1e-3, high=1.0)
    new, how = narrowed("lr", e, [0.01, 0.04], best=0.02)
    # log span of the top values padded by a quarter of it each side: 0.01/4**0.25 .. 0.04*4**0.25
    assert new.low == pytest.approx(0.01 / 4 ** 0.25, rel=1e-3) and new.high == pytest.approx(0.04 * 4 ** 0.25, rel=1e-3)
    assert how.startswith("narrowed")


def test_a_best_value_at_an_edge_widens_that_edge_within_the_settings_bounds():
    e = SearchEntry(type="uniform", low=0.0, high=0.2)
    new, how = narrowed("label_smoothing", e, [0.15, 0.199], best=0.199)
    assert new.high == pytest.approx(0.3) and "upper edge" in how      # 0.2 + half the range, capped at 0.3
    assert new.low == pytest.approx(0.15 - 0.25 * 0.049, abs=1e-3)
    e = SearchEntry(type="loguniform", low=1e-2, high=1.0)
    new, how = narrowed("lr", e, [0.0101, 0.02], best=0.0101)
    assert new.low == pytest.approx(1e-3, rel=1e-3) and "lower edge" in how   # a decade below, in log scale


@pytest.fixture(scope="module")
def report(ray_address, tmp_path_factory):
    from tuner.report import build
    from tuner.run import run_experiment
    root = tmp_path_factory.mktemp("report")
    exp = parse(SPEC.format(storage=root / "runs", cache=root / "cache"))
    run_experiment(exp, echo=lambda s: None)
    return exp, build(exp.exp_dir)


def test_every_png_decodes_and_the_html_carries_them_inline(report):
    from PIL import Image
    _exp, out = report
    names = {Path(p).name for p in out["pngs"]}
    assert {"curves.png", "best_so_far.png", "parallel.png", "importance.png", "throughput.png"} <= names
    for p in out["pngs"]:
        with Image.open(p) as im:
            im.load()
            assert im.format == "PNG" and im.size[0] > 100
    page = Path(out["html"]).read_text()
    imgs = re.findall(r'<img [^>]*src="([^"]+)"', page)
    assert len(imgs) == len(out["pngs"])
    for src in imgs:
        assert src.startswith("data:image/png;base64,")
        with Image.open(io.BytesIO(base64.b64decode(src.split(",", 1)[1]))) as im:
            im.load()
    assert not re.search(r"(src|href)=\"(https?:|//)", page) and "url(" not in page   # nothing from the network


def test_importance_per_rung_counts_its_trials_and_skips_small_rungs(report, monkeypatch):
    from tuner import history, importance
    exp, out = report
    trials = history.load(exp)
    by_rung = {e["rung"]: e for e in out["importance"]}
    assert set(by_rung) == {1, 3}
    for rung, e in by_rung.items():
        assert e["n"] == sum(t.value_at(rung, exp.metric) is not None for t in trials)
        assert (e["importance"] is None) == (e["n"] < importance.MIN_RUNG_TRIALS)
    first = by_rung[1]
    assert first["n"] == 10 and set(first["importance"]) == set(exp.search)
    assert math.isclose(sum(first["importance"].values()), 1.0, rel_tol=1e-6)
    for e in importance.importance_by_rung(exp, trials, min_trials=11):
        assert e["importance"] is None and e["skipped"] == f"{e['n']} trial(s) < 11"


@pytest.mark.parametrize("n", [2, 3, 8, 9, 10, 19, 20, 21, 40])
def test_pedanova_top_set_holds_at_least_two_trials(n):
    from tuner import _compat
    from tuner.importance import top_quantile
    q = top_quantile(n)
    if n <= 2:
        assert q is None
        return
    values = [float(v) for v in range(n)]   # distinct: the top set is exactly what the quantile keeps
    for lower in (False, True):
        kept = _compat.pedanova_top(values, q, lower)   # as Optuna's evaluator counts it
        assert 2 <= kept < n and kept == max(2, math.ceil(0.1 * n)), (n, q, kept)


def test_a_rung_of_nine_trials_ranks_with_a_top_set_of_two(report):
    from tuner import history, importance
    exp, out = report
    trials = history.load(exp)[:9]
    (first, *_) = importance.importance_by_rung(exp, trials)
    # The best two of nine, and every trial tied with the second (these values tie often).
    assert first["n"] == 9 and first["top"] >= 2 and first["importance"], first
    page = Path(out["html"]).read_text()
    assert "<th>top set</th>" in page and "at least 2)" in page


def test_next_yaml_validates_holds_the_top_trials_and_narrows(report):
    from tuner.history import load
    from tuner.next_space import TOP_K, top_k
    exp, out = report
    text = Path(out["next"]).read_text()
    nxt = parse(text, out["next"])
    assert nxt.name == "rep-next"
    assert nxt.warm_start == str(exp.exp_dir)   # it starts from this run's trials inside its ranges
    from tuner.warmstart import warm_trials
    warm, notes = warm_trials(nxt)
    assert len(warm) >= TOP_K and notes[0] == f"warm start: {len(warm)} trials from {exp.exp_dir}"
    _, top = top_k(exp, load(exp), TOP_K)
    assert len(top) == TOP_K
    narrower = []
    for name, e in exp.search.items():
        n = nxt.search[name]
        if e.type == "choice":
            assert n.values == e.values
            continue
        for t in top:
            assert n.low <= t.row.params[name] <= n.high, (name, t.row.params[name], n)
        narrower.append((n.high - n.low) < (e.high - e.low) if e.type != "loguniform"
                        else math.log(n.high / n.low) < math.log(e.high / e.low))
    assert any(narrower), text


def test_model_histograms_reach_each_trial_folder(report):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    exp, _ = report
    folders = sorted(p.parent for p in exp.exp_dir.glob("trial_*/result.json"))
    assert len(folders) == 10
    for f in folders:
        acc = EventAccumulator(str(f / "model"), size_guidance={"histograms": 0})
        acc.Reload()
        epochs = [int(line.split('"epoch": ')[1].split(",")[0]) for line in (f / "result.json").read_text().splitlines()]
        hist = acc.Tags()["histograms"]
        # One histogram per epoch trained.  A trial promoted at a rung resumed in a new process
        # with an event file of its own; TensorBoard orders steps across files, the reader here
        # goes file by file (in name order, which need not follow time within one second).
        assert epochs == sorted(epochs) and len(set(epochs)) == len(epochs), f
        assert hist and sorted(e.step for e in acc.Histograms(hist[0])) == epochs, f


def _chromium() -> tuple[str, str] | None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


def test_report_renders_in_headless_chromium_with_every_image_loaded(report):
    found = _chromium()
    if found is None:
        pytest.skip("no chromium and chromedriver on PATH (make test installs Debian's where apt and root exist); "
                    "the static check of every <img> still runs in the test above")
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
    from selenium.webdriver.chrome.service import Service
    _, out = report
    opts = webdriver.ChromeOptions()
    opts.binary_location = found[0]
    for arg in ("--headless=new", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"):
        opts.add_argument(arg)
    if os.geteuid() == 0:
        opts.add_argument("--no-sandbox")   # Chromium refuses to run as root with its sandbox
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(found[1]), options=opts)
    try:
        driver.set_page_load_timeout(60)
        driver.get(Path(out["html"]).as_uri())
        images = driver.execute_script(
            "return Array.from(document.images).map(i => [i.complete, i.naturalWidth, i.alt])")
        logs = [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]
        title = driver.title
    finally:
        driver.quit()
    assert title == "rep report"
    assert len(images) == len(out["pngs"]) and all(done and width > 100 for done, width, _ in images), images
    assert not logs, logs


def test_two_objectives_failures_and_an_edge_best_in_the_report(tmp_path):
    from tuner.history import Trial
    from tuner.report import render
    from tuner.results import TrialRow
    exp = parse("""
name: two
metric: val_acc
mode: max
second_objective: {metric: epoch_s, mode: min}
budget: {num_samples: 5, max_epochs: 2, grace_epochs: 1}
search: {lr: {type: loguniform, low: 1.0e-3, high: 0.1}}
""")

    def trial(tid, lr, acc, secs, status="ok", state="TERMINATED", reason=None, error=""):
        last = {"epoch": 2, "status": status, "val_acc": acc, "epoch_s": secs, "samples_per_s": 100.0,
                **({"reason": reason} if reason else {})}
        rows = [{**last, "epoch": 1, "timestamp": 10, "time_total_s": 1}, {**last, "timestamp": 20, "time_total_s": 2}]
        row = TrialRow(tid, state, status, 2, last, {"lr": lr}, {"lr": lr}, "/ckpt", error,
                       f"/x/trial_{tid}/error.txt" if error else "")
        return Trial(row, rows)
    ts = [trial("a", 0.0999, 0.97, 5.0), trial("b", 0.01, 0.95, 2.0), trial("c", 0.003, 0.90, 1.0),
          trial("d", 0.02, 0.80, 6.0), trial("n", 0.05, 0.0, 1.0, status="diverged",
                                            reason="5 consecutive steps had a non-finite loss"),
          trial("e", 0.004, 0.0, 0.0, status="", state="ERROR", error="ValueError: the data is gone")]
    out = render(exp, ts, tmp_path)
    assert "pareto.png" in {Path(p).name for p in out["pngs"]}
    assert out["warnings"] == [("the best trial's lr=0.0999 is at the upper edge of [0.001, 0.1]: the optimum may "
                               "lie outside; widen the range")]
    page = Path(out["html"]).read_text()
    assert "5 consecutive steps had a non-finite loss" in page and "ValueError: the data is gone" in page
    assert "/x/trial_e/error.txt" in page
    nxt = parse(Path(out["next"]).read_text())
    assert nxt.search["lr"].high > 0.1          # widened at the upper edge, where the best is


def test_report_command_prints_where_it_wrote(report, tmp_path):
    import subprocess
    import sys
    exp, _ = report
    r = subprocess.run([sys.executable, "-m", "tuner", "report", str(exp.exp_dir), "--out", str(tmp_path / "r")],
                       check=False, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert f"report: {tmp_path / 'r' / 'report.html'}" in r.stdout and (tmp_path / "r" / "next.yaml").is_file()
    bad = subprocess.run([sys.executable, "-m", "tuner", "report", str(tmp_path / "nowhere")],
                         check=False, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "not an experiment folder" in bad.stderr and "Traceback" not in bad.stderr


def test_the_report_compares_trials_at_the_schedulers_rungs_with_a_fractional_eta():
    # eta 2.5 over 15 epochs: ASHA's milestones are 1, 2.5 and 6.25, so trials are recorded at
    # epochs 1, 3 and 7 (the first whole epoch past each); int(2.5) would have said 1, 2, 4, 8.
    from tuner import importance
    from tuner.history import Trial
    from tuner.tuning import asha
    exp = parse("name: e\nbudget: {max_epochs: 15, grace_epochs: 1, reduction_factor: 2.5}\n"
                "search: {lr: {type: loguniform, low: 1.0e-3, high: 1.0}}\n")
    assert asha(exp.budget, "val_acc", "max").rungs == exp.budget.rungs == (1, 3, 7)
    rows = [{"epoch": e, "status": "ok", "val_acc": 0.1 * e} for e in range(1, 16)]
    t = Trial(row=None, history=rows)   # no trial row needed: only its history is read
    assert [e["rung"] for e in importance.importance_by_rung(exp, [t])] == [1, 3, 7, 15]
