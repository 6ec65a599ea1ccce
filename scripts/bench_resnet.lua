-- bench_resnet.lua - images/s of a ResNet training step (forward,
-- cross-entropy, backward, SGD-momentum step) and of inference, next to
-- PyTorch's figures from scripts/bench_resnet.py (same arch, batch, image size
-- and threads), and the ratio dlua / PyTorch.
--
-- On the CPU (the default): float32, --batch images, --threads threads;
-- PyTorch is Debian's /usr/bin/python3.  A third row times inference after
-- dl.models.optimize_for_inference (batch norms folded into the
-- convolutions), against PyTorch's plain evaluation.
-- With --device cuda: five rows, each timed between device synchronisations:
-- training at --batch (default 256) in float32 with TF32 and in bfloat16
-- autocast with channels-last, inference throughput in both, and batch-1
-- latency (ms, float32/TF32); PyTorch is --python (default python3).
-- Usage: dlua scripts/bench_resnet.lua [--arch resnet50] [--batch 8] [--size 224]
--        [--threads 2] [--steps 5] [--warmup 2] [--device cpu|cuda]
--        [--python /usr/bin/python3] [--no-torch] [--channels-last]
-- --channels-last (CPU): both frameworks run the model and its input
-- channels-last (NHWC memory order), dlua through oneDNN's NHWC kernels.
local parse = dofile((arg[0]:match("^(.*)/[^/]*$") or ".") .. "/benchopts.lua")
local opts = parse("bench_resnet", arg, {arch = "resnet50", batch = 0, size = 224, threads = 2,
  steps = 0, warmup = 0, device = "cpu", python = ""}, {"no-torch", "channels-last"})
local with_torch, channels_last = not opts["no-torch"], opts["channels-last"]

local on_gpu = opts.device:match("^cuda") ~= nil
if opts.batch == 0 then opts.batch = on_gpu and 256 or 8 end
if opts.steps == 0 then opts.steps = on_gpu and 10 or 5 end
if opts.warmup == 0 then opts.warmup = on_gpu and 3 or 2 end
if opts.python == "" then opts.python = on_gpu and "python3" or "/usr/bin/python3" end

local function torch_figures(extra)
  local t = {}
  if not with_torch then return t end
  local script = (arg[0]:match("^(.*)/[^/]*$") or ".") .. "/bench_resnet.py"
  local cmd = string.format("%s %s --arch %s --batch %d --size %d --threads %d --steps %d --warmup %d%s",
    opts.python, script, opts.arch, opts.batch, opts.size, opts.threads, opts.steps, opts.warmup,
    extra or "")
  local p = io.popen(cmd .. " 2>&1")
  for line in p:lines() do
    local k, v = line:match("^([%w_]+) ([%d.]+)$")
    if k then t[k] = tonumber(v) else io.stderr:write("torch: ", line, "\n") end
  end
  p:close()
  return t
end

if on_gpu then
  if not dl.cuda.is_available() then
    io.stderr:write("bench_resnet: --device cuda but no GPU on this machine\n")
    os.exit(2)
  end
  local dev = opts.device
  local F = dl.nn.functional
  local function sync() dl.cuda.synchronize() end
  -- one configuration: returns train img/s, infer img/s (or latency ms at batch 1)
  local function run(cfg)
    dl.manual_seed(0)
    dl.backends.allow_tf32 = true
    dl.backends.cudnn.benchmark = true
    local model = dl.models[opts.arch]():to(dev)
    if cfg.channels_last then model:to({memory_format = "channels_last"}) end
    local x = dl.randn(cfg.batch, 3, opts.size, opts.size):to(dev)
    if cfg.channels_last then x = x:contiguous({memory_format = "channels_last"}) end
    local y = dl.randint(1, 1001, {cfg.batch}):to(dev)
    local opt = dl.optim.SGD(model:parameters(), {lr = 0.001, momentum = 0.9})
    local function fwd(fn)
      if cfg.amp then return dl.autocast({dtype = cfg.amp}, fn) end
      return fn()
    end
    local function timed(n, fn)
      for _ = 1, opts.warmup do fn() end
      sync()
      local t0 = dl.clock()
      for _ = 1, n do fn() end
      sync()
      return (dl.clock() - t0) / n
    end
    local train
    if cfg.train then
      model:train()
      train = cfg.batch / timed(opts.steps, function()
        opt:zero_grad()
        local loss = fwd(function() return F.cross_entropy(model(x), y) end)
        loss:backward()
        opt:step()
      end)
    end
    model:eval()
    local per = dl.no_grad(function()
      return timed(cfg.batch == 1 and 5 * opts.steps or opts.steps, function() fwd(function() return model(x) end) end)
    end)
    return train, per
  end
  local rows = {}
  local function add(name, unit, v, key)
    rows[#rows + 1] = {name, unit, v, key}
    io.stderr:write(string.format("dlua %s: %.2f %s\n", name, v, unit))
  end
  local tr, per = run({batch = opts.batch, train = true})
  add("train fp32/tf32", "img/s", tr, "train_tf32")
  add("infer fp32/tf32", "img/s", opts.batch / per, "infer_tf32")
  tr, per = run({batch = opts.batch, train = true, amp = "bf16", channels_last = true})
  add("train bf16 channels-last", "img/s", tr, "train_bf16cl")
  add("infer bf16 channels-last", "img/s", opts.batch / per, "infer_bf16cl")
  local _, lat = run({batch = 1})
  add("latency batch 1 fp32/tf32", "ms", lat * 1000, "latency_ms")
  local peak = dl.cuda.max_memory_allocated() / 2 ^ 20
  local torch = torch_figures(" --device cuda")
  print(string.format("%s, batch %d, %dx%d, %s (%s)", opts.arch, opts.batch, opts.size, opts.size,
    dev, dl.cuda.get_device_name(0)))
  print(string.format("%-28s %12s %12s %8s", "", "dlua", "torch", "ratio"))
  for _, r in ipairs(rows) do
    local t = torch[r[4]]
    -- ratio > 1 means dlua is faster (for latency: torch ms / dlua ms)
    local ratio = t and (r[2] == "ms" and t / r[3] or r[3] / t)
    print(string.format("%-28s %9.2f %-2s %9s %-2s %8s", r[1], r[3], r[2] == "ms" and "ms" or "",
      t and string.format("%.2f", t) or "-", r[2] == "ms" and "ms" or "",
      ratio and string.format("%.2fx", ratio) or "-"))
  end
  print(string.format("dlua peak GPU memory: %.0f MB%s", peak,
    torch.peak_mb and string.format(" (torch %.0f MB)", torch.peak_mb) or ""))
  os.exit(0)
end

dl.set_num_threads(opts.threads)
dl.manual_seed(0)
local nn, F = dl.nn, dl.nn.functional
local model = dl.models[opts.arch]()
local x = dl.randn(opts.batch, 3, opts.size, opts.size)
local y = dl.randint(1, 1001, {opts.batch})
local memory_format = channels_last and "channels_last" or "contiguous_format"
if channels_last then
  model:to({memory_format = memory_format})
  x = x:contiguous({memory_format = memory_format})
end
local opt = dl.optim.SGD(model:parameters(), {lr = 0.001, momentum = 0.9})

local function train_step()
  opt:zero_grad()
  local loss = F.cross_entropy(model(x), y)
  loss:backward()
  opt:step()
end

local function rss_mb()
  for line in io.lines("/proc/self/status") do
    local v = line:match("^VmHWM:%s+(%d+)")
    if v then return tonumber(v) / 1024 end
  end
end

model:train()
for _ = 1, opts.warmup do train_step() end
local t0 = dl.clock()
for _ = 1, opts.steps do train_step() end
local train_ips = opts.batch * opts.steps / (dl.clock() - t0)

-- images/s of evaluation-mode forwards
local function infer_rate()
  return dl.no_grad(function()
    for _ = 1, opts.warmup do model(x) end
    local t1 = dl.clock()
    for _ = 1, opts.steps do model(x) end
    return opts.batch * opts.steps / (dl.clock() - t1)
  end)
end

model:eval()
local infer_ips = infer_rate()
-- batch-1 latency, ms per evaluation-mode forward
local latency_ms = dl.no_grad(function()
  local x1 = dl.randn(1, 3, opts.size, opts.size):contiguous({memory_format = memory_format})
  for _ = 1, opts.warmup do model(x1) end
  local n = math.max(5, opts.steps)
  local t1 = dl.clock()
  for _ = 1, n do model(x1) end
  return (dl.clock() - t1) / n * 1000
end)
-- the same model with its batch norms folded into the convolutions
-- (dl.models.optimize_for_inference); PyTorch's figure is its plain eval
dl.models.optimize_for_inference(model)
local folded_ips = infer_rate()

local torch = torch_figures(channels_last and " --channels-last" or "")

print(string.format("%s, batch %d, %dx%d, %d threads, float32 CPU%s", opts.arch, opts.batch,
  opts.size, opts.size, opts.threads, channels_last and ", channels-last" or ""))
print(string.format("%-18s %12s %12s %8s", "", "dlua img/s", "torch img/s", "ratio"))
for _, row in ipairs({{"train", train_ips}, {"infer", infer_ips}, {"infer (folded BN)", folded_ips, "infer"}}) do
  local t = torch[row[3] or row[1]]
  print(string.format("%-18s %12.2f %12s %8s", row[1], row[2], t and string.format("%.2f", t) or "-",
    t and string.format("%.2fx", row[2] / t) or "-"))
end
local tl = torch.latency_ms
print(string.format("%-18s %9.2f ms %9s ms %8s", "latency batch 1", latency_ms,
  tl and string.format("%.2f", tl) or "-", tl and string.format("%.2fx", tl / latency_ms) or "-"))
local rss, tr = rss_mb(), torch.peak_rss_mb
print(string.format("%-18s %9.0f MB %9s MB %8s", "peak RSS", rss, tr and string.format("%.0f", tr) or "-",
  tr and string.format("%.2fx", tr / rss) or "-"))
