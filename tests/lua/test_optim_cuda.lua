-- test_optim_cuda.lua - optimizer steps on CUDA against the CPU (skipped
-- without a GPU): a few steps of SGD (momentum, dampening, nesterov, weight
-- decay, maximize) and Adam/AdamW (weight decay, amsgrad, maximize) on
-- identical parameters and gradients on both devices; parameters and state
-- must agree to 1e-6.  The fused multi-tensor kernel (cuda/optim.cu) computes
-- the CPU's operations in the CPU's order, so in practice they are equal.
-- Also: many parameters and ones larger than a chunk, a group spread over
-- both devices, the tensor-op fallback on CUDA, and bad input.
local T = require "testlib"
local dl = require "dl"
T.require_cuda()

local optim = dl.optim

-- Parameter shapes: small ones, a scalar-like one, and one over the kernel's
-- 65536-element chunk (several chunks, a partial last one).
local SHAPES = {{3, 4}, {5}, {1}, {200003}, {7, 9}}

local function make_params(dev, shapes)
  dl.manual_seed(1)
  local ps = {}
  for i, s in ipairs(shapes or SHAPES) do ps[i] = dl.randn(s):to(dev):requires_grad_(true) end
  return ps
end

-- Runs `steps` steps of make(params) on dev with gradients drawn on the CPU;
-- returns the parameters and the optimizer state (a table of tensors and
-- step counts).
local function trajectory(dev, make, steps, shapes, skip)
  local ps = make_params(dev, shapes)
  local opt = make(ps)
  for s = 1, steps or 4 do
    dl.manual_seed(100 + s)
    for i, p in ipairs(ps) do
      local g = dl.randn(p.shape)
      if skip and skip(s, i) then p.grad = nil else p.grad = g:to(dev) end
    end
    opt:step()
  end
  local out = {params = {}, state = opt:state_dict().state}
  for i, p in ipairs(ps) do out.params[i] = p:detach() end
  return out
end

local function case(name, make, steps, shapes, skip)
  T.cuda_case(name, function(dev) return trajectory(dev, make, steps, shapes, skip) end, 1e-6, 1e-6)
end

case("SGD plain", function(ps) return optim.SGD(ps, {lr = 0.1}) end)
case("SGD momentum", function(ps) return optim.SGD(ps, {lr = 0.05, momentum = 0.9}) end)
case("SGD momentum, dampening, weight decay", function(ps)
  return optim.SGD(ps, {lr = 0.05, momentum = 0.9, dampening = 0.2, weight_decay = 1e-2})
end)
case("SGD nesterov, weight decay, maximize", function(ps)
  return optim.SGD(ps, {lr = 0.03, momentum = 0.8, nesterov = true, weight_decay = 1e-3, maximize = true})
end)
case("Adam", function(ps) return optim.Adam(ps, {lr = 1e-2}) end, 5)
case("Adam weight decay, amsgrad", function(ps)
  return optim.Adam(ps, {lr = 1e-2, weight_decay = 0.1, amsgrad = true, betas = {0.8, 0.99}})
end, 5)
case("Adam maximize", function(ps) return optim.Adam(ps, {lr = 3e-3, maximize = true, eps = 1e-6}) end, 3)
case("AdamW", function(ps) return optim.AdamW(ps, {lr = 1e-2}) end, 5)
case("AdamW amsgrad, strong decay", function(ps)
  return optim.AdamW(ps, {lr = 1e-2, weight_decay = 0.5, amsgrad = true})
end, 5)

-- Parameters that miss their grad on some steps: fresh momentum buffers
-- mid-run, per-parameter step counts.
local skip = function(s, i) return (i == 2 and s <= 2) or (i == 4 and s == 3) end
case("SGD momentum with parameters skipping steps", function(ps)
  return optim.SGD(ps, {lr = 0.05, momentum = 0.9})
end, 5, nil, skip)
case("Adam with parameters skipping steps", function(ps)
  return optim.Adam(ps, {lr = 1e-2, amsgrad = true})
end, 5, nil, skip)

-- Many small parameters: one launch over a long chunk list.
local MANY = {}
for i = 1, 120 do MANY[i] = {1 + (i * 7) % 13, 1 + i % 5} end
case("Adam over 120 small parameters", function(ps) return optim.Adam(ps, {lr = 1e-2}) end, 3, MANY)
case("SGD over 120 small parameters", function(ps)
  return optim.SGD(ps, {lr = 0.1, momentum = 0.9, nesterov = true})
end, 3, MANY)

T.cuda_case("a group spread over both devices: one fused call per device", function(dev)
  dl.manual_seed(2)
  local a, b = dl.randn(4, 5), dl.randn(300)
  local pa = a:requires_grad_(true)           -- stays on the CPU
  local pb = b:to(dev):requires_grad_(true)   -- on dev
  local opt = optim.Adam({pa, pb}, {lr = 1e-2, weight_decay = 0.01})
  for s = 1, 3 do
    dl.manual_seed(200 + s)
    pa.grad = dl.randn(4, 5)
    pb.grad = dl.randn(300):to(dev)
    opt:step()
  end
  return {pa:detach():to(dev), pb:detach(), opt.state[pb].exp_avg_sq}
end, 1e-6, 1e-6)

T.cuda_case("the tensor-op fallback on CUDA agrees too", function(dev)
  local saved = optim.use_fused
  optim.use_fused = false
  local ok, r = pcall(trajectory, dev, function(ps)
    return optim.Adam(ps, {lr = 1e-2, weight_decay = 0.1})
  end, 3, {{3, 4}, {50}})
  optim.use_fused = saved
  if not ok then error(r, 0) end
  return r
end, 1e-5, 1e-6)

T.case("fused steps refuse mixed devices and float64 on CUDA", function()
  local p = dl.zeros(3, {device = "cuda"})
  T.raises(function() dl._optim.sgd_step({p}, {dl.zeros(3)}, nil, nil, {lr = 0.1}) end,
    "grad of parameter 1 is on cpu but the parameter is on cuda:0")
  T.raises(function() dl._optim.sgd_step({p, dl.zeros(2)}, {p, dl.zeros(2)}, nil, nil, {lr = 0.1}) end,
    "parameter 2 is on cpu but parameter 1 is on cuda:0")
  local d = dl.zeros(3, {dtype = dl.float64, device = "cuda"})
  T.raises(function() dl._optim.sgd_step({d}, {dl.zeros(3, {dtype = dl.float64, device = "cuda"})}, nil, nil, {lr = 0.1}) end,
    "float64 parameters are stepped on the CPU only")
  -- the process stays healthy: a step after the errors works
  local q = dl.ones(3, {device = "cuda"})
  dl._optim.sgd_step({q}, {dl.ones(3, {device = "cuda"})}, nil, nil, {lr = 0.5})
  T.tensor_eq(q:cpu(), {0.5, 0.5, 0.5}, 0)
end)

T.done()
