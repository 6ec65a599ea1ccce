-- dl.optim: optimizers (PyTorch's torch.optim) and, as dl.optim.lr_scheduler,
-- learning-rate schedulers.
--
--   local opt = dl.optim.SGD(model:parameters(), {lr=0.1, momentum=0.9})
--   local opt = dl.optim.AdamW({{params=backbone, lr=1e-4}, {params=head}}, {lr=1e-3})
--   opt:zero_grad(); loss:backward(); opt:step()
--
-- Invariants:
--  * The update formulas are PyTorch 1.13's single-tensor (non-foreach)
--    forms, written with the same in-place tensor ops in the same order, so
--    trajectories agree with PyTorch to float rounding.  Steps run under
--    dl.no_grad and change parameters in place.
--  * Parameters are read through p.grad; a parameter whose grad is nil is
--    skipped.  Per-parameter state is keyed by the parameter tensor.
--  * state_dict() numbers parameters 1, 2, ... across the groups in order
--    (PyTorch numbers them from 0): {state = {[i] = {...}}, param_groups =
--    {{lr=..., params={1, 2}}, ...}}.  load_state_dict copies the state.
--  * Fused steps: when every parameter of a group that has a gradient is a
--    contiguous float32 tensor (as are its gradient and state, on its
--    device), SGD and Adam/AdamW update the group with one C call per device
--    (dl._optim, src/ops/optim.c) instead of a few tensor ops per parameter.
--    The C step computes the same operations in the same order and gives the
--    same values; the state it keeps is the same tables of the same tensors.
--    Set dl.optim.use_fused = false to always take the tensor-op path.
local dl = require "dl"
local util = require "dl.util"

local fail, pyrepr = util.fail, util.pyrepr

local optim = {}

optim.use_fused = true

local REQUIRED = setmetatable({}, {__tostring = function() return "<required parameter>" end})
optim.required = REQUIRED

-- --- Optimizer base ---------------------------------------------------------

local Optimizer = util.class("Optimizer")
optim.Optimizer = Optimizer

local function copy_value(v)
  if type(v) == "table" and not dl.is_tensor(v) then
    local c = {}
    for k, x in pairs(v) do c[k] = copy_value(x) end
    return c
  end
  return v
end

-- Optimizer.__init(self, params, defaults): params is an array of tensors, a
-- single tensor, or an array of groups {params=..., <option overrides>}.
function Optimizer:__init(params, defaults)
  self.defaults = defaults
  self.state = {}
  self.param_groups = {}
  self._seen = {}
  local name = self.__name
  if dl.is_tensor(params) then
    fail("%s: params argument given to the optimizer should be an array of tensors or groups, but got a tensor",
      name)
  end
  if type(params) ~= "table" then
    fail("%s: params must be an array of tensors or of parameter groups, got %s", name, type(params))
  end
  local mt = getmetatable(params)
  if type(mt) == "table" and mt._is_module_class then
    fail("%s: params must be an array of tensors, got a Module (pass model:parameters())", name)
  end
  if #params == 0 then fail("%s: optimizer got an empty parameter list", name) end
  if dl.is_tensor(params[1]) then
    self:add_param_group({params = params})
  else
    for _, g in ipairs(params) do self:add_param_group(g) end
  end
end

local GROUP_EXTRA = {params = true, initial_lr = true, name = true}

function Optimizer:add_param_group(group)
  local name = self.__name
  if type(group) ~= "table" or dl.is_tensor(group) then
    fail("%s: a parameter group must be a table {params=...}, got %s", name,
      dl.is_tensor(group) and "tensor" or type(group))
  end
  for k in pairs(group) do
    if type(k) ~= "string" or (self.defaults[k] == nil and not GROUP_EXTRA[k]) then
      fail("%s: unknown option '%s' in parameter group", name, tostring(k))
    end
  end
  local params = group.params
  if dl.is_tensor(params) then params = {params} end
  if type(params) ~= "table" then fail("%s: parameter group needs params (an array of tensors)", name) end
  local g = {}
  for k, v in pairs(group) do g[k] = copy_value(v) end
  g.params = {}
  for i, p in ipairs(params) do
    if not dl.is_tensor(p) then
      fail("%s: optimizer can only optimize tensors, but params[%d] is %s", name, i, type(p))
    end
    if p.is_leaf == false then fail("%s: can't optimize a non-leaf tensor (params[%d])", name, i) end
    g.params[i] = p
  end
  for k, v in pairs(self.defaults) do
    if g[k] == nil then
      if v == REQUIRED then
        fail("%s: parameter group didn't specify a value of required optimization parameter %s", name, k)
      end
      g[k] = copy_value(v)
    end
  end
  self:_check_group(g)
  for _, p in ipairs(g.params) do
    if self._seen[p] then fail("%s: some parameters appear in more than one parameter group", name) end
  end
  for _, p in ipairs(g.params) do self._seen[p] = true end
  self.param_groups[#self.param_groups + 1] = g
end

-- validates a complete group (subclasses)
function Optimizer:_check_group() end

-- Sets the grads of all parameters to nil ({set_to_none=false}: zeroes them).
function Optimizer:zero_grad(opts)
  opts = util.check_options(opts, "zero_grad", {"set_to_none"})
  local to_none = opts.set_to_none ~= false
  for _, g in ipairs(self.param_groups) do
    for _, p in ipairs(g.params) do
      local gr = p.grad
      if gr ~= nil then
        if to_none then p.grad = nil else dl.no_grad(function() gr:zero_() end) end
      end
    end
  end
end

-- Runs closure (if any, with grad mode on) for the loss, then the update
-- under no_grad.
function Optimizer:step(closure)
  local loss
  if closure ~= nil then
    if type(closure) ~= "function" then fail("%s.step: closure must be a function", self.__name) end
    loss = dl.enable_grad(closure)
  end
  -- GradScaler's device flag (true: skip this step): read here by
  -- optimizers that cannot skip on the device
  local skip = self._skip_if
  if skip ~= nil and not self._device_skip and skip:item() then return loss end
  dl.no_grad(function()
    for _, g in ipairs(self.param_groups) do self:_update_group(g) end
  end)
  return loss
end

function Optimizer:state_dict()
  local index, n = {}, 0
  local groups = {}
  for gi, g in ipairs(self.param_groups) do
    local packed = {}
    for k, v in pairs(g) do
      if k ~= "params" then packed[k] = copy_value(v) end
    end
    packed.params = {}
    for i, p in ipairs(g.params) do
      if index[p] == nil then
        n = n + 1
        index[p] = n
      end
      packed.params[i] = index[p]
    end
    groups[gi] = packed
  end
  local state = {}
  for p, s in pairs(self.state) do
    if index[p] then state[index[p]] = s end
  end
  return {state = state, param_groups = groups}
end

function Optimizer:load_state_dict(sd)
  local name = self.__name
  if type(sd) ~= "table" or type(sd.param_groups) ~= "table" or type(sd.state) ~= "table" then
    fail("%s.load_state_dict: expected a table {state=..., param_groups=...}", name)
  end
  local saved = sd.param_groups
  if #saved ~= #self.param_groups then
    fail("%s.load_state_dict: loaded state dict has a different number of parameter groups (%d, optimizer has %d)",
      name, #saved, #self.param_groups)
  end
  local id_map = {}
  for gi, g in ipairs(self.param_groups) do
    local s = saved[gi]
    if type(s.params) ~= "table" or #s.params ~= #g.params then
      fail("%s.load_state_dict: loaded state dict contains a parameter group that doesn't match the size of optimizer's group %d",
        name, gi)
    end
    for i, id in ipairs(s.params) do id_map[id] = g.params[i] end
  end
  local state = {}
  for id, st in pairs(sd.state) do
    local p = id_map[id]
    if p ~= nil then
      local c = {}
      for k, v in pairs(st) do
        if dl.is_tensor(v) then
          if k == "step" then
            c[k] = v:item()
          elseif v.dtype.is_floating_point then
            c[k] = v:to(p.device, p.dtype):clone()
          else
            c[k] = v:to(p.device):clone()
          end
        else
          c[k] = copy_value(v)
        end
      end
      state[p] = c
    end
  end
  self.state = state
  for gi, g in ipairs(self.param_groups) do
    for k, v in pairs(saved[gi]) do
      if k ~= "params" then g[k] = copy_value(v) end
    end
  end
end

function Optimizer:__tostring()
  local lines = {self.__name .. " ("}
  for i, g in ipairs(self.param_groups) do
    lines[#lines + 1] = "Parameter Group " .. i
    local keys = {}
    for k in pairs(g) do
      if k ~= "params" then keys[#keys + 1] = k end
    end
    table.sort(keys)
    for _, k in ipairs(keys) do lines[#lines + 1] = "    " .. k .. ": " .. pyrepr(g[k]) end
  end
  return table.concat(lines, "\n") .. "\n)"
end

-- Builds the defaults table of an optimizer from opts: spec is an array of
-- {name, default}.
local function make_defaults(name, opts, spec)
  local keys = {}
  for i, s in ipairs(spec) do keys[i] = s[1] end
  opts = util.check_options(opts, name, keys)
  local d = {}
  for _, s in ipairs(spec) do
    local v = opts[s[1]]
    if v == nil then v = s[2] end
    d[s[1]] = v
  end
  return d
end

local function check_num(g, key, name, what, lo)
  local v = g[key]
  if type(v) ~= "number" then fail("%s: %s must be a number, got %s", name, key, type(v)) end
  if v ~= v or v < (lo or 0) then fail("%s: Invalid %s: %s", name, what, pyrepr(v)) end
end

local function check_flag(g, key, name)
  if type(g[key]) ~= "boolean" then fail("%s: %s must be a boolean, got %s", name, key, type(g[key])) end
end

-- --- fused steps -------------------------------------------------------------

local F32 = dl.float32

local CL = {memory_format = "channels_last"}

-- p's layout, when a fused step can read it as a flat array: "c" (contiguous)
-- or "cl" (channels-last); nil otherwise.
local function layout(p)
  if p:is_contiguous() then return "c" end
  if p:dim() == 4 and p:is_contiguous(CL) then return "cl" end
  return nil
end

-- t can join a fused step as p's gradient or state: a float32 tensor of p's
-- shape on p's device, laid out as p is.
local function fusable(t, p)
  if not dl.is_tensor(t) or t.dtype ~= F32 or t.device ~= p.device then return false end
  local a, b = t.shape, p.shape
  if #a ~= #b then return false end
  for i = 1, #a do if a[i] ~= b[i] then return false end end
  local lt, lp = layout(t), layout(p)
  if lt == nil or lp == nil then return false end
  if lt == lp then return true end
  -- both readings can hold when sizes of 1 make the strides ambiguous
  local st, sp = t:stride(), p:stride()
  for i = 1, #a do if a[i] > 1 and st[i] ~= sp[i] then return false end end
  return true
end

-- The parameters of g that have a gradient, when a fused step can take them
-- all (each a contiguous float32 tensor, as are its gradient and the state
-- tensors `keys` it already has); nil otherwise.
local function fused_params(self, g, keys)
  if not optim.use_fused then return nil end
  local ps = {}
  for _, p in ipairs(g.params) do
    local grad = p.grad
    if grad ~= nil then
      if p.dtype ~= F32 or layout(p) == nil or not fusable(grad, p) then return nil end
      local st = self.state[p]
      if st ~= nil then
        for _, k in ipairs(keys) do
          if st[k] ~= nil and not fusable(st[k], p) then return nil end
        end
      end
      ps[#ps + 1] = p
    end
  end
  return ps
end

-- Splits ps by device, keeping their order: an array of arrays.
local function by_device(ps)
  local buckets, index = {}, {}
  for _, p in ipairs(ps) do
    local d = p.device
    local b = index[d]
    if b == nil then
      b = {}
      index[d] = b
      buckets[#buckets + 1] = b
    end
    b[#b + 1] = p
  end
  return buckets
end

-- --- SGD --------------------------------------------------------------------

local SGD = util.class("SGD", Optimizer)
optim.SGD = SGD
SGD._device_skip = true -- its fused step reads self._skip_if on the device

-- SGD(params, {lr=(required), momentum=0, dampening=0, weight_decay=0,
-- nesterov=false, maximize=false})
function SGD:__init(params, opts)
  local d = make_defaults("SGD", opts, {{"lr", REQUIRED}, {"momentum", 0}, {"dampening", 0},
    {"weight_decay", 0}, {"nesterov", false}, {"maximize", false}})
  Optimizer.__init(self, params, d)
end

function SGD:_check_group(g)
  check_num(g, "lr", "SGD", "learning rate")
  check_num(g, "momentum", "SGD", "momentum value")
  check_num(g, "dampening", "SGD", "dampening value", -math.huge)
  check_num(g, "weight_decay", "SGD", "weight_decay value")
  check_flag(g, "nesterov", "SGD")
  check_flag(g, "maximize", "SGD")
  if g.nesterov and (g.momentum <= 0 or g.dampening ~= 0) then
    fail("SGD: Nesterov momentum requires a momentum and zero dampening")
  end
end

local NOT_FIRST = "take one step before capturing (dl.cuda.graphed's warm-up does)"

-- The fused SGD step over ps (see src/cpu/optim.h): a new momentum buffer
-- is created empty and flagged fresh, and the C step sets it to the
-- direction, as the tensor-op path's clone does.  On CUDA the step reads
-- self._skip_if (GradScaler's device flag) on the device.  While a CUDA graph
-- captures it, the learning rate is read from a device scalar per group and
-- device (created by an eager step), which the graph refreshes from g.lr
-- before each replay.
function SGD:_fused_update(g, ps)
  local graph = dl.cuda._capturing_graph()
  for _, b in ipairs(by_device(ps)) do
    local dev = b[1].device
    local on_cuda = b[1]:is_cuda()
    local opts = {lr = g.lr, momentum = g.momentum, dampening = g.dampening,
      weight_decay = g.weight_decay, nesterov = g.nesterov, maximize = g.maximize}
    local skip = self._skip_if
    if skip ~= nil and skip.device == dev then opts.skip_if = skip end
    if on_cuda then
      -- self._lr_t[g][dev]: kept out of the group, which state_dict() copies
      self._lr_t = self._lr_t or setmetatable({}, {__mode = "k"})
      local per = self._lr_t[g] or {}
      self._lr_t[g] = per
      if graph ~= nil then
        local lr_t = per[dev]
        if lr_t == nil then fail("SGD: a step captured in a CUDA graph needs an earlier eager step; %s", NOT_FIRST) end
        graph:_add_replay_hook(function() lr_t:fill_(g.lr) end)
        opts.lr_tensor = lr_t
      elseif per[dev] == nil then
        per[dev] = dl.full({}, g.lr, {dtype = F32, device = dev})
      end
    end
    local grads, bufs, fresh = {}, {}, {}
    for i, p in ipairs(b) do
      grads[i] = p.grad
      if g.momentum ~= 0 then
        local st = self.state[p]
        if st == nil then
          st = {}
          self.state[p] = st
        end
        fresh[i] = st.momentum_buffer == nil
        if fresh[i] and graph ~= nil then
          fail("SGD: the first step creates the momentum buffers and cannot be captured in a CUDA graph; %s",
            NOT_FIRST)
        end
        if fresh[i] then st.momentum_buffer = dl.empty_like(p) end
        bufs[i] = st.momentum_buffer
      end
    end
    dl._optim.sgd_step(b, grads, bufs, fresh, opts)
  end
end

-- Refuses a step that would be captured in a CUDA graph with the host's
-- numbers frozen in it.
local function refuse_capture(name, why)
  if dl.cuda._capturing_graph() ~= nil then fail("%s: this step cannot be captured in a CUDA graph (%s)", name, why) end
end

function SGD:_update_group(g)
  local ps = fused_params(self, g, {"momentum_buffer"})
  if ps ~= nil then return self:_fused_update(g, ps) end
  refuse_capture("SGD", "only the fused step of contiguous float32 parameters can be")
  if self._skip_if ~= nil and self._skip_if:item() then return end
  local lr, momentum, dampening, wd = g.lr, g.momentum, g.dampening, g.weight_decay
  for _, p in ipairs(g.params) do
    local d_p = p.grad
    if d_p ~= nil then
      if g.maximize then d_p = d_p:neg() end
      if wd ~= 0 then d_p = d_p:add(p, {alpha = wd}) end
      if momentum ~= 0 then
        local st = self.state[p]
        if st == nil then
          st = {}
          self.state[p] = st
        end
        local buf = st.momentum_buffer
        if buf == nil then
          buf = d_p:detach():clone()
          st.momentum_buffer = buf
        else
          buf:mul_(momentum):add_(d_p, {alpha = 1 - dampening})
        end
        if g.nesterov then d_p = d_p:add(buf, {alpha = momentum}) else d_p = buf end
      end
      p:add_(d_p, {alpha = -lr})
    end
  end
end

-- --- Adam / AdamW -----------------------------------------------------------

local function check_adam_group(g, name)
  check_num(g, "lr", name, "learning rate")
  check_num(g, "eps", name, "epsilon value")
  check_num(g, "weight_decay", name, "weight_decay value")
  local b = g.betas
  if type(b) ~= "table" or #b ~= 2 or type(b[1]) ~= "number" or type(b[2]) ~= "number" then
    fail("%s: betas must be a table of two numbers", name)
  end
  for i = 1, 2 do
    if not (b[i] >= 0 and b[i] < 1) then fail("%s: Invalid beta parameter at index %d: %s", name, i, pyrepr(b[i])) end
  end
  check_flag(g, "amsgrad", name)
  check_flag(g, "maximize", name)
end

-- The fused Adam/AdamW step over ps: state as the tensor-op path keeps it,
-- the step counts advanced here and the bias corrections computed in C.
local function adam_fused(self, g, ps, decoupled)
  local opts = {lr = g.lr, beta1 = g.betas[1], beta2 = g.betas[2], eps = g.eps,
    weight_decay = g.weight_decay, decoupled = decoupled, amsgrad = g.amsgrad,
    maximize = g.maximize}
  for _, b in ipairs(by_device(ps)) do
    local grads, m, v, mx, steps = {}, {}, {}, {}, {}
    for i, p in ipairs(b) do
      local st = self.state[p]
      if st == nil then
        st = {step = 0, exp_avg = dl.zeros_like(p), exp_avg_sq = dl.zeros_like(p)}
        self.state[p] = st
      end
      if g.amsgrad and st.max_exp_avg_sq == nil then st.max_exp_avg_sq = dl.zeros_like(p) end
      st.step = st.step + 1
      grads[i], m[i], v[i], mx[i], steps[i] = p.grad, st.exp_avg, st.exp_avg_sq, st.max_exp_avg_sq, st.step
    end
    dl._optim.adam_step(b, grads, m, v, mx, steps, opts)
  end
end

local ADAM_STATE = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"}

-- The shared Adam/AdamW update; decoupled = AdamW's weight decay.
local function adam_update(self, g, decoupled)
  refuse_capture(self.__name, "its bias corrections change with every step")
  local ps = fused_params(self, g, ADAM_STATE)
  if ps ~= nil then return adam_fused(self, g, ps, decoupled) end
  local lr, eps, wd = g.lr, g.eps, g.weight_decay
  local beta1, beta2 = g.betas[1], g.betas[2]
  for _, p in ipairs(g.params) do
    local grad = p.grad
    if grad ~= nil then
      if g.maximize then grad = grad:neg() end
      local st = self.state[p]
      if st == nil then
        st = {step = 0, exp_avg = dl.zeros_like(p), exp_avg_sq = dl.zeros_like(p)}
        if g.amsgrad then st.max_exp_avg_sq = dl.zeros_like(p) end
        self.state[p] = st
      end
      st.step = st.step + 1
      if decoupled then
        p:mul_(1 - lr * wd)
      elseif wd ~= 0 then
        grad = grad:add(p, {alpha = wd})
      end
      local exp_avg, exp_avg_sq = st.exp_avg, st.exp_avg_sq
      exp_avg:mul_(beta1):add_(grad, {alpha = 1 - beta1})
      -- addcmul_(grad, grad, value = 1 - beta2): ((1 - beta2) * grad) * grad
      exp_avg_sq:mul_(beta2):add_(grad:mul(1 - beta2):mul_(grad))
      local step = st.step
      local bias_correction1 = 1 - beta1 ^ step
      local bias_correction2 = 1 - beta2 ^ step
      local step_size = lr / bias_correction1
      local bc2_sqrt = math.sqrt(bias_correction2)
      local denom
      if g.amsgrad then
        if st.max_exp_avg_sq == nil then st.max_exp_avg_sq = dl.zeros_like(p) end
        st.max_exp_avg_sq:copy_(dl.maximum(st.max_exp_avg_sq, exp_avg_sq))
        denom = st.max_exp_avg_sq:sqrt():div_(bc2_sqrt):add_(eps)
      else
        denom = exp_avg_sq:sqrt():div_(bc2_sqrt):add_(eps)
      end
      -- addcdiv_(exp_avg, denom, value = -step_size): p + ((-step_size * exp_avg) / denom)
      p:add_(exp_avg:mul(-step_size):div_(denom))
    end
  end
end

local Adam = util.class("Adam", Optimizer)
optim.Adam = Adam

-- Adam(params, {lr=1e-3, betas={0.9, 0.999}, eps=1e-8, weight_decay=0,
-- amsgrad=false, maximize=false})
function Adam:__init(params, opts)
  local d = make_defaults("Adam", opts, {{"lr", 1e-3}, {"betas", {0.9, 0.999}}, {"eps", 1e-8},
    {"weight_decay", 0}, {"amsgrad", false}, {"maximize", false}})
  Optimizer.__init(self, params, d)
end
function Adam:_check_group(g) check_adam_group(g, "Adam") end
function Adam:_update_group(g) adam_update(self, g, false) end

local AdamW = util.class("AdamW", Optimizer)
optim.AdamW = AdamW

-- AdamW(params, {lr=1e-3, betas={0.9, 0.999}, eps=1e-8, weight_decay=1e-2,
-- amsgrad=false, maximize=false})
function AdamW:__init(params, opts)
  local d = make_defaults("AdamW", opts, {{"lr", 1e-3}, {"betas", {0.9, 0.999}}, {"eps", 1e-8},
    {"weight_decay", 1e-2}, {"amsgrad", false}, {"maximize", false}})
  Optimizer.__init(self, params, d)
end
function AdamW:_check_group(g) check_adam_group(g, "AdamW") end
function AdamW:_update_group(g) adam_update(self, g, true) end

optim.lr_scheduler = require "dl.optim.lr_scheduler"

return optim
