-- test_graph_cuda.lua - CUDA graphs on a machine with a GPU: capture and
-- replay (dl.cuda.CUDAGraph, dl.cuda.graph), capture refusing host
-- synchronisations with a clear error and leaving the device healthy, the
-- private memory pool, dl.cuda.graphed for inference (replays equal eager
-- calls) and for whole training steps (replayed steps give the eager losses,
-- with float32 SGD and a changing learning rate, bf16 channels-last, fp16
-- with GradScaler), and the optimizer steps that refuse to be captured.
-- Skipped (exit 77) without a GPU.
local T = require "testlib"
T.require_cuda()

dl.backends.allow_tf32 = false

local CAPTURE_REFUSED = "not allowed while a CUDA graph is being captured"

T.case("capture and replay", function()
  local x = T.randn({1000}, {seed = 1, device = "cuda"})
  local g = dl.cuda.CUDAGraph()
  local y = dl.cuda.graph(g, function() return (x * 2 + 1):relu() end)
  T.eq(dl.cuda.is_current_stream_capturing(), false)
  g:replay()
  T.truthy(dl.equal(y:cpu(), (x:cpu() * 2 + 1):relu()), "first replay")
  x:copy_(T.randn({1000}, {seed = 2, device = "cuda"})) -- new values at the captured address
  g:replay()
  T.truthy(dl.equal(y:cpu(), (x:cpu() * 2 + 1):relu()), "replay after the input changed")
  T.truthy(tostring(g):match("ready"))
  g:reset()
  T.raises(function() g:replay() end, "nothing captured")
end)

T.case("capture refuses host synchronisations and leaves the device healthy", function()
  local x = T.randn({64}, {seed = 3, device = "cuda"})
  local g = dl.cuda.CUDAGraph()
  local refusals = {
    item = function() return x:sum():item() end,
    cpu = function() return x:cpu() end,
    synchronize = function() dl.cuda.synchronize() end,
    event = function() dl.cuda.Event():record() end,
    host_copy = function() return x + dl.randn(64):cuda() end, -- a pageable host-to-device copy
  }
  for name, fn in pairs(refusals) do
    local ok, err = pcall(dl.cuda.graph, g, fn)
    T.eq(ok, false, name)
    T.truthy(tostring(err):find(CAPTURE_REFUSED, 1, true), name .. ": " .. tostring(err))
    T.eq(dl.cuda.is_current_stream_capturing(), false, name .. ": capture ended")
    T.eq(dl.cuda._capturing_graph(), nil, name)
  end
  -- the same graph captures again, and eager work goes on
  local y = dl.cuda.graph(g, function() return x + 1 end)
  g:replay()
  T.truthy(dl.equal(y:cpu(), x:cpu() + 1))
  T.near(x:sum():item(), x:cpu():sum():item(), 1e-4)
  -- misuse
  local h = dl.cuda.CUDAGraph()
  T.raises(function() h:capture_end() end, "not capturing")
  T.raises(function() h:replay() end, "nothing captured")
  h:capture_begin()
  local _ = x * 3 -- something to capture
  T.raises(function() dl.cuda.CUDAGraph():capture_begin() end, "another graph is capturing")
  T.raises(function() h:replay() end, "still capturing")
  h:capture_end()
  T.raises(function() h:capture_begin() end, "holds a capture already")
end)

T.case("a graph's memory stays its own until it is freed", function()
  local g = dl.cuda.CUDAGraph()
  local y = dl.cuda.graph(g, function() return dl.ones({1 << 20}, {device = "cuda"}) * 3 end)
  g:replay()
  T.eq(y:sum():item(), 3 * (1 << 20))
  y = nil
  collectgarbage()
  collectgarbage() -- y's block goes back to the graph's pool, not to eager use
  local z = dl.zeros({1 << 20}, {device = "cuda"})
  g:replay() -- writes the graph's own block again
  T.eq(z:sum():item(), 0, "an eager tensor was overwritten by a replay")
  g:reset()
  collectgarbage()
  local w = dl.zeros({1 << 20}, {device = "cuda"}) -- may take the freed block now
  T.eq(w:sum():item(), 0)
end)

T.case("graphed inference gives the eager outputs", function()
  dl.manual_seed(0)
  local model = dl.models.resnet18({num_classes = 10}):to({device = "cuda"})
  model:eval()
  local function fwd(x) return dl.no_grad(function() return model(x) end) end
  local f = dl.cuda.graphed(fwd, {T.randn({2, 3, 64, 64}, {seed = 4, device = "cuda"})}, {warmup = 2})
  for i = 1, 3 do
    local x = T.randn({2, 3, 64, 64}, {seed = 10 + i, device = "cuda"})
    local out = f(x)
    T.close(out, fwd(x), 1e-5, 1e-6, "replay " .. i)
  end
  T.raises(function() f(dl.randn(3, 3, 64, 64):cuda()) end, "graphed: argument 1 is a [3, 3, 64, 64]")
  T.raises(function() f() end, "0 arguments given, the graph was captured with 1")
  f:reset()
  T.raises(function() f(dl.randn(2, 3, 64, 64):cuda()) end, "this callable was reset")
end)

-- Trains a resnet18 copy on `batches` (x, y pairs) eagerly or through
-- dl.cuda.graphed (warm-up: the first batch); returns the losses of steps
-- 2.. and the model.  lr(i) is the learning rate of step i.
local function train(opts, batches, graphed, lr)
  dl.manual_seed(0)
  local model = dl.models.resnet18({num_classes = 10}):to({device = "cuda"})
  if opts.channels_last then model:to({memory_format = "channels_last"}) end
  local opt = dl.optim.SGD(model:parameters(), {lr = lr(1), momentum = 0.9, weight_decay = 1e-4})
  local scaler = opts.amp == "fp16" and dl.amp.GradScaler({init_scale = 1024}) or nil
  local step = T.train_step(model, opt, dl.nn.CrossEntropyLoss(), opts.amp, scaler)
  local run = step
  if graphed then run = dl.cuda.graphed(step, batches[1], {warmup = 1}) else step(table.unpack(batches[1])) end
  local losses = {}
  for i = 2, #batches do
    for _, g in ipairs(opt.param_groups) do g.lr = lr(i) end
    losses[#losses + 1] = run(table.unpack(batches[i])):item()
  end
  return losses, model
end

for _, opts in ipairs {{}, {amp = "bf16", channels_last = true}, {amp = "fp16"}} do
  local name = (opts.amp or "float32") .. (opts.channels_last and " channels-last" or "")
  T.case("graphed training steps replay the eager losses: " .. name, function()
    local batches = {}
    for i = 1, 6 do
      local x = T.randn({8, 3, 64, 64}, {seed = 20 + i, device = "cuda"})
      if opts.channels_last then x = x:contiguous({memory_format = "channels_last"}) end
      dl.manual_seed(40 + i)
      batches[i] = {x, dl.randint(1, 11, {8}):cuda()}
    end
    local function lr(i) return 0.01 * (1 + 0.5 * i) end -- changes every step
    local eager, m1 = train(opts, batches, false, lr)
    local replayed, m2 = train(opts, batches, true, lr)
    local tol = opts.amp and 2e-2 or 1e-4
    for i = 1, #eager do
      T.near(replayed[i], eager[i], tol * math.abs(eager[i]), string.format("step %d: %s vs %s", i + 1, replayed[i], eager[i]))
    end
    T.close(m2.fc.weight, m1.fc.weight, opts.amp and 5e-2 or 1e-4, 1e-6, "fc.weight after the steps")
  end)
end

T.case("steps that cannot be captured say so", function()
  local p = T.randn({4}, {seed = 5, device = "cuda"}):requires_grad_()
  p.grad = dl.ones(4):cuda()
  local adam = dl.optim.Adam({p}, {lr = 0.1})
  adam:step()
  local ok, err = pcall(dl.cuda.graph, dl.cuda.CUDAGraph(), function() adam:step() end)
  T.eq(ok, false)
  T.truthy(tostring(err):find("Adam: this step cannot be captured in a CUDA graph", 1, true), tostring(err))
  local sgd = dl.optim.SGD({p}, {lr = 0.1, momentum = 0.9})
  ok, err = pcall(dl.cuda.graph, dl.cuda.CUDAGraph(), function() sgd:step() end)
  T.eq(ok, false)
  T.truthy(tostring(err):find("take one step before capturing", 1, true), tostring(err))
  T.eq(dl.cuda.is_current_stream_capturing(), false)
  sgd:step() -- eager: makes the state; now it captures
  local g = dl.cuda.CUDAGraph()
  dl.cuda.graph(g, function() sgd:step() end)
  local before = p:cpu()
  sgd.param_groups[1].lr = 0.0 -- the replay hook copies the new rate in
  g:replay()
  T.truthy(dl.equal(p:cpu(), before), "lr 0: the replayed step leaves p unchanged")
end)

T.done()
