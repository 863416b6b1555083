#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Per-kernel GPU times of libfusednorm's BatchNorm passes (torch.profiler),
for looking at where a case spends its time. Not a benchmark: eager calls,
one buffer set. Usage: profile_batchnorm.py [--cases i,j]"""
import argparse
import os
import sys

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bindings", "python"))
import fusednorm as fn  # noqa: E402

CASES = [
    ("fp16", [128, 64, 56, 56], "nhwc", "none"),
    ("fp32", [16, 32, 112, 112], "nchw", "none"),
    ("fp32", [126000, 16], "nchw", "none"),
    ("fp32", [1000000, 16, 16], "nchw", "none"),
    ("fp16", [128, 256, 56, 56], "nhwc", "add_relu"),
]
DT = {"fp32": torch.float32, "fp16": torch.float16}
EPI = {"none": fn.BnEpilogue.NONE, "add_relu": fn.BnEpilogue.ADD_RELU}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="")
    args = ap.parse_args()
    pick = [int(i) for i in args.cases.split(",") if i] or range(len(CASES))
    for i in pick:
        dt, shape, layout, epi = CASES[i]
        x = torch.randn(shape, device="cuda", dtype=DT[dt])
        if layout == "nhwc" and len(shape) == 4:
            x = x.to(memory_format=torch.channels_last)
        z = torch.randn_like(x) if epi == "add_relu" else None
        dy = torch.randn_like(x)
        w = torch.rand(shape[1], device="cuda") + 0.5
        b = torch.rand(shape[1], device="cuda")
        for _ in range(3):
            y, s = fn.batch_norm_train(x, w, b, epilogue=EPI[epi], z=z)
            fn.batch_norm_backward(dy, x, w, s)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                y, s = fn.batch_norm_train(x, w, b, epilogue=EPI[epi], z=z)
                fn.batch_norm_backward(dy, x, w, s)
            torch.cuda.synchronize()
        print(f"== {dt} {shape} {layout} {epi}: {x.numel() * x.element_size() / 1e6:.1f} MB per tensor")
        for e in sorted(prof.key_averages(), key=lambda e: -e.device_time_total)[:8]:
            print(f"  {e.device_time_total / e.count:9.1f} us x{e.count:3d}  {e.key[:110]}")


if __name__ == "__main__":
    main()
