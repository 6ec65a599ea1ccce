"""bench_ops_gpu.py - PyTorch twin of bench_ops_gpu.lua: milliseconds per op
on the GPU at the same ResNet-50 layer sizes, printed as `name<TAB>ms`.
Usage: python3 scripts/bench_ops_gpu.py [--reps 10]"""
import argparse
import time

import torch
import torch.nn.functional as F
import torchvision


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=10)
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cudnn.benchmark = True
    dev = "cuda"

    def timed(fn):
        fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(a.reps):
            fn()
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) / a.reps * 1000

    def out(name, ms):
        print("%s\t%.4f" % (name, ms), flush=True)

    for tag, dt, cl in (("f32", torch.float32, False), ("bf16cl", torch.bfloat16, True)):
        torch.manual_seed(0)
        fmt = torch.channels_last if cl else torch.contiguous_format

        def act(c, hw):
            return torch.randn(256, c, hw, hw, device=dev, dtype=dt).contiguous(memory_format=fmt)

        def weight(o, i, k):
            return (torch.randn(o, i, k, k, device=dev) * 0.05).to(dt).contiguous(memory_format=fmt)

        x64, x256 = act(64, 56), act(256, 56)
        w3, w1 = weight(64, 64, 3), weight(256, 64, 1)
        g, b = torch.ones(64, device=dev), torch.zeros(64, device=dev)
        rm, rv = torch.zeros(64, device=dev), torch.ones(64, device=dev)
        out(tag + " conv3x3 64->64 fwd", timed(lambda: F.conv2d(x64, w3, None, padding=1)))
        out(tag + " conv1x1 64->256 fwd", timed(lambda: F.conv2d(x64, w1)))
        xr = x64.detach().requires_grad_()
        wr = w3.detach().requires_grad_()
        gy = torch.ones_like(F.conv2d(xr, wr, None, padding=1))

        def conv_fb():
            F.conv2d(xr, wr, None, padding=1).backward(gy)

        out(tag + " conv3x3 fwd+bwd", timed(conv_fb))
        out(tag + " batchnorm train fwd", timed(lambda: F.batch_norm(x64, rm, rv, g, b, True)))
        gbn, bbn = g.clone().requires_grad_(), b.clone().requires_grad_()

        def bn_fb():
            F.batch_norm(xr, rm, rv, gbn, bbn, True).backward(gy)

        out(tag + " batchnorm fwd+bwd", timed(bn_fb))
        out(tag + " relu", timed(lambda: F.relu(x64)))
        out(tag + " relu_ in place", timed(lambda: F.relu(x64, inplace=True)))
        out(tag + " add (residual)", timed(lambda: x256 + x256))
        out(tag + " max_pool2d 3x3/2", timed(lambda: F.max_pool2d(x64, 3, 2, 1)))
        out(tag + " copy to NCHW", timed(lambda: x64.contiguous()))
        aq = torch.randn(3, 16, 6, 256, 64, device=dev).to(dt)
        q, k, v = aq[0], aq[1], aq[2]
        sdpa = getattr(F, "scaled_dot_product_attention", None)
        if sdpa is not None:  # PyTorch 2.x: its fastest fused kernel
            out(tag + " sdpa causal 16x6x256x64 fwd", timed(lambda: sdpa(q, k, v, is_causal=True)))
            qr, kr, vr = (t.detach().requires_grad_() for t in (q, k, v))
            ga = torch.ones_like(q)

            def sdpa_fb():
                sdpa(qr, kr, vr, is_causal=True).backward(ga)

            out(tag + " sdpa causal fwd+bwd", timed(sdpa_fb))
    model = torchvision.models.resnet50().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.001, momentum=0.9)
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    out("SGD step resnet50 params", timed(opt.step))

    def cast():
        for p in model.parameters():
            p.to(torch.bfloat16)

    out("autocast bf16 cast of resnet50 weights", timed(cast))
    model.train()
    xb = torch.randn(128, 3, 224, 224, device=dev)
    yb = torch.randint(0, 1000, (128,), device=dev)
    out("resnet50 b128 f32 train forward", timed(lambda: F.cross_entropy(model(xb), yb)))

    def fb():
        opt.zero_grad()
        F.cross_entropy(model(xb), yb).backward()

    out("resnet50 b128 f32 forward+backward", timed(fb))

    def full():
        fb()
        opt.step()

    out("resnet50 b128 f32 full step", timed(full))


if __name__ == "__main__":
    main()
