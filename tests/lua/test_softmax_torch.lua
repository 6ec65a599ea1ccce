-- test_softmax_torch.lua - softmax and log_softmax kernels (dl._nn) against
-- PyTorch: forward values and gradients (torch.autograd.grad with a random
-- grad_output) over every dim, non-contiguous views (transposed, narrowed,
-- expanded), 0-dim and empty inputs, float32/float64/bfloat16/float16 (half
-- storage also on longer rows and inner-dim blocks; torch 1.13 lacks a CPU
-- float16 softmax, so its float32 result rounded stands in).
-- Python draws the inputs and computes torch's results; Lua rebuilds the
-- inputs (T.from_torch_view) and compares.
local T = require "testlib"
local nn = dl._nn

local data = T.torch([==[
import warnings
import torch.nn.functional as F

warnings.filterwarnings("ignore")

# --- softmax / log_softmax --------------------------------------------------------------
SM = [((5, 7), ""), ((5, 7), "T"), ((2, 3, 4, 5), ""), ((2, 3, 4, 6), "narrow"),
      ((1, 4, 6), "expand"), ((), ""), ((0, 3), "")]
# half storage: rows (last dim) and blocks of columns (inner dims, a partial block)
HALF = [((64, 384), ""), ((6, 100, 70), "")]


def half16(fn, x, d):
    # torch 1.13 has no float16 softmax on the CPU: float32 on the widened
    # input, rounded once (what its bfloat16 kernels do), and the backward
    # formulas in float32 from the rounded output
    y = getattr(F, fn)(x.float(), d).half()
    gy = mk(y.shape, torch.float16)
    g, yf = gy.float(), y.float()
    if fn == "softmax":
        gx = yf * (g - (g * yf).sum(d, keepdim=True))
    else:
        gx = g - yf.exp() * g.sum(d, keepdim=True)
    return y, gy, gx.half()


for dt in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
    shapes = SM + ([((3, 3000), ""), ((3000, 3), "T")] if dt == torch.float32 else [])
    shapes += HALF if dt in (torch.bfloat16, torch.float16) else []
    for shape, v in shapes:
        base = mk(shape, dt, 3.0)
        x = view(base, v)
        dims = range(max(x.dim(), 1))
        if x.numel() > 1000:
            dims = [x.dim() - 1, 0] + ([1] if x.dim() > 2 else [])
        for d in dims:
            for fn in ("softmax", "log_softmax"):
                if dt == torch.float16:
                    y, gy, gx = half16(fn, x, d)
                    add(op=fn, x=base, view=v, dim=d + 1, y=y, gy=gy, gx=gx)
                    continue
                xr = leaf(x)
                y = getattr(F, fn)(xr, d)
                gy = mk(y.shape, dt)
                try:
                    gx, = torch.autograd.grad(y, xr, gy)
                except RuntimeError:
                    gx = None
                add(op=fn, x=base, view=v, dim=d + 1, y=y, gy=gy, gx=gx)

emit(cases)
]==])

-- float16 within its rounding (T.torch_tol's "sum" row has float16)
local function tol(dt) return T.torch_tol(dt, dt == "float16" and "sum" or "op") end

T.oracle_cases(data, tol, {"softmax", "log_softmax"}, function(c, rtol, atol, msg)
  if c.op == "softmax" or c.op == "log_softmax" then
    local x = T.from_torch_view(c.x, c.view)
    T.match_torch(nn[c.op .. "_forward"](x, c.dim), c.y, rtol, atol, msg .. " forward")
    if c.gx then
      local gx = nn[c.op .. "_backward"](T.from_torch(c.gy), T.from_torch(c.y), c.dim)
      T.match_torch(gx, c.gx, rtol, atol, msg .. " backward")
    end
  else
    error("unknown case " .. c.op)
  end
end)

T.done()
