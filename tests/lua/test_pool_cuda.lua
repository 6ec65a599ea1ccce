-- test_pool_cuda.lua - pooling on CUDA against the CPU: every case builds
-- its inputs on the CPU (seeded T.randn), runs on "cpu" and "cuda" and
-- compares the results (T.cuda_case).  Covers max pooling (ResNet's 3x3/2
-- pad 1, ceil mode, dilation, NaN, channels-last input), average pooling
-- options, adaptive average/max pooling, all gradients, float64 and half
-- types, the MaxPool2d and AdaptiveAvgPool2d modules, and mixed-device and
-- bad-index errors.  Max pooling of channels-last input on CUDA's own NHWC
-- kernels in the data's dtype (dl._nn.max_pool2d_nhwc, on by default) and on
-- the planar float32 path (off), in float32/float64/bfloat16/float16, at
-- ResNet's stem shape too.  Skipped (exit 77) without a GPU.
local T = require "testlib"
T.require_cuda()
local dl = require "dl"
local nn = dl._nn

local F64, BF16, F16 = dl.float64, dl.bfloat16, dl.float16

-- --- pooling -----------------------------------------------------------------------------

-- forward (values and indices) and the scatter backward of max pooling
local function max_pool(dev, x, k, opts, seed)
  local y, ind = nn.max_pool2d_forward(x, k, opts)
  local gy = T.randn(y.shape, {seed = seed, device = dev, dtype = x.dtype})
  return {y = y, ind = ind, gx = nn.max_pool2d_backward(gy, x, ind, k, opts)}
end

local max_cases = {
  {"3x3/2 padding 1 (ResNet)", {4, 16, 56, 56}, 3, {stride = 2, padding = 1}},
  {"ceil_mode", {2, 3, 10, 9}, 3, {stride = 2, ceil_mode = true}},
  {"dilation", {2, 3, 13, 12}, 3, {stride = {1, 2}, padding = 1, dilation = {2, 3}}},
  {"2x2 default stride", {3, 5, 8, 8}, 2, nil},
  {"unbatched, rectangular kernel", {4, 11, 9}, {3, 2}, {stride = {2, 1}, padding = {1, 0}}},
}
for i, c in ipairs(max_cases) do
  T.cuda_case("max_pool2d " .. c[1], function(dev)
    return max_pool(dev, T.randn(c[2], {seed = 600 + i, device = dev}), c[3], c[4], 620 + i)
  end, 1e-6, 1e-6)
end

T.cuda_case("max_pool2d with NaN: NaN wins, indices as the CPU's", function(dev)
  dl.manual_seed(640)
  local x = dl.randn(2, 3, 9, 9)
  x = x:masked_fill(x:gt(1.5), 0 / 0):to(dev)
  return max_pool(dev, x, 3, {stride = 2, padding = 1}, 641)
end, 1e-6, 1e-6)

T.cuda_case("max_pool2d float64 and bfloat16", function(dev)
  return {max_pool(dev, T.randn({2, 4, 11, 11}, {seed = 650, device = dev, dtype = F64}), 3, {stride = 2, padding = 1}, 651),
    max_pool(dev, T.randn({2, 4, 11, 11}, {seed = 652, device = dev, dtype = BF16}), 3, {stride = 2}, 653)}
end, 1e-6, 1e-6)

T.cuda_case("max_pool2d of a channels-last input", function(dev)
  return max_pool(dev, T.channels_last(T.randn({2, 8, 15, 15}, {seed = 660, device = dev})), 3, {stride = 2, padding = 1}, 661)
end, 1e-6, 1e-6)

-- channels-last input: CUDA's NHWC kernels in the data's dtype (results
-- stay channels-last and in that dtype), or the planar float32 path
local function with_nhwc(on, fn) return T.with_setting(nn.max_pool2d_nhwc, on, fn) end

for _, on in ipairs({true, false}) do
  for _, dt in ipairs({dl.float32, F64, BF16, F16}) do
    for i, c in ipairs(max_cases) do
      if #c[2] == 4 then
        T.cuda_case(string.format("max_pool2d channels-last %s, %s, nhwc kernels %s", dt.name, c[1],
          on and "on" or "off"), function(dev)
          return with_nhwc(on, function()
            local x = T.channels_last(T.randn(c[2], {seed = 700 + i, dtype = dt})):to(dev)
            local r = max_pool(dev, x, c[3], c[4], 720 + i)
            if dev == "cuda" then
              T.eq(r.y.dtype, dt, "y keeps the dtype")
              T.truthy(T.is_channels_last(r.y), "y channels-last")
              T.truthy(T.is_channels_last(r.gx), "gx channels-last")
            end
            return r
          end)
        end, 1e-6, 1e-6)
      end
    end
  end
end

T.cuda_case("max_pool2d channels-last bfloat16 at ResNet's stem (8x64x112x112), NaN included", function(dev)
  dl.manual_seed(740)
  local x = dl.randn(8, 64, 112, 112)
  x = x:masked_fill(x:gt(3.5), 0 / 0)
  x = T.channels_last(x:to(BF16)):to(dev)
  return max_pool(dev, x, 3, {stride = 2, padding = 1}, 741)
end, 1e-6, 1e-6)

T.cuda_case("MaxPool2d module on channels-last float16 input: output and input grad", function(dev)
  local pool = dl.nn.MaxPool2d(3, {stride = 2, padding = 1})
  local x = T.channels_last(T.randn({2, 16, 17, 17}, {seed = 750, dtype = F16})):to(dev):requires_grad_(true)
  local p = pool(x)
  p:backward(T.randn(p.shape, {seed = 751, dtype = F16}):to(dev))
  return {p = p:detach(), gx = x.grad}
end, 1e-6, 1e-6)

local avg_cases = {
  {"3x3/2 padding 1", {2, 4, 15, 15}, 3, {stride = 2, padding = 1}},
  {"count_include_pad=false", {2, 4, 15, 14}, 3, {stride = 2, padding = 1, count_include_pad = false}},
  {"ceil_mode", {2, 3, 10, 9}, 3, {stride = 2, ceil_mode = true}},
  {"ceil_mode, padding, count_include_pad", {2, 3, 10, 9}, 3, {stride = 2, padding = 1, ceil_mode = true}},
  {"divisor_override", {2, 3, 9, 9}, {3, 2}, {stride = {2, 1}, padding = {1, 1}, divisor_override = 5}},
  {"2x2 default stride", {2, 64, 28, 28}, 2, nil},
  {"unbatched", {5, 7, 8}, 2, {stride = 1}},
}
for i, c in ipairs(avg_cases) do
  T.cuda_case("avg_pool2d " .. c[1], function(dev)
    local x = T.randn(c[2], {seed = 700 + i, device = dev})
    local y = nn.avg_pool2d_forward(x, c[3], c[4])
    local gy = T.randn(y.shape, {seed = 720 + i, device = dev})
    return {y = y, gx = nn.avg_pool2d_backward(gy, x, c[3], c[4])}
  end, 1e-5, 1e-6)
end

T.cuda_case("avg_pool2d float64 and float16", function(dev)
  local r = {}
  for j, dt in ipairs({F64, F16}) do
    local x = T.randn({2, 3, 9, 10}, {seed = 740 + j, device = dev, dtype = dt})
    local o = {stride = 2, padding = 1, ceil_mode = true}
    local y = nn.avg_pool2d_forward(x, 3, o)
    r[j] = {y = y, gx = nn.avg_pool2d_backward(T.randn(y.shape, {seed = 750 + j, device = dev, dtype = dt}), x, 3, o)}
  end
  return r
end, 1e-3, 1e-3)

local adaptive_cases = {
  {"to 1x1", {4, 64, 7, 7}, {1, 1}},
  {"to 7x7 from 15x13", {2, 8, 15, 13}, {7, 7}},
  {"to 7x7 from 9x11", {2, 8, 9, 11}, {7, 7}},
  {"to 3x5 from 7x7", {2, 4, 7, 7}, {3, 5}},
  {"upsampling 5x4 to 7x9", {2, 3, 5, 4}, {7, 9}},
  {"unbatched to 2x2", {3, 9, 7}, {2, 2}},
}
for i, c in ipairs(adaptive_cases) do
  T.cuda_case("adaptive_avg_pool2d " .. c[1], function(dev)
    local x = T.randn(c[2], {seed = 800 + i, device = dev})
    local y = nn.adaptive_avg_pool2d_forward(x, c[3])
    local gy = T.randn(y.shape, {seed = 820 + i, device = dev})
    return {y = y, gx = nn.adaptive_avg_pool2d_backward(gy, x)}
  end, 1e-5, 1e-6)
  T.cuda_case("adaptive_max_pool2d " .. c[1], function(dev)
    local x = T.randn(c[2], {seed = 840 + i, device = dev})
    local y, ind = nn.adaptive_max_pool2d_forward(x, c[3])
    local gy = T.randn(y.shape, {seed = 860 + i, device = dev})
    return {y = y, ind = ind, gx = nn.adaptive_max_pool2d_backward(gy, x, ind)}
  end, 1e-6, 1e-6)
end

T.case("pooling: mixed devices and bad indices are refused", function()
  local x = dl.randn(1, 2, 6, 6):to("cuda")
  local y, ind = nn.max_pool2d_forward(x, 2)
  T.raises(function() nn.max_pool2d_backward(dl.ones(1, 2, 3, 3), x, ind, 2) end,
    "expected all tensors on one device")
  local bad = (ind:cpu() + 100):to("cuda")
  -- found on the device: reported at the next synchronisation, not before
  local gx = nn.max_pool2d_backward(dl.ones(1, 2, 3, 3):to("cuda"), x, bad, 2)
  T.raises(function() gx:cpu() end, "is outside the input plane of 36 elements")
  T.eq(gx:cpu().shape[4], 6, "reported once: the next read works")
  dl.backends.cuda.sync_checks = true -- debugging: the op waits and reports at once
  T.raises(function() nn.max_pool2d_backward(dl.ones(1, 2, 3, 3):to("cuda"), x, bad, 2) end,
    "outside the input plane")
  dl.backends.cuda.sync_checks = false
  -- the device is still healthy after the refused call
  local y2 = nn.max_pool2d_forward(x, 2)
  T.tensor_eq(y2:cpu(), y:cpu(), 0)
end)

-- --- modules --------------------------------------------------------------------------------

T.cuda_case("MaxPool2d and AdaptiveAvgPool2d modules: outputs and input grads", function(dev)
  local pool = dl.nn.MaxPool2d(3, {stride = 2, padding = 1})
  local gap = dl.nn.AdaptiveAvgPool2d(1)
  local x = T.randn({2, 8, 17, 17}, {seed = 950, device = dev}):requires_grad_(true)
  local p = pool(x)
  local y = gap(p)
  y:backward(T.randn({2, 8, 1, 1}, {seed = 951, device = dev}))
  return {p = p:detach(), y = y:detach(), gx = x.grad}
end, 1e-5, 1e-6)

T.done()
