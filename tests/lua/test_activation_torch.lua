-- test_activation_torch.lua - relu's kernels (dl._nn.relu_forward /
-- relu_backward) against PyTorch, bit-exact, in float32, float64 and
-- bfloat16; gelu (both forms) and silu through dl._F against
-- torch.nn.functional, values and input gradients to a dtype's rounding,
-- including the edge values (0, -0, +-large, +-inf, NaN) and rows long
-- enough for the vector kernels and their tails; the fused backwards of
-- gelu, silu, sigmoid and tanh also on strided views and in bfloat16 (the
-- file reruns itself with DLUA_CPU_VECMATH=avx2 and =0, so both vector
-- ISAs and the scalar loops meet the oracle).  Python draws the inputs and
-- computes torch's results.
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

# --- gelu (both forms) and silu: values and input gradients ------------------------------------
edge = [0.0, -0.0, 1.0, -1.0, 0.5, -0.75, 3.5, -3.5, 9.0, -9.0, 20.0, -20.0, 88.0, -88.0,
        1e6, -1e6, 1e30, -1e30, float("inf"), float("-inf"), float("nan"), 1e-30, -1e-30]
for dt in (torch.float32, torch.float64):
    for x in (torch.tensor(edge, dtype=dt), mk((5, 37), dt, 3.0), mk((3, 16), dt, 10.0)):
        for op, f in (("gelu", lambda t: F.gelu(t)),
                      ("gelu_tanh", lambda t: F.gelu(t, approximate="tanh")),
                      ("silu", F.silu), ("sigmoid", torch.sigmoid), ("tanh", torch.tanh)):
            xr = leaf(x)
            y = f(xr)
            g = mk(y.shape, dt)
            gx, = torch.autograd.grad(y, xr, g)
            add(op=op, x=x, y=y.detach(), g=g, gx=gx)
    # a strided view (the gathered path of the vector kernels)
    xb = mk((6, 9), dt, 4.0)
    for op, approx in (("gelu", "none"), ("gelu_tanh", "tanh")):
        add(op=op + "_T", x=xb, y=F.gelu(xb.t(), approximate=approx))
    add(op="silu_T", x=xb, y=F.silu(xb.t()))

# --- the fused backwards on strided views and in bfloat16 ----------------------------------------
ACTS = (("gelu", lambda t: F.gelu(t)), ("gelu_tanh", lambda t: F.gelu(t, approximate="tanh")),
        ("silu", F.silu), ("sigmoid", torch.sigmoid), ("tanh", torch.tanh))
for dt in (torch.float32, torch.float64, torch.bfloat16):
    x = mk((7, 45), dt, 4.0)
    for op, f in ACTS:
        xr = leaf(x)
        y = f(xr.t())  # the op reads a transposed view
        g = mk(y.shape, dt)
        gx, = torch.autograd.grad(y, xr, g)
        add(op=op + "_TG", x=x, y=y.detach(), g=g, gx=gx)
        if dt == torch.bfloat16:
            xr = leaf(x)
            y = f(xr)
            g = mk(y.shape, dt)
            gx, = torch.autograd.grad(y, xr, g)
            add(op=op, x=x, y=y.detach(), g=g, gx=gx)

emit(cases)
]==])

local F = dl._F
local act = {
  gelu = function(x) return F.gelu(x) end,
  gelu_tanh = function(x) return F.gelu(x, {approximate = "tanh"}) end,
  silu = function(x) return F.silu(x) end,
  sigmoid = function(x) return x:sigmoid() end,
  tanh = function(x) return x:tanh() end,
}

T.oracle_cases(data, T.torch_tol, {"relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh", "gelu_T",
  "gelu_tanh_T", "silu_T", "gelu_TG", "gelu_tanh_TG", "silu_TG", "sigmoid_TG", "tanh_TG"},
  function(c, rtol, atol, msg)
  if c.op == "relu" then
    local x = T.from_torch(c.x)
    local y = nn.relu_forward(x)
    T.match_torch(y, c.y, 0, 0, msg .. " forward")
    T.match_torch(nn.relu_backward(T.from_torch(c.g), y), c.gx, 0, 0, msg .. " backward")
  elseif act[c.op] then
    local x = T.from_torch(c.x):requires_grad_()
    local y = act[c.op](x)
    T.match_torch(y, c.y, rtol, atol, msg .. " forward")
    local gx = dl.autograd.grad(y, {x}, {grad_outputs = {T.from_torch(c.g)}})[1]
    T.match_torch(gx, c.gx, rtol, atol, msg .. " input gradient")
  elseif c.op:match("_TG$") then
    local x = T.from_torch(c.x):requires_grad_()
    local y = act[c.op:sub(1, -4)](x:t())
    T.match_torch(y, c.y, rtol, atol, msg .. " strided forward")
    local gx = dl.autograd.grad(y, {x}, {grad_outputs = {T.from_torch(c.g)}})[1]
    T.match_torch(gx, c.gx, rtol, atol, msg .. " strided input gradient")
  elseif c.op:match("_T$") then
    local x = T.from_torch(c.x):t()
    T.match_torch(act[c.op:sub(1, -3)](x), c.y, rtol, atol, msg .. " strided forward")
  else
    error("unknown case " .. c.op)
  end
end)

-- the same cases on AVX2 and on the scalar loops (child processes)
if os.getenv("DLUA_CPU_VECMATH") == nil then
  for _, mode in ipairs{"avx2", "0"} do
    T.case("the cases with DLUA_CPU_VECMATH=" .. mode, function()
      local ok, text = T.sh("DLUA_CPU_VECMATH=" .. mode .. " '" .. arg[-1] .. "' '" .. arg[0] .. "'")
      T.truthy(ok and text:match("(%d+) passed, 0 failed"), "with DLUA_CPU_VECMATH=" .. mode .. ":\n" .. text)
    end)
  end
end

T.done()
