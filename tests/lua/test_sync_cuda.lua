-- test_sync_cuda.lua - a CUDA training step never waits for the GPU: with
-- dl.cuda.sync_count() (every host synchronisation, counted in one place in
-- cuda/runtime.cu) a small ResNet's steady-state step makes none in float32,
-- bf16 channels-last and fp16 with GradScaler; loss:item() is the one
-- synchronisation the user asks for; checks found on the device (a bad class
-- label, a bad max-pool index) are reported at the next synchronisation, or
-- at once with dl.backends.cuda.sync_checks.  Skipped (exit 77) without a GPU.
local T = require "testlib"
T.require_cuda()

dl.backends.allow_tf32 = false

-- What the last synchronisations were, for a failure message.
local function reasons()
  return table.concat(dl.cuda._sync_reasons(), "; ")
end

-- A resnet18 training step on 8 images of 64x64: returns the synchronisations
-- of `steps` steady-state steps (after 3 warm-up steps), those of the one
-- loss read after them, and the summed loss read.
local function step_syncs(opts, steps)
  dl.manual_seed(0)
  local model = dl.models.resnet18({num_classes = 10}):to({device = "cuda"})
  if opts.channels_last then model:to({memory_format = "channels_last"}) end
  local opt = dl.optim.SGD(model:parameters(), {lr = 0.01, momentum = 0.9, weight_decay = 1e-4})
  local scaler = opts.amp == "fp16" and dl.amp.GradScaler() or nil
  local x = T.randn({8, 3, 64, 64}, {seed = 1, device = "cuda"})
  if opts.channels_last then x = x:contiguous({memory_format = "channels_last"}) end
  local y = dl.randint(1, 11, {8}):cuda()
  local sum = dl.zeros({}, {dtype = dl.float64, device = "cuda"})
  local train_step = T.train_step(model, opt, dl.nn.CrossEntropyLoss(), opts.amp, scaler)
  local function step()
    local loss = train_step(x, y)
    dl.no_grad(function() sum:add_(loss) end)
  end
  for _ = 1, 3 do step() end -- allocator, handles, cuDNN choices, optimizer state
  dl.cuda.synchronize()
  local c0 = dl.cuda.sync_count()
  for _ = 1, steps do step() end
  local c1 = dl.cuda.sync_count()
  local v = sum:item()
  return c1 - c0, dl.cuda.sync_count() - c1, v
end

for _, opts in ipairs {{}, {amp = "bf16", channels_last = true}, {amp = "fp16"}} do
  local name = (opts.amp or "float32") .. (opts.channels_last and " channels-last" or "")
  T.case("no synchronisation in a " .. name .. " training step", function()
    local n, read, v = step_syncs(opts, 4)
    T.eq(n, 0, string.format("%d synchronisations in 4 steps (last: %s)", n, reasons()))
    T.eq(read, 1, "loss:item() synchronises once (" .. reasons() .. ")")
    T.truthy(v == v and v > 0, "a finite summed loss, got " .. tostring(v))
  end)
end

T.case("the counter counts what waits for the GPU", function()
  local x = dl.randn(1000):cuda()
  local c0 = dl.cuda.sync_count()
  local _ = x * 2 + 1
  T.eq(dl.cuda.sync_count() - c0, 0, "kernels alone")
  local _ = x:sum():item()
  T.eq(dl.cuda.sync_count() - c0, 1, "item")
  dl.cuda.synchronize()
  T.eq(dl.cuda.sync_count() - c0, 2, "synchronize")
  local _ = x:cpu()
  T.eq(dl.cuda.sync_count() - c0, 3, "cpu()")
  T.truthy(dl.cuda._sync_reasons()[1]:match("from the GPU"), reasons())
end)

T.case("a bad class label is reported at the next synchronisation", function()
  local x = T.randn({4, 5}, {seed = 2, device = "cuda"}):requires_grad_()
  local bad = dl.tensor({1, 2, 9, 3}):cuda() -- label 9 of 5 classes
  local c0 = dl.cuda.sync_count()
  local loss = dl.nn.functional.cross_entropy(x, bad)
  loss:backward() -- the kernels skip the bad sample meanwhile
  T.eq(dl.cuda.sync_count() - c0, 0, "no wait in the forward and backward: " .. reasons())
  T.raises(function() loss:item() end,
    "cross_entropy: target label 9 is out of range for 5 classes (labels are 1..5; ignore_index is -100)")
  -- reported once; the device goes on
  local ok = dl.nn.functional.cross_entropy(x, dl.tensor({1, 2, 5, 3}):cuda()):item()
  T.truthy(ok == ok, "a later loss is finite")
  T.eq(x.grad:cpu()[3]:abs():sum():item(), 0, "the bad sample's gradient is zero")
  -- nll_loss and ignore_index
  local logp = dl.nn.functional.log_softmax(x:detach(), 2)
  T.raises(function() dl.nn.functional.nll_loss(logp, dl.tensor({0, 1, 1, 1}):cuda()):item() end,
    "nll_loss: target label 0 is out of range")
  local v = dl.nn.functional.nll_loss(logp, dl.tensor({-100, 1, 1, 1}):cuda()):item()
  T.near(v, dl.nn.functional.nll_loss(logp:cpu(), dl.tensor({-100, 1, 1, 1})):item(), 1e-5)
  -- debugging: checks waited for at the op
  dl.backends.cuda.sync_checks = true
  local ok2, err = pcall(dl.nn.functional.cross_entropy, x, bad)
  dl.backends.cuda.sync_checks = false
  T.eq(ok2, false)
  T.truthy(tostring(err):find("target label 9 is out of range", 1, true), tostring(err))
end)

T.done()
