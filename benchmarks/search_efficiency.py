"""ASHA + fidelity-aware TPE against FIFO random search on digits, same budget, 5 seeds.

    .venv/bin/python benchmarks/search_efficiency.py [--seeds 5] [--samples 16] [--epochs 9] [--eta 3]

Both searches draw the same number of trials from the same space (quickstart's, with a
wider learning-rate range so that bad trials exist); random search trains every trial
for all epochs.  Per seed: best val_acc and total trial-epochs trained.
Target: mean best within 0.5 points of random's with <= 40% of its epochs.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile

os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")

import ray  # noqa: E402
from ray import tune  # noqa: E402

from tuner.config import parse  # noqa: E402
from tuner.run import build_tuner  # noqa: E402
from tuner.space import param_space  # noqa: E402
from trainables.trainable import make_trainable  # noqa: E402

SPACE = """
name: {name}
storage_path: {storage}
metric: val_acc
mode: max
seed: {seed}
budget: {{num_samples: {samples}, max_epochs: {epochs}, grace_epochs: 1, reduction_factor: {eta}, max_concurrent_trials: 2}}
resources: {{workers: 1, cpus_per_worker: 1}}
train: {{dataset: digits, cache_dir: {cache}, model: convnet, width: 0.5, flip: false, crop_padding: 1, seed: {seed}}}
search:
  lr: {{type: loguniform, low: 1.0e-3, high: 1.0}}
  micro_batch_size: {{type: choice, values: [32, 64, 128]}}
  weight_decay: {{type: loguniform, low: 1.0e-5, high: 1.0e-2}}
  label_smoothing: {{type: uniform, low: 0.0, high: 0.2}}
  optimizer: {{type: choice, values: [sgd, adamw]}}
"""


def summarise(results) -> tuple[float, int]:
    best = max((r.metrics or {}).get("val_acc", 0.0) for r in results)
    epochs = sum(int((r.metrics or {}).get("epoch", 0)) for r in results)
    return best, epochs


def run_seed(seed: int, args, storage: str, cache: str) -> dict:
    text = SPACE.format(name=f"asha-{seed}", storage=storage, cache=cache, seed=seed, samples=args.samples,
                        epochs=args.epochs, eta=args.eta)
    exp = parse(text)
    asha = summarise(build_tuner(exp, concurrency=2).fit())
    rnd_exp = parse(text.replace(f"name: asha-{seed}", f"name: random-{seed}"))
    rnd = tune.Tuner(
        make_trainable(1, 1.0, 0.0, storage), param_space=param_space(rnd_exp),
        tune_config=tune.TuneConfig(num_samples=args.samples, max_concurrent_trials=2, reuse_actors=True,
                                    search_alg=tune.search.BasicVariantGenerator(random_state=seed)),
        run_config=tune.RunConfig(name=f"random-{seed}", storage_path=storage, verbose=0,
                                  checkpoint_config=tune.CheckpointConfig(num_to_keep=1))).fit()
    rnd = summarise(rnd)
    row = {"seed": seed, "asha_best": asha[0], "asha_epochs": asha[1], "random_best": rnd[0], "random_epochs": rnd[1]}
    print(json.dumps(row), flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--samples", type=int, default=16)
    ap.add_argument("--epochs", type=int, default=9)
    ap.add_argument("--eta", type=float, default=3, help="ASHA reduction factor")
    args = ap.parse_args()
    storage, cache = tempfile.mkdtemp(prefix="tuner-eff-"), tempfile.mkdtemp(prefix="tuner-cache-")
    ray.init(address="local", num_cpus=2, include_dashboard=True, dashboard_host="127.0.0.1", log_to_driver=False)
    try:
        rows = [run_seed(s, args, storage, cache) for s in range(args.seeds)]
    finally:
        ray.shutdown()
    m = {k: statistics.mean(r[k] for r in rows) for k in ("asha_best", "asha_epochs", "random_best", "random_epochs")}
    gap_points = (m["random_best"] - m["asha_best"]) * 100
    epoch_ratio = m["asha_epochs"] / m["random_epochs"]
    print(f"ASHA+TPE : mean best val_acc {m['asha_best']:.4f}, mean trial-epochs {m['asha_epochs']:.1f}")
    print(f"random   : mean best val_acc {m['random_best']:.4f}, mean trial-epochs {m['random_epochs']:.1f}")
    print(f"gap {gap_points:+.2f} points (target <= 0.5), epochs {epoch_ratio:.1%} of random's (target <= 40%)")
    print("BENCH " + json.dumps({"bench": "search_efficiency", "seeds": args.seeds, "samples": args.samples,
                                 "max_epochs": args.epochs, "eta": args.eta, **{k: round(v, 4) for k, v in m.items()},
                                 "gap_points": round(gap_points, 3), "epoch_ratio": round(epoch_ratio, 4),
                                 "targets": {"gap_points": 0.5, "epoch_ratio": 0.4},
                                 "met": gap_points <= 0.5 and epoch_ratio <= 0.4}))


if __name__ == "__main__":
    main()
