-- bench_resnet.lua - images/s of a ResNet training step (forward,
-- cross-entropy, backward, SGD-momentum step) and of inference, float32 on the
-- CPU, next to PyTorch's figures from scripts/bench_resnet.py (same arch,
-- batch, image size and threads, run with Debian's /usr/bin/python3), and the
-- ratio dlua / PyTorch.
-- Usage: dlua scripts/bench_resnet.lua [--arch resnet50] [--batch 8] [--size 224]
--        [--threads 2] [--steps 5] [--warmup 2] [--no-torch]
local opts = {arch = "resnet50", batch = 8, size = 224, threads = 2, steps = 5, warmup = 2}
local with_torch = true
local i = 1
while arg[i] do
  local k = arg[i]:match("^%-%-(.+)$")
  if k == "no-torch" then
    with_torch = false
  elseif k and opts[k] ~= nil and arg[i + 1] then
    opts[k] = type(opts[k]) == "number" and assert(tonumber(arg[i + 1]), "bad number for --" .. k)
      or arg[i + 1]
    i = i + 1
  else
    io.stderr:write("bench_resnet: unknown argument " .. arg[i] .. "\n")
    os.exit(2)
  end
  i = i + 1
end

dl.set_num_threads(opts.threads)
dl.manual_seed(0)
local nn, F = dl.nn, dl.nn.functional
local model = dl.models[opts.arch]()
local x = dl.randn(opts.batch, 3, opts.size, opts.size)
local y = dl.randint(1, 1001, {opts.batch})
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

model:eval()
local infer_ips = dl.no_grad(function()
  for _ = 1, opts.warmup do model(x) end
  local t1 = dl.clock()
  for _ = 1, opts.steps do model(x) end
  return opts.batch * opts.steps / (dl.clock() - t1)
end)

local torch = {}
if with_torch then
  local script = (arg[0]:match("^(.*)/[^/]*$") or ".") .. "/bench_resnet.py"
  local cmd = string.format("/usr/bin/python3 %s --arch %s --batch %d --size %d --threads %d --steps %d --warmup %d",
    script, opts.arch, opts.batch, opts.size, opts.threads, opts.steps, opts.warmup)
  local p = io.popen(cmd .. " 2>&1")
  for line in p:lines() do
    local k, v = line:match("^(%a+) ([%d.]+)$")
    if k then torch[k] = tonumber(v) end
  end
  p:close()
end

print(string.format("%s, batch %d, %dx%d, %d threads, float32 CPU", opts.arch, opts.batch,
  opts.size, opts.size, opts.threads))
print(string.format("%-10s %12s %12s %8s", "", "dlua img/s", "torch img/s", "ratio"))
for _, row in ipairs({{"train", train_ips}, {"infer", infer_ips}}) do
  local t = torch[row[1]]
  print(string.format("%-10s %12.2f %12s %8s", row[1], row[2], t and string.format("%.2f", t) or "-",
    t and string.format("%.2fx", row[2] / t) or "-"))
end
print(string.format("dlua peak RSS: %.0f MB", rss_mb()))
