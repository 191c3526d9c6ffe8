"""Triton kernels against their plain-PyTorch references on CUDA, side by side.

    python benchmarks/kernels.py [--json OUT.json]

augment: batch 512 of 3x32x32 uint8 -> bf16 channels_last, padding 4.
cross-entropy: 8192 x 1000 bf16 logits, label smoothing 0.1, forward + backward,
against the reference and against F.cross_entropy(label_smoothing=0.1).
Targets: augment >= 3x its reference; CE >= 1.5x its reference and no slower than
F.cross_entropy.  Without CUDA it exits with a message (exit code 2).
"""
from __future__ import annotations

import argparse
import json
import sys

import torch
import torch.nn.functional as F


def cuda_ms(fn, reps: int = 50) -> float:
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("benchmarks/kernels.py needs a CUDA GPU; none here (the kernels' correctness tests run on CPU "
              "under TRITON_INTERPRET=1 in the test suite)")
        return 2
    from trainables.training.kernels import augment_torch, cross_entropy_torch
    from trainables.training.kernels.augment_triton import augment_triton
    from trainables.training.kernels.cross_entropy_triton import cross_entropy_triton
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(0)
    n = 512
    imgs = torch.randint(0, 256, (n, 3, 32, 32), dtype=torch.uint8, device=dev, generator=g)
    off = torch.randint(0, 9, (n, 2), device=dev, generator=g)
    fl = torch.rand(n, device=dev, generator=g) < 0.5
    scale, shift = torch.rand(3, device=dev), torch.rand(3, device=dev)
    ref = augment_torch(imgs, off, fl, scale, shift, torch.float32, 4)
    got = augment_triton(imgs, off, fl, scale, shift, torch.float32, 4)
    aug_ulp = float(((got - ref).abs() / torch.finfo(torch.float32).eps / ref.abs().clamp_min(1e-30)).max())
    t_aug_ref = cuda_ms(lambda: augment_torch(imgs, off, fl, scale, shift, torch.bfloat16, 4))
    t_aug_tri = cuda_ms(lambda: augment_triton(imgs, off, fl, scale, shift, torch.bfloat16, 4))

    logits = torch.randn(8192, 1000, device=dev, dtype=torch.bfloat16, generator=g).requires_grad_()
    target = torch.randint(0, 1000, (8192,), device=dev, generator=g)

    def fwd_bwd(fn):
        return lambda: fn().backward()
    t_ce_ref = cuda_ms(fwd_bwd(lambda: cross_entropy_torch(logits, target, 0.1)))
    t_ce_tri = cuda_ms(fwd_bwd(lambda: cross_entropy_triton(logits, target, 0.1)))
    t_ce_f = cuda_ms(fwd_bwd(lambda: F.cross_entropy(logits, target, label_smoothing=0.1)))
    res = {"bench": "kernels", "augment_ref_ms": t_aug_ref, "augment_triton_ms": t_aug_tri,
           "augment_speedup": t_aug_ref / t_aug_tri, "augment_max_rel_ulp_fp32": aug_ulp,
           "ce_ref_ms": t_ce_ref, "ce_triton_ms": t_ce_tri, "ce_F_ms": t_ce_f,
           "ce_speedup_vs_ref": t_ce_ref / t_ce_tri, "ce_speedup_vs_F": t_ce_f / t_ce_tri,
           "targets": {"augment_speedup": 3.0, "ce_speedup_vs_ref": 1.5, "ce_speedup_vs_F": 1.0}}
    res["met"] = res["augment_speedup"] >= 3.0 and res["ce_speedup_vs_ref"] >= 1.5 and res["ce_speedup_vs_F"] >= 1.0
    for k, v in res.items():
        if isinstance(v, float):
            print(f"{k:28s} {v:10.4f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    print("BENCH " + json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in res.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
