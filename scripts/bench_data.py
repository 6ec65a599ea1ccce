# bench_data.py - the torchvision + Pillow twin of scripts/bench_data.lua:
# ImageFolder -> RandomResizedCrop(224), RandomHorizontalFlip, ToTensor,
# Normalize -> DataLoader(batch_size 32, shuffle) at each worker count; the
# best of --repeat epochs after a warm-up epoch.  torch runs single-threaded
# in the main process (as its DataLoader workers do), so a worker count means
# the same number of cores for both.  Prints "workers=W images_per_s=X".
# Usage: python3 scripts/bench_data.py --dir PATH [--workers 0,1,2] [--repeat R]
import argparse
import time

import torch
import torchvision.datasets as datasets
import torchvision.transforms as T


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--workers", default="0,1,2")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    torch.set_num_threads(1)
    tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                    T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    ds = datasets.ImageFolder(a.dir, transform=tf)
    for w in [int(x) for x in a.workers.split(",")]:
        loader = torch.utils.data.DataLoader(ds, batch_size=32, shuffle=True, num_workers=w,
                                             persistent_workers=w > 0)
        best, best_cpu = float("inf"), float("inf")
        for r in range(a.repeat + 1):
            t0, c0, n = time.perf_counter(), time.process_time(), 0
            for x, y in loader:
                n += x.shape[0]
            dt, dc = time.perf_counter() - t0, time.process_time() - c0
            if r > 0:
                best, best_cpu = min(best, dt), min(best_cpu, dc)
        line = "workers=%d images_per_s=%.1f" % (w, len(ds) / best)
        if w == 0:  # CPU time is only meaningful without worker processes
            line += " images_per_cpu_s=%.1f" % (len(ds) / best_cpu)
        print(line, flush=True)
        del loader


if __name__ == "__main__":
    main()
