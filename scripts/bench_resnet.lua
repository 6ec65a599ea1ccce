-- bench_resnet.lua - images/s of a ResNet training step (forward,
-- cross-entropy, backward, SGD-momentum step) and of inference, next to
-- PyTorch's figures from scripts/bench_resnet.py (same arch, batch, image size
-- and threads), and the ratio dlua / PyTorch.
--
-- On the CPU (the default): float32, --batch images, --threads threads;
-- PyTorch is Debian's /usr/bin/python3.  A third row times inference after
-- dl.models.optimize_for_inference (batch norms folded into the
-- convolutions), against PyTorch's plain evaluation.
-- With --device cuda, each timed between device synchronisations: training at
-- --batch (default 256) in bfloat16 autocast with channels-last and in
-- float32 with TF32, inference in both, batch-1 latency (ms, float32/TF32),
-- the peak GPU memory of the training runs and the host synchronisations per
-- training step; PyTorch is --python (default python3), its latency also
-- measured with a CUDA graph.  cudnn.benchmark is on unless --no-benchmark;
-- --cuda-graph runs every step through dl.cuda.graphed (the latency row is
-- then latency_graph_ms).  $DLUA_BENCH_NO_BENCHMARK=1 and
-- $DLUA_BENCH_CUDA_GRAPH=1 do the same, so scripts/gpu_check.sh describes its
-- A/B variants as environment settings alone.  --out FILE writes the figures
-- as "key value" lines; --report DIR prints one table from DIR/torch.txt and
-- DIR/variant_<name>.txt (in DIR/variants.txt's order when it is there): the
-- best variant per row against PyTorch, then every variant's figures.
-- Usage: dlua scripts/bench_resnet.lua [--arch resnet50] [--batch 8] [--size 224]
--        [--threads 2] [--steps 5] [--warmup 2] [--device cpu|cuda]
--        [--python /usr/bin/python3] [--no-torch] [--channels-last]
--        [--no-benchmark] [--cuda-graph] [--out FILE] [--report DIR]
-- --channels-last (CPU): both frameworks run the model and its input
-- channels-last (NHWC memory order), dlua through oneDNN's NHWC kernels.
local parse = dofile((arg[0]:match("^(.*)/[^/]*$") or ".") .. "/benchopts.lua")
local opts = parse("bench_resnet", arg, {arch = "resnet50", batch = 0, size = 224, threads = 2,
  steps = 0, warmup = 0, device = "cpu", python = "", out = "", report = ""},
  {"no-torch", "channels-last", "no-benchmark", "cuda-graph"})
local with_torch, channels_last = not opts["no-torch"], opts["channels-last"]
if os.getenv("DLUA_BENCH_NO_BENCHMARK") == "1" then opts["no-benchmark"] = true end
if os.getenv("DLUA_BENCH_CUDA_GRAPH") == "1" then opts["cuda-graph"] = true end

local on_gpu = opts.device:match("^cuda") ~= nil
if opts.batch == 0 then opts.batch = on_gpu and 256 or 8 end
if opts.steps == 0 then opts.steps = on_gpu and 10 or 5 end
if opts.warmup == 0 then opts.warmup = on_gpu and 3 or 2 end
if opts.python == "" then opts.python = on_gpu and "python3" or "/usr/bin/python3" end

local function torch_figures(extra)
  local t = {}
  if not with_torch then return t end
  local script = (arg[0]:match("^(.*)/[^/]*$") or ".") .. "/bench_resnet.py"
  -- THP_MEM_ALLOC_ENABLE=1: PyTorch 2.x's huge-page allocation, as dlua's host cache (1.13 ignores it)
  local cmd = string.format("THP_MEM_ALLOC_ENABLE=1 %s %s --arch %s --batch %d --size %d --threads %d --steps %d --warmup %d%s",
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

-- --- the GPU report: one table from the figures of PyTorch and of each variant -----------------

-- "key value" lines of a file into a table (nil when the file is missing).
local function read_figures(path)
  local f = io.open(path)
  if not f then return nil end
  local t = {}
  for line in f:lines() do
    local k, v = line:match("^([%w_]+) ([%-%d.e+]+)$")
    if k then t[k] = tonumber(v) end
  end
  f:close()
  return t
end

-- The issue's rows: key, label, unit, which way is better.
local ROWS = {
  {"train_bf16cl", "training bf16 channels-last", "img/s", "high"},
  {"train_tf32", "training fp32/TF32", "img/s", "high"},
  {"infer_bf16cl", "inference bf16 channels-last", "img/s", "high"},
  {"infer_tf32", "inference fp32/TF32", "img/s", "high"},
  {"latency_ms", "latency batch 1 fp32, eager", "ms", "low"},
  {"latency_graph_ms", "latency batch 1 fp32, CUDA graph", "ms", "low"},
  {"peak_mb", "peak GPU memory in training", "MB", "low"},
  {"syncs_per_step", "host syncs per training step", "", "low"},
}

if opts.report ~= "" then
  local dir = opts.report
  local torch = read_figures(dir .. "/torch.txt") or {}
  -- the variants in DIR/variants.txt's order (one name a line), else all found
  local variants, names = {}, {}
  local order = io.open(dir .. "/variants.txt")
  if order then
    for name in order:lines() do names[#names + 1] = name end
    order:close()
  else
    local p = io.popen("ls " .. dir .. "/variant_*.txt 2>/dev/null")
    for path in p:lines() do names[#names + 1] = path:match("variant_(.-)%.txt$") end
    p:close()
  end
  for _, name in ipairs(names) do
    variants[#variants + 1] = {name = name, v = read_figures(dir .. "/variant_" .. name .. ".txt") or {}}
  end
  local info = read_figures(dir .. "/info.txt") or {}
  print(string.format("%-38s %10s %10s %7s  %s", "", "PyTorch", "dlua", "ratio", "best dlua variant"))
  for _, r in ipairs(ROWS) do
    local key, unit, high = r[1], r[3], r[4] == "high"
    local best, which
    for _, var in ipairs(variants) do
      local x = var.v[key]
      if x and (not best or (high and x > best) or (not high and x < best)) then best, which = x, var.name end
    end
    local t = torch[key]
    -- ratio > 1: dlua is better (faster, or less memory)
    local ratio = t and best and best > 0 and t > 0 and (high and best / t or t / best)
    local function num(x) return x and string.format("%.2f", x) or "-" end
    print(string.format("%-38s %10s %10s %7s  %s", r[2] .. (unit ~= "" and " (" .. unit .. ")" or ""),
      num(t), num(best), ratio and string.format("%.2fx", ratio) or "-", which or "-"))
  end
  if #variants > 0 then
    print("")
    local head = string.format("%-38s", "variant figures")
    for _, var in ipairs(variants) do head = head .. string.format(" %11s", var.name:sub(1, 11)) end
    print(head)
    for _, r in ipairs(ROWS) do
      local line = string.format("%-38s", r[2])
      for _, var in ipairs(variants) do
        local x = var.v[r[1]]
        line = line .. string.format(" %11s", x and string.format("%.2f", x) or "-")
      end
      print(line)
    end
  end
  if info.cudnn then print(string.format("cuDNN %d", info.cudnn)) end
  os.exit(0)
end

if on_gpu then
  if not dl.cuda.is_available() then
    io.stderr:write("bench_resnet: --device cuda but no GPU on this machine\n")
    os.exit(2)
  end
  local dev = opts.device
  local F = dl.nn.functional
  local graphs = opts["cuda-graph"]
  dl.backends.allow_tf32 = true
  dl.backends.cudnn.benchmark = not opts["no-benchmark"]
  local function sync() dl.cuda.synchronize() end
  local function timed(n, fn)
    for _ = 1, opts.warmup do fn() end
    sync()
    local t0 = dl.clock()
    for _ = 1, n do fn() end
    sync()
    return (dl.clock() - t0) / n
  end
  local function setup(cfg)
    dl.manual_seed(0)
    local model = dl.models[opts.arch]():to(dev)
    if cfg.channels_last then model:to({memory_format = "channels_last"}) end
    local x = dl.randn(cfg.batch, 3, opts.size, opts.size):to(dev)
    if cfg.channels_last then x = x:contiguous({memory_format = "channels_last"}) end
    local y = dl.randint(1, 1001, {cfg.batch}):to(dev)
    local function fwd(fn, ...)
      if cfg.amp then return dl.autocast({dtype = cfg.amp}, fn, ...) end
      return fn(...)
    end
    return model, x, y, fwd
  end
  -- training img/s, the run's peak memory (MB) and host syncs per step
  local function train_rate(cfg)
    local model, x, y, fwd = setup(cfg)
    local opt = dl.optim.SGD(model:parameters(), {lr = 0.001, momentum = 0.9})
    model:train()
    local function step(a, b)
      opt:zero_grad()
      local loss = fwd(function(p, q) return F.cross_entropy(model(p), q) end, a, b)
      loss:backward()
      opt:step()
      return loss:detach()
    end
    dl.cuda.reset_peak_memory_stats()
    local run = step
    if graphs then run = dl.cuda.graphed(step, {x, y}, {warmup = opts.warmup}) end
    local per = timed(opts.steps, function() run(x, y) end)
    local s0 = dl.cuda.sync_count()
    for _ = 1, 2 do run(x, y) end
    local syncs = (dl.cuda.sync_count() - s0) / 2
    sync()
    return cfg.batch / per, dl.cuda.max_memory_allocated() / 2 ^ 20, syncs
  end
  -- seconds per evaluation-mode forward
  local function infer_time(cfg)
    local model, x, _, fwd = setup(cfg)
    model:eval()
    local function forward(a) return dl.no_grad(function() return fwd(model, a) end) end
    local run = forward
    if graphs then run = dl.cuda.graphed(forward, {x}, {warmup = opts.warmup}) end
    return timed(cfg.batch == 1 and 5 * opts.steps or opts.steps, function() run(x) end)
  end
  local figures, order = {}, {}
  local function add(key, v)
    figures[key] = v
    order[#order + 1] = key
    io.stderr:write(string.format("dlua %s: %.2f\n", key, v))
  end
  local bf16 = {batch = opts.batch, amp = "bf16", channels_last = true}
  local fp32 = {batch = opts.batch}
  local tr, peak1, syncs = train_rate(bf16)
  add("train_bf16cl", tr)
  local tr2, peak2 = train_rate(fp32)
  add("train_tf32", tr2)
  add("peak_mb", math.max(peak1, peak2))
  add("syncs_per_step", syncs)
  add("infer_bf16cl", opts.batch / infer_time(bf16))
  add("infer_tf32", opts.batch / infer_time(fp32))
  add(graphs and "latency_graph_ms" or "latency_ms", infer_time({batch = 1}) * 1000)
  if opts.out ~= "" then
    local f = assert(io.open(opts.out, "w"))
    for _, k in ipairs(order) do f:write(string.format("%s %.4f\n", k, figures[k])) end
    f:close()
  end
  local torch = torch_figures(" --device cuda")
  print(string.format("%s, batch %d, %dx%d, %s (%s)%s%s", opts.arch, opts.batch, opts.size, opts.size,
    dev, dl.cuda.get_device_name(0), graphs and ", CUDA graphs" or "",
    opts["no-benchmark"] and ", cudnn.benchmark off" or ""))
  print(string.format("%-34s %12s %12s %8s", "", "dlua", "torch", "ratio"))
  for _, r in ipairs(ROWS) do
    local v, t = figures[r[1]], torch[r[1]]
    if v then
      local ratio = t and v > 0 and (r[4] == "high" and v / t or t / v)
      print(string.format("%-34s %12.2f %12s %8s", r[2], v, t and string.format("%.2f", t) or "-",
        ratio and string.format("%.2fx", ratio) or "-"))
    end
  end
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
