-- test_batchnorm_cuda.lua - batch norm on CUDA against the CPU: every case
-- builds its inputs on the CPU (seeded T.randn), runs on "cpu" and "cuda" and
-- compares the results (T.cuda_case).  Covers training (outputs, batch
-- statistics, running statistics after several calls; batch sizes 1..64,
-- spatial 1x1..56x56, 3..2048 channels) and evaluation, both backwards, no
-- affine, a channels-last input (kept channels-last on CUDA), bfloat16/float16
-- data with float32 parameters, float64, the BatchNorm2d module, and
-- mixed-device errors.  The fused batch_norm_relu / batch_norm_add_relu:
-- against the CPU and against the unfused ops on CUDA (bit-equal with our
-- kernels), each training implementation (dl._nn.batch_norm_impl: native,
-- cudnn, auto; which one ran is printed), channels-last bfloat16 at
-- ResNet-50's layer shapes, evaluation.  Skipped (exit 77) without a GPU.
local T = require "testlib"
T.require_cuda()
local dl = require "dl"
local nn = dl._nn

local F32, F64, BF16, F16 = dl.float32, dl.float64, dl.bfloat16, dl.float16

-- positive values in [0.5, 1.5): variances
local function rand_pos(seed, n, dev, dt)
  dl.manual_seed(seed)
  return (dl.rand(n) + 0.5):to(dt or F32):to(dev)
end

-- --- batch norm ------------------------------------------------------------------------

local bn_shapes = {
  {1, 3, 56, 56}, {64, 64, 56, 56}, {64, 2048, 1, 1}, {2, 2048, 1, 1}, {64, 3, 1, 1},
  {1, 512, 7, 7}, {64, 1000}, {8, 16, 100}, {3, 5, 7, 9},
}

for i, shape in ipairs(bn_shapes) do
  local big = shape[1] * (shape[3] or 1) * (shape[4] or 1) > 100000
  T.cuda_case("batch_norm training " .. table.concat(shape, "x"), function(dev)
    local C = shape[2]
    local x = T.randn(shape, {seed = 10 + i, device = dev})
    local w, b = T.randn({C}, {seed = 20 + i, device = dev}), T.randn({C}, {seed = 30 + i, device = dev})
    local rm, rv = T.randn({C}, {seed = 40 + i, device = dev}), rand_pos(50 + i, C, dev)
    local y, mean, invstd
    for _ = 1, 3 do
      y, mean, invstd = nn.batch_norm_forward(x, w, b, rm, rv, {training = true, momentum = 0.2})
    end
    return {y = y, mean = mean, invstd = invstd, rm = rm, rv = rv}
  end, big and 1e-4 or 1e-5, big and 1e-4 or 1e-5)
end

T.cuda_case("batch_norm training float64, cumulative average", function(dev)
  local x = T.randn({4, 6, 5, 3}, {seed = 1, device = dev, dtype = F64})
  local rm, rv = dl.zeros(6, {dtype = F64}):to(dev), dl.ones(6, {dtype = F64}):to(dev)
  local y, mean, invstd = nn.batch_norm_forward(x, nil, nil, rm, rv,
    {training = true, cumulative = true, num_batches_tracked = 3})
  return {y, mean, invstd, rm, rv}
end, 1e-12, 1e-12)

for i, shape in ipairs({{4, 8, 5, 5}, {64, 2048, 1, 1}, {2, 64, 56, 56}, {16, 10}}) do
  T.cuda_case("batch_norm evaluation " .. table.concat(shape, "x"), function(dev)
    local C = shape[2]
    local x = T.randn(shape, {seed = 60 + i, device = dev})
    local w, b = T.randn({C}, {seed = 70 + i, device = dev}), T.randn({C}, {seed = 80 + i, device = dev})
    local rm, rv = T.randn({C}, {seed = 90 + i, device = dev}), rand_pos(100 + i, C, dev)
    return nn.batch_norm_forward(x, w, b, rm, rv, {eps = 1e-3})
  end)
end

-- forward then backward (training or evaluation), with or without affine
local function bn_fwd_bwd(dev, shape, training, affine, seed, dt, pdt)
  local C = shape[2]
  local x = T.randn(shape, {seed = seed, device = dev, dtype = dt})
  local gy = T.randn(shape, {seed = seed + 1, device = dev, dtype = dt})
  local w = affine and T.randn({C}, {seed = seed + 2, device = dev, dtype = pdt}) or nil
  local b = affine and T.randn({C}, {seed = seed + 3, device = dev, dtype = pdt}) or nil
  local rm, rv = T.randn({C}, {seed = seed + 4, device = dev, dtype = pdt}), rand_pos(seed + 5, C, dev, pdt)
  if training then
    local y, mean, invstd = nn.batch_norm_forward(x, w, b, rm, rv, {training = true})
    local gx, gw, gb = nn.batch_norm_backward(gy, x, w, nil, nil, mean, invstd,
      {training = true, need = {true, affine, affine}})
    return {y = y, gx = gx, gw = gw, gb = gb, rm = rm, rv = rv}
  end
  local y = nn.batch_norm_forward(x, w, b, rm, rv)
  local gx, gw, gb = nn.batch_norm_backward(gy, x, w, rm, rv, nil, nil,
    {need = {true, affine, affine}})
  return {y = y, gx = gx, gw = gw, gb = gb}
end

for _, training in ipairs({true, false}) do
  local mode = training and "training" or "evaluation"
  for i, shape in ipairs({{4, 8, 6, 6}, {32, 256, 14, 14}, {64, 2048, 1, 1}, {1, 3, 56, 56}}) do
    T.cuda_case("batch_norm backward " .. mode .. " " .. table.concat(shape, "x"), function(dev)
      return bn_fwd_bwd(dev, shape, training, true, 200 + 10 * i, F32)
    end, 1e-4, 1e-5)
  end
  T.cuda_case("batch_norm backward " .. mode .. ", no affine", function(dev)
    return bn_fwd_bwd(dev, {5, 7, 9, 4}, training, false, 300, F32)
  end, 1e-4, 1e-5)
  T.cuda_case("batch_norm backward " .. mode .. " float64", function(dev)
    return bn_fwd_bwd(dev, {3, 4, 5, 6}, training, true, 310, F64, F64)
  end, 1e-10, 1e-12)
end

-- half data, float32 parameters and statistics (autocast's batch norm)
for _, dt in ipairs({BF16, F16}) do
  for _, training in ipairs({true, false}) do
    T.cuda_case(string.format("batch_norm %s data, float32 parameters, %s", dt.name,
      training and "training" or "evaluation"), function(dev)
      local r = bn_fwd_bwd(dev, {8, 32, 7, 7}, training, true, 400, dt, F32)
      T.eq(r.y.dtype, dt)
      T.eq(r.gw.dtype, F32)
      return r
    end, 2e-2, 2e-2)
  end
end

T.cuda_case("batch_norm channels-last input: training, backward, layout kept", function(dev)
  local x = T.channels_last(T.randn({4, 24, 9, 7}, {seed = 500, device = dev}))
  T.truthy(not x:is_contiguous())
  local gy = T.randn({4, 24, 9, 7}, {seed = 501, device = dev}) -- plain layout: converted to x's
  local w, b = T.randn({24}, {seed = 502, device = dev}), T.randn({24}, {seed = 503, device = dev})
  local rm, rv = dl.zeros(24):to(dev), dl.ones(24):to(dev)
  local y, mean, invstd = nn.batch_norm_forward(x, w, b, rm, rv, {training = true})
  if dev == "cuda" then
    T.truthy(not y:is_contiguous(), "y stays channels-last on CUDA")
    T.truthy(y:permute(1, 3, 4, 2):is_contiguous(), "y is (N,H,W,C) in memory")
  end
  local gx, gw, gb = nn.batch_norm_backward(gy, x, w, nil, nil, mean, invstd, {training = true})
  if dev == "cuda" then T.truthy(gx:permute(1, 3, 4, 2):is_contiguous(), "gx channels-last") end
  local ye = nn.batch_norm_forward(x, w, b, rm, rv)
  local gxe = nn.batch_norm_backward(gy, x, w, rm, rv, nil, nil)
  return {y = y, mean = mean, invstd = invstd, rm = rm, rv = rv, gx = gx, gw = gw, gb = gb,
    ye = ye, gxe = gxe}
end, 1e-4, 1e-5)

T.cuda_case("batch_norm channels-last bfloat16, ResNet-sized", function(dev)
  local x = T.channels_last(T.randn({8, 64, 56, 56}, {seed = 510, device = dev, dtype = BF16}))
  local w, b = T.randn({64}, {seed = 511, device = dev}), T.randn({64}, {seed = 512, device = dev})
  local rm, rv = dl.zeros(64):to(dev), dl.ones(64):to(dev)
  local y, mean, invstd = nn.batch_norm_forward(x, w, b, rm, rv, {training = true})
  return {y = y, mean = mean, invstd = invstd, rm = rm, rv = rv}
end, 2e-2, 2e-2)

T.case("batch_norm: mixed devices are refused with both devices named", function()
  local x = dl.randn(2, 3, 4, 4):to("cuda")
  local w = dl.ones(3)
  T.raises(function() nn.batch_norm_forward(x, w, nil, nil, nil, {training = true}) end,
    "batch_norm: expected all tensors on one device")
  local rm, rv = dl.zeros(3):to("cuda"), dl.ones(3)
  T.raises(function() nn.batch_norm_forward(x, nil, nil, rm, rv) end, "cpu")
end)

-- --- modules --------------------------------------------------------------------------------

T.cuda_case("BatchNorm2d module: training steps then evaluation, outputs and grads", function(dev)
  dl.manual_seed(900)
  local m = dl.nn.BatchNorm2d(16)
  m:to(dev)
  local out = {}
  for step = 1, 2 do
    local x = T.randn({4, 16, 10, 10}, {seed = 910 + step, device = dev}):requires_grad_(true)
    local y = m(x)
    y:backward(T.randn({4, 16, 10, 10}, {seed = 920 + step, device = dev}))
    out[step] = {y = y:detach(), gx = x.grad, gw = m.weight.grad:clone(), gb = m.bias.grad:clone()}
    m.weight.grad, m.bias.grad = nil, nil
  end
  m:eval()
  local xe = T.randn({4, 16, 10, 10}, {seed = 930, device = dev}):requires_grad_(true)
  local ye = m(xe)
  ye:backward(T.randn({4, 16, 10, 10}, {seed = 931, device = dev}))
  out.eval = {y = ye:detach(), gx = xe.grad, rm = m.running_mean, rv = m.running_var}
  return out
end, 1e-4, 1e-5)

-- --- the fused batch norm + ReLU (+ add) ------------------------------------------------

local F = dl.nn.functional
local IMPL_NAMES = {"native", "cudnn"}

-- Runs fn with the CUDA training implementation set to impl (on the CPU the
-- switch changes nothing), restoring the previous choice.
local function with_impl(impl, fn) return T.with_setting(nn.batch_norm_impl, impl, fn) end

-- The fused op (add: with a residual) through autograd: the output, every
-- gradient and the running statistics.  cl: channels-last input.
local function fused_run(dev, shape, dt, cl, add, training, seed)
  local C = shape[2]
  local x = T.randn(shape, {seed = seed, dtype = dt})
  if cl then x = T.channels_last(x) end
  x = x:to(dev):requires_grad_(true)
  local r = T.randn(shape, {seed = seed + 1, dtype = dt}):to(dev):requires_grad_(true)
  local gy = T.randn(shape, {seed = seed + 2, dtype = dt}):to(dev)
  local w = T.randn({C}, {seed = seed + 3, device = dev}):requires_grad_(true)
  local b = T.randn({C}, {seed = seed + 4, device = dev}):requires_grad_(true)
  local rm, rv = T.randn({C}, {seed = seed + 5, device = dev}), rand_pos(seed + 6, C, dev)
  local y
  if add then
    y = F.batch_norm_add_relu(x, r, rm, rv, w, b, training, 0.1, 1e-5)
  else
    y = F.batch_norm_relu(x, rm, rv, w, b, training, 0.1, 1e-5)
  end
  y:backward(gy)
  local out = {y = y:detach(), gx = x.grad, gw = w.grad, gb = b.grad, rm = rm, rv = rv}
  if add then out.gr = r.grad end
  if dev == "cuda" and cl then T.truthy(T.is_channels_last(out.gx), "gx stays channels-last") end
  return out
end

for _, impl in ipairs({"native", "cudnn", "auto"}) do
  for _, cfg in ipairs({{F32, false}, {F32, true}, {BF16, true}, {F16, true}}) do
    local dt, cl = cfg[1], cfg[2]
    for _, add in ipairs({false, true}) do
      local name = string.format("batch_norm_%srelu %s %s%s, impl %s", add and "add_" or "", dt.name,
        "8x64x14x14", cl and " channels-last" or "", impl)
      -- half data: the CPU rounds once (its kernels run in float32), CUDA as
      -- the unfused ops, so masks may differ where the sum is within a
      -- rounding of 0: compared norm-wise
      local half = dt ~= F32
      T.cuda_case(name, function(dev)
        return with_impl(impl, function()
          return fused_run(dev, {8, 64, 14, 14}, dt, cl, add, true, 600)
        end)
      end, half and 2e-2 or 1e-4, half and 1e-3 or 1e-5, half and 2 or nil)
    end
  end
  T.cuda_case("batch_norm (plain) channels-last bfloat16 training, impl " .. impl, function(dev)
    return with_impl(impl, function()
      return bn_fwd_bwd(dev, {8, 64, 14, 14}, true, true, 700, BF16, F32)
    end)
  end, 2e-2, 2e-2)
  T.cuda_case("batch_norm (plain) float32 NCHW training, impl " .. impl, function(dev)
    return with_impl(impl, function()
      return bn_fwd_bwd(dev, {8, 32, 9, 9}, true, true, 710, F32, F32)
    end)
  end, 1e-4, 1e-5)
end

T.cuda_case("batch_norm_relu / batch_norm_add_relu evaluation, float32 and bfloat16", function(dev)
  local out = {}
  for _, add in ipairs({false, true}) do
    out[#out + 1] = fused_run(dev, {4, 24, 7, 9}, F32, false, add, false, 720)
    local h = fused_run(dev, {4, 24, 7, 9}, BF16, true, add, false, 730)
    out[#out + 1] = {y = h.y:float(), gw = h.gw}
  end
  return out
end, 2e-2, 2e-2)

-- which implementation the plan picks, for the log of a GPU run
T.case("the training implementation each switch runs (printed)", function()
  for _, impl in ipairs({"native", "cudnn", "auto"}) do
    with_impl(impl, function()
      for _, dt in ipairs({F32, BF16, F16}) do
        local x = T.channels_last(T.randn({16, 64, 28, 28}, {seed = 740, dtype = dt})):to("cuda")
        local r = T.randn({16, 64, 28, 28}, {seed = 741, dtype = dt}):to("cuda")
        local w, b = dl.ones(64):to("cuda"), dl.zeros(64):to("cuda")
        local _, _, _, mask, got = nn.batch_norm_relu_forward(x, r, w, b, nil, nil, {training = true})
        T.truthy(got == 1 or got == 2, "impl " .. tostring(got))
        if impl == "native" then T.eq(got, 1, "native chosen, native ran") end
        io.write(string.format("  batch_norm_add_relu %s channels-last 16x64x28x28, choice %s: ran %s (mask %d bytes)\n",
          dt.name, impl, IMPL_NAMES[got], mask:numel()))
      end
    end)
  end
end)

-- on CUDA, the fused ops against the unfused ones: bit-equal with our
-- kernels (the same roundings), close with cuDNN's
for _, impl in ipairs({"native", "cudnn"}) do
  T.case("fused = unfused on CUDA, impl " .. impl, function()
    with_impl(impl, function()
      for _, cfg in ipairs({{F32, false}, {F32, true}, {BF16, true}}) do
        local dt, cl = cfg[1], cfg[2]
        for _, add in ipairs({false, true}) do
          local shape, C = {6, 32, 10, 10}, 32
          local function run(fused)
            local x = T.randn(shape, {seed = 800, dtype = dt})
            if cl then x = T.channels_last(x) end
            x = x:to("cuda"):requires_grad_(true)
            local r = T.randn(shape, {seed = 801, dtype = dt}):to("cuda"):requires_grad_(true)
            local w = T.randn({C}, {seed = 802, device = "cuda"}):requires_grad_(true)
            local b = T.randn({C}, {seed = 803, device = "cuda"}):requires_grad_(true)
            local rm, rv = dl.zeros(C):to("cuda"), dl.ones(C):to("cuda")
            local y
            if fused then
              y = add and F.batch_norm_add_relu(x, r, rm, rv, w, b, true) or F.batch_norm_relu(x, rm, rv, w, b, true)
            else
              y = F.batch_norm(x, rm, rv, w, b, true)
              if add then y = y + r end
              y = F.relu(y)
            end
            y:backward(T.randn(shape, {seed = 804, dtype = dt}):to("cuda"))
            return {y = y:detach():cpu(), gx = x.grad:cpu(), gw = w.grad:cpu(), gb = b.grad:cpu(),
              gr = add and r.grad:cpu() or nil, rm = rm:cpu(), rv = rv:cpu()}
          end
          local u, f = run(false), run(true)
          local what = string.format("%s cl=%s add=%s", dt.name, cl, add)
          for _, k in ipairs({"y", "gx", "gw", "gb", "gr", "rm", "rv"}) do
            if u[k] then
              if impl == "native" then
                T.same_bits(f[k], u[k], what .. " " .. k)
              else
                T.close(f[k]:double(), u[k]:double(), dt == F32 and 1e-4 or 3e-2, 1e-5, what .. " " .. k, 2)
              end
            end
          end
        end
      end
    end)
  end)
end

-- ResNet-50's batch norms, channels-last bfloat16 at batch 4: the stem, then
-- each stage's widths (bn1/bn2 with ReLU, bn3 with the residual)
local r50 = {{64, 112, false}, {64, 56, false}, {256, 56, true}, {128, 28, false}, {512, 28, true},
  {256, 14, false}, {1024, 14, true}, {512, 7, false}, {2048, 7, true}}
for _, impl in ipairs({"native", "auto"}) do
  for i, l in ipairs(r50) do
    local C, H, add = l[1], l[2], l[3]
    T.cuda_case(string.format("ResNet-50 batch norm %dx%dx%d bfloat16 channels-last%s, impl %s", C, H, H,
      add and " + residual" or "", impl), function(dev)
      return with_impl(impl, function()
        local o = fused_run(dev, {4, C, H, H}, BF16, true, add, true, 900 + 10 * i)
        return {y = o.y, gx = o.gx, gr = o.gr, gw = o.gw, gb = o.gb}
      end)
    end, 2e-2, 1e-3, 2)
  end
end

T.case("batch_norm_add_relu: a residual on another device is refused", function()
  local x = dl.randn(2, 3, 4, 4):to("cuda")
  T.raises(function() F.batch_norm_add_relu(x, dl.randn(2, 3, 4, 4), nil, nil, nil, nil, true) end,
    "batch_norm_add_relu: expected all tensors on one device")
end)

T.cuda_case("resnet18 training step with fused blocks, float32 channels-last", function(dev)
  dl.manual_seed(950)
  local m = dl.models.resnet18({num_classes = 10}):to(dev)
  m:to({memory_format = "channels_last"})
  local x = T.channels_last(T.randn({4, 3, 64, 64}, {seed = 951})):to(dev)
  local loss = F.cross_entropy(m(x), dl.tensor({1, 2, 3, 4}):to(dev))
  loss:backward()
  return {loss = loss, gfc = m.fc.weight.grad, g1 = m.conv1.weight.grad,
    rm = m.layer2[1].bn1.running_mean}
end, 1e-3, 1e-5, 2)

T.case("resnet18 training step with fused blocks, bfloat16 autocast: finite", function()
  dl.manual_seed(960)
  local m = dl.models.resnet18({num_classes = 10}):to("cuda")
  m:to({memory_format = "channels_last"})
  local x = T.channels_last(T.randn({4, 3, 64, 64}, {seed = 961})):to("cuda")
  local loss = dl.autocast({dtype = "bf16"}, function()
    return F.cross_entropy(m(x), dl.tensor({1, 2, 3, 4}):to("cuda"))
  end)
  loss:backward()
  local l = loss:item()
  T.truthy(l == l and l > 0 and l < 100, "loss " .. tostring(l))
  T.truthy(m.conv1.weight.grad:isfinite():all():item(), "finite gradients")
end)

T.done()
