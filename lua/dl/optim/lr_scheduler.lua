-- dl.optim.lr_scheduler: PyTorch 1.13's learning-rate schedulers StepLR,
-- MultiStepLR, CosineAnnealingLR, LinearLR, SequentialLR and OneCycleLR.
--
--   local sched = dl.optim.lr_scheduler.StepLR(opt, 30, {gamma=0.1})
--   for epoch = 1, 90 do train(); sched:step() end
--
-- Invariants: a scheduler writes group.lr of its optimizer's param groups.
-- step() uses PyTorch's chainable (recursive) formulas and step(epoch) the
-- closed forms, evaluated in the same order with the same doubles, so
-- get_last_lr() sequences equal PyTorch's.  last_epoch counts steps from 0
-- exactly as in PyTorch; milestones, step_size, T_max and total_iters are
-- counts of steps (not indices) and keep PyTorch's values.
local util = require "dl.util"

local fail = util.fail
local S = {}

local function is_optimizer(o)
  local optim = package.loaded["dl.optim"]
  local base = optim and optim.Optimizer
  return base ~= nil and util.isinstance(o, base)
end

-- --- base -------------------------------------------------------------------

local LRScheduler = util.class("LRScheduler")
S.LRScheduler = LRScheduler

function LRScheduler:_attach(optimizer, last_epoch)
  local name = self.__name
  if not is_optimizer(optimizer) then
    fail("%s: an optimizer is required, got %s", name, type(optimizer))
  end
  self.optimizer = optimizer
  last_epoch = last_epoch or -1
  util.check_int(last_epoch, name, "last_epoch")
  if last_epoch == -1 then
    for _, g in ipairs(optimizer.param_groups) do
      if g.initial_lr == nil then g.initial_lr = g.lr end
    end
  else
    for i, g in ipairs(optimizer.param_groups) do
      if g.initial_lr == nil then
        fail("%s: param 'initial_lr' is not specified in param_groups[%d] when resuming an optimizer", name, i)
      end
    end
  end
  self.base_lrs = {}
  for i, g in ipairs(optimizer.param_groups) do self.base_lrs[i] = g.initial_lr end
  self.last_epoch = last_epoch
  self:_initial_step()
end

function LRScheduler:_initial_step()
  self._step_count = 0
  self:step()
end

-- step(): one step of the chainable form.  step(epoch): jump to epoch with the
-- closed form where one exists (PyTorch's deprecated form).
function LRScheduler:step(epoch)
  self._step_count = self._step_count + 1
  local values
  if epoch == nil then
    self.last_epoch = self.last_epoch + 1
    values = self:get_lr()
  else
    self.last_epoch = util.check_int(epoch, self.__name, "epoch")
    if self._get_closed_form_lr then values = self:_get_closed_form_lr() else values = self:get_lr() end
  end
  local groups = self.optimizer.param_groups
  for i, g in ipairs(groups) do g.lr = values[i] end
  self._last_lr = {}
  for i, g in ipairs(groups) do self._last_lr[i] = g.lr end
end

-- The learning rates (one per group) set by the last step.
function LRScheduler:get_last_lr()
  local out = {}
  for i, v in ipairs(self._last_lr) do out[i] = v end
  return out
end

function LRScheduler:get_lr()
  fail("%s: a scheduler class must define get_lr (LRScheduler is only a base class)", self.__name)
end

-- Every field but the optimizer (plain values, copied one level deep).
function LRScheduler:state_dict()
  local sd = {}
  for k, v in pairs(self) do
    if k ~= "optimizer" and k ~= "_schedulers" and type(v) ~= "function" then
      if type(v) == "table" then
        local c = {}
        for kk, vv in pairs(v) do c[kk] = vv end
        v = c
      end
      sd[k] = v
    end
  end
  return sd
end

function LRScheduler:load_state_dict(sd)
  if type(sd) ~= "table" then fail("%s.load_state_dict: a table is required", self.__name) end
  for k, v in pairs(sd) do
    if k ~= "_schedulers" then self[k] = v end
  end
end

local function group_lrs(self, fn)
  local out = {}
  for i, g in ipairs(self.optimizer.param_groups) do out[i] = fn(g, self.base_lrs[i]) end
  return out
end

-- Every group's lr as it stands (a step that changes nothing).
local function current_lrs(self) return group_lrs(self, function(g) return g.lr end) end

-- S[name], a scheduler class.
local function scheduler(name)
  local cls = util.class(name, LRScheduler)
  S[name] = cls
  return cls
end

-- --- StepLR -----------------------------------------------------------------

local StepLR = scheduler("StepLR")

-- StepLR(optimizer, step_size, {gamma=0.1, last_epoch=-1}): lr * gamma every
-- step_size steps.
function StepLR:__init(optimizer, step_size, opts)
  opts = util.check_options(opts, "StepLR", {"gamma", "last_epoch"})
  self.step_size = util.check_int(step_size, "StepLR", "step_size", 1)
  self.gamma = util.check_number(opts.gamma or 0.1, "StepLR", "gamma")
  self:_attach(optimizer, opts.last_epoch)
end

function StepLR:get_lr()
  if self.last_epoch == 0 or self.last_epoch % self.step_size ~= 0 then
    return current_lrs(self)
  end
  return group_lrs(self, function(g) return g.lr * self.gamma end)
end

function StepLR:_get_closed_form_lr()
  return group_lrs(self, function(_, base) return base * self.gamma ^ (self.last_epoch // self.step_size) end)
end

-- --- MultiStepLR ------------------------------------------------------------

local MultiStepLR = scheduler("MultiStepLR")

-- MultiStepLR(optimizer, milestones, {gamma=0.1, last_epoch=-1}): lr * gamma
-- at each milestone (a step count; repeated milestones multiply again).
function MultiStepLR:__init(optimizer, milestones, opts)
  opts = util.check_options(opts, "MultiStepLR", {"gamma", "last_epoch"})
  if type(milestones) ~= "table" then
    fail("MultiStepLR: milestones must be a table of step counts, got %s", type(milestones))
  end
  self.milestones = {}
  for _, m in ipairs(milestones) do
    m = util.check_int(m, "MultiStepLR", "milestone")
    self.milestones[m] = (self.milestones[m] or 0) + 1
  end
  self.gamma = util.check_number(opts.gamma or 0.1, "MultiStepLR", "gamma")
  self:_attach(optimizer, opts.last_epoch)
end

function MultiStepLR:get_lr()
  local c = self.milestones[self.last_epoch]
  if c == nil then return current_lrs(self) end
  return group_lrs(self, function(g) return g.lr * self.gamma ^ c end)
end

function MultiStepLR:_get_closed_form_lr()
  local n = 0 -- bisect_right over the sorted milestones: how many are <= last_epoch
  for m, c in pairs(self.milestones) do
    if m <= self.last_epoch then n = n + c end
  end
  return group_lrs(self, function(_, base) return base * self.gamma ^ n end)
end

-- --- CosineAnnealingLR --------------------------------------------------------

local CosineAnnealingLR = scheduler("CosineAnnealingLR")

-- CosineAnnealingLR(optimizer, T_max, {eta_min=0, last_epoch=-1})
function CosineAnnealingLR:__init(optimizer, T_max, opts)
  opts = util.check_options(opts, "CosineAnnealingLR", {"eta_min", "last_epoch"})
  self.T_max = util.check_int(T_max, "CosineAnnealingLR", "T_max", 1)
  self.eta_min = util.check_number(opts.eta_min or 0, "CosineAnnealingLR", "eta_min")
  self:_attach(optimizer, opts.last_epoch)
end

function CosineAnnealingLR:get_lr()
  local e, T, eta_min = self.last_epoch, self.T_max, self.eta_min
  if e == 0 then return current_lrs(self) end
  if self._step_count == 1 and e > 0 then
    return group_lrs(self, function(_, base)
      return eta_min + (base - eta_min) * (1 + math.cos(e * math.pi / T)) / 2
    end)
  end
  if (e - 1 - T) % (2 * T) == 0 then
    return group_lrs(self, function(g, base)
      return g.lr + (base - eta_min) * (1 - math.cos(math.pi / T)) / 2
    end)
  end
  return group_lrs(self, function(g)
    return (1 + math.cos(math.pi * e / T)) / (1 + math.cos(math.pi * (e - 1) / T)) * (g.lr - eta_min) + eta_min
  end)
end

function CosineAnnealingLR:_get_closed_form_lr()
  local e, T, eta_min = self.last_epoch, self.T_max, self.eta_min
  return group_lrs(self, function(_, base)
    return eta_min + (base - eta_min) * (1 + math.cos(math.pi * e / T)) / 2
  end)
end

-- --- LinearLR ---------------------------------------------------------------

local LinearLR = scheduler("LinearLR")

-- LinearLR(optimizer, {start_factor=1/3, end_factor=1, total_iters=5,
-- last_epoch=-1}): the factor moves linearly over total_iters steps.
function LinearLR:__init(optimizer, opts)
  opts = util.check_options(opts, "LinearLR", {"start_factor", "end_factor", "total_iters", "last_epoch"})
  local sf = util.check_number(opts.start_factor or 1.0 / 3, "LinearLR", "start_factor")
  local ef = util.check_number(opts.end_factor or 1.0, "LinearLR", "end_factor")
  if sf > 1.0 or sf < 0 then fail("LinearLR: Starting multiplicative factor expected to be between 0 and 1.") end
  if ef > 1.0 or ef < 0 then fail("LinearLR: Ending multiplicative factor expected to be between 0 and 1.") end
  self.start_factor, self.end_factor = sf, ef
  self.total_iters = util.check_int(opts.total_iters or 5, "LinearLR", "total_iters", 0)
  self:_attach(optimizer, opts.last_epoch)
end

function LinearLR:get_lr()
  local e, sf, ef, n = self.last_epoch, self.start_factor, self.end_factor, self.total_iters
  if e == 0 then return group_lrs(self, function(g) return g.lr * sf end) end
  if e > n then return current_lrs(self) end
  return group_lrs(self, function(g)
    return g.lr * (1.0 + (ef - sf) / (n * sf + (e - 1) * (ef - sf)))
  end)
end

function LinearLR:_get_closed_form_lr()
  local e, sf, ef, n = self.last_epoch, self.start_factor, self.end_factor, self.total_iters
  return group_lrs(self, function(_, base)
    return base * (sf + (ef - sf) * math.min(n, e) / n)
  end)
end

-- --- SequentialLR -------------------------------------------------------------

local SequentialLR = scheduler("SequentialLR")

-- SequentialLR(optimizer, schedulers, milestones, {last_epoch=-1}): runs
-- schedulers[i+1] from step milestones[i] on (milestones are step counts).
function SequentialLR:__init(optimizer, schedulers, milestones, opts)
  opts = util.check_options(opts, "SequentialLR", {"last_epoch"})
  if not is_optimizer(optimizer) then fail("SequentialLR: an optimizer is required, got %s", type(optimizer)) end
  if type(schedulers) ~= "table" or #schedulers == 0 then
    fail("SequentialLR: schedulers must be a non-empty array of schedulers")
  end
  for i, s in ipairs(schedulers) do
    if not util.isinstance(s, LRScheduler) then fail("SequentialLR: schedulers[%d] is not a scheduler", i) end
    if s.optimizer ~= optimizer then
      fail("SequentialLR: Sequential Schedulers expects all schedulers to belong to the same optimizer, but got schedulers at index %d to be different than the optimizer passed in.",
        i)
    end
  end
  if type(milestones) ~= "table" or #milestones ~= #schedulers - 1 then
    fail("SequentialLR: Sequential Schedulers expects number of schedulers provided to be one more than the number of milestone points, but got number of schedulers %d and the number of milestones to be equal to %d",
      #schedulers, type(milestones) == "table" and #milestones or 0)
  end
  local last_epoch = util.check_int(opts.last_epoch or -1, "SequentialLR", "last_epoch")
  self._schedulers = schedulers
  self._milestones = {}
  for i, m in ipairs(milestones) do self._milestones[i] = util.check_int(m, "SequentialLR", "milestone") end
  self.last_epoch = last_epoch + 1
  self.optimizer = optimizer
  for _, g in ipairs(optimizer.param_groups) do g.lr = g.initial_lr end
  for _, s in ipairs(schedulers) do s.last_epoch = s.last_epoch - 1 end
  schedulers[1]:_initial_step()
  self._last_lr = schedulers[1]:get_last_lr()
end

function SequentialLR:step()
  self.last_epoch = self.last_epoch + 1
  local idx = 0 -- bisect_right(milestones, last_epoch)
  for _, m in ipairs(self._milestones) do
    if m <= self.last_epoch then idx = idx + 1 end
  end
  local s = self._schedulers[idx + 1]
  if idx > 0 and self._milestones[idx] == self.last_epoch then s:step(0) else s:step() end
  self._last_lr = s:get_last_lr()
end

function SequentialLR:state_dict()
  local sd = LRScheduler.state_dict(self)
  sd._schedulers = {}
  for i, s in ipairs(self._schedulers) do sd._schedulers[i] = s:state_dict() end
  return sd
end

function SequentialLR:load_state_dict(sd)
  LRScheduler.load_state_dict(self, sd)
  for i, s in ipairs(sd._schedulers or {}) do self._schedulers[i]:load_state_dict(s) end
end

-- --- OneCycleLR -----------------------------------------------------------------

local OneCycleLR = scheduler("OneCycleLR")

local function anneal(strategy, start, stop, pct)
  if strategy == "cos" then
    local cos_out = math.cos(math.pi * pct) + 1
    return stop + (start - stop) / 2.0 * cos_out
  end
  return (stop - start) * pct + start
end

-- OneCycleLR(optimizer, max_lr, {total_steps=, epochs=, steps_per_epoch=,
-- pct_start=0.3, anneal_strategy="cos", cycle_momentum=true,
-- base_momentum=0.85, max_momentum=0.95, div_factor=25,
-- final_div_factor=1e4, three_phase=false, last_epoch=-1})
-- max_lr and the momenta may be numbers or one value per group.
function OneCycleLR:__init(optimizer, max_lr, opts)
  local name = "OneCycleLR"
  opts = util.check_options(opts, name, {"total_steps", "epochs", "steps_per_epoch", "pct_start",
    "anneal_strategy", "cycle_momentum", "base_momentum", "max_momentum", "div_factor", "final_div_factor",
    "three_phase", "last_epoch"})
  if not is_optimizer(optimizer) then fail("%s: an optimizer is required, got %s", name, type(optimizer)) end
  if opts.total_steps == nil and opts.epochs == nil and opts.steps_per_epoch == nil then
    fail("OneCycleLR: You must define either total_steps OR (epochs AND steps_per_epoch)")
  elseif opts.total_steps ~= nil then
    if math.type(opts.total_steps) ~= "integer" or opts.total_steps <= 0 then
      fail("OneCycleLR: Expected positive integer total_steps, but got %s", tostring(opts.total_steps))
    end
    self.total_steps = opts.total_steps
  else
    if math.type(opts.epochs) ~= "integer" or opts.epochs <= 0 then
      fail("OneCycleLR: Expected positive integer epochs, but got %s", tostring(opts.epochs))
    end
    if math.type(opts.steps_per_epoch) ~= "integer" or opts.steps_per_epoch <= 0 then
      fail("OneCycleLR: Expected positive integer steps_per_epoch, but got %s", tostring(opts.steps_per_epoch))
    end
    self.total_steps = opts.epochs * opts.steps_per_epoch
  end
  local pct_start = opts.pct_start or 0.3
  if type(pct_start) ~= "number" or pct_start < 0 or pct_start > 1 then
    fail("OneCycleLR: Expected float between 0 and 1 pct_start, but got %s", tostring(pct_start))
  end
  local n = self.total_steps
  if opts.three_phase then
    self._schedule_phases = {
      {end_step = pct_start * n - 1, start_lr = "initial_lr", end_lr = "max_lr",
       start_momentum = "max_momentum", end_momentum = "base_momentum"},
      {end_step = 2 * pct_start * n - 2, start_lr = "max_lr", end_lr = "initial_lr",
       start_momentum = "base_momentum", end_momentum = "max_momentum"},
      {end_step = n - 1, start_lr = "initial_lr", end_lr = "min_lr",
       start_momentum = "max_momentum", end_momentum = "max_momentum"},
    }
  else
    self._schedule_phases = {
      {end_step = pct_start * n - 1, start_lr = "initial_lr", end_lr = "max_lr",
       start_momentum = "max_momentum", end_momentum = "base_momentum"},
      {end_step = n - 1, start_lr = "max_lr", end_lr = "min_lr",
       start_momentum = "base_momentum", end_momentum = "max_momentum"},
    }
  end
  self.anneal_strategy = util.check_string(opts.anneal_strategy or "cos", name, "anneal_strategy", {"cos", "linear"})
  local groups = optimizer.param_groups
  local function per_group(v, what)
    if type(v) == "table" then
      if #v ~= #groups then fail("OneCycleLR: expected %d values for %s, got %d", #groups, what, #v) end
      return v
    end
    util.check_number(v, name, what)
    local t = {}
    for i = 1, #groups do t[i] = v end
    return t
  end
  local last_epoch = opts.last_epoch or -1
  local max_lrs = per_group(max_lr, "max_lr")
  local div_factor = opts.div_factor or 25.0
  local final_div_factor = opts.final_div_factor or 1e4
  if last_epoch == -1 then
    for i, g in ipairs(groups) do
      g.initial_lr = max_lrs[i] / div_factor
      g.max_lr = max_lrs[i]
      g.min_lr = g.initial_lr / final_div_factor
    end
  end
  self.cycle_momentum = util.opt_bool(opts.cycle_momentum, true, name, "cycle_momentum")
  if self.cycle_momentum then
    local d = optimizer.defaults
    if d.momentum == nil and d.betas == nil then
      fail("OneCycleLR: optimizer must support momentum with `cycle_momentum` option enabled")
    end
    self.use_beta1 = d.betas ~= nil
    local maxm = per_group(opts.max_momentum or 0.95, "max_momentum")
    local basem = per_group(opts.base_momentum or 0.85, "base_momentum")
    if last_epoch == -1 then
      for i, g in ipairs(groups) do
        if self.use_beta1 then g.betas = {maxm[i], g.betas[2]} else g.momentum = maxm[i] end
        g.max_momentum = maxm[i]
        g.base_momentum = basem[i]
      end
    end
  end
  self:_attach(optimizer, last_epoch)
end

function OneCycleLR:get_lr()
  local step_num = self.last_epoch
  if step_num > self.total_steps then
    fail("OneCycleLR: Tried to step %d times. The specified number of total steps is %d", step_num + 1,
      self.total_steps)
  end
  local lrs = {}
  local phases = self._schedule_phases
  for gi, g in ipairs(self.optimizer.param_groups) do
    local start_step = 0
    local lr, mom
    for i, ph in ipairs(phases) do
      local end_step = ph.end_step
      if step_num <= end_step or i == #phases then
        local pct = (step_num - start_step) / (end_step - start_step)
        lr = anneal(self.anneal_strategy, g[ph.start_lr], g[ph.end_lr], pct)
        if self.cycle_momentum then
          mom = anneal(self.anneal_strategy, g[ph.start_momentum], g[ph.end_momentum], pct)
        end
        break
      end
      start_step = ph.end_step
    end
    lrs[gi] = lr
    if self.cycle_momentum then
      if self.use_beta1 then g.betas = {mom, g.betas[2]} else g.momentum = mom end
    end
  end
  return lrs
end

return S
