#!/usr/bin/python3
"""resnet_golden.py - writes a safetensors file with everything the whole-model
golden test compares: a torchvision ResNet's initial state dict (random weights,
BN statistics and affine parameters perturbed so evaluation mode is not
trivial), an input batch and labels, and PyTorch's results for one training
step (logits, loss, every parameter's gradient, BN running statistics after the
forward, parameters after one SGD step with momentum and weight decay) and for
evaluation mode afterwards -- computed twice from the same start, in float32
and in float64, so the test can tell float32 rounding (how far PyTorch's own
float32 result is from float64) from real disagreement.

Usage: /usr/bin/python3 tests/golden/resnet_golden.py ARCH OUT [--batch 2] [--size 64]
Keys: w.<name> (initial state, float32), x, y (0-based labels), and for P in
f32, f64: P.logits, P.loss, P.grad.<param>, P.run.<buffer>, P.step.<param>,
P.eval0_logits (evaluation mode before the step), P.eval_logits (after it);
metadata lr, momentum, weight_decay."""
import copy
import argparse
import os
import sys

import torch
import torchvision

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from convert_torchvision import save_safetensors  # noqa: E402

LR, MOMENTUM, WD = 0.1, 0.9, 1e-4


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("arch")
    ap.add_argument("out")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--size", type=int, default=64)
    a = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(2)
    m = getattr(torchvision.models, a.arch)()
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, torch.nn.BatchNorm2d):
                mod.weight.uniform_(0.5, 1.5)
                mod.bias.uniform_(-0.2, 0.2)
                mod.running_mean.uniform_(-0.1, 0.1)
                mod.running_var.uniform_(0.5, 1.5)
    out = {"w." + k: v.clone() for k, v in m.state_dict().items()}
    x = torch.randn(a.batch, 3, a.size, a.size)
    y = torch.randint(0, 1000, (a.batch,))
    out["x"], out["y"] = x, y
    models = {"f32": m, "f64": copy.deepcopy(m).double()}
    for prec, mm in models.items():
        xx = x if prec == "f32" else x.double()
        mm.eval()
        with torch.no_grad():
            out[prec + ".eval0_logits"] = mm(xx)
        mm.train()
        opt = torch.optim.SGD(mm.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WD)
        logits = mm(xx)
        loss = torch.nn.functional.cross_entropy(logits, y)
        loss.backward()
        out[prec + ".logits"] = logits.detach()
        out[prec + ".loss"] = loss.detach()
        for k, p in mm.named_parameters():
            out[prec + ".grad." + k] = p.grad.clone()
        for k, b in mm.named_buffers():
            out[prec + ".run." + k] = b.clone()
        opt.step()
        for k, p in mm.named_parameters():
            out[prec + ".step." + k] = p.detach().clone()
        mm.eval()
        with torch.no_grad():
            out[prec + ".eval_logits"] = mm(xx)
    save_safetensors(a.out, {k: v.contiguous() for k, v in out.items()},
                     {"lr": str(LR), "momentum": str(MOMENTUM), "weight_decay": str(WD)})


if __name__ == "__main__":
    main()
