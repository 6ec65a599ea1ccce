# bench_matmul.py - float32 matmul GFLOP/s with PyTorch (CPU), the reference
# for scripts/bench_matmul.lua.  Run with Debian's /usr/bin/python3.
# Prints one line per case and path:
#   "torch <path> <threads> <n> <best GFLOP/s> <median GFLOP/s>"
# where path is "mm" (torch.mm, PyTorch's default dense path; Debian's build
# sends it to the BLAS it was linked with, BLAS_INFO in torch.__config__) or
# "mkldnn" (the same product through PyTorch's oneDNN linear on mkldnn
# tensors, a @ b.T: what PyTorch gets from the library dlua uses).
# Usage: python3 bench_matmul.py [threads ...]   (default: 1 2)
import statistics
import sys
import time

import torch

SIZES = (1024, 2048)
RUNS = {1024: 10, 2048: 5}


def bench(path, n, runs):
    a = torch.rand(n, n)
    b = torch.rand(n, n)
    if path == "mm":
        f = lambda: torch.mm(a, b)
    else:
        am, bm = a.to_mkldnn(), b.to_mkldnn()
        f = lambda: torch._C._nn.mkldnn_linear(am, bm)
    f()  # warm-up
    rates, spent = [], 0.0
    while len(rates) < runs and not (len(rates) >= 3 and spent > 10):  # slow BLAS: cap time
        t0 = time.perf_counter()
        f()
        dt = time.perf_counter() - t0
        spent += dt
        rates.append(2.0 * n ** 3 / dt / 1e9)
    return max(rates), statistics.median(rates)


def main():
    threads = [int(x) for x in sys.argv[1:]] or [1, 2]
    for t in threads:
        torch.set_num_threads(t)
        for n in SIZES:
            for path in ("mm", "mkldnn"):
                try:
                    best, med = bench(path, n, RUNS[n])
                except (RuntimeError, AttributeError) as e:  # no mkldnn in this build
                    print("# %s: %s" % (path, e), file=sys.stderr)
                    continue
                print("torch %s %d %d %.1f %.1f" % (path, t, n, best, med), flush=True)


if __name__ == "__main__":
    main()
