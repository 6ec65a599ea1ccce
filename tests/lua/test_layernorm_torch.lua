-- test_layernorm_torch.lua - layer norm and RMS norm against PyTorch:
-- dl._F.layer_norm / rms_norm forward and, through autograd with a random
-- grad_output, the gradients of input, weight and bias; the kernel pair
-- dl._nn.layer_norm_forward's mean and rstd against torch.native_layer_norm;
-- the modules nn.LayerNorm / nn.RMSNorm loaded with the same weights.
-- Shapes: 1-D, 2-D, 3-D and 4-D inputs, normalized_shape over one to three
-- dims, non-contiguous inputs (transposed, narrowed, expanded), affine or
-- not, with and without bias, rows longer than a vector and more rows than
-- the weight-gradient chunks, empty batches; float32, float64 and bfloat16
-- (whose reference is torch in float32 on the same values, rounded once).
-- torch 1.13 has no RMS norm: its reference is the float64 formula
-- x * rsqrt(mean(x^2) + eps) * w in torch ops (gradients by autograd).
local T = require "testlib"
local F = dl.nn.functional

local data = T.torch([==[
import torch.nn.functional as F

F64 = torch.float64

# shape of the base tensor, normalized_shape, view of the base (torch_oracle.view),
# which of weight/bias, eps (None: RMS norm's default), offset added to x
CFG = [((5, 7), (7,), "", "wb", 1e-5, 0.0),
       ((2, 3, 4), (4,), "", "wb", 1e-5, 0.0),
       ((2, 3, 4), (3, 4), "", "wb", 1e-5, 0.0),
       ((6,), (6,), "", "wb", 1e-5, 0.0),
       ((2, 3, 4, 5), (3, 4, 5), "", "w", 1e-3, 0.0),
       ((4, 6), (4,), "T", "wb", 1e-5, 0.0),
       ((3, 9), (7,), "narrow", "b", 1e-5, 0.0),
       ((1, 5, 8), (8,), "expand", "", 1e-5, 0.0),
       ((3, 3000), (3000,), "", "wb", 1e-5, 0.0),
       ((70, 33), (33,), "", "wb", 1e-5, 3.0),
       ((4, 40), (40,), "", "wb", None, 10.0),
       ((0, 4), (4,), "", "wb", 1e-5, 0.0)]

def ref_dtype(dt):
    return torch.float32 if dt == torch.bfloat16 else dt

for dt in (torch.float32, torch.float64, torch.bfloat16):
    for shape, ns, v, aff, eps, off in CFG:
        base = (torch.randn(shape, dtype=F64) * 2 + off).to(dt)
        w = (torch.rand(ns, dtype=F64) + 0.5).to(dt) if "w" in aff else None
        b = torch.randn(ns, dtype=F64).to(dt) if "b" in aff else None
        x = view(base, v)
        gy = torch.randn(x.shape, dtype=F64).to(dt)
        rt = ref_dtype(dt)
        # layer norm: torch in the reference dtype, rounded to dt
        lv = [leaf(t.to(rt)) if t is not None else None for t in (base, w, b)]
        e = 1e-5 if eps is None else eps
        y = F.layer_norm(view(lv[0], v), ns, lv[1], lv[2], e)
        wanted = [t for t in lv if t is not None]
        g = list(torch.autograd.grad(y, wanted, gy.to(rt))) if y.numel() > 0 else [None] * 3
        gx, gw, gb = g[0], (g[1] if w is not None else None), None
        if b is not None:
            gb = g[-1]
        _, mean, rstd = torch.native_layer_norm(x.to(rt), ns, None, None, e)
        r = lambda t: t.to(dt) if t is not None else None
        add(op="layer_norm", x=base, view=v, ns=list(ns), w=w, b=b, eps=e, gy=gy, y=r(y),
            gx=r(gx), gw=r(gw), gb=r(gb), mean=mean.to(rt), rstd=rstd.to(rt))
        # RMS norm: the float64 formula
        if eps is None:
            re, use_default = torch.finfo(F64 if dt == F64 else torch.float32).eps, True
        else:
            re, use_default = eps, False
        lv = [leaf(t.to(F64)) if t is not None else None for t in (base, w)]
        xv = view(lv[0], v)
        dims = tuple(range(-len(ns), 0))
        y = xv * torch.rsqrt(xv.pow(2).mean(dims, keepdim=True) + re)
        if w is not None:
            y = y * lv[1]
        wanted = [t for t in lv if t is not None]
        g = list(torch.autograd.grad(y, wanted, gy.to(F64))) if y.numel() > 0 else [None] * 2
        add(op="rms_norm", x=base, view=v, ns=list(ns), w=w, eps="default" if use_default else re,
            gy=gy, y=r(y), gx=r(g[0]), gw=r(g[1]) if w is not None else None)
emit(cases)
]==])

-- Runs the functional op with autograd on leaves rebuilt from the record;
-- returns y and the gradients of the base input, weight and bias.
local function run(c)
  local base = T.from_torch(c.x):requires_grad_()
  local x = T.torch_view(base, c.view)
  local w = c.w and T.from_torch(c.w):requires_grad_() or nil
  local b = c.b and T.from_torch(c.b):requires_grad_() or nil
  local y
  if c.op == "layer_norm" then
    y = F.layer_norm(x, c.ns, w, b, c.eps)
  else
    y = F.rms_norm(x, c.ns, w, c.eps ~= "default" and c.eps or nil)
  end
  if y:numel() == 0 then return y end
  local wanted = {base}
  if w then wanted[#wanted + 1] = w end
  if b then wanted[#wanted + 1] = b end
  local g = dl.autograd.grad(y, wanted, {grad_outputs = T.from_torch(c.gy)})
  return y, g[1], w and g[2] or nil, b and g[#g] or nil
end

-- one op's rounding (T.torch_tol) for outputs, statistics and input
-- gradients; the weight gradients, sums over the rows, as long sums
T.oracle_cases(data, T.torch_tol, {"layer_norm", "rms_norm"}, function(c, rtol, atol, msg)
    local y, gx, gw, gb = run(c)
    T.match_torch(y, c.y, rtol, atol, msg .. " forward")
    if c.gx then T.match_torch(gx, c.gx, rtol, atol, msg .. " grad input") end
    local srtol, satol = T.torch_tol(c.y.dtype, "sum")
    if c.gw then T.match_torch(gw, c.gw, srtol, satol, msg .. " grad weight") end
    if c.gb then T.match_torch(gb, c.gb, srtol, satol, msg .. " grad bias") end
    if c.op == "layer_norm" then
      -- the kernel's saved statistics, as native_layer_norm's
      local x = T.from_torch_view(c.x, c.view)
      local _, mean, rstd = dl._nn.layer_norm_forward(x, c.ns, nil, nil, {eps = c.eps})
      T.match_torch(mean, c.mean, rtol, atol, msg .. " mean")
      T.match_torch(rstd, c.rstd, rtol, atol, msg .. " rstd")
    end
  end)

-- --- modules with PyTorch's weights ----------------------------------------------

local mod = T.torch([==[
m = torch.nn.LayerNorm((3, 4), eps=1e-6)
with torch.no_grad():
    m.weight.uniform_(0.5, 1.5)
    m.bias.normal_()
x = torch.randn(2, 5, 3, 4, requires_grad=True)
y = m(x)
gy = torch.randn(y.shape)
y.backward(gy)
emit(dict(sd={k: v for k, v in m.state_dict().items()}, repr=repr(m), x=x.detach(), gy=gy,
          y=y.detach(), gx=x.grad, gw=m.weight.grad, gb=m.bias.grad))
]==])

T.case("nn.LayerNorm with torch's state_dict: outputs and gradients", function()
  local m = dl.nn.LayerNorm({3, 4}, {eps = 1e-6})
  local sd = {}
  for k, v in pairs(mod.sd) do sd[k] = T.from_torch(v) end
  m:load_state_dict(sd)
  T.eq(tostring(m), mod.repr, "repr")
  local x = T.from_torch(mod.x):requires_grad_()
  local y = m(x)
  y:backward(T.from_torch(mod.gy))
  local rtol, atol = T.torch_tol("float32", "sum")
  T.match_torch(y, mod.y, rtol, atol, "forward")
  T.match_torch(x.grad, mod.gx, rtol, atol, "grad input")
  T.match_torch(m.weight.grad, mod.gw, rtol, atol, "grad weight")
  T.match_torch(m.bias.grad, mod.gb, rtol, atol, "grad bias")
end)

T.done()
