"""bench_ops.py - PyTorch's twin of bench_ops.lua: the same single ops on the
same shapes, best of --runs after a warm-up, one line per op: "name ms".
The attention rows time the math path (baddbmm with a causal -inf bias,
softmax, bmm), the private F._scaled_dot_product_attention of 1.13 and the
public fused F.scaled_dot_product_attention of 2.x, whichever the version
has, and report the fastest.
--only a,b,c times just the named rows; --serve PIPE times the rows named
one per line on the named pipe PIPE as they come, until it closes (how
bench_ops.lua runs it: each op timed right after dlua's).
Usage: python3 scripts/bench_ops.py [--threads 2] [--runs 5] [--only sum,sum_dim] [--serve PIPE]"""
import argparse
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--threads", type=int, default=2)
p.add_argument("--runs", type=int, default=5)
p.add_argument("--only", default="")
p.add_argument("--serve", default="")
a = p.parse_args()
torch.set_num_threads(a.threads)
torch.manual_seed(0)

n = 10_000_000
x, y = torch.randn(n), torch.randn(n)
m = torch.randn(4096, 4096)
xg, gy = torch.randn(n).requires_grad_(), torch.randn(n)
xa = x.abs()
s3 = torch.randn(64, 256, 384)
s3h = s3.bfloat16()
mg, mgy = m.clone().requires_grad_(), torch.randn(4096)
mh = m.bfloat16()
l3, l3gy = torch.randn(64, 512, 128), torch.randn(64, 128)
l3g = l3.clone().requires_grad_()
mask = s3 > 0.5
parts = [torch.randn(1_000_000) for _ in range(4)]
rows = torch.randn(8192, 4096)
idx = torch.randint(0, 8192, (1000,))
ba, bb = torch.randn(96, 256, 64), torch.randn(96, 64, 256)
lx, lw, lb, lgy = torch.randn(4096, 768), torch.randn(768), torch.randn(768), torch.randn(4096, 768)
lxg, lwg, lbg = (t.clone().requires_grad_() for t in (lx, lw, lb))

eids, ew, egy = torch.randint(0, 30522, (32, 128)), torch.randn(30522, 768), torch.randn(32, 128, 768)
ewg = ew.clone().requires_grad_()


def layer_norm_fwd_bwd():
    with torch.enable_grad():
        y = torch.nn.functional.layer_norm(lxg, (768,), lwg, lbg)
        return torch.autograd.grad(y, (lxg, lwg, lbg), lgy)[0]


def embedding_fwd_bwd():
    with torch.enable_grad():
        return torch.autograd.grad(torch.nn.functional.embedding(eids, ewg), ewg, egy)[0]


aq, ak, av = (torch.randn(16, 6, 256, 64) for _ in range(3))
gq, gk, gv = (t.clone().requires_grad_() for t in (aq, ak, av))
agy = torch.randn(16, 6, 256, 64)
causal_bias = torch.full((256, 256), float("-inf")).triu(1)


def sdpa_bmm(q, k, v):
    qb, kb, vb = (t.reshape(96, 256, 64) for t in (q, k, v))
    w = torch.softmax(torch.baddbmm(causal_bias, qb, kb.transpose(1, 2), alpha=1 / 8), -1)
    return torch.bmm(w, vb).view(16, 6, 256, 64)


def sdpa_private(q, k, v):  # 1.13 only
    return torch.nn.functional._scaled_dot_product_attention(q, k, v, None, 0.0, False, True)[0]


def sdpa_public(q, k, v):  # 2.x: the fused kernel (flash attention on the CPU)
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


# the attention variants this version has
SDPA = [sdpa_bmm] + [f for f, name in ((sdpa_private, "_scaled_dot_product_attention"),
                                        (sdpa_public, "scaled_dot_product_attention"))
                     if hasattr(torch.nn.functional, name)]


def logsumexp_fwd_bwd(t=None, g=None):
    with torch.enable_grad():
        t, g = (mg, mgy) if t is None else (t, g)
        return torch.autograd.grad(t.logsumexp(1), t, g)[0]


def act_bwd(f):
    with torch.enable_grad():
        return torch.autograd.grad(f(xg), xg, gy)[0]


def fwd_bwd(f):
    with torch.enable_grad():
        out = f(gq, gk, gv)
        torch.autograd.grad(out, (gq, gk, gv), agy)
    return out


OPS = [
    ("add", lambda: x + y),
    ("exp", lambda: x.exp()),
    ("tanh", lambda: x.tanh()),
    ("erf", lambda: x.erf()),
    ("sigmoid", lambda: x.sigmoid()),
    ("pow", lambda: xa.pow(y)),
    ("gelu", lambda: torch.nn.functional.gelu(x)),
    ("silu", lambda: torch.nn.functional.silu(x)),
    ("gelu_bwd", lambda: act_bwd(torch.nn.functional.gelu)),
    ("gelu_tanh_bwd", lambda: act_bwd(lambda t: torch.nn.functional.gelu(t, approximate="tanh"))),
    ("silu_bwd", lambda: act_bwd(torch.nn.functional.silu)),
    ("sum", lambda: x.sum()),
    ("mean", lambda: x.mean()),
    ("sum_dim", lambda: m.sum(1)),
    ("sum_dim1", lambda: m.sum(0)),
    ("mean_dim", lambda: m.mean(1)),
    ("max_dim", lambda: m.max(1)),
    ("argmax", lambda: m.argmax(1)),
    ("amax", lambda: x.amax()),
    ("prod_dim", lambda: m.prod(1)),
    ("norm_dim", lambda: m.norm(2, 1)),
    ("logsumexp", lambda: m.logsumexp(1)),
    ("logsumexp_bwd", logsumexp_fwd_bwd),
    ("logsumexp_inner", lambda: l3.logsumexp(1)),
    ("logsumexp_inner_bwd", lambda: logsumexp_fwd_bwd(l3g, l3gy)),
    ("amax_bf16", lambda: mh.amax(1)),
    ("softmax", lambda: torch.softmax(s3, -1)),
    ("softmax_bf16", lambda: torch.softmax(s3h, -1)),
    ("log_softmax", lambda: torch.log_softmax(s3, -1)),
    ("transpose_copy", lambda: m.t().contiguous()),
    ("cat", lambda: torch.cat(parts, 0)),
    ("index_select", lambda: rows.index_select(0, idx)),
    ("masked_fill", lambda: s3.masked_fill(mask, 0.0)),
    ("bmm", lambda: torch.bmm(ba, bb)),
    ("layer_norm", lambda: torch.nn.functional.layer_norm(lx, (768,), lw, lb)),
    ("layer_norm_fwd_bwd", layer_norm_fwd_bwd),
    ("embedding", lambda: torch.nn.functional.embedding(eids, ew)),
    ("embedding_fwd_bwd", embedding_fwd_bwd),
    ("sdpa", [lambda f=f: f(aq, ak, av) for f in SDPA]),
    ("sdpa_fwd_bwd", [lambda f=f: fwd_bwd(f) for f in SDPA]),
]

def best_ms(fs):
    """the best of --runs after a warm-up; of the fastest variant"""
    best = float("inf")
    for f in fs if isinstance(fs, list) else [fs]:
        f()
        for _ in range(a.runs):
            t0 = time.perf_counter()
            f()
            best = min(best, time.perf_counter() - t0)
    return best * 1e3


with torch.no_grad():
    if a.serve:  # names from the pipe, one timing per name, until it closes
        table = dict(OPS)
        with open(a.serve) as cmds:
            while True:
                name = cmds.readline()
                if not name:
                    break
                name = name.strip()
                if name in table:
                    print(f"{name} {best_ms(table[name]):.3f}", flush=True)
                else:
                    print(f"{name} unknown", flush=True)
    else:
        only = set(a.only.split(",")) if a.only else None
        for name, fs in OPS:
            if only is None or name in only:
                print(f"{name} {best_ms(fs):.3f}", flush=True)
