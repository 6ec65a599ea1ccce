# bench_conv.py - float32 conv2d forward + backward times with PyTorch (CPU,
# torch.nn.functional.conv2d: Debian's torch 1.13 sends NCHW float32
# convolutions to oneDNN/mkldnn), the reference for scripts/bench_conv.lua.
# Run with Debian's /usr/bin/python3.  One line per layer:
#   "torch <name> <fwd ms> <bwd ms>"   (best of 7; bwd = input + weight grads)
# Usage: python3 bench_conv.py THREADS BATCH
import sys
import time

import torch
import torch.nn.functional as F

# name, C, H, O, k, stride, pad  (square inputs and kernels)
LAYERS = [
    ("stem7x7s2", 3, 224, 64, 7, 2, 3),
    ("l1_1x1_64", 64, 56, 64, 1, 1, 0),
    ("l1_3x3_64", 64, 56, 64, 3, 1, 1),
    ("l1_1x1_256", 64, 56, 256, 1, 1, 0),
    ("l2_3x3s2_128", 128, 56, 128, 3, 2, 1),
    ("l2_1x1_512", 512, 28, 128, 1, 1, 0),
    ("l2_down1x1s2", 256, 56, 512, 1, 2, 0),
    ("l3_down1x1s2", 512, 28, 1024, 1, 2, 0),
    ("l3_3x3_256", 256, 14, 256, 3, 1, 1),
    ("l3_1x1_1024", 1024, 14, 256, 1, 1, 0),
    ("l3_1x1_256", 256, 14, 1024, 1, 1, 0),
    ("l4_3x3_512", 512, 7, 512, 3, 1, 1),
    ("l4_1x1_2048", 512, 7, 2048, 1, 1, 0),
]


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
    for name, C, H, O, k, s, p in LAYERS:
        x = torch.randn(batch, C, H, H, requires_grad=True)
        w = torch.randn(O, C, k, k, requires_grad=True)
        y = F.conv2d(x, w, None, s, p)
        gy = torch.randn_like(y)
        fwd = best_ms(lambda: F.conv2d(x, w, None, s, p), 7)
        # the backward alone: gradients through the graph of y, kept alive
        bwd = best_ms(lambda: torch.autograd.grad(y, (x, w), gy, retain_graph=True), 7)
        print("torch %s %.2f %.2f" % (name, fwd, bwd), flush=True)


main()
