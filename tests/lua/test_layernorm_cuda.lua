-- test_layernorm_cuda.lua - layer norm and RMS norm on CUDA against the CPU:
-- short rows (a warp each) and long rows (a block each), normalized_shape
-- over two dims, with and without weight and bias, float32 and float64,
-- float16/bfloat16 data with float32 or half parameters, the saved
-- statistics, every gradient (input, weight, bias; the weight gradients'
-- chunked column sums), and autocast (half input computed in float32).
-- Skipped (exit 77) without a GPU.
local T = require "testlib"
T.require_cuda()
local F, nn = dl.nn.functional, dl._nn

local SHAPES = {
  -- x shape, normalized_shape
  {{6, 40}, {40}},
  {{3, 5, 1024}, {1024}},
  {{4, 3000}, {3000}},
  {{2, 3, 4, 8}, {4, 8}},
  {{700, 33}, {33}},
}

local function leaves(dev, shape, ns, dt, pdt, seed)
  local x = T.randn(shape, {seed = seed}):to(dt):to(dev):requires_grad_()
  local w = (T.randn(ns, {seed = seed + 1}) * 0.5 + 1):to(pdt):to(dev):requires_grad_()
  local b = T.randn(ns, {seed = seed + 2}):to(pdt):to(dev):requires_grad_()
  local gy = T.randn(shape, {seed = seed + 3}):to(dt):to(dev)
  return x, w, b, gy
end

for _, dt in ipairs({dl.float32, dl.float64}) do
  for i, c in ipairs(SHAPES) do
    T.cuda_case(string.format("layer_norm, rms_norm forward and backward %s #%d", tostring(dt), i), function(dev)
      local out = {}
      for _, affine in ipairs({true, false}) do
        local x, w, b, gy = leaves(dev, c[1], c[2], dt, dt, 10 * i)
        if not affine then w, b = nil, nil end
        local y = F.layer_norm(x, c[2], w, b)
        local wanted = affine and {x, w, b} or {x}
        out[#out + 1] = {y, dl.autograd.grad(y, wanted, {grad_outputs = gy})}
        local yr = F.rms_norm(x, c[2], w)
        wanted = affine and {x, w} or {x}
        out[#out + 1] = {yr, dl.autograd.grad(yr, wanted, {grad_outputs = gy})}
        local _, mean, rstd = nn.layer_norm_forward(x:detach(), c[2], nil, nil)
        out[#out + 1] = {mean, rstd}
      end
      return out
    end, 1e-4, 1e-5)
  end
end

for _, hdt in ipairs({dl.float16, dl.bfloat16}) do
  for _, pdt in ipairs({dl.float32, hdt}) do
    T.cuda_case(string.format("layer_norm, rms_norm with %s data, %s parameters", tostring(hdt), tostring(pdt)),
      function(dev)
        local out = {}
        for i, c in ipairs({SHAPES[1], SHAPES[3]}) do
          local x, w, b, gy = leaves(dev, c[1], c[2], hdt, pdt, 50 + i)
          local y = F.layer_norm(x, c[2], w, b)
          out[#out + 1] = {y, dl.autograd.grad(y, {x, w, b}, {grad_outputs = gy})}
          local yr = F.rms_norm(x, c[2], w)
          out[#out + 1] = {yr, dl.autograd.grad(yr, {x, w}, {grad_outputs = gy})}
        end
        return out
      end, 2e-2, 2e-2)
  end
end

T.cuda_case("layer_norm, rms_norm under autocast compute in float32", function(dev)
  local x = T.randn(8, 64, {seed = 70}):to(dl.bfloat16):to(dev)
  local m = dl.nn.LayerNorm(64):to(dev)
  local y, yr = dl.autocast({dtype = "bf16"}, function() return m(x), F.rms_norm(x, 64) end)
  if dev == "cuda" then
    -- autocast applies to CUDA tensors: the half input is cast up, the result is float32
    T.eq(y.dtype, dl.float32, "LayerNorm under autocast")
    T.eq(yr.dtype, dl.float32, "rms_norm under autocast")
    T.close(y, m(x:float()), 1e-6, 1e-7, "LayerNorm under autocast is LayerNorm of the float32 input")
    return {m(x:float()), F.rms_norm(x:float(), 64)}
  end
  return {y:float(), yr:float()}
end, 2e-2, 2e-2)

T.done()
