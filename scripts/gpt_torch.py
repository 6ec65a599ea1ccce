"""gpt_torch.py - the PyTorch side of dl.models.GPT, shared by
scripts/train_gpt.py, scripts/bench_text.py and tests/lua/test_gpt_torch.lua.

    from gpt_torch import GPT, load_safetensors, read_export, twin_setup, spread_starts, lr_at

GPT(vocab_size, block_size, n_layer, n_head, n_embd, dropout, bias) is the
same model as lua/dl/models/gpt.lua, with the same parameter names
(nanoGPT's: transformer.wte.weight, ..., lm_head.weight tied to wte) and the
same initialisation scheme, so a state dict moves between them through
safetensors unchanged.  Token ids are 0-based here (dlua's are 1-based: the
callers shift them).  forward(idx, targets=None, cache=None, last_only=False) takes a KV cache
laid out as dlua's (per layer k, v buffers (B, nh, block_size, hs) and a
length), so generation costs the same work per token in both frameworks.
Attention goes through F.scaled_dot_product_attention where torch has it
(>= 2.0, e.g. a PyPI build) and is written out otherwise (Debian's 1.13).

load_safetensors(path) -> ({name: tensor}, {metadata}) reads what dl.save
writes (no `safetensors` package needed); read_export reads a program's
--export-data file (one line and status 2 when it cannot), twin_setup is the
start every PyTorch twin shares (options, that file, torch's threads and
seed).  spread_starts and lr_at are the
evaluation blocks and the learning-rate schedule of scripts/train_gpt.lua,
0-based starts here.
"""
import argparse
import json
import math
import os
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

# torch >= 2.0 has the fused attention; 1.13 (Debian's) gets it written out
HAVE_SDPA = hasattr(F, "scaled_dot_product_attention")

ST_DTYPES = {
    "F32": torch.float32, "F64": torch.float64, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
    "U8": torch.uint8, "BOOL": torch.bool,
}


def load_safetensors(path):
    """The tensors and the metadata of a safetensors file."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n).decode("utf-8"))
        data = f.read()
    meta = header.pop("__metadata__", {}) or {}
    out = {}
    for name, h in header.items():
        a, b = h["data_offsets"]
        dt = ST_DTYPES[h["dtype"]]
        if b > a:
            t = torch.frombuffer(bytearray(data[a:b]), dtype=dt)
        else:
            t = torch.empty(0, dtype=dt)
        out[name] = t.reshape(h["shape"])
    return out, meta


def read_export(path, fmt, prog, program, convert):
    """The tensors and the JSON recipe of a file a dlua program wrote with
    --export-data in format fmt; convert(tensors) turns the tensors into what
    the twin uses.  A missing or foreign file prints one line "prog: ..." and
    exits with status 2."""
    def die(msg):
        print("%s: --data %s: %s" % (prog, path, msg), file=sys.stderr)
        sys.exit(2)
    if not os.path.isfile(path):
        die("no such file")
    try:
        tensors, meta = load_safetensors(path)
        if meta.get("format") != fmt:
            raise ValueError("not a %s --export-data file" % program)
        return convert(tensors), json.loads(meta["recipe"])
    except (OSError, ValueError, KeyError) as e:
        die(str(e))


def twin_setup(prog, program, fmt, convert, steps, steps_help):
    """The start of a PyTorch twin of scripts/<program>: its options (--data,
    the file program wrote with --export-data in format fmt; --seed and
    --<steps>, an int, overriding the recipe's; --threads), the file read
    through read_export (convert as there), the overrides applied, torch's
    threads and seed set.  Returns (converted tensors, recipe, options)."""
    p = argparse.ArgumentParser(prog=prog, description="The PyTorch twin of scripts/%s." % program)
    p.add_argument("--data", required=True, help="file from %s --export-data" % program)
    p.add_argument("--seed", type=int, help="override the recipe's seed")
    p.add_argument("--" + steps, type=int, help="override the recipe's " + steps_help)
    p.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    a = p.parse_args()
    data, r = read_export(a.data, fmt, prog, program, convert)
    for key in ("seed", steps.replace("-", "_")):
        if getattr(a, key) is not None:
            r[key] = getattr(a, key)
    torch.set_num_threads(a.threads)
    torch.manual_seed(r["seed"])
    return data, r, a


def spread_starts(n, length, count):
    """0-based starts of count blocks of length tokens spread evenly over n."""
    if n < length:
        return []
    if count == 1:
        return [0]
    return [(j * (n - length)) // (count - 1) for j in range(count)]


def lr_at(r, it):
    """nanoGPT's schedule at 0-based step it: warm-up, cosine, then min_lr."""
    decay = r["lr_decay_iters"]
    if it < r["warmup_iters"]:
        return r["lr"] * (it + 1) / (r["warmup_iters"] + 1)
    if it > decay:
        return r["min_lr"]
    ratio = (it - r["warmup_iters"]) / max(1, decay - r["warmup_iters"])
    return r["min_lr"] + 0.5 * (1 + math.cos(math.pi * ratio)) * (r["lr"] - r["min_lr"])


class LayerNorm(nn.Module):
    """LayerNorm with an optional bias (torch 1.13's has no bias=False)."""

    def __init__(self, n, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.bias = nn.Parameter(torch.zeros(n)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_attn = nn.Linear(c["n_embd"], 3 * c["n_embd"], bias=c["bias"])
        self.c_proj = nn.Linear(c["n_embd"], c["n_embd"], bias=c["bias"])
        self.attn_dropout = nn.Dropout(c["dropout"])
        self.resid_dropout = nn.Dropout(c["dropout"])
        self.n_head, self.n_embd = c["n_head"], c["n_embd"]

    def forward(self, x, kv=None, pos=0):
        B, T, C = x.shape
        nh = self.n_head
        hs = C // nh
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, nh, hs).transpose(1, 2)
        k = k.view(B, T, nh, hs).transpose(1, 2)
        v = v.view(B, T, nh, hs).transpose(1, 2)
        if kv is not None:
            kv[0][:, :, pos:pos + T] = k
            kv[1][:, :, pos:pos + T] = v
            k, v = kv[0][:, :, :pos + T], kv[1][:, :, :pos + T]
        p = self.attn_dropout.p if self.training else 0.0
        mask = None
        if T > 1 and pos > 0:  # query i (at position pos + i) sees keys 0 .. pos + i
            mask = torch.ones(T, pos + T, dtype=torch.bool, device=x.device).tril(pos)
        if HAVE_SDPA:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p,
                                               is_causal=T > 1 and pos == 0)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
            if T > 1:
                if mask is None:
                    mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
                att = att.masked_fill(~mask, float("-inf"))
            y = self.attn_dropout(F.softmax(att, dim=-1)) @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_fc = nn.Linear(c["n_embd"], 4 * c["n_embd"], bias=c["bias"])
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * c["n_embd"], c["n_embd"], bias=c["bias"])
        self.dropout = nn.Dropout(c["dropout"])

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln_1 = LayerNorm(c["n_embd"], c["bias"])
        self.attn = CausalSelfAttention(c)
        self.ln_2 = LayerNorm(c["n_embd"], c["bias"])
        self.mlp = MLP(c)

    def forward(self, x, kv=None, pos=0):
        x = x + self.attn(self.ln_1(x), kv, pos)
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab_size, block_size, n_layer, n_head, n_embd, dropout=0.0, bias=True):
        super().__init__()
        c = dict(vocab_size=vocab_size, block_size=block_size, n_layer=n_layer, n_head=n_head,
                 n_embd=n_embd, dropout=dropout, bias=bias)
        self.config = c
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab_size, n_embd),
            wpe=nn.Embedding(block_size, n_embd),
            drop=nn.Dropout(dropout),
            h=nn.ModuleList([Block(c) for _ in range(n_layer)]),
            ln_f=LayerNorm(n_embd, bias),
        ))
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying
        for name, m in self.named_modules():
            if isinstance(m, nn.Linear):
                std = 0.02 / math.sqrt(2 * n_layer) if name.endswith("c_proj") else 0.02
                nn.init.normal_(m.weight, 0.0, std)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Embedding):
                nn.init.normal_(m.weight, 0.0, 0.02)

    def new_cache(self, batch):
        c = self.config
        w = self.lm_head.weight
        shape = (batch, c["n_head"], c["block_size"], c["n_embd"] // c["n_head"])
        return {"layers": [(torch.zeros(shape, dtype=w.dtype), torch.zeros(shape, dtype=w.dtype))
                           for _ in range(c["n_layer"])], "len": 0}

    def forward(self, idx, targets=None, cache=None, last_only=False):
        B, T = idx.shape
        pos = cache["len"] if cache is not None else 0
        assert pos + T <= self.config["block_size"], "sequence longer than block_size"
        tr = self.transformer
        positions = torch.arange(pos, pos + T, dtype=torch.long, device=idx.device)
        x = tr.drop(tr.wte(idx) + tr.wpe(positions))
        for i, block in enumerate(tr.h):
            x = block(x, cache["layers"][i] if cache is not None else None, pos)
        if cache is not None:
            cache["len"] = pos + T
        x = tr.ln_f(x)
        if targets is not None:
            logits = self.lm_head(x)
            loss = F.cross_entropy(logits.view(B * T, -1), targets.reshape(B * T))
            return logits, loss
        if last_only:
            x = x[:, -1:, :]
        return self.lm_head(x), None

    def configure_optimizers(self, weight_decay, lr, betas):
        decay = [p for p in self.parameters() if p.dim() >= 2]
        no_decay = [p for p in self.parameters() if p.dim() < 2]
        groups = [{"params": decay, "weight_decay": weight_decay},
                  {"params": no_decay, "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=1e-8)
