-- test_loss_cuda.lua - the losses on CUDA against the CPU: cross_entropy
-- and nll_loss with weights, ignore_index, label smoothing and every
-- reduction, (N,C) and (N,C,H,W), class-probability targets; mse, l1 and
-- binary cross entropy with logits; gradients of each, compared on both
-- devices; a bad target is refused with the CPU's message.  Skipped (exit 77)
-- without a GPU.
local T = require "testlib"
T.require_cuda()
local F = dl._F

local function labels(seed, C, ...)
  dl.manual_seed(seed)
  return dl.randint(1, C + 1, {...})
end

-- the option sets a class loss is run with
local function options(C, w)
  local r = {}
  for _, red in ipairs({"mean", "sum", "none"}) do
    r[#r + 1] = {reduction = red}
    r[#r + 1] = {reduction = red, weight = w}
    r[#r + 1] = {reduction = red, ignore_index = 2}
    r[#r + 1] = {reduction = red, weight = w, ignore_index = 2, label_smoothing = 0.2}
    r[#r + 1] = {reduction = red, label_smoothing = 0.1}
  end
  return r
end

local function with_weight(o, w)
  local c = {}
  for k, v in pairs(o) do c[k] = v end
  if o.weight then c.weight = w end
  return c
end

-- input shapes: (N,C) and (N,C,H,W)
local class_shapes = {{{16, 10}, {16}}, {{3, 5, 4, 6}, {3, 4, 6}}, {{2, 300}, {2}}}

for si, sh in ipairs(class_shapes) do
  local xs, ts = sh[1], sh[2]
  local C = xs[2]
  for oi, o in ipairs(options(C, true)) do
    T.cuda_case(string.format("cross_entropy / nll_loss shape %d options %d", si, oi), function(dev)
      local w = (dl.arange(C):float() * 0.1 + 0.5):to(dev)
      local opts = with_weight(o, w)
      local x = T.randn(xs, {seed = 10 + oi}):to(dev):requires_grad_()
      local t = labels(20 + oi, C, table.unpack(ts)):to(dev)
      local ce = F.cross_entropy(x, t, opts)
      local nopts = with_weight(o, w)
      nopts.label_smoothing = nil
      local lp = T.randn(xs, {seed = 30 + oi}):to(dev)
      local lpx = F.log_softmax(lp, 2):detach():requires_grad_()
      local nll = F.nll_loss(lpx, t, nopts)
      ;(ce:sum() + nll:sum()):backward()
      return {ce, nll, x.grad, lpx.grad}
    end, 1e-5, 1e-6)
  end
end

T.cuda_case("cross_entropy with class probabilities", function(dev)
  local out = {}
  for _, red in ipairs({"mean", "sum", "none"}) do
    for _, eps in ipairs({0, 0.25}) do
      local x = T.randn(6, 7, 3, {seed = 41}):to(dev):requires_grad_()
      local p = F.softmax(T.randn(6, 7, 3, {seed = 42}), 2):to(dev):requires_grad_()
      local w = (dl.arange(7):float() * 0.2 + 0.3):to(dev)
      local l = F.cross_entropy(x, p, {reduction = red, label_smoothing = eps, weight = w})
      l:sum():backward()
      out[#out + 1] = {l, x.grad, p.grad}
    end
  end
  return out
end, 1e-5, 1e-6)

T.cuda_case("cross_entropy float64 and all targets ignored", function(dev)
  local x = T.randn(8, 5, {seed = 51}):double():to(dev):requires_grad_()
  local t = labels(52, 5, 8):to(dev)
  local l = F.cross_entropy(x, t, {label_smoothing = 0.3})
  l:backward()
  local ign = dl.full({8}, 7, {dtype = dl.int64}):to(dev)
  return {l, x.grad, F.cross_entropy(x:detach(), ign, {ignore_index = 7}),
          F.nll_loss(x:detach(), ign, {ignore_index = 7, reduction = "sum"})}
end, 1e-12, 1e-12)

T.cuda_case("a target out of range is refused with the CPU's message", function(dev)
  local x = T.randn(4, 3, {seed = 61}):to(dev)
  local t = dl.tensor({1, 2, 9, 3}):to(dev)
  local ok, err = pcall(F.cross_entropy, x, t)
  T.truthy(not ok, "expected an error")
  local ok2, err2 = pcall(dl._nn.nll_loss_forward, x, dl.tensor({0, 1, 3, 9}):to(dev))
  T.truthy(not ok2, "expected an error")
  -- the device still works afterwards
  return {tostring(err):match("target.*$"), tostring(err2):match("target.*$"),
          F.cross_entropy(x, dl.tensor({1, 2, 3, 3}):to(dev))}
end)

-- pointwise losses: forward and both gradients
local function pw_case(name, f, yshape)
  T.cuda_case(name, function(dev)
    local out = {}
    for _, red in ipairs({"mean", "sum", "none"}) do
      local x = T.randn(5, 4, 3, {seed = 71}):to(dev):requires_grad_()
      local y = T.randn(yshape, {seed = 72}):to(dev):requires_grad_()
      local l = f(x, y, red)
      l:sum():backward()
      out[#out + 1] = {l, x.grad, y.grad}
    end
    return out
  end, 1e-5, 1e-6)
end

pw_case("mse_loss", function(x, y, red) return F.mse_loss(x, y, {reduction = red}) end, {5, 4, 3})
pw_case("mse_loss broadcast", function(x, y, red) return F.mse_loss(x, y, {reduction = red}) end,
        {4, 1})
pw_case("l1_loss", function(x, y, red) return F.l1_loss(x, y, {reduction = red}) end, {5, 4, 3})
pw_case("bce_with_logits", function(x, y, red)
  return F.binary_cross_entropy_with_logits(x * 3, y:sigmoid(), {reduction = red})
end, {5, 4, 3})
pw_case("bce_with_logits weight pos_weight", function(x, y, red)
  local dev = x.device
  local w = (dl.arange(3):float() * 0.5 + 0.5):to(dev)
  local pw = dl.tensor({2.0, 0.5, 1.5}):to(dev)
  return F.binary_cross_entropy_with_logits(x * 3, y:sigmoid(),
    {reduction = red, weight = w, pos_weight = pw})
end, {5, 4, 3})

T.cuda_case("losses of 1e6 elements", function(dev)
  local x = T.randn(1000000, {seed = 81}):to(dev)
  local y = T.randn(1000000, {seed = 82}):to(dev)
  local s = T.randn(10000, 100, {seed = 83}):to(dev)
  local t = labels(84, 100, 10000):to(dev)
  return {F.mse_loss(x, y), F.l1_loss(x, y, {reduction = "sum"}),
          F.cross_entropy(s, t), F.softmax(s, 2):sum(1)}
end, 1e-5, 1e-6)

T.done()
