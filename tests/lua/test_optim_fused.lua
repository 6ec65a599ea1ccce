-- test_optim_fused.lua - the fused optimizer steps (dl._optim, src/ops/optim.c)
-- on the CPU against dl.optim's tensor-op path: same parameters and same state
-- after several steps of SGD (momentum, dampening, nesterov, weight decay,
-- maximize) and Adam/AdamW (weight decay, amsgrad, maximize), bit for bit;
-- per-parameter step counts, state layout, fallback and bad input.
local T = require "testlib"
local dl = require "dl"
local optim = dl.optim

-- Shapes: a small matrix, a vector, a scalar-like and one large enough for
-- the OpenMP split.
local SHAPES = {{3, 4}, {5}, {1}, {40000}}

local function params(dtype)
  dl.manual_seed(11)
  local ps = {}
  for i, s in ipairs(SHAPES) do ps[i] = dl.randn(s, {dtype = dtype}):requires_grad_(true) end
  return ps
end

-- The gradient of parameter i at step s (nil: that parameter has no grad).
local function grads(ps, s, dtype, skip)
  dl.manual_seed(100 + s)
  for i, p in ipairs(ps) do
    local g = dl.randn(p.shape, {dtype = dtype})
    if skip and skip(s, i) then p.grad = nil else p.grad = g end
  end
end

-- Counts the fused C calls (so a test knows which path ran).
local calls = 0
for _, name in ipairs({"sgd_step", "adam_step"}) do
  local f = dl._optim[name]
  dl._optim[name] = function(...)
    calls = calls + 1
    return f(...)
  end
end

-- Runs `steps` steps with the fused path on or off; returns params, the
-- optimizer and the number of fused calls made.
local function run(make, fused, dtype, steps, skip)
  dtype = dtype or dl.float32
  local saved = optim.use_fused
  optim.use_fused = fused
  calls = 0
  local ps = params(dtype)
  local opt = make(ps)
  local ok, err = pcall(function()
    for s = 1, steps or 4 do
      grads(ps, s, dtype, skip)
      opt:step()
    end
  end)
  optim.use_fused = saved
  if not ok then error(err, 0) end
  return ps, opt, calls
end

local function same_tensor(a, b, what)
  T.eq(tostring(a.dtype), tostring(b.dtype), what .. " dtype")
  T.eq(T.fmt(a.shape), T.fmt(b.shape), what .. " shape")
  local bad = a:ne(b):logical_and(a:eq(a):logical_or(b:eq(b))):sum():item()
  T.eq(bad, 0, what .. ": elements that differ")
end

-- Compares params and the whole state (same keys, same values) of both runs.
local function compare(make, dtype, steps, skip)
  local p1, o1, n1 = run(make, true, dtype, steps, skip)
  local p2, o2, n2 = run(make, false, dtype, steps, skip)
  T.eq(n2, 0, "fused calls with use_fused = false")
  if (dtype or dl.float32) == dl.float32 then
    T.truthy(n1 >= (steps or 4), "the fused path ran")
  else
    T.eq(n1, 0, "fused calls for float64 parameters")
  end
  for i = 1, #p1 do same_tensor(p1[i], p2[i], "param " .. i) end
  local s1, s2 = o1:state_dict().state, o2:state_dict().state
  for i = 1, #p1 do
    local a, b = s1[i], s2[i]
    T.eq(a == nil, b == nil, "state " .. i .. " present")
    if a then
      for k, v in pairs(b) do
        T.truthy(a[k] ~= nil, "fused state " .. i .. " lacks " .. k)
        if dl.is_tensor(v) then
          same_tensor(a[k], v, "state " .. i .. " " .. k)
        else
          T.eq(a[k], v, "state " .. i .. " " .. k)
        end
      end
      for k in pairs(a) do T.truthy(b[k] ~= nil, "fused state " .. i .. " has extra " .. k) end
    end
  end
end

T.case("SGD: plain, momentum, dampening, nesterov, weight decay, maximize", function()
  compare(function(ps) return optim.SGD(ps, {lr = 0.1}) end)
  compare(function(ps) return optim.SGD(ps, {lr = 0.05, momentum = 0.9}) end)
  compare(function(ps) return optim.SGD(ps, {lr = 0.05, momentum = 0.9, dampening = 0.3}) end)
  compare(function(ps) return optim.SGD(ps, {lr = 0.05, momentum = 0.8, nesterov = true, weight_decay = 1e-2}) end)
  compare(function(ps) return optim.SGD(ps, {lr = 0.02, weight_decay = 0.1, maximize = true}) end)
end)

T.case("Adam and AdamW: weight decay, amsgrad, maximize", function()
  compare(function(ps) return optim.Adam(ps, {lr = 1e-2}) end, nil, 5)
  compare(function(ps) return optim.Adam(ps, {lr = 1e-2, weight_decay = 0.1}) end, nil, 5)
  compare(function(ps) return optim.Adam(ps, {lr = 1e-2, betas = {0.8, 0.99}, amsgrad = true}) end, nil, 5)
  compare(function(ps) return optim.Adam(ps, {lr = 3e-3, maximize = true, eps = 1e-6}) end, nil, 5)
  compare(function(ps) return optim.AdamW(ps, {lr = 1e-2}) end, nil, 5)
  compare(function(ps) return optim.AdamW(ps, {lr = 1e-2, weight_decay = 0.5, amsgrad = true}) end, nil, 5)
end)

T.case("parameters without a grad on some steps keep their own step counts", function()
  local skip = function(s, i) return (i == 2 and s <= 2) or (i == 3 and s == 3) end
  compare(function(ps) return optim.SGD(ps, {lr = 0.05, momentum = 0.9}) end, nil, 5, skip)
  compare(function(ps) return optim.Adam(ps, {lr = 1e-2, amsgrad = true}) end, nil, 5, skip)
  local _, opt = run(function(ps) return optim.Adam(ps, {lr = 1e-2}) end, true, nil, 5, skip)
  local st = opt:state_dict().state
  T.eq(st[1].step, 5)
  T.eq(st[2].step, 3)
  T.eq(st[3].step, 4)
end)

T.case("parameter groups with their own options", function()
  compare(function(ps)
    return optim.SGD({{params = {ps[1], ps[2]}, momentum = 0.5}, {params = {ps[3], ps[4]}, lr = 0.3}},
      {lr = 0.1, momentum = 0.9})
  end)
end)

T.case("float64 falls back to the tensor-op path; direct float64 fused calls agree", function()
  compare(function(ps) return optim.Adam(ps, {lr = 1e-2, weight_decay = 0.01}) end, dl.float64, 3)
  -- call dl._optim directly on float64 and compare with the tensor-op path
  local ps = params(dl.float64)
  local qs = {}
  for i, p in ipairs(ps) do qs[i] = p:detach():clone() end
  grads(ps, 1, dl.float64)
  local gs = {}
  for i, p in ipairs(ps) do gs[i] = p.grad end
  local bufs, fresh = {}, {}
  for i, q in ipairs(qs) do bufs[i], fresh[i] = dl.empty_like(q), true end
  dl._optim.sgd_step(qs, gs, bufs, fresh, {lr = 0.1, momentum = 0.9, weight_decay = 0.01})
  local saved = optim.use_fused
  optim.use_fused = false
  optim.SGD(ps, {lr = 0.1, momentum = 0.9, weight_decay = 0.01}):step()
  optim.use_fused = saved
  for i = 1, #ps do same_tensor(qs[i], ps[i]:detach(), "float64 param " .. i) end
end)

T.case("non-contiguous parameters fall back and still step", function()
  local base = dl.randn(4, 6)
  local p = base:t():requires_grad_(true) -- a transposed leaf view
  T.truthy(not p:is_contiguous())
  p.grad = dl.ones(6, 4)
  local before = p:detach():clone()
  calls = 0
  optim.SGD({p}, {lr = 0.5}):step()
  T.eq(calls, 0, "fused calls for a strided parameter")
  same_tensor(p:detach(), before - 0.5, "stepped")
end)

T.case("sgd_step: the learning rate and a skip flag as tensors", function()
  -- lr_tensor replaces lr; skip_if true leaves everything as it was (the
  -- CUDA kernel reads both on the device; the CPU step reads them here)
  local function fresh_run(opts)
    local p = dl.tensor({1.0, -2.0, 3.0})
    local g = dl.tensor({0.5, 0.25, -1.0})
    local buf = dl.tensor({0.1, 0.2, 0.3})
    opts.momentum, opts.dampening = 0.9, 0
    dl._optim.sgd_step({p}, {g}, {buf}, {false}, opts)
    return p, buf
  end
  local p1, b1 = fresh_run({lr = 0.25})
  local p2, b2 = fresh_run({lr = 7.0, lr_tensor = dl.tensor(0.25)})
  T.truthy(dl.equal(p1, p2) and dl.equal(b1, b2), "lr_tensor gives the step lr gives")
  local p3, b3 = fresh_run({lr = 0.25, skip_if = dl.tensor(true)})
  T.truthy(dl.equal(p3, dl.tensor({1.0, -2.0, 3.0})), "skipped: parameter untouched")
  T.truthy(dl.equal(b3, dl.tensor({0.1, 0.2, 0.3})), "skipped: buffer untouched")
  local p4 = fresh_run({lr = 0.25, skip_if = dl.tensor(false)})
  T.truthy(dl.equal(p4, p1), "skip_if false steps")
  local p = dl.zeros(3)
  T.raises(function() dl._optim.sgd_step({p}, {p:clone()}, nil, nil, {lr = 0.1, lr_tensor = dl.tensor({0.1})}) end,
    "sgd_step: lr_tensor must be a 0-dim float32 tensor, got a 1-dim float32 one")
  T.raises(function() dl._optim.sgd_step({p}, {p:clone()}, nil, nil, {lr = 0.1, skip_if = dl.tensor(1.0)}) end,
    "skip_if must be a 0-dim bool tensor")
  T.raises(function() dl._optim.sgd_step({p}, {p:clone()}, nil, nil, {lr = 0.1, lr_tensor = 0.1}) end,
    "option 'lr_tensor' must be a tensor")
end)

T.case("bad input is refused with the facts", function()
  local p, q = dl.zeros(3), dl.zeros(4)
  T.raises(function() dl._optim.sgd_step({p}, {q}, {}, {}, {lr = 0.1}) end, "grad of parameter 1 has shape [4]")
  T.raises(function() dl._optim.sgd_step({p}, {}, {}, {}, {lr = 0.1}) end, "grads has 0 entries, expected 1")
  T.raises(function() dl._optim.sgd_step({p}, {dl.zeros(3, {dtype = dl.float64})}, nil, nil, {lr = 0.1}) end,
    "grad of parameter 1 is float64 but the parameter is float32")
  T.raises(function() dl._optim.sgd_step({dl.zeros(3, {dtype = dl.int64})}, {p}, nil, nil, {lr = 0.1}) end,
    "parameters must be float32 or float64")
  T.raises(function() dl._optim.sgd_step({p}, {p}, nil, nil, {lr = 0.1, bogus = 1}) end, "bogus")
  T.raises(function() dl._optim.adam_step({p}, {dl.zeros(3)}, {dl.zeros(3)}, {dl.zeros(3)}, nil, {0}, {}) end,
    "step of parameter 1 is 0")
  T.raises(function() dl._optim.adam_step({p}, {dl.zeros(3)}, {dl.zeros(3)}, {dl.zeros(3)}, nil, {1}, {amsgrad = true}) end,
    "max_exp_avg_sqs")
end)

T.done()
