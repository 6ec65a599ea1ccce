-- dl.amp: mixed precision, PyTorch's torch.autocast and
-- torch.cuda.amp.GradScaler.
--
--   local scaler = dl.amp.GradScaler()
--   local loss = dl.autocast({dtype = "fp16"}, function()
--     return criterion(model(x), y)
--   end)
--   scaler:scale(loss):backward()
--   scaler:step(opt)      -- skipped when a gradient is inf or NaN
--   scaler:update()
--
-- Autocast (dl.autocast(opts, fn), dl.autocast_enter/exit): while on,
-- conv2d, linear and matmul cast float32 CUDA inputs and weights to the half
-- dtype (bfloat16 or float16; the cast records autograd, so float32 master
-- weights get float32 gradients); softmax, log_softmax, the losses,
-- layer_norm, rms_norm and batch_norm compute in float32 (half CUDA inputs
-- are cast up).  Autocast applies to CUDA tensors only: on CPU tensors it
-- changes nothing.
--
-- Invariants: the autocast state is a stack (nested regions restore the
-- outer one); dl.autocast restores the state it found even when fn raises.
-- The wrappers in dl.nn.functional read amp._state on every call and do
-- nothing else while autocast is off.
local dl = require "dl"
local util = require "dl.util"

local fail = util.fail

local amp = {}

local state = {enabled = false, dtype = nil}
amp._state = state
local stack = {}

local HALF_NAMES = {bf16 = "bfloat16", bfloat16 = "bfloat16", fp16 = "float16", float16 = "float16",
  half = "float16"}

-- The half dtype an autocast dtype option names (float16 by default, as PyTorch's CUDA autocast).
local function half_dtype(d, op)
  if d == nil then return dl.float16 end
  if d == dl.float16 or d == dl.bfloat16 then return d end
  local name = type(d) == "string" and HALF_NAMES[d]
  if not name then
    fail("%s: dtype must be \"bf16\"/\"bfloat16\" or \"fp16\"/\"float16\", got %s", op, tostring(d))
  end
  return dl[name]
end

local function check_autocast_opts(opts, op)
  opts = util.check_options(opts, op, {"dtype", "enabled", "device_type", "cache_enabled"})
  if opts.device_type ~= nil and opts.device_type ~= "cuda" then
    fail("%s: device_type must be \"cuda\" (autocast applies to CUDA tensors only; on the CPU it changes nothing)", op)
  end
  if opts.enabled ~= nil and type(opts.enabled) ~= "boolean" then
    fail("%s: enabled must be a boolean, got %s", op, type(opts.enabled))
  end
  return opts
end

-- Turns autocast on (or off, with {enabled=false}) until the matching autocast_exit.
function amp.autocast_enter(opts)
  opts = check_autocast_opts(opts, "autocast_enter")
  local dtype = half_dtype(opts.dtype, "autocast_enter")
  stack[#stack + 1] = {state.enabled, state.dtype}
  state.enabled = opts.enabled ~= false
  state.dtype = dtype
end

function amp.autocast_exit()
  local top = stack[#stack]
  if not top then fail("autocast_exit: no autocast region is open") end
  stack[#stack] = nil
  state.enabled, state.dtype = top[1], top[2]
end

-- Closes every region opened above depth (after an error inside them).
local function unwind(depth)
  while #stack > depth do amp.autocast_exit() end
end

function amp.is_autocast_enabled()
  return state.enabled
end

-- The dtype autocast casts to (nil while it is off).
function amp.get_autocast_dtype()
  return state.enabled and state.dtype or nil
end

-- dl.autocast({dtype=, enabled=}, fn, ...) -> fn(...)'s results, computed
-- with autocast on; the previous state comes back even if fn raises.
-- dl.autocast(fn, ...) uses float16.
local function callable(f)
  if type(f) == "function" then return true end
  local mt = getmetatable(f)
  return type(mt) == "table" and mt.__call ~= nil
end

function amp.autocast(opts, fn, ...)
  if callable(opts) then
    return amp.autocast(nil, opts, fn, ...)
  end
  if not callable(fn) then fail("autocast: a function to run is required, got %s", type(fn)) end
  local depth = #stack
  amp.autocast_enter(opts)
  local res = table.pack(pcall(fn, ...))
  unwind(depth)
  if not res[1] then error(res[2], 0) end
  return table.unpack(res, 2, res.n)
end

-- --- casts used by dl.nn.functional ------------------------------------------------

local function is_half(dt)
  return dt == dl.float16 or dt == dl.bfloat16
end

-- x cast to the autocast dtype when it is a float32 CUDA tensor.
function amp._to_half(x)
  if dl.is_tensor(x) and x.dtype == dl.float32 and x:is_cuda() then return x:to(state.dtype) end
  return x
end

-- x cast to float32 when it is a half CUDA tensor.
function amp._to_float(x)
  if dl.is_tensor(x) and is_half(x.dtype) and x:is_cuda() then return x:float() end
  return x
end

-- Whether autocast applies to a call whose first tensor argument is x.
function amp._applies(x)
  return state.enabled and dl.is_tensor(x) and x:is_cuda()
end

-- dl.matmul under autocast computes in the half dtype.
local raw_matmul = rawget(dl, "matmul")
if raw_matmul then
  dl.matmul = function(a, b, ...)
    if state.enabled and amp._applies(a) then return raw_matmul(amp._to_half(a), amp._to_half(b), ...) end
    return raw_matmul(a, b, ...)
  end
end

-- --- GradScaler -----------------------------------------------------------------

local GradScaler = util.class("GradScaler")
amp.GradScaler = GradScaler

-- GradScaler({init_scale=65536, growth_factor=2, backoff_factor=0.5,
-- growth_interval=2000, enabled=true})
function GradScaler:__init(opts)
  opts = util.check_options(opts, "GradScaler",
    {"init_scale", "growth_factor", "backoff_factor", "growth_interval", "enabled"})
  local function num(k, def)
    local v = opts[k]
    if v == nil then return def end
    util.check_number(v, "GradScaler", k)
    return v
  end
  self._scale = num("init_scale", 65536.0) + 0.0
  self._growth_factor = num("growth_factor", 2.0)
  self._backoff_factor = num("backoff_factor", 0.5)
  self._growth_interval = opts.growth_interval or 2000
  self._enabled = opts.enabled ~= false
  if opts.enabled ~= nil and type(opts.enabled) ~= "boolean" then fail("GradScaler: enabled must be a boolean") end
  if not (self._scale > 0) then fail("GradScaler: init_scale must be positive, got %s", tostring(self._scale)) end
  if not (self._growth_factor > 1) then fail("GradScaler: growth_factor should be > 1, got %s", tostring(self._growth_factor)) end
  if not (self._backoff_factor > 0 and self._backoff_factor < 1) then
    fail("GradScaler: backoff_factor should be in (0, 1), got %s", tostring(self._backoff_factor))
  end
  if math.type(self._growth_interval) ~= "integer" or self._growth_interval < 1 then
    fail("GradScaler: growth_interval should be a positive integer, got %s", tostring(self._growth_interval))
  end
  self._growth_tracker = 0
  self._per_opt = {} -- optimizer -> {unscaled =, stepped =, found_inf =}
end

function GradScaler:is_enabled() return self._enabled end

-- The current scale (1.0 when disabled).
function GradScaler:get_scale() return self._enabled and self._scale or 1.0 end
function GradScaler:get_growth_factor() return self._growth_factor end
function GradScaler:get_backoff_factor() return self._backoff_factor end
function GradScaler:get_growth_interval() return self._growth_interval end

-- outputs * scale (a tensor, or an array of tensors).
function GradScaler:scale(outputs)
  if not self._enabled then return outputs end
  if dl.is_tensor(outputs) then return outputs * self._scale end
  if type(outputs) ~= "table" then fail("GradScaler:scale: a tensor or an array of tensors expected, got %s", type(outputs)) end
  local out = {}
  for i, t in ipairs(outputs) do out[i] = self:scale(t) end
  return out
end

local function opt_state(self, opt)
  local st = self._per_opt[opt]
  if not st then
    st = {unscaled = false, stepped = false, found_inf = false}
    self._per_opt[opt] = st
  end
  return st
end

-- Divides the gradients of opt's parameters by the scale in place and notes
-- whether any is inf or NaN (one device read per device for all of them).
function GradScaler:unscale_(opt)
  if not self._enabled then return end
  if type(opt) ~= "table" or type(opt.param_groups) ~= "table" then
    fail("GradScaler:unscale_: an optimizer expected, got %s", type(opt))
  end
  local st = opt_state(self, opt)
  if st.unscaled then fail("unscale_() has already been called on this optimizer since the last update().") end
  if st.stepped then fail("unscale_() is being called after step().") end
  local inv = 1.0 / self._scale
  local found = false
  dl.no_grad(function()
    local flags = {} -- device -> array of 0-dim bool tensors (true: all finite)
    for _, group in ipairs(opt.param_groups) do
      for _, p in ipairs(group.params) do
        local g = p.grad
        if g ~= nil then
          g:mul_(inv)
          local dev = g.device
          flags[dev] = flags[dev] or {}
          local f = flags[dev]
          f[#f + 1] = g:isfinite():all()
        end
      end
    end
    for _, f in pairs(flags) do
      if not dl.stack(f):all():item() then found = true end
    end
  end)
  st.found_inf = found
  st.unscaled = true
end

-- Unscales (unless unscale_ ran) and runs opt:step(...) unless a gradient
-- was inf or NaN.  Returns what opt:step returned (nil when skipped).
function GradScaler:step(opt, ...)
  if not self._enabled then return opt:step(...) end
  local st = opt_state(self, opt)
  if st.stepped then fail("step() has already been called since the last update().") end
  if not st.unscaled then self:unscale_(opt) end
  local ret
  if not st.found_inf then ret = opt:step(...) end
  st.stepped = true
  return ret
end

-- Adjusts the scale after the step(s): backoff when any step found inf/NaN,
-- growth after growth_interval clean steps in a row; or sets new_scale.
function GradScaler:update(new_scale)
  if not self._enabled then return end
  if new_scale ~= nil then
    if dl.is_tensor(new_scale) then new_scale = new_scale:item() end
    util.check_number(new_scale, "GradScaler:update", "new_scale")
    self._scale = new_scale + 0.0
  else
    local any, found = false, false
    for _, st in pairs(self._per_opt) do
      any = true
      found = found or st.found_inf
    end
    if not any then fail("GradScaler:update: no inf checks were recorded prior to update (call step or unscale_ first)") end
    if found then
      self._scale = self._scale * self._backoff_factor
      self._growth_tracker = 0
    else
      self._growth_tracker = self._growth_tracker + 1
      if self._growth_tracker == self._growth_interval then
        self._scale = self._scale * self._growth_factor
        self._growth_tracker = 0
      end
    end
  end
  self._per_opt = {}
end

function GradScaler:state_dict()
  if not self._enabled then return {} end
  return {scale = self._scale, growth_factor = self._growth_factor, backoff_factor = self._backoff_factor,
    growth_interval = self._growth_interval, _growth_tracker = self._growth_tracker}
end

function GradScaler:load_state_dict(sd)
  if not self._enabled then return end
  if type(sd) ~= "table" then fail("GradScaler:load_state_dict: a table expected, got %s", type(sd)) end
  if sd.scale == nil then
    fail("GradScaler:load_state_dict: the state dict is empty (it was saved from a disabled GradScaler)")
  end
  self._scale = sd.scale + 0.0
  self._growth_factor = sd.growth_factor or self._growth_factor
  self._backoff_factor = sd.backoff_factor or self._backoff_factor
  self._growth_interval = sd.growth_interval or self._growth_interval
  self._growth_tracker = sd._growth_tracker or 0
end

function GradScaler:__tostring()
  return string.format("GradScaler(scale=%s, enabled=%s)", util.pyrepr(self._scale), tostring(self._enabled))
end

return amp
