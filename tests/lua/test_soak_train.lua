-- test_soak_train.lua - soak: 2,000 training steps of a small ResNet (a stem
-- convolution and three torchvision BasicBlocks, 8 -> 16 -> 32 channels, on
-- 16x16 inputs, batch 8, SGD with momentum) keep the process's RSS flat
-- after warm-up, with no collectgarbage calls (the bindings pace Lua's
-- collector from the bytes tensors hold).
--
-- "Flat": RSS saws with the collector's cycle, so like is compared with like:
-- the peak of the last 400 steps is within 4% (and 8 MB) of the peak of steps
-- 201-600.  A leak of one small tensor per step (~2 KB) over the 1,400 steps
-- between them would add ~3 MB and fail it.  Also checked: the loss falls on
-- the fixed batches and stays finite at every step.
-- Label: long (about 30 s on one thread); left out of the sanitizer pass,
-- where ASan's quarantine makes RSS meaningless.
local T = require "testlib"
local R = require "dl.models.resnet"
local nn = dl.nn

local function rss_kb() return T.proc_status("VmRSS") end

local function small_resnet(classes)
  local function down(i, o) return nn.Sequential(nn.Conv2d(i, o, 1, {stride = 2, bias = false}), nn.BatchNorm2d(o)) end
  return nn.Sequential(
    nn.Conv2d(3, 8, 3, {padding = 1, bias = false}), nn.BatchNorm2d(8), nn.ReLU(),
    R.BasicBlock(8, 8),
    R.BasicBlock(8, 16, 2, down(8, 16)),
    R.BasicBlock(16, 32, 2, down(16, 32)),
    nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, classes))
end

T.case("2,000 steps of a small ResNet keep RSS flat", function()
  -- one compute thread: a model this small gains nothing from two, and on a
  -- busy machine OpenMP's waiting threads made the run 20x slower
  dl.set_num_threads(1)
  dl.manual_seed(0)
  local model = small_resnet(10)
  model:train()
  local opt = dl.optim.SGD(model:parameters(), {lr = 0.02, momentum = 0.9})
  local xs, ys = {}, {}
  for i = 1, 4 do xs[i], ys[i] = dl.randn(8, 3, 16, 16), dl.randint(1, 11, {8}) end
  local early, late, first, last = 0, 0, nil, nil
  local t0 = dl.clock()
  for step = 1, 2000 do
    local k = step % 4 + 1
    opt:zero_grad()
    local loss = nn.functional.cross_entropy(model(xs[k]), ys[k])
    loss:backward()
    opt:step()
    local l = loss:item()
    T.truthy(l == l and l < math.huge, "finite loss at step " .. step)
    if step <= 4 then first = (first or 0) + l / 4 end
    if step > 1996 then last = (last or 0) + l / 4 end
    if step > 200 and step <= 600 then early = math.max(early, rss_kb()) end
    if step > 1600 then late = math.max(late, rss_kb()) end
  end
  print(string.format("2000 steps in %.0f s; peak RSS steps 201-600: %.1f MB, steps 1601-2000: %.1f MB (%+.2f%%); loss %.3f -> %.3f",
    dl.clock() - t0, early / 1024, late / 1024, 100 * (late - early) / early, first, last))
  T.truthy(late <= math.max(early * 1.04, early + 8 * 1024), "RSS grew after warm-up")
  T.truthy(last < first, "the loss falls on the fixed batches")
end)

T.done()
