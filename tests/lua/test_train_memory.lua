-- test_train_memory.lua - 200 training steps of resnet18 (batch 8, 64x64,
-- SGD with momentum) keep the process's RSS flat after step 20, with no
-- collectgarbage calls (the bindings pace the collector).  RSS saws up and
-- down with the collector's cycle, so "flat" compares like with like: the
-- highest RSS of the last 40 steps is within 5% of the highest of the 40
-- steps after step 20 -- a leak of even 0.1 MB per step would fail it.
local T = require "testlib"

local function rss_kb() return T.proc_status("VmRSS") end

T.case("resnet18 training keeps RSS flat", function()
  dl.manual_seed(0)
  local model = dl.models.resnet18({num_classes = 10})
  model:train()
  local opt = dl.optim.SGD(model:parameters(), {lr = 0.01, momentum = 0.9})
  local x = dl.randn(8, 3, 64, 64)
  local y = dl.randint(1, 11, {8})
  local early, late, first_loss, loss = 0, 0
  for step = 1, 200 do
    opt:zero_grad()
    loss = dl.nn.functional.cross_entropy(model(x), y)
    loss:backward()
    opt:step()
    if step == 1 then first_loss = loss:item() end
    local r = rss_kb()
    if step > 20 and step <= 60 then early = math.max(early, r) end
    if step > 160 then late = math.max(late, r) end
  end
  print(string.format("peak RSS, steps 21-60: %.1f MB; steps 161-200: %.1f MB (%+.1f%%); loss %.3f -> %.3f",
    early / 1024, late / 1024, 100 * (late - early) / early, first_loss, loss:item()))
  T.truthy(late <= early * 1.05, "RSS grew more than 5% after step 20")
  T.truthy(loss:item() < first_loss, "the loss falls on a fixed batch")
end)

T.done()
