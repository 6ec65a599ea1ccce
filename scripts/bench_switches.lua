-- bench_switches.lua - in-process A/B of the speed switches of issue 17 on a
-- ResNet training step (forward, cross-entropy, backward, SGD-momentum
-- step): one model, the variants taken in turns for --rounds rounds, each
-- variant's best round counting.  Variants:
--   default        everything as shipped
--   unfused-bn     dl.models.resnet.fused_bn = false (batch norm, add, relu
--                  one module at a time)
--   bn-native      dl._nn.batch_norm_impl("native")   (CUDA only)
--   bn-cudnn       dl._nn.batch_norm_impl("cudnn")    (CUDA only)
--   pool-planar    dl._nn.max_pool2d_nhwc(false)      (CUDA only)
--   maps-scalar    dl._nn.elementwise_vectorized(false) (CUDA only)
--   before         all of the above off: the code paths before the issue
-- Prints ms per step (wall; on the CPU also process CPU time, which other
-- processes on a loaded machine disturb less), images/s and each variant's
-- speed against "before" (or "unfused-bn" when "before" did not run).  On CUDA steps are timed between synchronisations.
-- Usage: dlua scripts/bench_switches.lua [--arch resnet18] [--batch 8] [--size 112]
--        [--threads 2] [--steps 3] [--rounds 3] [--device cpu|cuda]
--        [--amp none|bf16|fp16] [--channels-last] [--only default,unfused-bn,...]
local dl = require "dl"
local parse = dofile((arg[0]:match("^(.*)/[^/]*$") or ".") .. "/benchopts.lua")
local opts = parse("bench_switches", arg, {arch = "resnet18", batch = 8, size = 112, threads = 2,
  steps = 3, rounds = 3, device = "cpu", amp = "none", only = ""}, {"channels-last"})
local resnet = require "dl.models.resnet"
local F = dl.nn.functional
local nn = dl._nn

local cuda = opts.device:match("^cuda") ~= nil
if cuda and not dl.cuda.is_available() then
  io.stderr:write("bench_switches: --device cuda but no GPU on this machine\n")
  os.exit(2)
end
if not cuda then dl.set_num_threads(opts.threads) end
local function sync() if cuda then dl.cuda.synchronize() end end

-- each variant: its settings {fused, bn impl, pool nhwc, vectorized maps}
local ALL = {
  {"default", {true, "auto", true, true}},
  {"unfused-bn", {false, "auto", true, true}},
  {"bn-native", {true, "native", true, true}, cuda},
  {"bn-cudnn", {true, "cudnn", true, true}, cuda},
  {"pool-planar", {true, "auto", false, true}, cuda},
  {"maps-scalar", {true, "auto", true, false}, cuda},
  {"before", {false, "native", false, false}},
}
local wanted = {}
for name in opts.only:gmatch("[^,]+") do wanted[name] = true end
local variants = {}
for _, v in ipairs(ALL) do
  if (v[3] == nil or v[3]) and (opts.only == "" or wanted[v[1]]) then variants[#variants + 1] = v end
end

local saved = {resnet.fused_bn, nn.batch_norm_impl(), nn.max_pool2d_nhwc(), nn.elementwise_vectorized()}
local function apply(s)
  resnet.fused_bn = s[1]
  nn.batch_norm_impl(s[2])
  nn.max_pool2d_nhwc(s[3])
  if s[4] ~= nil then nn.elementwise_vectorized(s[4]) end
end

dl.manual_seed(0)
if cuda then
  dl.backends.allow_tf32 = true
  dl.backends.cudnn.benchmark = true
end
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

-- ms per step (wall, cpu) of one round of a variant
local function round(v)
  apply(v[2])
  step() -- warm-up in this variant (and its one-time plans)
  sync()
  local w0, c0 = dl.clock(), os.clock()
  for _ = 1, opts.steps do step() end
  sync()
  return (dl.clock() - w0) / opts.steps * 1e3, (os.clock() - c0) / opts.steps * 1e3
end

local best = {}
local ok, err = pcall(function()
  for _ = 1, opts.rounds do
    for _, v in ipairs(variants) do
      local w, c = round(v)
      local b = best[v[1]] or {math.huge, math.huge}
      best[v[1]] = {math.min(b[1], w), math.min(b[2], c)}
    end
  end
end)
apply(saved)
if not ok then
  io.stderr:write("bench_switches: ", tostring(err), "\n")
  os.exit(1)
end

print(string.format("%s training step, batch %d, %dx%d, %s%s%s%s (best of %d rounds of %d steps)",
  opts.arch, opts.batch, opts.size, opts.size, opts.device,
  cuda and "" or string.format(", %d threads", opts.threads),
  opts["channels-last"] and ", channels-last" or "", opts.amp ~= "none" and ", amp " .. opts.amp or "",
  opts.rounds, opts.steps))
-- the reference: "before" when it ran, else "unfused-bn"
local base_name = best.before and "before" or best["unfused-bn"] and "unfused-bn" or nil
local base = base_name and best[base_name]
print(string.format("%-12s %11s %9s %11s %16s", "variant", "ms/step", "img/s", cuda and "" or "cpu ms/step",
  base_name and "vs " .. base_name or ""))
for _, v in ipairs(variants) do
  local b = best[v[1]]
  local k = cuda and 1 or 2 -- CPU: compare process CPU time
  print(string.format("%-12s %11.1f %9.1f %11s %15s", v[1], b[1], opts.batch / b[1] * 1e3,
    cuda and "" or string.format("%.1f", b[2]),
    base and string.format("%.2fx", base[k] / b[k]) or "-"))
end
