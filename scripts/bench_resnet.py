#!/usr/bin/python3
"""bench_resnet.py - PyTorch twin of bench_resnet.lua: images/s for the
ResNet-50 training step (forward, cross-entropy, backward, SGD-momentum step)
and for inference, float32 on the CPU, same batch, image size and threads.
Prints one line per measurement in the form the Lua script parses:
  train <images/s>
  infer <images/s>
With --device cuda it measures what bench_resnet.lua measures on a GPU:
  train_tf32, infer_tf32      float32 with TF32, NCHW
  train_bf16cl, infer_bf16cl  bfloat16 autocast, channels-last
  latency_ms                  batch 1, float32 with TF32
  latency_graph_ms            the same forward replayed from a CUDA graph
  peak_mb                     peak GPU memory of the training runs
Usage: /usr/bin/python3 scripts/bench_resnet.py [--arch resnet50] [--batch 8]
       [--size 224] [--threads 2] [--steps 5] [--warmup 2] [--device cpu]
       [--channels-last]   (CPU: model and input in torch.channels_last)"""
import argparse
import resource
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
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--channels-last", action="store_true")
    a = ap.parse_args()
    if a.device.startswith("cuda"):
        gpu(a)
        return
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = getattr(torchvision.models, a.arch)()
    x = torch.randn(a.batch, 3, a.size, a.size)
    y = torch.randint(0, 1000, (a.batch,))
    cl = torch.channels_last if a.channels_last else torch.contiguous_format
    model = model.to(memory_format=cl)
    x = x.contiguous(memory_format=cl)
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
    with torch.no_grad():
        x1 = torch.randn(1, 3, a.size, a.size).contiguous(memory_format=cl)
        for _ in range(a.warmup):
            model(x1)
        n = max(5, a.steps)
        t0 = time.perf_counter()
        for _ in range(n):
            model(x1)
        print("latency_ms %.3f" % ((time.perf_counter() - t0) / n * 1000), flush=True)
    print("peak_rss_mb %.1f" % (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024), flush=True)


def gpu(a):
    dev = torch.device(a.device)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cudnn.benchmark = True
    loss_fn = torch.nn.CrossEntropyLoss()

    def run(batch, train, amp=False, channels_last=False):
        torch.manual_seed(0)
        model = getattr(torchvision.models, a.arch)().to(dev)
        x = torch.randn(batch, 3, a.size, a.size, device=dev)
        y = torch.randint(0, 1000, (batch,), device=dev)
        if channels_last:
            model = model.to(memory_format=torch.channels_last)
            x = x.contiguous(memory_format=torch.channels_last)
        opt = torch.optim.SGD(model.parameters(), lr=0.001, momentum=0.9)

        def fwd(fn):
            if amp:
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    return fn()
            return fn()

        def timed(n, fn):
            for _ in range(a.warmup):
                fn()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            torch.cuda.synchronize()
            return (time.perf_counter() - t0) / n

        tr = None
        if train:
            model.train()

            def step():
                opt.zero_grad()
                loss = fwd(lambda: loss_fn(model(x), y))
                loss.backward()
                opt.step()

            tr = batch / timed(a.steps, step)
        model.eval()
        with torch.no_grad():
            per = timed(5 * a.steps if batch == 1 else a.steps, lambda: fwd(lambda: model(x)))
        return tr, per

    def graph_latency():
        # batch 1 in eval mode, captured once and replayed (static input)
        torch.manual_seed(0)
        model = getattr(torchvision.models, a.arch)().to(dev).eval()
        x = torch.randn(1, 3, a.size, a.size, device=dev)
        with torch.no_grad():
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(max(3, a.warmup)):
                    model(x)
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                model(x)
        for _ in range(a.warmup):
            g.replay()
        torch.cuda.synchronize()
        n = 5 * a.steps
        t0 = time.perf_counter()
        for _ in range(n):
            g.replay()
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) / n

    torch.cuda.reset_peak_memory_stats()
    tr, per = run(a.batch, True, amp=True, channels_last=True)
    print("train_bf16cl %.3f" % tr, flush=True)
    print("infer_bf16cl %.3f" % (a.batch / per), flush=True)
    tr, per = run(a.batch, True)
    print("train_tf32 %.3f" % tr, flush=True)
    print("infer_tf32 %.3f" % (a.batch / per), flush=True)
    print("peak_mb %.0f" % (torch.cuda.max_memory_allocated() / 2**20), flush=True)
    _, per = run(1, False)
    print("latency_ms %.3f" % (per * 1000), flush=True)
    try:
        print("latency_graph_ms %.3f" % (graph_latency() * 1000), flush=True)
    except Exception as e:  # the other figures stand without it
        print("latency_graph_ms: %s" % e, flush=True)


if __name__ == "__main__":
    main()
