-- bench_bn_fused.lua - in-process A/B of the ResNet blocks' fused batch norm
-- + ReLU (+ residual add) (dl.models.resnet.fused_bn = true, the default)
-- against the unfused modules (false): one model, training steps (forward,
-- cross-entropy, backward, SGD-momentum step) taken in turns, A then B, for
-- --rounds rounds; each variant's best round counts.  Prints ms per step
-- (wall, and on the CPU also process CPU time, which other processes on a
-- loaded machine disturb less) and the speed-up.
-- On CUDA (--device cuda) steps are timed between synchronisations, with
-- --amp bf16 (autocast) and --channels-last as options; DLUA_BN_IMPL picks
-- the CUDA training implementation (auto, native, cudnn) for both variants.
-- Usage: dlua scripts/bench_bn_fused.lua [--arch resnet18] [--batch 8] [--size 112]
--        [--threads 2] [--steps 3] [--rounds 3] [--device cpu|cuda] [--amp none|bf16|fp16]
--        [--channels-last]
local dl = require "dl"
local parse = dofile((arg[0]:match("^(.*)/[^/]*$") or ".") .. "/benchopts.lua")
local opts = parse("bench_bn_fused", arg, {arch = "resnet18", batch = 8, size = 112, threads = 2,
  steps = 3, rounds = 3, device = "cpu", amp = "none"}, {"channels-last"})
local resnet = require "dl.models.resnet"
local F = dl.nn.functional

local cuda = opts.device:match("^cuda") ~= nil
if cuda and not dl.cuda.is_available() then
  io.stderr:write("bench_bn_fused: --device cuda but no GPU on this machine\n")
  os.exit(2)
end
if not cuda then dl.set_num_threads(opts.threads) end
local function sync() if cuda then dl.cuda.synchronize() end end

dl.manual_seed(0)
local model = dl.models[opts.arch]():to(opts.device)
local x = dl.randn(opts.batch, 3, opts.size, opts.size):to(opts.device)
if opts["channels-last"] then
  model:to({memory_format = "channels_last"})
  x = x:contiguous({memory_format = "channels_last"})
end
local y = dl.randint(1, 1001, {opts.batch}):to(opts.device)
local opt = dl.optim.SGD(model:parameters(), {lr = 0.001, momentum = 0.9})
model:train()

local function step()
  opt:zero_grad()
  local loss
  if opts.amp ~= "none" then
    loss = dl.autocast({dtype = opts.amp}, function() return F.cross_entropy(model(x), y) end)
  else
    loss = F.cross_entropy(model(x), y)
  end
  loss:backward()
  opt:step()
end

-- ms per step (wall, cpu) of one round of the variant
local function round(fused)
  resnet.fused_bn = fused
  step() -- warm-up in this variant
  sync()
  local w0, c0 = dl.clock(), os.clock()
  for _ = 1, opts.steps do step() end
  sync()
  return (dl.clock() - w0) / opts.steps * 1e3, (os.clock() - c0) / opts.steps * 1e3
end

local best = {[true] = {math.huge, math.huge}, [false] = {math.huge, math.huge}}
for _ = 1, opts.rounds do
  for _, fused in ipairs({true, false}) do
    local w, c = round(fused)
    best[fused][1] = math.min(best[fused][1], w)
    best[fused][2] = math.min(best[fused][2], c)
  end
end
resnet.fused_bn = true

print(string.format("%s training step, batch %d, %dx%d, %s%s%s%s", opts.arch, opts.batch, opts.size,
  opts.size, opts.device, cuda and "" or string.format(", %d threads", opts.threads),
  opts["channels-last"] and ", channels-last" or "", opts.amp ~= "none" and ", amp " .. opts.amp or ""))
local function row(name, k)
  local u, f = best[false][k], best[true][k]
  print(string.format("%-10s unfused %9.1f ms   fused %9.1f ms   speed-up %.2fx", name, u, f, u / f))
end
row("wall", 1)
if not cuda then row("cpu time", 2) end
