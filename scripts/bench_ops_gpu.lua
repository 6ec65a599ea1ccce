-- bench_ops_gpu.lua - milliseconds per op on the GPU at ResNet-50 layer sizes
-- (batch 256, 64..256 channels, 56x56), float32 NCHW and bfloat16
-- channels-last, next to PyTorch's (scripts/bench_ops_gpu.py, same shapes):
-- where a network's time goes, op by op; and scaled dot-product attention
-- (batch 16, 6 heads, T = 256, head dim 64, causal).  Prints the layouts our ops return
-- in the channels-last run, since a layout change between ops costs a copy.
-- Usage: dlua scripts/bench_ops_gpu.lua [--python python3] [--reps 10]
local python, reps = "python3", 10
for i = 1, #arg do
  if arg[i] == "--python" then python = arg[i + 1] end
  if arg[i] == "--reps" then reps = tonumber(arg[i + 1]) end
end
if not dl.cuda.is_available() then
  io.stderr:write("bench_ops_gpu: no GPU on this machine\n")
  os.exit(2)
end
dl.backends.allow_tf32 = true
dl.backends.cudnn.benchmark = true
local F = dl.nn.functional
local CL = {memory_format = "channels_last"}

local function timed(fn)
  fn()
  dl.cuda.synchronize()
  local t0 = dl.clock()
  for _ = 1, reps do fn() end
  dl.cuda.synchronize()
  return (dl.clock() - t0) / reps * 1000
end

local rows, order = {}, {}
local function add(name, ms)
  rows[name] = ms
  order[#order + 1] = name
end

local function strides(t) return table.concat(t:stride(), ",") end

for _, cfg in ipairs({{"f32", dl.float32, false}, {"bf16cl", dl.bfloat16, true}}) do
  local tag, dt, cl = cfg[1], cfg[2], cfg[3]
  dl.manual_seed(0)
  local function act(c, hw)
    local t = dl.randn(256, c, hw, hw):to("cuda"):to(dt)
    return cl and t:contiguous(CL) or t
  end
  local function weight(o, i, k)
    local w = (dl.randn(o, i, k, k) * 0.05):to("cuda"):to(dt)
    return cl and w:contiguous(CL) or w
  end
  local x64, x256 = act(64, 56), act(256, 56)
  local w3, w1 = weight(64, 64, 3), weight(256, 64, 1)
  local g = dl.ones(64):cuda()
  local b = dl.zeros(64):cuda()
  local rm, rv = dl.zeros(64):cuda(), dl.ones(64):cuda()
  add(tag .. " conv3x3 64->64 fwd", timed(function() return F.conv2d(x64, w3, nil, {padding = 1}) end))
  add(tag .. " conv1x1 64->256 fwd", timed(function() return F.conv2d(x64, w1) end))
  local xr = x64:detach():requires_grad_()
  local wr = w3:detach():requires_grad_()
  local y = F.conv2d(xr, wr, nil, {padding = 1})
  local gy = dl.ones_like(y)
  add(tag .. " conv3x3 fwd+bwd", timed(function()
    local out = F.conv2d(xr, wr, nil, {padding = 1})
    out:backward(gy)
  end))
  add(tag .. " batchnorm train fwd", timed(function()
    return F.batch_norm(x64, rm, rv, g, b, true)
  end))
  local gbn, bbn = g:clone():requires_grad_(), b:clone():requires_grad_()
  add(tag .. " batchnorm fwd+bwd", timed(function()
    local out = F.batch_norm(xr, rm, rv, gbn, bbn, true)
    out:backward(gy)
  end))
  add(tag .. " relu", timed(function() return F.relu(x64) end))
  add(tag .. " relu_ in place", timed(function() return F.relu(x64, {inplace = true}) end))
  add(tag .. " add (residual)", timed(function() return x256 + x256 end))
  add(tag .. " max_pool2d 3x3/2", timed(function()
    return F.max_pool2d(x64, 3, {stride = 2, padding = 1})
  end))
  add(tag .. " copy to NCHW", timed(function() return x64:contiguous() end))
  -- attention: batch 16, 6 heads, T = 256, head dim 64, causal (the fused kernels)
  local aq = dl.randn(3, 16, 6, 256, 64):to("cuda"):to(dt)
  local q, k, v = aq[1], aq[2], aq[3]
  add(tag .. " sdpa causal 16x6x256x64 fwd", timed(function()
    return F.scaled_dot_product_attention(q, k, v, {is_causal = true})
  end))
  local qr, kr, vr = q:detach():requires_grad_(), k:detach():requires_grad_(), v:detach():requires_grad_()
  local ga = dl.ones_like(q)
  add(tag .. " sdpa causal fwd+bwd", timed(function()
    F.scaled_dot_product_attention(qr, kr, vr, {is_causal = true}):backward(ga)
  end))
  if cl then
    print("layouts (bf16, channels-last input " .. strides(x64) .. "):")
    print("  conv", strides(F.conv2d(x64, w3, nil, {padding = 1})))
    print("  batch_norm", strides(F.batch_norm(x64, rm, rv, g, b, true)))
    print("  relu", strides(F.relu(x64)), "add", strides(x64 + x64))
    print("  max_pool2d", strides(F.max_pool2d(x64, 3, {stride = 2, padding = 1})))
    local o = F.batch_norm(xr, rm, rv, gbn, bbn, true)
    o:backward(gy)
    print("  batch_norm grad", strides(xr.grad))
  end
end
-- the optimizer step over ResNet-50's parameters
local model = dl.models.resnet50():to("cuda")
local opt = dl.optim.SGD(model:parameters(), {lr = 0.001, momentum = 0.9})
for _, p in ipairs(model:parameters()) do p.grad = dl.ones_like(p) end
add("SGD step resnet50 params", timed(function() opt:step() end))
add("autocast bf16 cast of resnet50 weights", timed(function()
  for _, p in ipairs(model:parameters()) do local _ = p:to(dl.bfloat16) end
end))
-- a ResNet-50 training step at batch 128 in parts: forward, + backward, + step
do
  model:train()
  local xb = dl.randn(128, 3, 224, 224):to("cuda")
  local yb = dl.randint(1, 1001, {128}):to("cuda")
  add("resnet50 b128 f32 train forward", timed(function() return F.cross_entropy(model(xb), yb) end))
  add("resnet50 b128 f32 forward+backward", timed(function()
    opt:zero_grad()
    F.cross_entropy(model(xb), yb):backward()
  end))
  add("resnet50 b128 f32 full step", timed(function()
    opt:zero_grad()
    F.cross_entropy(model(xb), yb):backward()
    opt:step()
  end))
end
-- what the Lua side costs: a full collection with the model loaded, and
-- batch-1 inference with the collector running and stopped
add("full Lua GC (resnet50 loaded)", timed(function() collectgarbage("collect") end))
model:eval()
local x1 = dl.randn(1, 3, 224, 224):to("cuda")
dl.no_grad(function()
  add("resnet50 batch-1 forward", timed(function() return model(x1) end))
  collectgarbage("stop")
  add("resnet50 batch-1 forward, GC stopped", timed(function() return model(x1) end))
  collectgarbage("restart")
end)

local torch = {}
local script = (arg[0]:match("^(.*)/[^/]*$") or ".") .. "/bench_ops_gpu.py"
local p = io.popen(string.format("%s %s --reps %d 2>&1", python, script, reps))
for line in p:lines() do
  local k, v = line:match("^(.-)\t([%d.]+)$")
  if k then torch[k] = tonumber(v) else io.stderr:write("torch: ", line, "\n") end
end
p:close()
print(string.format("%-40s %10s %10s %8s", "op (ms)", "dlua", "torch", "ratio"))
for _, name in ipairs(order) do
  local t = torch[name]
  print(string.format("%-40s %10.3f %10s %8s", name, rows[name], t and string.format("%.3f", t) or "-",
    t and string.format("%.2fx", t / rows[name]) or "-"))
end
