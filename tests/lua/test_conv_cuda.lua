-- test_conv_cuda.lua - conv2d on CUDA (cuDNN) against the CPU (oneDNN):
-- forward and backward (input, weight and bias gradients) for the layer
-- shapes of ResNet-50 at batch 2 (7x7/2 stem, 3x3 stride 1 and 2, 1x1 stride
-- 1 and 2), depthwise and grouped convolutions, dilation, no bias, odd sizes,
-- unbatched input, empty batch, channels-last input and weight (same values
-- as NCHW, results channels-last), float64 and bfloat16/float16 (loose), and
-- cuDNN's benchmark mode on and off giving the same results.  Results are
-- compared normwise: max |cuda - cpu| <= tol * max |cpu|, the natural error
-- measure of long sums.  The graph API's plans (the default) give the legacy
-- API's results for ResNet-50's shapes in float32, bfloat16 and float16
-- channels-last and float64; plans are built once per key (direction, shape,
-- layout, dtype, pointer alignment, flags) and reused, timed once in
-- benchmark mode.  Skipped (exit 77) without a GPU.
local T = require "testlib"
local dl = require "dl"
local nn = dl._nn

T.require_cuda()

local F32, F64 = dl.float32, dl.float64

-- Sets cudnn.benchmark / TF32 when the switches exist (dl.backends); returns
-- whether the benchmark switch is there.
local function cudnn_flags(benchmark)
  local c = dl.backends and dl.backends.cudnn
  if not c then return false end
  return (pcall(function()
    c.allow_tf32 = false
    c.benchmark = benchmark
  end))
end
cudnn_flags(false)

-- Normwise: max |cuda - cpu| <= tol * max |cpu| for every result.
local function check(name, fn, tol)
  T.cuda_case(name, fn, tol, 1e-30, "max")
end

-- forward and backward of one convolution; spec: {N, C, H, W, O, k, stride,
-- pad, dilation, groups, bias, dtype, xcl, wcl}
local function run(spec, dev)
  local N, C, H, W, O, k = spec[1], spec[2], spec[3], spec[4], spec[5], spec[6]
  local g = spec.groups or 1
  local dt = spec.dtype or F32
  local opts = {stride = spec.stride or 1, padding = spec.pad or 0,
                dilation = spec.dilation or 1, groups = g}
  dl.manual_seed(spec.seed or 11)
  local x = dl.randn(N, C, H, W):to(dt)
  local w = (dl.randn(O, C // g, k, k) * (1 / math.sqrt(C // g * k * k))):to(dt)
  local b = spec.bias ~= false and dl.randn(O):to(dt) or nil
  x, w = x:to(dev), w:to(dev)
  if b then b = b:to(dev) end
  if spec.xcl then x = T.channels_last(x) end
  if spec.wcl then w = T.channels_last(w) end
  local y = nn.conv2d_forward(x, w, b, opts)
  dl.manual_seed(99)
  local gy = dl.randn(y:size()):to(dt):to(dev)
  if spec.xcl then gy = T.channels_last(gy) end
  opts.need = {true, true, b ~= nil}
  local gx, gw, gb = nn.conv2d_backward(gy, x, w, opts)
  if dev == "cuda" and spec.xcl and dt ~= F64 then
    T.eq(y:stride(2), 1, "channels-last output")
    T.eq(gx:stride(2), 1, "channels-last grad input")
  end
  if dev == "cuda" and C // g > 1 and k > 1 then -- (strides of size-1 dims mean nothing)
    T.eq(gw:stride(2) == 1, w:stride(2) == 1, "grad weight in the weight's layout")
  end
  return {y = y, gx = gx, gw = gw, gb = gb}
end

local TOL = {[F32] = 1e-4, [F64] = 1e-10, [dl.bfloat16] = 3e-2, [dl.float16] = 5e-3}

local function conv_case(name, spec)
  check(name, function(dev) return run(spec, dev) end, TOL[spec.dtype or F32])
end

-- --- ResNet-50's layers at batch 2 -------------------------------------------------------

local RESNET = {
  {"stem 7x7/2 3->64 @224", {2, 3, 224, 224, 64, 7, stride = 2, pad = 3, bias = false}},
  {"1x1 64->64 @56", {2, 64, 56, 56, 64, 1, bias = false}},
  {"3x3 64->64 @56", {2, 64, 56, 56, 64, 3, pad = 1, bias = false}},
  {"1x1 64->256 @56", {2, 64, 56, 56, 256, 1, bias = false}},
  {"1x1 256->128 @56", {2, 256, 56, 56, 128, 1, bias = false}},
  {"3x3/2 128->128 @56", {2, 128, 56, 56, 128, 3, stride = 2, pad = 1, bias = false}},
  {"1x1/2 256->512 @56 (downsample)", {2, 256, 56, 56, 512, 1, stride = 2, bias = false}},
  {"3x3/2 256->256 @28", {2, 256, 28, 28, 256, 3, stride = 2, pad = 1, bias = false}},
  {"1x1 1024->256 @14", {2, 1024, 14, 14, 256, 1, bias = false}},
  {"3x3/2 512->512 @14", {2, 512, 14, 14, 512, 3, stride = 2, pad = 1, bias = false}},
  {"1x1/2 1024->2048 @14 (downsample)", {2, 1024, 14, 14, 2048, 1, stride = 2, bias = false}},
  {"1x1 512->2048 @7", {2, 512, 7, 7, 2048, 1, bias = false}},
}
for _, c in ipairs(RESNET) do conv_case("resnet50 " .. c[1], c[2]) end

-- --- options -----------------------------------------------------------------------------

conv_case("bias", {2, 8, 9, 9, 12, 3, pad = 1})
conv_case("depthwise 3x3 (groups = channels)", {2, 32, 15, 15, 32, 3, pad = 1, groups = 32})
conv_case("depthwise with multiplier 2", {2, 16, 12, 12, 32, 3, stride = 2, pad = 1, groups = 16})
conv_case("groups 4", {2, 16, 10, 10, 24, 3, pad = 1, groups = 4})
conv_case("dilation 2", {2, 8, 17, 17, 8, 3, pad = 2, dilation = 2})
conv_case("dilation 3, stride 2, no padding", {2, 6, 21, 19, 5, 3, stride = 2, dilation = 3})
conv_case("odd sizes, 5x5, padding 2", {3, 5, 13, 11, 7, 5, pad = 2})
conv_case("odd sizes, stride 3, 1 channel", {1, 1, 10, 7, 3, 2, stride = 3, pad = 1})
conv_case("kernel as large as the padded input", {2, 3, 4, 4, 2, 6, pad = 1})

check("rectangular kernel, stride and padding", function(dev)
  dl.manual_seed(5)
  local x = dl.randn(2, 4, 11, 14):to(dev)
  local w = dl.randn(6, 4, 3, 5):to(dev)
  local b = dl.randn(6):to(dev)
  local opts = {stride = {2, 1}, padding = {1, 2}, dilation = {1, 2}}
  local y = nn.conv2d_forward(x, w, b, opts)
  local gx, gw, gb = nn.conv2d_backward(dl.ones(y:size()):to(dev), x, w, opts)
  return {y, gx, gw, gb}
end, 1e-4)

check("unbatched (C,H,W) input", function(dev)
  dl.manual_seed(6)
  local x = dl.randn(4, 9, 9):to(dev)
  local w = dl.randn(5, 4, 3, 3):to(dev)
  local y = nn.conv2d_forward(x, w, nil, {padding = 1})
  local gx, gw = nn.conv2d_backward(dl.ones(5, 9, 9):to(dev), x, w,
    {padding = 1, need = {true, true, false}})
  return {y, gx, gw}
end, 1e-4)

check("need skips gradients; empty batch", function(dev)
  dl.manual_seed(7)
  local x = dl.randn(2, 4, 8, 8):to(dev)
  local w = dl.randn(3, 4, 3, 3):to(dev)
  local gy = dl.randn(2, 3, 6, 6):to(dev)
  local gx1 = nn.conv2d_backward(gy, x, w, {need = {true, false, false}})
  local _, gw2, gb2 = nn.conv2d_backward(gy, x, w, {need = {false, true, true}})
  local e = dl.randn(0, 4, 8, 8):to(dev)
  local ye = nn.conv2d_forward(e, w, dl.ones(3):to(dev))
  local gxe, gwe, gbe = nn.conv2d_backward(dl.ones(0, 3, 6, 6):to(dev), e, w)
  return {gx1, gw2, gb2, ye, gxe, gwe, gbe}
end, 1e-4)

-- --- layouts -------------------------------------------------------------------------------

conv_case("channels-last input, 3x3", {2, 16, 14, 14, 32, 3, pad = 1, xcl = true})
conv_case("channels-last input, 1x1/2 bias", {2, 64, 28, 28, 128, 1, stride = 2, xcl = true})
conv_case("channels-last input and weight, 7x7/2", {2, 3, 64, 64, 16, 7, stride = 2, pad = 3,
  xcl = true, wcl = true, bias = false})
conv_case("channels-last weight only", {2, 8, 12, 12, 16, 3, pad = 1, wcl = true})
conv_case("channels-last depthwise", {2, 32, 14, 14, 32, 3, pad = 1, groups = 32, xcl = true})
conv_case("channels-last bfloat16", {2, 32, 14, 14, 64, 3, pad = 1, xcl = true,
  dtype = dl.bfloat16})
conv_case("channels-last float64 (computed NCHW)", {2, 6, 9, 9, 4, 3, pad = 1, xcl = true,
  dtype = F64})

-- --- dtypes -----------------------------------------------------------------------------------

conv_case("float64 3x3", {2, 8, 12, 12, 16, 3, pad = 1, dtype = F64})
conv_case("float64 grouped, dilated, strided", {2, 8, 13, 13, 8, 3, stride = 2, pad = 2,
  dilation = 2, groups = 2, dtype = F64})
conv_case("bfloat16 3x3 @56", {2, 64, 56, 56, 64, 3, pad = 1, dtype = dl.bfloat16})
conv_case("bfloat16 7x7/2 stem", {2, 3, 112, 112, 64, 7, stride = 2, pad = 3, bias = false,
  dtype = dl.bfloat16})
conv_case("float16 1x1 with bias", {2, 32, 20, 20, 48, 1, dtype = dl.float16})

-- --- cudnn.benchmark --------------------------------------------------------------------------

T.case("cudnn benchmark on and off give the same results", function()
  local have = cudnn_flags(true)
  if not have then print("note: dl.backends.cudnn is missing; only the default mode ran") end
  local specs = {
    {2, 64, 56, 56, 64, 3, pad = 1, bias = false},
    {2, 256, 28, 28, 256, 3, stride = 2, pad = 1, bias = false},
    {2, 16, 14, 14, 32, 3, pad = 1, xcl = true},
    {2, 64, 56, 56, 64, 3, pad = 1, dtype = dl.bfloat16},
  }
  local ok, err = pcall(function()
    for i, s in ipairs(specs) do
      local on = run(s, "cuda")
      local on2 = run(s, "cuda") -- the cached algorithms
      cudnn_flags(false)
      local off = run(s, "cuda")
      cudnn_flags(have)
      local cpu = run(s, "cpu")
      local tol = TOL[s.dtype or F32]
      T.compare_devices(cpu, on, tol, 1e-30, "benchmark on " .. i, "max")
      T.compare_devices(cpu, on2, tol, 1e-30, "benchmark on, again " .. i, "max")
      T.compare_devices(cpu, off, tol, 1e-30, "benchmark off " .. i, "max")
    end
  end)
  cudnn_flags(false)
  if not ok then error(err, 0) end
end)

-- --- the graph API's plans (cuda/conv_plan.cu) against the legacy API --------------------------

-- run(spec, "cuda") with dl.backends.cudnn.graph set to on, the switch restored.
local function run_graph(spec, on)
  local saved = dl.backends.cudnn.graph
  dl.backends.cudnn.graph = on
  local ok, r = pcall(run, spec, "cuda")
  dl.backends.cudnn.graph = saved
  if not ok then error(r, 0) end
  return r
end

-- The plan cache's counters after minus before.
local function plans_delta(before)
  local now, d = nn.conv2d_plans(), {}
  for k, v in pairs(now) do d[k] = v - (before[k] or 0) end
  return d, now
end

local GRAPH_SPECS = {
  {"3x3 64->64 @56 float32", {2, 64, 56, 56, 64, 3, pad = 1, bias = false}},
  {"1x1/2 1024->2048 @14 float32", {2, 1024, 14, 14, 2048, 1, stride = 2, bias = false}},
  {"stem 7x7/2 bfloat16 channels-last", {2, 3, 112, 112, 64, 7, stride = 2, pad = 3, bias = false,
    xcl = true, wcl = true, dtype = dl.bfloat16}},
  {"3x3/2 128->128 bfloat16 channels-last", {2, 128, 28, 28, 128, 3, stride = 2, pad = 1, xcl = true,
    dtype = dl.bfloat16}},
  {"1x1 256->64 float16 channels-last", {2, 256, 14, 14, 64, 1, xcl = true, dtype = dl.float16}},
  {"grouped dilated float32", {2, 16, 13, 13, 24, 3, pad = 2, dilation = 2, groups = 4}},
  {"float64 3x3", {2, 8, 12, 12, 16, 3, pad = 1, dtype = F64}},
}

for _, c in ipairs(GRAPH_SPECS) do
  T.case("graph API and legacy API agree: " .. c[1], function()
    local spec = c[2]
    local legacy = run_graph(spec, false)
    local graph = run_graph(spec, true)
    local tol = TOL[spec.dtype or F32]
    T.compare_devices(legacy, graph, tol, 1e-30, "graph vs legacy", "max")
  end)
end

T.case("plans are built once per key and reused", function()
  local spec = {2, 32, 20, 20, 48, 3, pad = 1, bias = false, seed = 31}
  local before = nn.conv2d_plans()
  local first = run_graph(spec, true)
  local d = plans_delta(before)
  -- forward, backward data, backward filter: three keys, each built or found planless
  T.eq(d.misses, 3, "three new keys")
  T.eq(d.built + d.no_plan, 3, "each built, or left to the legacy API")
  T.truthy(d.built >= 1, "at least one plan finalized on this GPU")
  local built = d.built
  local mid = nn.conv2d_plans()
  local again = run_graph(spec, true)
  d = plans_delta(mid)
  T.eq(d.misses, 0, "no new keys the second time")
  T.eq(d.hits, 3)
  T.eq(d.built, 0)
  T.eq(d.executed, built, "each cached plan executed")
  T.compare_devices(first, again, 1e-5, 1e-30, "the cached plans, the same results", "max")
  -- the switch off: no plan runs
  mid = nn.conv2d_plans()
  run_graph(spec, false)
  d = plans_delta(mid)
  T.eq(d.hits + d.misses + d.executed, 0, "legacy API only")
  T.truthy(mid.capacity >= 256, "a bounded cache of " .. mid.capacity)
end)

T.case("the pointer alignment is part of the key", function()
  -- a float16 input 2 bytes off a 16-byte boundary (contiguous, so used as is)
  local shape = {2, 16, 12, 12}
  local n = 2 * 16 * 12 * 12
  dl.manual_seed(41)
  local base = dl.randn(n + 1):half():cuda()
  local x_odd = base:narrow(1, 2, n):view(shape)
  local x = x_odd:clone()
  local w = (dl.randn(8, 16, 3, 3) * 0.1):half():cuda()
  local saved = dl.backends.cudnn.graph
  dl.backends.cudnn.graph = true
  local before = nn.conv2d_plans()
  local y = nn.conv2d_forward(x, w, nil, {padding = 1})
  local mid = nn.conv2d_plans()
  local y_odd = nn.conv2d_forward(x_odd, w, nil, {padding = 1})
  dl.backends.cudnn.graph = saved
  local d = plans_delta(mid)
  T.eq(mid.misses - before.misses, 1, "the aligned input's key")
  T.eq(d.misses, 1, "the misaligned input is a new key")
  T.compare_devices(y:cpu(), y_odd, 1e-3, 1e-30, "same values", "max")
end)

T.case("benchmark mode times the candidate plans once per key", function()
  local spec = {2, 64, 28, 28, 64, 3, pad = 1, bias = false, seed = 51}
  local legacy = run_graph(spec, false)
  cudnn_flags(true)
  local ok, err = pcall(function()
    local before = nn.conv2d_plans()
    local timed = run_graph(spec, true)
    local d = plans_delta(before)
    T.truthy(d.timed >= d.built, string.format("%d plans timed for %d built", d.timed, d.built))
    T.compare_devices(legacy, timed, TOL[F32], 1e-30, "the fastest plan's results", "max")
    local mid = nn.conv2d_plans()
    run_graph(spec, true)
    T.eq(plans_delta(mid).timed, 0, "timed once per key")
  end)
  cudnn_flags(false)
  if not ok then error(err, 0) end
end)

-- --- errors ----------------------------------------------------------------------------------

T.case("operands on different devices are refused, naming both", function()
  local x, w = dl.ones(1, 2, 5, 5):cuda(), dl.ones(3, 2, 3, 3)
  T.raises(function() return nn.conv2d_forward(x, w) end, "conv2d: expected all tensors on one device")
  T.raises(function() return nn.conv2d_forward(x, w:cuda(), dl.ones(3)) end, "conv2d: expected all")
  T.raises(function() return nn.conv2d_backward(dl.ones(1, 3, 3, 3), x, w:cuda()) end,
    "conv2d_backward: expected all")
end)

T.done()
