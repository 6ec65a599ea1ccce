#!/usr/bin/python3
"""bench_resnet.py - PyTorch twin of bench_resnet.lua: images/s for the
ResNet-50 training step (forward, cross-entropy, backward, SGD-momentum step)
and for inference, float32 on the CPU, same batch, image size and threads.
Prints one line per measurement in the form the Lua script parses:
  train <images/s>
  infer <images/s>
Usage: /usr/bin/python3 scripts/bench_resnet.py [--arch resnet50] [--batch 8]
       [--size 224] [--threads 2] [--steps 5] [--warmup 2]"""
import argparse
import time

import torch
import torchvision


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", default="resnet50")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = getattr(torchvision.models, a.arch)()
    x = torch.randn(a.batch, 3, a.size, a.size)
    y = torch.randint(0, 1000, (a.batch,))
    opt = torch.optim.SGD(model.parameters(), lr=0.001, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()

    def train_step():
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()

    model.train()
    for _ in range(a.warmup):
        train_step()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        train_step()
    dt = (time.perf_counter() - t0) / a.steps
    print("train %.3f" % (a.batch / dt), flush=True)

    model.eval()
    with torch.no_grad():
        for _ in range(a.warmup):
            model(x)
        t0 = time.perf_counter()
        for _ in range(a.steps):
            model(x)
        dt = (time.perf_counter() - t0) / a.steps
    print("infer %.3f" % (a.batch / dt), flush=True)


if __name__ == "__main__":
    main()
