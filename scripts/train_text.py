#!/usr/bin/env python3
"""train_text.py - the PyTorch twin of scripts/train_text.lua: the same
classifier (EmbeddingBag baseline or small pre-norm Transformer encoder with
key-padding masks, mean- or CLS-pooled) trained with the same recipe on the
same tokens; prints validation accuracy and the confusion matrix.

    dlua scripts/train_text.lua --model transformer --export-data text_data.safetensors
    /usr/bin/python3 scripts/train_text.py --data text_data.safetensors [--seed S] [--threads 2]

The data file (train_text.lua --export-data) holds each split's token ids
(concatenated, 1-based: shifted here), lengths and labels, and the recipe as
JSON metadata (model, sizes, epochs, batch, AdamW lr / weight decay, cosine
decay to 0 over all steps, gradient clipping, seed).  Only the random
numbers differ from the dlua run (initialisation and batch order come from
torch's generator, seeded with the same seed).
Exit status: 0 done, 2 bad options or data.
"""
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_torch import twin_setup  # noqa: E402

PROG = "train_text.py"


class Bag(nn.Module):
    def __init__(self, r):
        super().__init__()
        self.embedding = nn.EmbeddingBag(r["vocab"], r["dim"], mode="mean", padding_idx=r["pad"] - 1)
        self.fc = nn.Linear(r["dim"], r["classes"])

    def forward(self, ids, mask, lengths):
        return self.fc(self.embedding(ids))


class Encoder(nn.Module):
    def __init__(self, r):
        super().__init__()
        d = r["dim"]
        self.pool = r["pool"]
        self.embedding = nn.Embedding(r["vocab"], d, padding_idx=r["pad"] - 1)
        self.position = nn.Embedding(r["max_length"], d)
        layer = nn.TransformerEncoderLayer(d, r["heads"], dim_feedforward=4 * d, dropout=r["dropout"],
                                           activation="gelu", batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, r["layers"], enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)
        self.fc = nn.Linear(d, r["classes"])

    def forward(self, ids, mask, lengths):
        T = ids.shape[1]
        x = self.embedding(ids) + self.position(torch.arange(T))
        x = self.norm(self.encoder(x, src_key_padding_mask=mask))
        if self.pool == "cls":
            return self.fc(x[:, 0])
        keep = (~mask).unsqueeze(2).to(x.dtype)
        return self.fc((x * keep).sum(1) / lengths.unsqueeze(1).to(x.dtype))


def collate(seqs, labels, pad):
    lengths = torch.tensor([len(s) for s in seqs])
    T = int(lengths.max())
    ids = torch.full((len(seqs), T), pad, dtype=torch.long)
    for k, s in enumerate(seqs):
        ids[k, :len(s)] = s
    mask = torch.arange(T).unsqueeze(0) >= lengths.unsqueeze(1)
    return ids, mask, lengths, torch.tensor(labels)


def split(tensors, part):
    flat = tensors[part + ".ids"].long() - 1
    lengths = tensors[part + ".lengths"].long().tolist()
    labels = (tensors[part + ".labels"].long() - 1).tolist()
    seqs, off = [], 0
    for n in lengths:
        seqs.append(flat[off:off + n])
        off += n
    return seqs, labels


@torch.no_grad()
def evaluate(model, seqs, labels, B, pad, C):
    model.eval()
    conf = [[0] * C for _ in range(C)]
    correct = 0
    for i in range(0, len(seqs), B):
        ids, mask, lengths, y = collate(seqs[i:i + B], labels[i:i + B], pad)
        pred = model(ids, mask, lengths).argmax(1).tolist()
        for p, t in zip(pred, y.tolist()):
            conf[t][p] += 1
            correct += p == t
    model.train()
    return correct / len(seqs), conf


def main():
    (tr_x, tr_y, va_x, va_y), r, _ = twin_setup(PROG, "train_text.lua", "dlua-text-data-1",
                                                lambda ts: split(ts, "train") + split(ts, "val"),
                                                "epochs", "epochs")
    t_start = time.time()
    C, B, pad = r["classes"], r["batch_size"], r["pad"] - 1
    model = Bag(r) if r["model"] == "bag" else Encoder(r)
    nparams = sum(q.numel() for q in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=r["lr"], weight_decay=r["weight_decay"])
    per_epoch = (len(tr_x) + B - 1) // B
    total = per_epoch * r["epochs"]
    print("%s: %d classes; %d train / %d val quotes; vocab %d; model: %s, %d parameters; %d epochs of %d steps, "
          "batch %d, lr %g, %d threads" % (PROG, C, len(tr_x), len(va_x), r["vocab"], r["model"], nparams,
                                           r["epochs"], per_epoch, B, r["lr"], torch.get_num_threads()))
    step = 0
    model.train()
    for epoch in range(1, r["epochs"] + 1):
        t0 = time.time()
        order = torch.randperm(len(tr_x)).tolist()
        total_loss, n = 0.0, 0
        for i in range(0, len(order), B):
            idx = order[i:i + B]
            ids, mask, lengths, y = collate([tr_x[k] for k in idx], [tr_y[k] for k in idx], pad)
            lr = 0.5 * r["lr"] * (1 + math.cos(math.pi * step / total))
            for g in opt.param_groups:
                g["lr"] = lr
            loss = F.cross_entropy(model(ids, mask, lengths), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if r["grad_clip"] > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), r["grad_clip"])
            opt.step()
            total_loss, n, step = total_loss + loss.item() * len(idx), n + len(idx), step + 1
        acc, _ = evaluate(model, va_x, va_y, B, pad, C)
        print("epoch %d/%d: train loss %.4f, val accuracy %.2f%% (%.1fs)" % (epoch, r["epochs"], total_loss / n,
                                                                            100 * acc, time.time() - t0), flush=True)
    acc, conf = evaluate(model, va_x, va_y, B, pad, C)
    print("final: val accuracy %.2f%% (%d quotes, %s, seed %d); time %.1fs" % (100 * acc, len(va_x), r["model"],
                                                                              r["seed"], time.time() - t_start))
    names = r["names"]
    w = 12
    print("%-*s" % (w, "true \\ pred") + "".join("%*s" % (w, n[:w - 1]) for n in names))
    for i in range(C):
        print("%-*s" % (w, names[i][:w - 1]) + "".join("%*d" % (w, v) for v in conf[i]))


if __name__ == "__main__":
    main()
