# torch_oracle.py - prelude for tests that compare dlua with PyTorch.
# A Lua test sends a Python snippet; the snippet calls emit(value) and this
# module prints the value as a Lua literal the test loads.  Tensors become
# {shape={...}, dtype="float32", data={...flat row-major values...}}.
import math
import sys

import torch

torch.manual_seed(0)
torch.set_num_threads(1)

_DT = {
    torch.float32: "float32", torch.float64: "float64", torch.float16: "float16",
    torch.bfloat16: "bfloat16", torch.int64: "int64", torch.int32: "int32",
    torch.uint8: "uint8", torch.bool: "bool",
}


def _num(x):
    if isinstance(x, bool):
        return "true" if x else "false"
    if isinstance(x, int):
        return str(x)
    x = float(x)
    if math.isnan(x):
        return "(0/0)"
    if math.isinf(x):
        return "(1/0)" if x > 0 else "(-1/0)"
    return repr(x)


def lua(v):
    if isinstance(v, torch.Tensor):
        t = v.detach().cpu().contiguous()
        if t.dtype in (torch.float16, torch.bfloat16):
            flat = t.float().reshape(-1).tolist()
        else:
            flat = t.reshape(-1).tolist()
        return "{shape={%s},dtype=%s,data={%s}}" % (
            ",".join(str(s) for s in t.shape), '"%s"' % _DT[t.dtype], ",".join(_num(x) for x in flat))
    if isinstance(v, dict):
        return "{" + ",".join("[%s]=%s" % (lua(k), lua(x)) for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "{" + ",".join(lua(x) for x in v) + "}"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    if v is None:
        return "nil"
    return _num(v)


def emit(v):
    sys.stdout.write("return " + lua(v) + "\n")


# --- helpers for case lists ------------------------------------------------------------
# A snippet builds `cases` with add(...) and emits it; mk draws float64
# normals (times scale) converted to dt; view(b, v) is the non-contiguous view
# the Lua side rebuilds with T.from_torch_view(rec, v); leaf is a fresh leaf;
# lua_dim turns dims 1-based.
cases = []


def add(**kw):
    cases.append(kw)


def mk(shape, dt, scale=1.0):
    return (torch.randn(shape, dtype=torch.float64) * scale).to(dt)


def view(b, v):
    if v == "T":
        return b.transpose(0, -1)
    if v == "narrow":
        return b.narrow(-1, 1, b.shape[-1] - 2)
    if v == "perm":
        return b.permute(2, 0, 1)
    if v == "expand":
        return b.expand(3, *b.shape[1:])
    return b


def lua_dim(d):
    # a 0-based dim (or list of them) as the Lua API's 1-based one
    if d is None:
        return None
    if isinstance(d, (list, tuple)):
        return [lua_dim(e) for e in d]
    return d + 1 if d >= 0 else d


def leaf(t):
    return t.detach().requires_grad_(True)

