-- bench_profile.lua - where a ResNet step spends its time on the CPU, per op
-- family.  Forward ops are timed by wrapping dl._F's functions (and the
-- residual add); backward and the optimizer step are timed as wholes.  For
-- the split of backward by primitive, run with DNNL_VERBOSE=1 and feed the
-- output to scripts/bench_profile_dnnl.awk.
-- Usage: dlua scripts/bench_profile.lua [--arch resnet50] [--batch 8] [--size 224]
--        [--threads 1] [--steps 3] [--mode train|infer|both]
--        [--memory_format contiguous_format|channels_last]
local parse = dofile((arg[0]:match("^(.*)/[^/]*$") or ".") .. "/benchopts.lua")
local opts = parse("bench_profile", arg, {arch = "resnet50", batch = 8, size = 224, threads = 1,
  steps = 3, mode = "both", memory_format = "contiguous_format"})

dl.set_num_threads(opts.threads)
dl.manual_seed(0)
local F = dl.nn.functional
local acc, active = {}, true
local function timed(name, f)
  return function(...)
    if not active then return f(...) end
    local t0 = dl.clock()
    local r = table.pack(f(...))
    acc[name] = (acc[name] or 0) + dl.clock() - t0
    return table.unpack(r, 1, r.n)
  end
end
for _, name in ipairs {"conv2d", "batch_norm", "relu", "max_pool2d", "adaptive_avg_pool2d",
  "linear", "cross_entropy"} do
  F[name] = timed("fwd " .. name, F[name])
end
local x = dl.randn(opts.batch, 3, opts.size, opts.size)
local mt = getmetatable(x)
mt.__add = timed("fwd add", mt.__add)
if type(mt.__index) == "table" and mt.__index.add_ then
  mt.__index.add_ = timed("fwd add", mt.__index.add_)
end

local model = dl.models[opts.arch]()
model:to({memory_format = opts.memory_format})
x = x:contiguous({memory_format = opts.memory_format})
local y = dl.randint(1, 1001, {opts.batch})
local opt = dl.optim.SGD(model:parameters(), {lr = 0.001, momentum = 0.9})

local function section(name, f)
  local t0 = dl.clock()
  local r = f()
  acc[name] = (acc[name] or 0) + dl.clock() - t0
  return r
end

local function report(title, total, n)
  print(string.format("%s: %.1f ms per step (%d steps)", title, total / n * 1000, n))
  local names = {}
  for k in pairs(acc) do names[#names + 1] = k end
  table.sort(names, function(a, b) return acc[a] > acc[b] end)
  for _, k in ipairs(names) do
    print(string.format("  %-28s %8.1f ms %5.1f%%", k, acc[k] / n * 1000, 100 * acc[k] / total))
  end
end

if opts.mode ~= "infer" then
  model:train()
  local function step()
    opt:zero_grad()
    local loss = section("forward (all)", function() return F.cross_entropy(model(x), y) end)
    section("backward (all)", function() loss:backward() end)
    section("optimizer step", function() opt:step() end)
  end
  step()
  acc = {}
  collectgarbage()
  local t0 = dl.clock()
  for _ = 1, opts.steps do step() end
  report(string.format("%s train batch %d, %d threads", opts.arch, opts.batch, opts.threads),
    dl.clock() - t0, opts.steps)
end
if opts.mode ~= "train" then
  model:eval()
  dl.no_grad(function()
    model(x)
    acc = {}
    collectgarbage()
    local t0 = dl.clock()
    for _ = 1, opts.steps do section("forward (all)", function() return model(x) end) end
    report(string.format("%s infer batch %d, %d threads", opts.arch, opts.batch, opts.threads),
      dl.clock() - t0, opts.steps)
  end)
end
