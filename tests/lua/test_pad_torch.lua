-- test_pad_torch.lua - pad's kernels (dl._nn.pad_forward / pad_backward)
-- against PyTorch in every mode (constant, reflect, replicate, circular) with
-- negative pads, 1 to 3 padded dims, non-contiguous views, float32/float64
-- and an integer tensor.  Python draws the inputs and computes torch's
-- results; Lua rebuilds the inputs (T.from_torch_view) and compares.
local T = require "testlib"
local nn = dl._nn

local data = T.torch([==[
import warnings
import torch.nn.functional as F

warnings.filterwarnings("ignore")

# --- pad ----------------------------------------------------------------------------------------
PADS = [
    ("constant", (2, 3, 4), (1, 2), ""), ("constant", (2, 3, 4), (1, -1, 2, 0), "T"),
    ("constant", (2, 3, 4, 5), (-1, 2, 0, 1, 1, 1, 0, 1), ""), ("constant", (2, 3), (2, 2, 1, 1), ""),
    ("reflect", (2, 3, 5), (2, 3), ""), ("reflect", (3, 6), (2, -2), ""),
    ("reflect", (1, 2, 4, 5), (1, 2, 3, -1), ""), ("reflect", (1, 2, 3, 4, 5), (1, 1, 2, 0, 1, 2), ""),
    ("reflect", (2, 5, 6), (1, 0, 2, 2), "T"),
    ("replicate", (2, 3, 5), (2, 3), ""), ("replicate", (1, 2, 4, 5), (-1, 2, 3, 1), ""),
    ("replicate", (1, 2, 3, 4, 5), (1, 1, 2, 0, 1, 2), ""), ("replicate", (4, 3, 5), (2, 2), "narrow"),
    ("circular", (2, 3, 5), (2, 3), ""), ("circular", (1, 2, 4, 5), (1, 2, 3, 1), ""),
    ("circular", (1, 2, 3, 4, 5), (1, 1, 2, 0, 1, 2), ""),
]
for dt in (torch.float32, torch.float64):
    for mode, shape, pads, v in PADS:
        base = mk(shape, dt)
        xr = leaf(view(base, v))
        kw = {"value": 0.5} if mode == "constant" else {}
        y = F.pad(xr, pads, mode=mode, **kw)
        g = mk(y.shape, dt)
        gx, = torch.autograd.grad(y, xr, g)
        add(op="pad", x=base, view=v, mode=mode, pads=list(pads), y=y, g=g, gx=gx)
xi = torch.randint(-9, 9, (2, 3, 5))
add(op="pad_int", x=xi, mode="reflect", pads=[2, 1], y=F.pad(xi.double(), (2, 1), mode="reflect").long())

emit(cases)
]==])

T.oracle_cases(data, T.torch_tol, {"pad", "pad_int"}, function(c, rtol, atol, msg)
  if c.op == "pad" then
    local x = T.from_torch_view(c.x, c.view)
    T.match_torch(nn.pad_forward(x, c.pads, c.mode, 0.5), c.y, 0, 0, msg .. " forward")
    local gx = nn.pad_backward(T.from_torch(c.g), x.shape, c.pads, {mode = c.mode})
    T.match_torch(gx, c.gx, rtol, atol, msg .. " backward")
  elseif c.op == "pad_int" then
    T.match_torch(nn.pad_forward(T.from_torch(c.x), c.pads, c.mode), c.y, 0, 0, msg)
  else
    error("unknown case " .. c.op)
  end
end)

T.done()
