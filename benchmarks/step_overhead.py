"""TrainStep overhead against a plain PyTorch training step, measured side by side.

    .venv/bin/python benchmarks/step_overhead.py

convnet (width 1) on 32x32x3 inputs, batch 128, SGD, fp32, CPU: 10 warm-up steps, then
50 timed steps of each, interleaved step by step so machine noise hits both alike.
Target: TrainStep costs at most 3% more per step, judged on the median step time
(robust to the odd stall that these shared machines give either side); the ratio of
totals is printed too.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

from trainables.config import ModelConfig
from trainables.training.models import build_model
from trainables.training.step import TrainStep

TARGET_OVERHEAD = 0.03


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--batch", type=int, default=128)
    args = ap.parse_args()
    torch.manual_seed(0)
    x = torch.randn(args.batch, 3, 32, 32)
    y = torch.randint(0, 10, (args.batch,))
    plain_model = build_model(ModelConfig(model="convnet", width=1.0), 3, 10)
    step_model = build_model(ModelConfig(model="convnet", width=1.0), 3, 10)
    step_model.load_state_dict(plain_model.state_dict())
    plain_opt = torch.optim.SGD(plain_model.parameters(), lr=0.01, momentum=0.9)
    step = TrainStep(step_model, torch.optim.SGD(step_model.parameters(), lr=0.01, momentum=0.9),
                     loss_fn=F.cross_entropy, device=torch.device("cpu"))

    def plain() -> None:
        plain_opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(plain_model(x), y)
        loss.backward()
        plain_opt.step()
        loss.item()  # a real loop reads the loss too

    def ours() -> None:
        step([(x, y)])

    for _ in range(args.warmup):
        plain(), ours()
    t_plain, t_ours = [], []
    for i in range(args.steps):
        order = (plain, ours) if i % 2 == 0 else (ours, plain)
        for fn in order:
            t0 = time.perf_counter()
            fn()
            (t_plain if fn is plain else t_ours).append(time.perf_counter() - t0)
    sps_plain, sps_ours = len(t_plain) / sum(t_plain), len(t_ours) / sum(t_ours)
    overhead = sum(t_ours) / sum(t_plain) - 1.0
    median_overhead = statistics.median(t_ours) / statistics.median(t_plain) - 1.0
    print(f"plain loop : {sps_plain:7.2f} steps/s")
    print(f"TrainStep  : {sps_ours:7.2f} steps/s")
    print(f"overhead   : {overhead * 100:+.2f}% (total), {median_overhead * 100:+.2f}% (median step)")
    print("BENCH " + json.dumps({"bench": "step_overhead", "plain_steps_per_s": round(sps_plain, 3),
                                 "trainstep_steps_per_s": round(sps_ours, 3), "overhead": round(overhead, 4),
                                 "median_overhead": round(median_overhead, 4), "target_overhead": TARGET_OVERHEAD,
                                 "met": median_overhead <= TARGET_OVERHEAD}))


if __name__ == "__main__":
    main()
