-- test_golden_resnet.lua - whole-model golden tests: torchvision resnet18 and
-- resnet50 with random weights (BN statistics perturbed), exported to
-- safetensors (tests/golden/resnet_golden.py), loaded by dlua, agree with
-- PyTorch on the same input in training mode (logits, loss, every
-- parameter's gradient, BN running statistics, the parameters after one SGD
-- step with momentum and weight decay) and in evaluation mode (before the step
-- and after it).
--
-- Errors are relative in the L2 norm over each tensor.  In float64 dlua must
-- match PyTorch's float64 run to 1e-9.  In float32 the logits must match
-- PyTorch's float32 logits to 1e-4, and every tensor must be as close to the
-- float64 result as PyTorch's own float32 result is (at most twice its error,
-- plus a floor): a deep network amplifies float32 rounding, so two correct
-- float32 implementations differ by about as much as each differs from float64.
-- One quantity is left out of that float32 rule: the evaluation logits after
-- the step.  They are chaotic at float32 level: perturbing PyTorch's float64
-- gradients randomly by PyTorch's own float32 error (about 1%) moves them by
-- 0.15% to 1.4% between draws, so no implementation can promise better; the
-- float64 comparison covers them exactly, and evaluation before the step is
-- held to 1e-4.
local T = require "testlib"

local ROOT = debug.getinfo(1, "S").source:match("^@(.*)/tests/lua/[^/]*$") or "../.."

local function relerr(a, b)
  local d = (a:double() - b:double()):norm():item()
  local n = b:double():norm():item()
  return n > 0 and d / n or d
end

-- Runs one training step and evaluation in dtype; returns name -> tensor.
local function run(arch, g, md, dtype)
  local sd = {}
  for k, v in pairs(g) do
    if k:sub(1, 2) == "w." then sd[k:sub(3)] = v end
  end
  local model = dl.models[arch]()
  model:load_state_dict(sd)
  model = model:to(dtype)
  local r = {}
  model:eval()
  r.eval0_logits = dl.no_grad(function() return model(g.x:to(dtype)) end)
  model:train()
  local opt = dl.optim.SGD(model:parameters(), {lr = tonumber(md.lr), momentum = tonumber(md.momentum),
                                                weight_decay = tonumber(md.weight_decay)})
  local logits = model(g.x:to(dtype))
  local loss = dl.nn.functional.cross_entropy(logits, g.y + 1) -- labels are 1-based in dlua
  loss:backward()
  r.logits, r.loss = logits:detach(), loss:detach()
  for name, p in model:named_parameters() do r["grad." .. name] = p.grad end
  for name, b in model:named_buffers() do r["run." .. name] = b:clone() end
  opt:step()
  for name, p in model:named_parameters() do r["step." .. name] = p:detach():clone() end
  model:eval()
  r.eval_logits = dl.no_grad(function() return model(g.x:to(dtype)) end)
  return r
end

for _, arch in ipairs({"resnet18", "resnet50"}) do
  T.case(arch, function()
    local path = T.tmpdir() .. "/golden_" .. arch .. ".safetensors"
    local cmd = string.format("%s %s/tests/golden/resnet_golden.py %s %s", T.python(), ROOT, arch, path)
    T.truthy(os.execute(cmd), "python golden export failed: " .. cmd)
    local g, md = dl.load(path)
    os.remove(path)
    local keys = {}
    for k in pairs(g) do
      local rest = k:match("^f64%.(.*)$")
      if rest then keys[#keys + 1] = rest end
    end
    table.sort(keys)
    T.truthy(#keys > 100, "tensors compared: " .. #keys)

    -- float64: the same computation as PyTorch's float64 run
    local r64 = run(arch, g, md, dl.float64)
    local worst64, at64 = 0, ""
    for _, k in ipairs(keys) do
      T.truthy(r64[k], "float64 run lacks " .. k)
      T.shape_eq(r64[k], g["f64." .. k].shape, k)
      local e = relerr(r64[k], g["f64." .. k])
      if e > worst64 then worst64, at64 = e, k end
    end
    T.truthy(worst64 <= 1e-9, string.format("float64: %s relative error %.3g", at64, worst64))

    -- float32: as accurate as PyTorch's float32
    local r32 = run(arch, g, md, dl.float32)
    local e = relerr(r32.logits, g["f32.logits"])
    T.truthy(e <= 1e-4, string.format("float32 logits vs PyTorch: relative error %.3g", e))
    e = relerr(r32.eval0_logits, g["f32.eval0_logits"])
    T.truthy(e <= 1e-4, string.format("float32 eval logits vs PyTorch: relative error %.3g", e))
    local worst_ratio, at32, worst_abs = 0, "", 0
    for _, k in ipairs(keys) do
      if k == "eval_logits" then goto continue end
      local ours = relerr(r32[k], g["f64." .. k])
      local theirs = relerr(g["f32." .. k], g["f64." .. k])
      local ratio = ours / (theirs + 1e-6)
      if ratio > worst_ratio then worst_ratio, at32, worst_abs = ratio, k, ours end
      T.truthy(ours <= 2 * theirs + 1e-5, string.format(
        "float32 %s: error vs float64 %.3g, PyTorch float32's %.3g", k, ours, theirs))
      ::continue::
    end
    print(string.format("%s: %d tensors; float64 worst %.2g (%s); float32 worst %.2g of PyTorch's error (%s, %.2g)",
      arch, #keys, worst64, at64, worst_ratio, at32, worst_abs))
  end)
end

T.done()
