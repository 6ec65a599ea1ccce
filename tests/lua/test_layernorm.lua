-- test_layernorm.lua - layer norm and RMS norm (the layernorm family) on
-- known small values: the kernels dl._nn.layer_norm_forward/backward and
-- rms_norm_forward/backward, dl.nn.functional's layer_norm/rms_norm, the
-- modules nn.LayerNorm/nn.RMSNorm (parameters, state_dict keys, printing,
-- options); RMS norm's default eps per dtype; empty inputs; float16/bfloat16
-- data with float32 parameters; results independent of the thread count;
-- and bad input: each a clear error naming the op, the process healthy
-- after it.  (test_layernorm_torch.lua compares with PyTorch,
-- test_layernorm_grad.lua checks gradients by finite differences.)
local T = require "testlib"
local nn, F = dl._nn, dl.nn.functional

local F32, F64 = dl.float32, dl.float64

-- --- known values --------------------------------------------------------------------

T.case("layer_norm: statistics, output and gradients on known values", function()
  for _, dt in ipairs({F32, F64}) do
    local x = dl.tensor({{1, 2, 3, 4}, {2, 2, 2, 2}}, {dtype = dt})
    local y, mean, rstd = nn.layer_norm_forward(x, 4, nil, nil, {eps = 0.75})
    -- row 1: mean 2.5, biased variance 1.25 -> rstd 1/sqrt(2); row 2: variance 0
    local r1, r2 = 1 / math.sqrt(2), 1 / math.sqrt(0.75)
    T.tensor_eq(mean, {{2.5}, {2}})
    T.tensor_eq(rstd, {{r1}, {r2}}, 1e-6)
    T.tensor_eq(y, {{-1.5 * r1, -0.5 * r1, 0.5 * r1, 1.5 * r1}, {0, 0, 0, 0}}, 1e-6)
    local w, b = dl.tensor({1, 2, 3, 4}, {dtype = dt}), dl.tensor({0, 1, 0, -1}, {dtype = dt})
    local yw = nn.layer_norm_forward(x, {4}, w, b, {eps = 0.75})
    T.tensor_eq(yw, {{-1.5 * r1, -r1 + 1, 1.5 * r1, 6 * r1 - 1}, {0, 1, 0, -1}}, 1e-6)
    -- gy = ones: gx = 0 without a weight (a constant shift is normalised
    -- away); gw = sum of xhat, gb = number of rows
    local gx, gw, gb = nn.layer_norm_backward(dl.ones_like(x), x, mean, rstd, nil, 4)
    T.tensor_eq(gx, {{0, 0, 0, 0}, {0, 0, 0, 0}}, 1e-6)
    T.tensor_eq(gw, {-1.5 * r1, -0.5 * r1, 0.5 * r1, 1.5 * r1}, 1e-6)
    T.tensor_eq(gb, {2, 2, 2, 2})
    -- with the weight, gy = ones is g = w: gx = rstd * (w - mean(w) - xhat * mean(w * xhat))
    gx = nn.layer_norm_backward(dl.ones_like(x), x, mean, rstd, w, 4)
    local xh = {-1.5 * r1, -0.5 * r1, 0.5 * r1, 1.5 * r1}
    local mwx = (xh[1] + 2 * xh[2] + 3 * xh[3] + 4 * xh[4]) / 4
    local want = {{}, {}}
    for i = 1, 4 do
      want[1][i] = r1 * (i - 2.5 - xh[i] * mwx)
      want[2][i] = r2 * (i - 2.5)
    end
    T.tensor_eq(gx, want, 1e-6)
    -- need: only what is asked for
    local a, c, d = nn.layer_norm_backward(x, x, mean, rstd, w, 4, {need = {false, true, false}})
    T.truthy(a == nil and d == nil and dl.is_tensor(c), "need {false, true, false}")
  end
end)

T.case("rms_norm: output and gradients on known values", function()
  for _, dt in ipairs({F32, F64}) do
    local x = dl.tensor({{3, 4}, {0, 0}}, {dtype = dt})
    local y, rstd = nn.rms_norm_forward(x, 2, nil, {eps = 0.5})
    local r = 1 / math.sqrt(12.5 + 0.5)
    T.tensor_eq(rstd, {{r}, {1 / math.sqrt(0.5)}}, 1e-6)
    T.tensor_eq(y, {{3 * r, 4 * r}, {0, 0}}, 1e-6)
    local w = dl.tensor({2, -1}, {dtype = dt})
    T.tensor_eq(F.rms_norm(x, {2}, w, 0.5), {{6 * r, -4 * r}, {0, 0}}, 1e-6)
    -- gx = rstd * (g - xhat * mean(g * xhat)), g = gy * w; gw = sum of gy * xhat
    local gy = dl.tensor({{1, 1}, {1, 1}}, {dtype = dt})
    local gx, gw = nn.rms_norm_backward(gy, x, rstd, w, 2)
    local xh1, xh2 = 3 * r, 4 * r
    local m = (2 * xh1 - xh2) / 2
    T.tensor_eq(gx, {{r * (2 - xh1 * m), r * (-1 - xh2 * m)}, {2 / math.sqrt(0.5), -1 / math.sqrt(0.5)}},
      1e-6)
    T.tensor_eq(gw, {xh1, xh2}, 1e-6)
  end
end)

T.case("rms_norm: eps defaults to the machine epsilon of the compute dtype", function()
  local x = dl.full({1, 2}, 1e-4)
  local _, r32 = nn.rms_norm_forward(x, 2)
  T.near(r32[1][1]:item(), 1 / math.sqrt(1e-8 + 2 ^ -23), 1e-6, "float32")
  local x64 = x:double()
  local _, r64 = nn.rms_norm_forward(x64, 2)
  T.near(r64[1][1]:item(), 1 / math.sqrt(x64[1][1]:item() ^ 2 + 2 ^ -52), 1e-12, "float64")
  local _, rb = nn.rms_norm_forward(x:to(dl.bfloat16), 2)
  T.near(rb[1][1]:item(), 1 / math.sqrt(x:to(dl.bfloat16)[1][1]:item() ^ 2 + 2 ^ -23), 1e-6,
    "bfloat16 computes in float32")
  T.tensor_eq(F.rms_norm(x, 2), F.rms_norm(x, 2, nil, 2 ^ -23), 0, "F.rms_norm eps nil")
end)

-- --- shapes and dtypes --------------------------------------------------------------------

T.case("layer_norm, rms_norm: float32 rows whose float sums would overflow", function()
  -- |x| = 2e19 over 64 elements: the squares overflow float, so the kernel
  -- takes its moments in double; the float64 op is the reference
  local v = {}
  for i = 1, 64 do v[i] = i % 2 == 0 and 2e19 or -2e19 end
  local x = dl.tensor({v}, {dtype = F32})
  local y, mean, rstd = nn.layer_norm_forward(x, 64, nil, nil, {eps = 1e-5})
  T.near(mean[1][1]:item(), 0, 1e-6, "mean")
  T.near(rstd[1][1]:item() * 2e19, 1, 1e-6, "rstd")
  T.tensor_eq(y:narrow(2, 1, 4), {{-1, 1, -1, 1}}, 1e-6)
  local r = F.rms_norm(x, 64)
  T.close(r, F.rms_norm(x:double(), 64):float(), 1e-6, 1e-7)
end)

T.case("layer_norm: float32 rows far from 0 against their spread (mean 1e4, std 1)", function()
  -- one unshifted pass would lose the variance to cancellation (s2/D and
  -- mean^2 both ~1e8); the kernel sums such rows again around their mean.
  -- Reference: the float64 kernel on the same float32 values.
  local x = (T.randn(4, 256, {seed = 4}) + 1e4):float()
  local _, mean, rstd = nn.layer_norm_forward(x, 256, nil, nil, {eps = 1e-5})
  local _, mean64, rstd64 = nn.layer_norm_forward(x:double(), 256, nil, nil, {eps = 1e-5})
  T.close(mean, mean64:float(), 1e-7, 0)
  T.close(rstd, rstd64:float(), 1e-6, 0)
end)

T.case("layer_norm: normalized_shape over several dims is one row of their product", function()
  local x = T.randn(2, 3, 4, {seed = 1})
  local w, b = T.randn(3, 4, {seed = 2}), T.randn(3, 4, {seed = 3})
  local y = F.layer_norm(x, {3, 4}, w, b)
  local flat = F.layer_norm(x:reshape(2, 12), 12, w:reshape(12), b:reshape(12))
  T.close(y:reshape(2, 12), flat, 1e-6, 1e-7)
  local _, mean = nn.layer_norm_forward(x, {3, 4})
  T.shape_eq(mean, {2, 1, 1})
  -- a 1-D input is one row
  local v = dl.tensor({1.0, 2.0, 3.0})
  T.tensor_eq(F.layer_norm(v, 3, nil, nil, 0), {-math.sqrt(1.5), 0, math.sqrt(1.5)}, 1e-6)
end)

T.case("layer_norm, rms_norm: empty inputs", function()
  local y, mean, rstd = nn.layer_norm_forward(dl.zeros(0, 4), 4)
  T.shape_eq(y, {0, 4})
  T.shape_eq(mean, {0, 1})
  T.shape_eq(rstd, {0, 1})
  -- empty rows: mean 0 and rstd NaN, as PyTorch
  y, mean, rstd = nn.layer_norm_forward(dl.zeros(3, 0), 0)
  T.shape_eq(y, {3, 0})
  T.tensor_eq(mean, {{0}, {0}, {0}})
  T.truthy(rstd:isnan():all():item(), "rstd of empty rows is NaN")
  local x = dl.zeros(0, 4):requires_grad_()
  local w = dl.ones(4):requires_grad_()
  F.rms_norm(x, 4, w):sum():backward()
  T.tensor_eq(w.grad, {0, 0, 0, 0})
  T.shape_eq(x.grad, {0, 4})
end)

T.case("layer_norm, rms_norm: half data with float32 or half parameters", function()
  local x32 = T.randn(5, 16, {seed = 4})
  local w, b = T.randn(16, {seed = 5}), T.randn(16, {seed = 6})
  for _, hdt in ipairs({dl.float16, dl.bfloat16}) do
    local x = x32:to(hdt)
    local want = F.layer_norm(x:float(), 16, w, b):to(hdt)
    local got = F.layer_norm(x, 16, w, b)
    T.eq(got.dtype, hdt, "dtype")
    T.same_bits(got, want, tostring(hdt) .. " layer_norm rounds once")
    T.same_bits(F.layer_norm(x, 16, w:to(hdt), b:to(hdt)),
      F.layer_norm(x:float(), 16, w:to(hdt):float(), b:to(hdt):float()):to(hdt), "half weights")
    T.same_bits(F.rms_norm(x, 16, w), F.rms_norm(x:float(), 16, w):to(hdt), tostring(hdt) .. " rms_norm")
    -- gradients: x's dtype for x, the parameters' for theirs
    local xl, wl, bl = x:clone():requires_grad_(), w:clone():requires_grad_(), b:to(hdt):requires_grad_()
    F.layer_norm(xl, 16, wl, bl):sum():backward()
    T.eq(xl.grad.dtype, hdt, "grad x dtype")
    T.eq(wl.grad.dtype, F32, "grad weight dtype")
    T.eq(bl.grad.dtype, hdt, "grad bias dtype")
  end
end)

T.case("layer_norm, rms_norm: results do not depend on the thread count", function()
  local x = T.randn(300, 257, {seed = 7})
  local w, b = T.randn(257, {seed = 8}), T.randn(257, {seed = 9})
  local gy = T.randn(300, 257, {seed = 10})
  local function run()
    local out = {}
    for _, rms in ipairs({false, true}) do
      local y, mean, rstd
      if rms then
        y, rstd = nn.rms_norm_forward(x, 257, w)
      else
        y, mean, rstd = nn.layer_norm_forward(x, 257, w, b)
      end
      local gx, gw, gb
      if rms then
        gx, gw = nn.rms_norm_backward(gy, x, rstd, w, 257)
      else
        gx, gw, gb = nn.layer_norm_backward(gy, x, mean, rstd, w, 257)
      end
      out[#out + 1] = {y, rstd, gx, gw, gb or gw}
    end
    return out
  end
  T.same_across_threads(run, {1, 3}, "layer_norm/rms_norm")
end)

-- --- modules ------------------------------------------------------------------------

T.case("nn.LayerNorm, nn.RMSNorm: parameters, state_dict keys, printing", function()
  local m = dl.nn.LayerNorm({3, 4})
  T.eq(tostring(m), "LayerNorm((3, 4), eps=1e-05, elementwise_affine=True)")
  T.tensor_eq(m.weight, dl.ones(3, 4))
  T.tensor_eq(m.bias, dl.zeros(3, 4))
  local keys = {}
  for k in pairs(m:state_dict()) do keys[#keys + 1] = k end
  table.sort(keys)
  T.eq(table.concat(keys, ","), "bias,weight")
  local nb = dl.nn.LayerNorm(8, {bias = false, eps = 1e-6})
  T.eq(tostring(nb), "LayerNorm((8,), eps=1e-06, elementwise_affine=True)")
  T.truthy(nb.bias == nil and nb.weight ~= nil, "bias=false")
  local na = dl.nn.LayerNorm(8, {elementwise_affine = false})
  T.eq(#na:parameters(), 0, "elementwise_affine=false has no parameters")
  local x = T.randn(2, 8, {seed = 11})
  T.tensor_eq(na(x), F.layer_norm(x, 8), 0)
  local r = dl.nn.RMSNorm(8)
  T.eq(tostring(r), "RMSNorm((8,), eps=None, elementwise_affine=True)")
  T.eq(tostring(dl.nn.RMSNorm({2, 4}, {eps = 1e-6, elementwise_affine = false})),
    "RMSNorm((2, 4), eps=1e-06, elementwise_affine=False)")
  keys = {}
  for k in pairs(r:state_dict()) do keys[#keys + 1] = k end
  T.eq(table.concat(keys, ","), "weight")
  T.tensor_eq(r(x), F.rms_norm(x, 8, r.weight), 0)
  local f64 = dl.nn.LayerNorm(4, {dtype = F64})
  T.eq(f64.weight.dtype, F64, "dtype option")
end)

-- --- bad input ---------------------------------------------------------------------

T.case("layer_norm, rms_norm: bad input raises clear errors", function()
  local x = dl.randn(2, 3)
  T.raises(function() F.layer_norm(x, 4) end,
    "layer_norm: normalized_shape is [4], expected input of shape [*, 4], got [2, 3]")
  T.raises(function() F.layer_norm(x, {2, 2}) end, "layer_norm: normalized_shape is [2, 2]")
  T.raises(function() F.layer_norm(dl.tensor(1.0), 1) end, "expected input of shape [*, 1], got []")
  T.raises(function() F.layer_norm(x, {}) end, "layer_norm: normalized_shape must have 1 to")
  T.raises(function() F.layer_norm(x, "3") end, "layer_norm: normalized_shape must be an integer")
  T.raises(function() F.layer_norm(x, {3.5}) end, "layer_norm: normalized_shape[1] must be an integer")
  T.raises(function() F.layer_norm(x, {-3}) end, "layer_norm: normalized_shape has a negative size")
  T.raises(function() F.layer_norm(x, 3, dl.ones(4)) end,
    "layer_norm: weight must have shape [3] (normalized_shape), got [4]")
  T.raises(function() F.layer_norm(x, 3, nil, dl.ones(1, 3)) end, "layer_norm: bias must have shape [3]")
  T.raises(function() F.layer_norm(x, 3, dl.ones(3, {dtype = F64})) end,
    "layer_norm: weight (float64) must have the input's dtype (float32)")
  T.raises(function() F.layer_norm(x:half(), 3, dl.ones(3, {dtype = F64})) end,
    "layer_norm: weight (float64) must have the input's dtype (float16) or float32")
  T.raises(function() F.layer_norm(dl.ones(2, 3, {dtype = dl.int64}), 3) end,
    "layer_norm: input must be a floating-point tensor, got int64")
  T.raises(function() F.layer_norm(x, 3, nil, nil, -1) end, "layer_norm: eps must be non-negative")
  T.raises(function() F.layer_norm(x, 3, nil, nil, "a") end, "layer_norm: eps must be a number")
  T.raises(function() F.layer_norm(x, 3, 5) end, "")
  T.raises(function() F.rms_norm(x, 3, nil, 1e-5, 1) end, "rms_norm: unexpected argument 5")
  T.raises(function() F.rms_norm(x, 2) end, "rms_norm: normalized_shape is [2]")
  T.raises(function() nn.layer_norm_forward(x, 3, nil, nil, {epsilon = 1}) end,
    "layer_norm: unknown option 'epsilon'")
  local y, mean, rstd = nn.layer_norm_forward(x, 3)
  T.raises(function() nn.layer_norm_backward(dl.ones(2, 4), x, mean, rstd, nil, 3) end,
    "layer_norm_backward: normalized_shape is [3], expected grad_output of shape [*, 3], got [2, 4]")
  T.raises(function() nn.layer_norm_backward(dl.ones(1, 3), x, mean, rstd, nil, 3) end,
    "layer_norm_backward: grad_output has shape [1, 3], expected the input's [2, 3]")
  T.raises(function() nn.layer_norm_backward(dl.ones(2, 3), x, mean:reshape(-1):narrow(1, 1, 1), rstd, nil, 3) end,
    "layer_norm_backward: mean has 1 elements (shape [1]), expected one per row: 2")
  T.raises(function() nn.layer_norm_backward(dl.ones(2, 3), x, mean, rstd, nil, 3, {need = 1}) end,
    "layer_norm_backward: need must be a table of 3 booleans")
  -- modules
  T.raises(function() dl.nn.LayerNorm(4, {affine = true}) end, "LayerNorm: unknown option 'affine'")
  T.raises(function() dl.nn.LayerNorm({}) end, "LayerNorm: normalized_shape must be an integer or a non-empty")
  T.raises(function() dl.nn.LayerNorm(4, {bias = 1}) end, "LayerNorm: bias must be a boolean")
  T.raises(function() dl.nn.RMSNorm(4, {eps = "small"}) end, "RMSNorm: eps must be a number")
  T.raises(function() dl.nn.RMSNorm(4)(dl.randn(2, 5)) end, "rms_norm: normalized_shape is [4]")
  T.raises(function() dl.nn.LayerNorm(4)("x") end, "LayerNorm: input must be a tensor")
  -- a weight changed in place after the forward cannot be used by the backward
  local w = dl.ones(3):requires_grad_()
  local out = F.layer_norm(x, 3, w)
  dl.no_grad(function() w:mul_(2) end)
  T.raises(function() out:sum():backward() end, "modified by an in-place operation")
  -- the process is healthy afterwards
  T.tensor_eq(F.layer_norm(dl.tensor({{1.0, 3.0}}), 2, nil, nil, 0), {{-1, 1}}, 1e-6)
end)

T.done()
