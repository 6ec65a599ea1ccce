#!/usr/bin/env python3
"""train_resnet.py - the PyTorch twin of scripts/train_resnet.lua, for the
accuracy (and speed) comparison of the built-in default run:

    /usr/bin/python3 scripts/train_resnet.py --preset fashion-mnist

It takes the same options (those that change what is trained) with the same
defaults and presets, and trains the same way: torchvision's ImageFolder
(images loaded as RGB), Resize + CenterCrop (or RandomResizedCrop +
RandomHorizontalFlip with --augment), ToTensor, Normalize(ImageNet), the same
evenly spread training subset, SGD with momentum and weight decay, and the
same per-step learning rate (linear warmup, then none/step/cosine).  It prints
the seed's "[epoch, batch] loss" lines, a summary per epoch and the final
validation top-1.  Random streams differ from dlua's (initialisation,
shuffling), so expect the same accuracy to within run-to-run noise, not the
same numbers.
"""
import argparse
import math
import time

import torch
import torchvision
from torch.utils.data import DataLoader, Subset
from torchvision import transforms as T

PRESETS = {
    "fashion-mnist": dict(
        data="./data/fashion-mnist/train", val="./data/fashion-mnist/val", arch="resnet18",
        image_size=32, resize=32, epochs=3, batch_size=128, lr=0.05, momentum=0.9,
        weight_decay=5e-4, lr_schedule="cosine", warmup_epochs=0.5, workers=2, threads=2,
        train_subset=24000, val_subset=0, log_every=20),
}


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", choices=["none"] + list(PRESETS), default="none")
    p.add_argument("--data", default="./data/train")
    p.add_argument("--val", default=None)
    p.add_argument("--arch", default="resnet50")
    p.add_argument("--num-classes", type=int, default=None)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.001)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--lr-schedule", choices=["none", "step", "cosine"], default="none")
    p.add_argument("--lr-step-size", type=int, default=None)
    p.add_argument("--warmup-epochs", type=float, default=0.0)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--augment", action="store_true", default=False)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--resize", type=int, default=None)
    p.add_argument("--train-subset", type=int, default=0)
    p.add_argument("--val-subset", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=100)
    p.add_argument("--max-steps", type=int, default=0)
    a = p.parse_args()
    if a.preset != "none":
        given = {k.split("=")[0].lstrip("-").replace("-", "_") for k in __import__("sys").argv[1:]
                 if k.startswith("--")}
        for k, v in PRESETS[a.preset].items():
            if k not in given:
                setattr(a, k, v)
    return a


def spread(n, k):
    """k indices spread evenly over range(n) (all when k is 0 or >= n): dlua's rule, 0-based."""
    if not k or k >= n:
        return list(range(n))
    return [i * n // k for i in range(k)]


def lr_at(a, s, total, per_epoch):
    warm = math.floor(a.warmup_epochs * per_epoch + 0.5)
    if s <= warm:
        return a.lr * s / warm
    if a.lr_schedule == "cosine":
        t, tt = s - warm - 1, max(1, total - warm)
        return a.lr * 0.5 * (1 + math.cos(math.pi * t / tt))
    if a.lr_schedule == "step":
        size = a.lr_step_size or max(1, a.epochs // 3)
        return a.lr * 0.1 ** (((s - 1) // per_epoch) // size)
    return a.lr


def evaluate(model, loader):
    model.eval()
    c1 = c5 = n = 0
    loss = 0.0
    with torch.no_grad():
        for x, y in loader:
            out = model(x)
            loss += torch.nn.functional.cross_entropy(out, y, reduction="sum").item()
            k = min(5, out.shape[1])
            top = out.topk(k, 1).indices
            hits = top.eq(y.view(-1, 1))
            c1 += hits[:, :1].sum().item()
            c5 += hits.sum().item()
            n += y.shape[0]
    model.train()
    return c1 / n, c5 / n, loss / n, n


def main():
    a = parse()
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    resize = a.resize or math.floor(a.image_size * 256 / 224 + 0.5)
    norm = T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
    if a.augment:
        tf = T.Compose([T.RandomResizedCrop(a.image_size), T.RandomHorizontalFlip(), T.ToTensor(), norm])
    else:
        tf = T.Compose([T.Resize(resize), T.CenterCrop(a.image_size), T.ToTensor(), norm])
    eval_tf = T.Compose([T.Resize(resize), T.CenterCrop(a.image_size), T.ToTensor(), norm])
    folder = torchvision.datasets.ImageFolder(a.data, transform=tf)
    train_set = Subset(folder, spread(len(folder), a.train_subset))
    loader = DataLoader(train_set, batch_size=a.batch_size, shuffle=True, num_workers=a.workers)
    val_loader = None
    if a.val:
        vf = torchvision.datasets.ImageFolder(a.val, transform=eval_tf)
        val_loader = DataLoader(Subset(vf, spread(len(vf), a.val_subset)), batch_size=2 * a.batch_size,
                                num_workers=a.workers)
    num_classes = a.num_classes or len(folder.classes)
    model = getattr(torchvision.models, a.arch)(num_classes=num_classes)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum, weight_decay=a.weight_decay)
    crit = torch.nn.CrossEntropyLoss()
    nb = len(loader)
    total = nb * a.epochs
    print(f"train_resnet.py: {len(folder.classes)} classes, {len(train_set)} training images "
          f"({nb} batches of {a.batch_size}); {a.arch}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads")
    step, t_start = 0, time.time()
    last = None
    for epoch in range(1, a.epochs + 1):
        model.train()
        t0, running, seen, loss_sum = time.time(), 0.0, 0, 0.0
        for b, (x, y) in enumerate(loader, 1):
            step += 1
            for g in opt.param_groups:
                g["lr"] = lr_at(a, step, total, nb)
            out = model(x)
            loss = crit(out, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            running += loss.item()
            loss_sum += loss.item()
            seen += y.shape[0]
            if b % a.log_every == 0:
                print(f"[{epoch}, {b:5d}] loss: {running / a.log_every:.3f}", flush=True)
                running = 0.0
            if a.max_steps and step >= a.max_steps:
                break
        dt = time.time() - t0
        line = f"epoch {epoch}/{a.epochs}: train loss {loss_sum / max(1, b):.4f}, {seen / dt:.0f} img/s, {dt:.0f} s"
        if val_loader is not None:
            last = evaluate(model, val_loader)
            line += f"; val top-1 {100 * last[0]:.2f}%, top-5 {100 * last[1]:.2f}%, loss {last[2]:.4f} ({last[3]} images)"
        print(line, flush=True)
        if a.max_steps and step >= a.max_steps:
            break
    print("Finished Training")
    if last is not None:
        print(f"final val top-1: {100 * last[0]:.2f}% (top-5 {100 * last[1]:.2f}%, loss {last[2]:.4f})")
    print(f"time: {time.time() - t_start:.0f} s")


if __name__ == "__main__":
    main()
