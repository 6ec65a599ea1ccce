-- test_optim_lr_scheduler.lua - dl.optim.lr_scheduler against PyTorch 1.13:
-- get_last_lr() after construction and after each of 30 steps must equal
-- torch's sequence (two param groups with different lrs), plus the momentum
-- and betas that OneCycleLR cycles, state_dict, and bad input.
local T = require "testlib"
local optim = dl.optim
local S = optim.lr_scheduler

local N = 30

local R = T.torch([==[
import warnings
warnings.filterwarnings("ignore")
import torch
from torch.optim import lr_scheduler as L
N = 30

def opt_sgd():
    a = torch.zeros(2, requires_grad=True); b = torch.zeros(3, requires_grad=True)
    return torch.optim.SGD([{"params": [a]}, {"params": [b], "lr": 0.05}], lr=0.1, momentum=0.9)

def opt_adam():
    a = torch.zeros(2, requires_grad=True); b = torch.zeros(3, requires_grad=True)
    return torch.optim.Adam([{"params": [a]}, {"params": [b], "lr": 0.002}], lr=0.01)

def seq(make_opt, make_sched, extra=None):
    opt = make_opt()
    s = make_sched(opt)
    lrs = [s.get_last_lr()]
    ext = [extra(opt)] if extra else []
    for _ in range(N):
        opt.step()
        s.step()
        lrs.append(s.get_last_lr())
        if extra: ext.append(extra(opt))
    return {"lrs": lrs, "extra": ext}

mom = lambda o: [g["momentum"] for g in o.param_groups]
beta1 = lambda o: [g["betas"][0] for g in o.param_groups]
out = {
  "step": seq(opt_sgd, lambda o: L.StepLR(o, 7, gamma=0.5)),
  "step_default": seq(opt_sgd, lambda o: L.StepLR(o, 3)),
  "multistep": seq(opt_sgd, lambda o: L.MultiStepLR(o, [5, 12, 12, 20], gamma=0.3)),
  "cosine": seq(opt_sgd, lambda o: L.CosineAnnealingLR(o, 10, eta_min=0.001)),
  "cosine0": seq(opt_sgd, lambda o: L.CosineAnnealingLR(o, 7)),
  "linear": seq(opt_sgd, lambda o: L.LinearLR(o, start_factor=0.25, total_iters=8)),
  "linear_default": seq(opt_sgd, lambda o: L.LinearLR(o)),
  "sequential": seq(opt_sgd, lambda o: L.SequentialLR(o, [L.LinearLR(o, start_factor=0.1, total_iters=5),
                                                        L.CosineAnnealingLR(o, 20, eta_min=1e-4)], milestones=[5])),
  "sequential3": seq(opt_sgd, lambda o: L.SequentialLR(o, [L.LinearLR(o, start_factor=0.5, total_iters=4),
                                                         L.StepLR(o, 3, gamma=0.5),
                                                         L.MultiStepLR(o, [2, 6], gamma=0.1)], milestones=[4, 12])),
  "onecycle": seq(opt_sgd, lambda o: L.OneCycleLR(o, max_lr=[1.0, 0.5], total_steps=N), mom),
  "onecycle_lin3": seq(opt_sgd, lambda o: L.OneCycleLR(o, max_lr=0.3, epochs=6, steps_per_epoch=5, pct_start=0.25,
                                                     anneal_strategy="linear", three_phase=True,
                                                     div_factor=10.0, final_div_factor=100.0), mom),
  "onecycle_adam": seq(opt_adam, lambda o: L.OneCycleLR(o, max_lr=0.01, total_steps=N + 5, base_momentum=0.8,
                                                      max_momentum=0.9), beta1),
  "onecycle_nomom": seq(opt_adam, lambda o: L.OneCycleLR(o, max_lr=0.02, total_steps=N, cycle_momentum=False)),
}
emit(out)
]==])

local function opt_sgd()
  local a, b = dl.zeros(2):requires_grad_(true), dl.zeros(3):requires_grad_(true)
  return optim.SGD({{params = {a}}, {params = {b}, lr = 0.05}}, {lr = 0.1, momentum = 0.9})
end

local function opt_adam()
  local a, b = dl.zeros(2):requires_grad_(true), dl.zeros(3):requires_grad_(true)
  return optim.Adam({{params = {a}}, {params = {b}, lr = 0.002}}, {lr = 0.01})
end

local function same(a, b, what)
  T.eq(#a, #b, what .. " group count")
  for i = 1, #b do T.eq(a[i], b[i], what .. " group " .. i) end -- bit-identical doubles
end

local function check(name, make_opt, make_sched, extra)
  local opt = make_opt()
  local s = make_sched(opt)
  local want = R[name]
  same(s:get_last_lr(), want.lrs[1], name .. " initial lr")
  if extra then same(extra(opt), want.extra[1], name .. " initial extra") end
  for i = 1, N do
    opt:step()
    s:step()
    same(s:get_last_lr(), want.lrs[i + 1], name .. " lr after step " .. i)
    if extra then same(extra(opt), want.extra[i + 1], name .. " extra after step " .. i) end
  end
  -- the optimizer's groups carry the same lrs
  local last = s:get_last_lr()
  for i, g in ipairs(opt.param_groups) do T.eq(g.lr, last[i], name .. " group lr") end
  return s, opt
end

local function mom(o)
  local t = {}
  for i, g in ipairs(o.param_groups) do t[i] = g.momentum end
  return t
end
local function beta1(o)
  local t = {}
  for i, g in ipairs(o.param_groups) do t[i] = g.betas[1] end
  return t
end

T.case("StepLR", function()
  check("step", opt_sgd, function(o) return S.StepLR(o, 7, {gamma = 0.5}) end)
  check("step_default", opt_sgd, function(o) return S.StepLR(o, 3) end)
end)

T.case("MultiStepLR (repeated milestone)", function()
  check("multistep", opt_sgd, function(o) return S.MultiStepLR(o, {5, 12, 12, 20}, {gamma = 0.3}) end)
end)

T.case("CosineAnnealingLR past T_max", function()
  check("cosine", opt_sgd, function(o) return S.CosineAnnealingLR(o, 10, {eta_min = 0.001}) end)
  check("cosine0", opt_sgd, function(o) return S.CosineAnnealingLR(o, 7) end)
end)

T.case("LinearLR", function()
  check("linear", opt_sgd, function(o) return S.LinearLR(o, {start_factor = 0.25, total_iters = 8}) end)
  check("linear_default", opt_sgd, function(o) return S.LinearLR(o) end)
end)

T.case("SequentialLR (warmup then cosine; three stages)", function()
  check("sequential", opt_sgd, function(o)
    return S.SequentialLR(o, {S.LinearLR(o, {start_factor = 0.1, total_iters = 5}),
      S.CosineAnnealingLR(o, 20, {eta_min = 1e-4})}, {5})
  end)
  check("sequential3", opt_sgd, function(o)
    return S.SequentialLR(o, {S.LinearLR(o, {start_factor = 0.5, total_iters = 4}), S.StepLR(o, 3, {gamma = 0.5}),
      S.MultiStepLR(o, {2, 6}, {gamma = 0.1})}, {4, 12})
  end)
end)

T.case("OneCycleLR: lr and momentum / betas", function()
  check("onecycle", opt_sgd, function(o) return S.OneCycleLR(o, {1.0, 0.5}, {total_steps = N}) end, mom)
  check("onecycle_lin3", opt_sgd, function(o)
    return S.OneCycleLR(o, 0.3, {epochs = 6, steps_per_epoch = 5, pct_start = 0.25, anneal_strategy = "linear",
      three_phase = true, div_factor = 10.0, final_div_factor = 100.0})
  end, mom)
  check("onecycle_adam", opt_adam, function(o)
    return S.OneCycleLR(o, 0.01, {total_steps = N + 5, base_momentum = 0.8, max_momentum = 0.9})
  end, beta1)
  local s = check("onecycle_nomom", opt_adam, function(o)
    return S.OneCycleLR(o, 0.02, {total_steps = N, cycle_momentum = false})
  end)
  T.raises(function() s:step() end, "Tried to step 32 times. The specified number of total steps is 30")
end)

T.case("state_dict resumes a schedule", function()
  local opt = opt_sgd()
  local s = S.CosineAnnealingLR(opt, 10, {eta_min = 0.001})
  for _ = 1, 6 do s:step() end
  local sd = s:state_dict()
  T.eq(sd.last_epoch, 6)
  T.eq(sd.optimizer, nil)
  local opt2 = opt_sgd()
  for i, g in ipairs(opt2.param_groups) do g.lr = opt.param_groups[i].lr end
  local s2 = S.CosineAnnealingLR(opt2, 10, {eta_min = 0.001})
  s2:load_state_dict(sd)
  for i = 7, N do
    s2:step()
    same(s2:get_last_lr(), R.cosine.lrs[i + 1], "resumed cosine step " .. i)
  end
  -- step(epoch) uses the closed form
  s2:step(3)
  T.near(s2:get_last_lr()[1], 0.001 + (0.1 - 0.001) * (1 + math.cos(math.pi * 3 / 10)) / 2, 1e-15)
end)

T.case("bad input", function()
  local opt = opt_sgd()
  T.raises(function() S.StepLR({}, 3) end, "StepLR: an optimizer is required")
  T.raises(function() S.StepLR(opt, 0) end, "StepLR: step_size must be at least 1")
  T.raises(function() S.StepLR(opt, 3, {gama = 0.1}) end, "StepLR: unknown option 'gama'")
  T.raises(function() S.MultiStepLR(opt, 5) end, "milestones must be a table")
  T.raises(function() S.LinearLR(opt, {start_factor = 2}) end, "Starting multiplicative factor")
  T.raises(function() S.OneCycleLR(opt, 0.1) end, "You must define either total_steps")
  T.raises(function() S.OneCycleLR(opt, 0.1, {total_steps = 10, anneal_strategy = "cosine"}) end,
    "anneal_strategy must be one of cos, linear")
  T.raises(function() S.OneCycleLR(opt, {0.1}, {total_steps = 10}) end, "expected 2 values for max_lr")
  T.raises(function() S.SequentialLR(opt, {S.StepLR(opt, 2)}, {3}) end, "one more than the number of milestone")
  T.raises(function() S.SequentialLR(opt, {S.StepLR(opt, 2), S.StepLR(opt_sgd(), 2)}, {3}) end,
    "to belong to the same optimizer")
  T.raises(function() S.StepLR(opt_sgd(), 3, {last_epoch = 4}) end, "param 'initial_lr' is not specified")
end)

T.done()
