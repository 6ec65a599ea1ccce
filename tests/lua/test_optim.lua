-- test_optim.lua - dl.optim SGD/Adam/AdamW against PyTorch 1.13: the same
-- starting parameters and the same sequence of 20 gradients (fed through
-- p.grad), parameters compared after every step; param groups, state_dict
-- round trips, zero_grad and bad input.
local T = require "testlib"
local optim = dl.optim

local STEPS = 20

-- One Python call: initial params, gradients, and every trajectory.
local R = T.torch([==[
import torch
STEPS = 20
g = torch.Generator().manual_seed(1)
p0 = [torch.randn(3, 4, generator=g), torch.randn(5, generator=g)]
grads = [[torch.randn(3, 4, generator=g), torch.randn(5, generator=g)] for _ in range(STEPS)]
# a few exact zeros and large values to exercise amsgrad and eps
grads[3][1][0] = 0.0
grads[7][0][1, 2] = 25.0

def run(make, dtype=torch.float32):
    params = [p.clone().to(dtype).requires_grad_() for p in p0]
    opt = make(params)
    traj = []
    for s in range(STEPS):
        for p, gr in zip(params, grads[s]):
            p.grad = gr.clone().to(dtype)
        opt.step()
        traj.append([p.detach().clone() for p in params])
    return traj

O = torch.optim
cases = {
  "sgd": lambda ps: O.SGD(ps, lr=0.1),
  "sgd_momentum": lambda ps: O.SGD(ps, lr=0.05, momentum=0.9),
  "sgd_dampening": lambda ps: O.SGD(ps, lr=0.05, momentum=0.9, dampening=0.3, weight_decay=0.01),
  "sgd_nesterov": lambda ps: O.SGD(ps, lr=0.05, momentum=0.8, nesterov=True, weight_decay=1e-3),
  "sgd_maximize": lambda ps: O.SGD(ps, lr=0.02, momentum=0.5, maximize=True),
  "adam": lambda ps: O.Adam(ps, lr=0.01),
  "adam_wd": lambda ps: O.Adam(ps, lr=0.02, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1),
  "adam_amsgrad": lambda ps: O.Adam(ps, lr=0.01, amsgrad=True, weight_decay=0.01),
  "adam_maximize": lambda ps: O.Adam(ps, lr=0.01, maximize=True),
  "adamw": lambda ps: O.AdamW(ps, lr=0.01),
  "adamw_amsgrad": lambda ps: O.AdamW(ps, lr=0.03, weight_decay=0.5, amsgrad=True, betas=(0.85, 0.95)),
  "groups_sgd": lambda ps: O.SGD([{"params": [ps[0]], "lr": 0.2, "momentum": 0.9},
                                  {"params": [ps[1]]}], lr=0.01, momentum=0.5, nesterov=True),
  "groups_adam": lambda ps: O.Adam([{"params": [ps[0]], "lr": 0.05, "betas": (0.5, 0.9)},
                                   {"params": [ps[1]], "weight_decay": 0.2}], lr=0.003),
}
out = {"p0": p0, "grads": grads}
for k, make in cases.items():
    out[k] = run(make)
out["adam_f64"] = run(cases["adam_amsgrad"], torch.float64)
out["sgd_f64"] = run(cases["sgd_nesterov"], torch.float64)
emit(out)
]==])

local function fresh(dtype)
  dtype = dtype or dl.float32
  local ps = {}
  for i, rec in ipairs(R.p0) do ps[i] = T.from_torch(rec):to(dtype):clone():requires_grad_(true) end
  return ps
end

local function grad(s, i, dtype)
  return T.from_torch(R.grads[s][i]):to(dtype or dl.float32)
end

-- runs STEPS steps and compares with the torch trajectory after each.
-- float32 tolerance: 1e-6 relative, plus 1e-6 absolute for parameters that
-- pass near zero: PyTorch's vectorised add(alpha=) is a fused multiply-add, so
-- float32 results may differ by an ulp of the (order-1) operands.
local function check(name, make, dtype, rtol, atol)
  local ps = fresh(dtype)
  local opt = make(ps)
  for s = 1, STEPS do
    for i, p in ipairs(ps) do p.grad = grad(s, i, dtype) end
    opt:step()
    for i, p in ipairs(ps) do
      local rec = R[name][s][i]
      if dtype == dl.float64 then rec.dtype = "float64" end
      T.match_torch(p, rec, rtol or 1e-6, atol or 1e-6, string.format("%s step %d param %d", name, s, i))
    end
  end
  return opt, ps
end

T.case("SGD plain, momentum, dampening, nesterov, maximize", function()
  check("sgd", function(ps) return optim.SGD(ps, {lr = 0.1}) end)
  check("sgd_momentum", function(ps) return optim.SGD(ps, {lr = 0.05, momentum = 0.9}) end)
  check("sgd_dampening", function(ps)
    return optim.SGD(ps, {lr = 0.05, momentum = 0.9, dampening = 0.3, weight_decay = 0.01})
  end)
  check("sgd_nesterov", function(ps)
    return optim.SGD(ps, {lr = 0.05, momentum = 0.8, nesterov = true, weight_decay = 1e-3})
  end)
  check("sgd_maximize", function(ps) return optim.SGD(ps, {lr = 0.02, momentum = 0.5, maximize = true}) end)
  check("sgd_f64", function(ps)
    return optim.SGD(ps, {lr = 0.05, momentum = 0.8, nesterov = true, weight_decay = 1e-3})
  end, dl.float64, 1e-12, 1e-14)
end)

T.case("Adam: plain, weight decay, amsgrad, maximize, float64", function()
  check("adam", function(ps) return optim.Adam(ps, {lr = 0.01}) end)
  check("adam_wd", function(ps)
    return optim.Adam(ps, {lr = 0.02, betas = {0.8, 0.99}, eps = 1e-6, weight_decay = 0.1})
  end)
  check("adam_amsgrad", function(ps) return optim.Adam(ps, {lr = 0.01, amsgrad = true, weight_decay = 0.01}) end)
  check("adam_maximize", function(ps) return optim.Adam(ps, {lr = 0.01, maximize = true}) end)
  check("adam_f64", function(ps) return optim.Adam(ps, {lr = 0.01, amsgrad = true, weight_decay = 0.01}) end,
    dl.float64, 1e-12, 1e-14)
end)

T.case("AdamW", function()
  check("adamw", function(ps) return optim.AdamW(ps, {lr = 0.01}) end)
  check("adamw_amsgrad", function(ps)
    return optim.AdamW(ps, {lr = 0.03, weight_decay = 0.5, amsgrad = true, betas = {0.85, 0.95}})
  end)
end)

T.case("parameter groups with their own lr and options", function()
  local opt = check("groups_sgd", function(ps)
    return optim.SGD({{params = {ps[1]}, lr = 0.2, momentum = 0.9}, {params = {ps[2]}}},
      {lr = 0.01, momentum = 0.5, nesterov = true})
  end)
  T.eq(#opt.param_groups, 2)
  T.eq(opt.param_groups[1].lr, 0.2)
  T.eq(opt.param_groups[2].lr, 0.01)
  T.eq(opt.param_groups[2].momentum, 0.5)
  T.eq(opt.param_groups[1].nesterov, true)
  check("groups_adam", function(ps)
    return optim.Adam({{params = {ps[1]}, lr = 0.05, betas = {0.5, 0.9}}, {params = {ps[2]}, weight_decay = 0.2}},
      {lr = 0.003})
  end)
end)

T.case("params without grad are skipped; zero_grad", function()
  local a = dl.ones(3):requires_grad_(true)
  local b = dl.ones(2):requires_grad_(true)
  local opt = optim.SGD({a, b}, {lr = 0.5, momentum = 0.9})
  a.grad = dl.tensor({1.0, 2.0, 3.0})
  opt:step()
  T.tensor_eq(a, {0.5, 0.0, -0.5})
  T.tensor_eq(b, {1, 1})
  T.eq(opt.state[b], nil)
  opt:zero_grad({set_to_none = false})
  T.tensor_eq(a.grad, {0, 0, 0})
  opt:zero_grad()
  T.eq(a.grad, nil)
  -- step returns the closure's loss
  T.eq(opt:step(function() return 42 end), 42)
end)

T.case("grads from backward drive the step", function()
  local p = dl.tensor({3.0, 4.0}):requires_grad_(true)
  local opt = optim.SGD({p}, {lr = 0.5})
  p:norm():backward() -- grad = p / |p|
  T.tensor_eq(p.grad, {0.6, 0.8})
  opt:step()
  T.tensor_eq(p, {2.7, 3.6})
  T.truthy(p.requires_grad and p.is_leaf, "still a leaf that requires grad")
  opt:zero_grad()
  T.eq(p.grad, nil)
  p:sum():backward()
  opt:step()
  T.tensor_eq(p, {2.2, 3.1})
  -- a module's parameters: backward, step, zero_grad through the module
  local lin = dl.nn.Linear(3, 2)
  local w0 = lin.weight:detach():clone()
  local o = optim.SGD(lin:parameters(), {lr = 0.1})
  lin.weight:sum():backward()
  o:step()
  T.tensor_eq(lin.weight, w0 - 0.1, 1e-6)
  lin:zero_grad()
  T.eq(lin.weight.grad, nil)
end)

T.case("state_dict round trip continues the same trajectory", function()
  -- 10 steps, save, new optimizer on fresh copies of the params, load, 10 more
  local ps = fresh()
  local opt = optim.Adam(ps, {lr = 0.01, amsgrad = true, weight_decay = 0.01})
  for s = 1, 10 do
    for i, p in ipairs(ps) do p.grad = grad(s, i) end
    opt:step()
  end
  local sd = opt:state_dict()
  T.eq(#sd.param_groups, 1)
  T.eq(sd.param_groups[1].params[1], 1)
  T.eq(sd.param_groups[1].params[2], 2)
  T.eq(sd.param_groups[1].lr, 0.01)
  T.eq(sd.state[1].step, 10)
  T.shape_eq(sd.state[2].exp_avg, {5})
  T.truthy(sd.state[1].max_exp_avg_sq ~= nil, "amsgrad state saved")
  local ps2 = {}
  for i, p in ipairs(ps) do ps2[i] = p:detach():clone():requires_grad_(true) end
  local opt2 = optim.Adam(ps2, {lr = 0.5})
  opt2:load_state_dict(sd)
  T.eq(opt2.param_groups[1].lr, 0.01)
  T.eq(opt2.param_groups[1].amsgrad, true)
  -- loaded state is a copy
  T.truthy(opt2.state[ps2[1]].exp_avg ~= opt.state[ps[1]].exp_avg)
  for s = 11, STEPS do
    for i, p in ipairs(ps2) do p.grad = grad(s, i) end
    opt2:step()
    for i, p in ipairs(ps2) do T.match_torch(p, R.adam_amsgrad[s][i], 1e-6, 1e-6, "resumed step " .. s) end
  end
  T.raises(function() optim.Adam({dl.ones(1):requires_grad_(true)}, {}):load_state_dict(sd) end,
    "doesn't match the size")
  T.raises(function() opt2:load_state_dict({}) end, "expected a table {state=..., param_groups=...}")
end)

T.case("printing and defaults", function()
  local opt = optim.AdamW({dl.ones(2):requires_grad_(true)})
  local g = opt.param_groups[1]
  T.eq(g.lr, 1e-3)
  T.eq(g.weight_decay, 1e-2)
  T.eq(g.betas[1], 0.9)
  T.eq(g.betas[2], 0.999)
  T.eq(g.eps, 1e-8)
  T.eq(tostring(opt), "AdamW (\nParameter Group 1\n    amsgrad: False\n    betas: (0.9, 0.999)\n" ..
    "    eps: 1e-08\n    lr: 0.001\n    maximize: False\n    weight_decay: 0.01\n)")
  T.eq(optim.Adam({dl.ones(2):requires_grad_(true)}).param_groups[1].weight_decay, 0)
end)

T.case("bad input", function()
  local p = dl.ones(2):requires_grad_(true)
  T.raises(function() optim.SGD({p}, {lr = -0.1}) end, "SGD: Invalid learning rate: -0.1")
  T.raises(function() optim.SGD({p}, {lr = "fast"}) end, "SGD: lr must be a number, got string")
  T.raises(function() optim.SGD({p}) end, "required optimization parameter lr")
  T.raises(function() optim.SGD({p}, {lr = 0.1, momentun = 0.9}) end, "SGD: unknown option 'momentun'")
  T.raises(function() optim.SGD({p}, {lr = 0.1, nesterov = true}) end, "Nesterov momentum requires a momentum")
  T.raises(function() optim.SGD({}, {lr = 0.1}) end, "empty parameter list")
  T.raises(function() optim.SGD(p, {lr = 0.1}) end, "but got a tensor")
  T.raises(function() optim.SGD({p, 3}, {lr = 0.1}) end, "optimizer can only optimize tensors")
  T.raises(function() optim.SGD(dl.nn.Linear(2, 2), {lr = 0.1}) end, "got a Module (pass model:parameters())")
  T.raises(function() optim.SGD({{params = {p}}, {params = {p}}}, {lr = 0.1}) end,
    "more than one parameter group")
  T.raises(function() optim.Adam({p}, {betas = {0.9, 1.0}}) end, "Invalid beta parameter at index 2: 1.0")
  T.raises(function() optim.Adam({p}, {eps = -1}) end, "Invalid epsilon value")
  T.raises(function() optim.Adam({p}, {lr = 0.1, weight_decay = -1}) end, "Invalid weight_decay value")
  T.raises(function() optim.Adam({{params = {p}, lrr = 1}}) end, "unknown option 'lrr' in parameter group")
  T.raises(function() optim.Adam({p}, 0.1) end, "Adam: options table expected, got number")
  T.raises(function() optim.SGD({p}, {lr = 0.1}):step(5) end, "closure must be a function")
end)

T.done()
