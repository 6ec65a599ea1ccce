# bench_conv.py - float32 conv2d forward + backward times with PyTorch (CPU,
# torch.nn.functional.conv2d: Debian's torch 1.13 sends NCHW float32
# convolutions to oneDNN/mkldnn), the reference for scripts/bench_conv.lua.
# Run with Debian's /usr/bin/python3.  One line per layer:
#   "torch <name> <fwd ms> <bwd ms>"   (best of 7; bwd = input + weight grads)
# Usage: python3 bench_conv.py THREADS BATCH LAYER...
# LAYER is name,C,H,O,k,stride,pad (square inputs and kernels): bench_conv.lua
# passes its table of layers, so the two time the same shapes.
import sys
import time

import torch
import torch.nn.functional as F


def best_ms(f, runs):
    f()
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        f()
        ts.append((time.perf_counter() - t0) * 1e3)
    return min(ts)


def main():
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    batch = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    torch.set_num_threads(threads)
    for spec in sys.argv[3:]:
        name, C, H, O, k, s, p = [f if i == 0 else int(f) for i, f in enumerate(spec.split(","))]
        x = torch.randn(batch, C, H, H, requires_grad=True)
        w = torch.randn(O, C, k, k, requires_grad=True)
        y = F.conv2d(x, w, None, s, p)
        gy = torch.randn_like(y)
        fwd = best_ms(lambda: F.conv2d(x, w, None, s, p), 7)
        # the backward alone: gradients through the graph of y, kept alive
        bwd = best_ms(lambda: torch.autograd.grad(y, (x, w), gy, retain_graph=True), 7)
        print("torch %s %.2f %.2f" % (name, fwd, bwd), flush=True)


main()
