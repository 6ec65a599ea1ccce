#!/usr/bin/env python3
"""train_gpt.py - the PyTorch twin of scripts/train_gpt.lua: trains the same
GPT (scripts/gpt_torch.py) with the same recipe on the same tokens and prints
its losses on the same evaluation blocks.

    dlua scripts/train_gpt.lua --export-data gpt_data.safetensors --max-iters 0
    /usr/bin/python3 scripts/train_gpt.py --data gpt_data.safetensors [--threads 2] [--seed S]

The data file (written by train_gpt.lua --export-data) holds the training
and validation token streams (1-based ids: shifted to 0-based here) and the
recipe as JSON metadata: model size, batch, steps, learning-rate schedule,
AdamW betas and weight decay (2-D weights only), gradient clipping, the
number of evaluation blocks and the seed.  Command-line options override the
recipe's seed, max_iters and threads.  What differs from the dlua run is only
the random numbers (initialisation and batch offsets come from torch's
generator, seeded with the same seed).
Exit status: 0 done, 2 bad options or data.
"""
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_torch import GPT, lr_at, spread_starts, twin_setup  # noqa: E402

PROG = "train_gpt.py"


def blocks(data, starts, T):
    s = torch.tensor(starts, dtype=torch.long)
    idx = (s.unsqueeze(1) + torch.arange(T)).view(-1)
    return data[idx].view(len(starts), T), data[idx + 1].view(len(starts), T)


@torch.no_grad()
def evaluate(model, data, starts, T, B):
    model.eval()
    total, n = 0.0, 0
    for i in range(0, len(starts), B):
        part = starts[i:i + B]
        x, y = blocks(data, part, T)
        _, loss = model(x, y)
        total += loss.item() * len(part)
        n += len(part)
    model.train()
    return total / n if n else float("nan")


def main():
    (train, val), r, a = twin_setup(PROG, "train_gpt.lua", "dlua-gpt-data-1",
                                    lambda ts: (ts["train"].long() - 1, ts["val"].long() - 1),
                                    "max-iters", "number of steps")
    if a.max_iters is not None:
        r["lr_decay_iters"] = a.max_iters
    T, B = r["block_size"], r["batch_size"]
    model = GPT(r["vocab_size"], T, r["n_layer"], r["n_head"], r["n_embd"], r["dropout"], r["bias"])
    opt = model.configure_optimizers(r["weight_decay"], r["lr"], (0.9, r["beta2"]))
    ntrain, nval = train.numel(), val.numel()
    eval_train = spread_starts(ntrain, T + 1, r["eval_blocks"])
    eval_val = spread_starts(nval, T + 1, r["eval_blocks"])
    nparams = sum(q.numel() for q in model.parameters()) - model.transformer.wpe.weight.numel()
    print("%s: %d / %d tokens, vocab %d; model: %d layers, %d heads, %d wide, context %d, %d parameters; "
          "batch %d, %d steps, %d threads" % (PROG, ntrain, nval, r["vocab_size"], r["n_layer"], r["n_head"],
                                               r["n_embd"], T, nparams, B, r["max_iters"], torch.get_num_threads()))
    t_start = time.time()
    last = {"train": float("nan"), "val": float("nan")}
    run_loss, run_n, tokens, t_log = 0.0, 0, 0, time.time()
    model.train()
    for it in range(r["max_iters"]):
        lr = lr_at(r, it)
        for g in opt.param_groups:
            g["lr"] = lr
        starts = torch.randint(0, ntrain - T, (B,)).tolist()
        x, y = blocks(train, starts, T)
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if r["grad_clip"] > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), r["grad_clip"])
        opt.step()
        run_loss, run_n, tokens = run_loss + loss.item(), run_n + 1, tokens + B * T
        step = it + 1
        if step % r["log_every"] == 0 or step == r["max_iters"]:
            dt = time.time() - t_log
            print("step %d/%d: loss %.4f, lr %.2e, %.0f tokens/s" % (step, r["max_iters"], run_loss / run_n, lr,
                                                                    tokens / dt), flush=True)
            run_loss, run_n, tokens, t_log = 0.0, 0, 0, time.time()
        if step % r["eval_interval"] == 0 or step == r["max_iters"]:
            t0 = time.time()
            last["train"] = evaluate(model, train, eval_train, T, B)
            last["val"] = evaluate(model, val, eval_val, T, B)
            print("step %d: train loss %.4f, val loss %.4f (eval %.1fs)" % (step, last["train"], last["val"],
                                                                          time.time() - t0), flush=True)
            t_log = time.time()
    print("final: train loss %.4f, val loss %.4f after %d steps; time %.1fs" % (last["train"], last["val"],
                                                                              r["max_iters"], time.time() - t_start))


if __name__ == "__main__":
    main()
