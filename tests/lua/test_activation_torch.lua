-- test_activation_torch.lua - relu's kernels (dl._nn.relu_forward /
-- relu_backward) against PyTorch, bit-exact, in float32, float64 and
-- bfloat16.  Python draws the inputs and computes torch's results.
local T = require "testlib"
local nn = dl._nn

local data = T.torch([==[
import warnings
import torch.nn.functional as F

warnings.filterwarnings("ignore")

# --- relu backward ------------------------------------------------------------------------------
for dt in (torch.float32, torch.float64, torch.bfloat16):
    x = mk((4, 6), dt)
    xr = leaf(x)
    y = torch.relu(xr)
    g = mk(y.shape, dt)
    gx, = torch.autograd.grad(y, xr, g)
    add(op="relu", x=x, y=y, g=g, gx=gx)

emit(cases)
]==])

T.oracle_cases(data, T.torch_tol, {"relu"}, function(c, rtol, atol, msg)
  if c.op == "relu" then
    local x = T.from_torch(c.x)
    local y = nn.relu_forward(x)
    T.match_torch(y, c.y, 0, 0, msg .. " forward")
    T.match_torch(nn.relu_backward(T.from_torch(c.g), y), c.gx, 0, 0, msg .. " backward")
  else
    error("unknown case " .. c.op)
  end
end)

T.done()
