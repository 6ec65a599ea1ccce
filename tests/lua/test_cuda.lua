-- test_cuda.lua - the CUDA face in Lua on a machine with a GPU: every
-- dl.cuda function, moving tensors of every dtype and layout to the GPU and
-- back (with autograd through the moves), printing, memory statistics,
-- events, pinned memory with non_blocking copies, Module:to, and whole-model
-- checks (a small ResNet forward and backward against the CPU, autocast
-- bf16, channels-last, GradScaler).  Skipped (exit 77) without a GPU.
local T = require "testlib"
T.require_cuda()

dl.backends.allow_tf32 = false

local DTYPES = {dl.float32, dl.float64, dl.float16, dl.bfloat16, dl.int64, dl.int32, dl.uint8, dl.bool}

-- Cases that need no kernel beyond copies come first, so a missing kernel in
-- a later case cannot hide them.

T.case("dl.cuda functions", function()
  T.truthy(dl.cuda.is_available())
  T.truthy(dl.cuda.compiled)
  T.truthy(dl.cuda.device_count() >= 1)
  T.eq(type(dl.cuda.get_device_name(0)), "string")
  T.eq(dl.cuda.get_device_name(), dl.cuda.get_device_name(0))
  dl.cuda.set_device(0)
  T.eq(dl.cuda.current_device(), 0)
  dl.cuda.set_device("cuda:0")
  dl.cuda.synchronize()
  dl.cuda.synchronize(0)
  T.raises(function() dl.cuda.set_device(dl.cuda.device_count()) end, "no device cuda:")
  T.raises(function() dl.cuda.set_device() end, "a device is required")
  -- one generator serves both devices
  dl.cuda.manual_seed(11)
  local a = dl.randn(5)
  dl.manual_seed(11)
  T.truthy(dl.equal(a, dl.randn(5)))
end)

T.case("to, cuda and cpu round trips of every dtype", function()
  for _, dt in ipairs(DTYPES) do
    local x = dl.arange(24):to(dt):view(2, 3, 4)
    local g = x:cuda()
    T.eq(g.device, "cuda:0", dt.name)
    T.eq(g.dtype, dt)
    T.truthy(g:is_cuda())
    T.truthy(dl.equal(g:cpu(), x), dt.name .. " contiguous")
    local nc = x:transpose(1, 3) -- non-contiguous
    T.truthy(dl.equal(nc:to("cuda"):cpu(), nc), dt.name .. " transposed")
    T.truthy(dl.equal(x:narrow(2, 2, 2):to("cuda:0"):cpu(), x:narrow(2, 2, 2)), dt.name .. " narrowed")
    local s = dl.tensor(7):to(dt) -- 0-dim
    local sg = s:cuda()
    T.eq(sg:dim(), 0)
    T.truthy(dl.equal(sg:cpu(), s), dt.name .. " 0-dim")
  end
  local x = dl.randn(3, 4)
  T.truthy(dl.equal(x:to({device = "cuda", dtype = dl.float64}):cpu(), x:double()))
  T.truthy(dl.equal(x:cuda(0):to("cpu", dl.float16), x:half()))
  T.truthy(dl.equal(x:to("cuda", dl.bfloat16):float():cpu(), x:bfloat16():float()))
  T.truthy(dl.equal(dl.arange(6):to(dl.uint8):to("cuda", dl.float32):cpu(), dl.arange(6):float()))
  T.eq(x:cuda():to(x:cuda()).device, "cuda:0")
  T.raises(function() x:to("cuda:" .. dl.cuda.device_count()) end, "no device cuda:")
end)

T.case("autograd through :cuda() and back", function()
  local x = dl.randn(3, 4, {dtype = dl.float64}):requires_grad_()
  local y = x:cuda():float():cpu()
  T.eq(y.grad_fn, "ToCopyBackward")
  local s = (y * dl.arange(12):float():view(3, 4)):sum()
  s:backward()
  T.eq(x.grad.dtype, dl.float64)
  T.eq(x.grad.device, "cpu")
  T.truthy(dl.equal(x.grad, dl.arange(12):double():view(3, 4)))
  -- a CUDA leaf gets its gradient on CUDA
  local w = dl.ones(4):cuda():requires_grad_()
  local z = (w:cpu() * 3):sum()
  z:backward()
  T.eq(w.grad.device, "cuda:0")
  T.truthy(dl.equal(w.grad:cpu(), dl.full({4}, 3)))
end)

T.case("printing matches the CPU plus the device", function()
  local function expect(x)
    local cpu = tostring(x)
    local want = cpu:gsub("(shape=%b{})", "%1, device='cuda:0'", 1)
    T.eq(tostring(x:cuda()), want)
  end
  expect(dl.tensor({{1.5, -2}, {3, 4}}))
  expect(dl.arange(5))
  expect(dl.tensor({1, 2}, {dtype = dl.float64}))
  expect(dl.tensor({true, false}))
  expect(dl.tensor(3.25))
  expect(dl.zeros(0))
  expect(dl.randn(40, 40)) -- summarised
  local r = dl.ones(2):cuda():requires_grad_()
  T.eq(tostring(r), "tensor([1., 1.], shape={2}, device='cuda:0', requires_grad=true)")
  T.eq(tostring(dl.ones(2, {dtype = dl.float16}):cuda()),
    "tensor([1., 1.], shape={2}, device='cuda:0', dtype=dl.float16)")
end)

T.case("memory statistics rise and fall; empty_cache", function()
  collectgarbage()
  dl.cuda.synchronize()
  local base = dl.cuda.memory_allocated()
  local n = 4 * 1024 * 1024
  local x = dl.zeros(n):cuda()
  local up = dl.cuda.memory_allocated(0)
  T.truthy(up >= base + 4 * n, string.format("allocated %d -> %d", base, up))
  T.truthy(dl.cuda.memory_reserved() >= up)
  T.truthy(dl.cuda.max_memory_allocated() >= up)
  x = nil -- luacheck: ignore
  collectgarbage()
  local down = dl.cuda.memory_allocated()
  T.truthy(down <= up - 4 * n, string.format("allocated %d after freeing (was %d)", down, up))
  dl.cuda.reset_peak_memory_stats()
  T.eq(dl.cuda.max_memory_allocated(), dl.cuda.memory_allocated())
  local reserved = dl.cuda.memory_reserved()
  dl.cuda.empty_cache()
  T.truthy(dl.cuda.memory_reserved() <= reserved - 4 * n,
    string.format("reserved %d -> %d", reserved, dl.cuda.memory_reserved()))
  T.eq(dl.cuda.memory_allocated(), down)
end)

T.case("events time work on the GPU", function()
  local start, stop = dl.cuda.Event({enable_timing = true}), dl.cuda.Event({enable_timing = true})
  local h = dl.randn(8 * 1024 * 1024)
  start:record()
  local g
  for _ = 1, 4 do g = h:cuda() end
  stop:record()
  stop:synchronize()
  local ms = start:elapsed_time(stop)
  T.truthy(ms > 0, "elapsed " .. tostring(ms))
  T.truthy(g:is_cuda())
  T.raises(function() dl.cuda.Event():elapsed_time(stop) end, "recorded")
  T.raises(function() dl.cuda.Event({bogus = true}) end, "bogus")
end)

T.case("pinned memory and non_blocking copies", function()
  dl.manual_seed(2)
  local x = dl.randn(257, 33)
  local p = x:pin_memory()
  T.truthy(p:is_pinned())
  T.truthy(not x:is_pinned())
  T.eq(p.device, "cpu")
  T.truthy(dl.equal(p, x))
  T.truthy(rawequal(p:pin_memory(), p) or dl.equal(p:pin_memory(), p))
  for _ = 1, 3 do
    local g = p:to({device = "cuda", non_blocking = true})
    T.truthy(dl.equal(g:cpu(), x))
    T.truthy(dl.equal(p:cuda({non_blocking = true}):cpu(), x))
    T.truthy(dl.equal(p:to({device = "cuda", dtype = dl.float64, non_blocking = true}):cpu(), x:double()))
  end
  -- blocks are reused across batches without mixing their contents
  local outs = {}
  for i = 1, 6 do
    local b = dl.full({1000}, i):pin_memory()
    outs[i] = b:to({device = "cuda", non_blocking = true})
    b = nil -- luacheck: ignore
    collectgarbage()
  end
  for i = 1, 6 do T.truthy(dl.equal(outs[i]:cpu(), dl.full({1000}, i)), "batch " .. i) end
  T.raises(function() x:cuda():pin_memory() end, "only CPU tensors")
  -- a loader that pins
  local ds = dl.data.TensorDataset(dl.randn(10, 3), dl.arange(10))
  for _, bx, by in dl.data.DataLoader(ds, {batch_size = 4, pin_memory = true}):iter() do
    T.truthy(bx:is_pinned() and by:is_pinned())
    T.eq(bx:to({device = "cuda", non_blocking = true}):cpu():sum():item(), bx:sum():item())
  end
end)

T.case("Module:to moves parameters in place", function()
  dl.manual_seed(4)
  local lin = dl.nn.Linear(3, 2)
  local w = lin.weight
  local opt = dl.optim.SGD(lin:parameters(), {lr = 0.1})
  lin.weight.grad = dl.ones(2, 3)
  lin:cuda()
  T.truthy(rawequal(lin.weight, w))
  T.eq(w.device, "cuda:0")
  T.eq(w.grad.device, "cuda:0")
  T.eq(opt.param_groups[1].params[1].device, "cuda:0")
  lin:to({device = "cpu", dtype = dl.float64})
  T.eq(w.device, "cpu")
  T.eq(w.dtype, dl.float64)
  lin:cuda(0)
  T.eq(lin.bias.device, "cuda:0")
  lin:cpu()
  T.eq(lin.bias.device, "cpu")
end)

-- Whole models: these need the other families' CUDA kernels.

-- A resnet18 step on 4 images of 64x64.  In training mode batch norm
-- normalises layer4's 2x2 maps over 16 values, which amplifies rounding
-- differences a lot, so float32 is judged against a float64 reference rather
-- than against the other device's float32; eval mode has no such amplifier.
local function resnet_case(dev, opts)
  opts = opts or {}
  dl.manual_seed(0)
  local model = dl.models.resnet18({num_classes = 10})
  local x = dl.randn(4, 3, 64, 64)
  local y = dl.tensor({3, 7, 1, 10})
  local dtype = opts.dtype or dl.float32
  model:to({device = dev, dtype = dtype})
  if opts.eval then model:eval() end
  if opts.channels_last then model:to({memory_format = "channels_last"}) end
  x, y = x:to(dtype):to(dev), y:to(dev)
  if opts.channels_last then x = x:contiguous({memory_format = "channels_last"}) end
  local function fwd()
    local logits = model(x)
    return logits, dl.nn.functional.cross_entropy(logits, y)
  end
  local logits, loss
  if opts.amp then
    logits, loss = dl.autocast({dtype = opts.amp}, fwd)
  else
    logits, loss = fwd()
  end
  loss:backward()
  local grads = {}
  for name, p in model:named_parameters() do
    if name == "conv1.weight" or name == "layer2.0.conv1.weight" or name == "fc.weight" or name == "fc.bias"
      or name == "bn1.weight" then
      grads[name] = p.grad:cpu():double()
      T.eq(p.grad.dtype, dtype, name .. " grad dtype")
    end
  end
  return {logits = logits:double():cpu(), grads = grads, model = model}
end

local function maxdiff(a, b) return (a - b):abs():amax():item() end

T.case("resnet18 forward and backward in float64: CUDA equals the CPU", function()
  local cpu = resnet_case("cpu", {dtype = dl.float64})
  local gpu = resnet_case("cuda", {dtype = dl.float64})
  T.truthy(maxdiff(cpu.logits, gpu.logits) < 1e-9, "logits differ by " .. maxdiff(cpu.logits, gpu.logits))
  for name, g in pairs(cpu.grads) do
    local d, scale = maxdiff(g, gpu.grads[name]), g:abs():amax():item()
    T.truthy(d <= 1e-8 * scale + 1e-12, name .. " grads differ by " .. d)
  end
end)

T.case("resnet18 in float32: CUDA's error against float64 is the CPU's", function()
  local ref = resnet_case("cpu", {dtype = dl.float64})
  local cpu = resnet_case("cpu")
  local gpu = resnet_case("cuda")
  local ec, eg = maxdiff(cpu.logits, ref.logits), maxdiff(gpu.logits, ref.logits)
  T.truthy(eg <= 4 * ec + 1e-5, string.format("logits: cuda error %.3g, cpu error %.3g", eg, ec))
  for name, g in pairs(ref.grads) do
    local ecg, egg = maxdiff(cpu.grads[name], g), maxdiff(gpu.grads[name], g)
    local scale = g:abs():amax():item()
    T.truthy(egg <= 4 * ecg + 1e-5 * scale,
      string.format("%s: cuda error %.3g, cpu error %.3g", name, egg, ecg))
  end
end)

T.case("autocast bf16 logits and float32 master grads", function()
  local ref = resnet_case("cuda", {eval = true})
  local half = resnet_case("cuda", {eval = true, amp = "bf16"})
  local diff, scale = maxdiff(half.logits, ref.logits), ref.logits:abs():amax():item()
  T.truthy(diff < 5e-2 * scale, string.format("bf16 logits differ by %.3g (scale %.3g)", diff, scale))
  for name, p in half.model:named_parameters() do T.eq(p.dtype, dl.float32, name) end
end)

T.case("a channels-last model gives the NCHW logits", function()
  local ref = resnet_case("cuda", {eval = true})
  local cl = resnet_case("cuda", {eval = true, channels_last = true})
  T.eq(table.concat(cl.model.conv1.weight:stride(), ","), "147,1,21,3")
  local diff, scale = maxdiff(cl.logits, ref.logits), ref.logits:abs():amax():item()
  T.truthy(diff < 1e-4 * scale, string.format("channels-last logits differ by %.3g (scale %.3g)", diff, scale))
end)

T.case("GradScaler skips a step with an inf gradient on CUDA", function()
  local w = dl.tensor({1.0, 2.0}):cuda():requires_grad_()
  local opt = dl.optim.SGD({w}, {lr = 0.5})
  local scaler = dl.amp.GradScaler({init_scale = 1024})
  local loss = (w * dl.tensor({math.huge, 1.0}):cuda()):sum()
  scaler:scale(loss):backward()
  scaler:step(opt)
  scaler:update()
  T.truthy(dl.equal(w:cpu(), dl.tensor({1.0, 2.0})))
  T.eq(scaler:get_scale(), 512.0)
  opt:zero_grad()
  scaler:scale((w * dl.tensor({1.0, 1.0}):cuda()):sum()):backward()
  scaler:step(opt)
  scaler:update()
  T.truthy(dl.equal(w:cpu(), dl.tensor({0.5, 1.5})))
end)

T.done()
