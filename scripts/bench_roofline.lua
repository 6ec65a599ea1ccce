-- bench_roofline.lua - how fast a ResNet step could be on these cores: the
-- floating-point work of its convolutions and linear layer (counted from the
-- shapes of one forward pass) divided by the float32 matrix-multiply rate the
-- cores reach (oneDNN sgemm, 2048^3, best of several).  Prints that floor for
-- a training step (forward + input gradient + weight gradient; the stem has
-- no input gradient) and for inference, dlua's measured time, and with
-- --torch-train / --torch-infer (PyTorch's images/s from
-- scripts/bench_resnet.lua) the largest ratio to PyTorch any implementation
-- of the same arithmetic could reach here.
-- Usage: dlua scripts/bench_roofline.lua [--arch resnet50] [--batch 8] [--size 224]
--        [--threads 2] [--steps 3] [--torch-train IMG_S] [--torch-infer IMG_S]
local parse = dofile((arg[0]:match("^(.*)/[^/]*$") or ".") .. "/benchopts.lua")
local opts = parse("bench_roofline", arg, {arch = "resnet50", batch = 8, size = 224, threads = 2,
  steps = 3, ["torch-train"] = 0, ["torch-infer"] = 0})

dl.set_num_threads(opts.threads)
dl.manual_seed(0)
local F = dl.nn.functional

-- 1. Work: multiply-adds of every convolution and the linear layer.
local layers = {}
local conv2d, linear = F.conv2d, F.linear
F.conv2d = function(x, w, ...)
  local y = conv2d(x, w, ...)
  local s, ws = y:size(), w:size()
  -- output elements x (input channels per group x kernel area)
  local macs = s[1] * s[2] * s[3] * s[4] * ws[2] * ws[3] * ws[4]
  layers[#layers + 1] = {macs = macs, first = #layers == 0}
  return y
end
F.linear = function(x, w, ...)
  local y = linear(x, w, ...)
  layers[#layers + 1] = {macs = x:size(1) * w:size(1) * w:size(2)}
  return y
end
local model = dl.models[opts.arch]()
local x = dl.randn(opts.batch, 3, opts.size, opts.size)
local y = dl.randint(1, 1001, {opts.batch})
dl.no_grad(function() model:eval()(x) end)
F.conv2d, F.linear = conv2d, linear
local fwd, train = 0, 0
for _, l in ipairs(layers) do
  fwd = fwd + 2 * l.macs
  train = train + 2 * l.macs * (l.first and 2 or 3)
end

-- 2. Rate: sgemm on these threads.
local n = 2048
local a, b = dl.randn(n, n), dl.randn(n, n)
local best = math.huge
dl.matmul(a, b)
for _ = 1, 5 do
  local t0 = dl.clock()
  dl.matmul(a, b)
  best = math.min(best, dl.clock() - t0)
end
local peak = 2 * n ^ 3 / best

-- 3. dlua's own times.
local function timed(fn)
  fn()
  local t0 = dl.clock()
  for _ = 1, opts.steps do fn() end
  return (dl.clock() - t0) / opts.steps
end
model:train()
local opt = dl.optim.SGD(model:parameters(), {lr = 0.001, momentum = 0.9})
local t_train = timed(function()
  opt:zero_grad()
  F.cross_entropy(model(x), y):backward()
  opt:step()
end)
model:eval()
local t_infer = dl.no_grad(function() return timed(function() model(x) end) end)

print(string.format("%s, batch %d, %dx%d, %d threads: %d convolution/linear layers",
  opts.arch, opts.batch, opts.size, opts.size, opts.threads, #layers))
print(string.format("sgemm %dx%dx%d: %.0f GFLOP/s (best of 5)", n, n, n, peak / 1e9))
print(string.format("%-10s %10s %12s %12s %14s %10s", "", "GFLOP", "floor ms", "dlua ms",
  "dlua GFLOP/s", "of floor"))
local function row(name, flop, t)
  local floor = flop / peak
  print(string.format("%-10s %10.1f %12.1f %12.1f %14.0f %9.0f%%", name, flop / 1e9, floor * 1e3,
    t * 1e3, flop / t / 1e9, 100 * floor / t))
  return floor
end
local floor_train = row("train", train, t_train)
local floor_infer = row("inference", fwd, t_infer)
local function ceiling(name, img_s, floor)
  if img_s <= 0 then return end
  local torch_t = opts.batch / img_s
  print(string.format("%s: PyTorch %.1f ms per batch; at the floor a step would be %.2fx PyTorch's rate",
    name, torch_t * 1e3, torch_t / floor))
end
ceiling("train", opts["torch-train"], floor_train)
ceiling("inference", opts["torch-infer"], floor_infer)
