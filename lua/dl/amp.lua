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
--
-- GradScaler keeps the scale, the growth tracker and the found-inf flag in
-- 0-dim float32/bool tensors on the gradients' device (as PyTorch does), so on
-- CUDA scale/unscale_/step/update never wait for the GPU and can be captured
-- in a CUDA graph: the optimizer skips its step on the device (SGD's fused
-- step reads the flag; an optimizer that cannot reads it on the host, one
-- synchronisation).  get_scale() and state_dict() read the scale back (they
-- wait).  Gradients spread over several devices take the host path: the
-- flags are read and the scale is a Lua number.
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

-- The current scale (1.0 when disabled); reads it back from the device.
function GradScaler:get_scale()
  if not self._enabled then return 1.0 end
  if self._scale_t then return self._scale_t:item() end
  return self._scale
end
function GradScaler:get_growth_factor() return self._growth_factor end
function GradScaler:get_backoff_factor() return self._backoff_factor end
function GradScaler:get_growth_interval() return self._growth_interval end

-- The device scale and growth tracker, made on first use (from the host
-- values) on the device of the tensors scaled.
local function device_state(self, dev)
  if self._scale_t then
    if self._scale_t.device ~= dev then
      fail("GradScaler: the scale lives on %s, these tensors are on %s", self._scale_t.device, dev)
    end
    return self._scale_t
  end
  self._scale_t = dl.full({}, self._scale, {dtype = dl.float32, device = dev})
  self._tracker_t = dl.full({}, self._growth_tracker, {dtype = dl.float32, device = dev})
  return self._scale_t
end

-- outputs * scale (a tensor, or an array of tensors).
function GradScaler:scale(outputs)
  if not self._enabled then return outputs end
  if dl.is_tensor(outputs) then
    local st = device_state(self, outputs.device)
    return st and outputs * st or outputs * self._scale
  end
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

-- The one device all of opt's gradients are on (and the scale, once made),
-- else nil.
local function grads_device(self, opt)
  local dev
  for _, group in ipairs(opt.param_groups) do
    for _, p in ipairs(group.params) do
      local g = p.grad
      if g ~= nil then
        if dev and g.device ~= dev then return nil end
        dev = g.device
      end
    end
  end
  if dev and self._scale_t and self._scale_t.device ~= dev then return nil end
  return dev
end

-- Divides the gradients of opt's parameters by the scale in place and notes
-- whether any is inf or NaN: in a device flag when they share one device,
-- else read on the host (one device read per device for all of them).
function GradScaler:unscale_(opt)
  if not self._enabled then return end
  if type(opt) ~= "table" or type(opt.param_groups) ~= "table" then
    fail("GradScaler:unscale_: an optimizer expected, got %s", type(opt))
  end
  local st = opt_state(self, opt)
  if st.unscaled then fail("unscale_() has already been called on this optimizer since the last update().") end
  if st.stepped then fail("unscale_() is being called after step().") end
  local dev = grads_device(self, opt)
  local scale_t = dev and device_state(self, dev)
  dl.no_grad(function()
    if scale_t then
      local inv = scale_t:reciprocal()
      local flags = {} -- 0-dim bools, true: all finite
      for _, group in ipairs(opt.param_groups) do
        for _, p in ipairs(group.params) do
          local g = p.grad
          if g ~= nil then
            g:mul_(inv)
            flags[#flags + 1] = g:isfinite():all()
          end
        end
      end
      st.found_t = #flags > 0 and dl.stack(flags):all():logical_not() or dl.zeros({}, {dtype = dl.bool, device = dev})
      return
    end
    local inv = 1.0 / self:get_scale()
    local flags = {} -- device -> array of 0-dim bool tensors (true: all finite)
    for _, group in ipairs(opt.param_groups) do
      for _, p in ipairs(group.params) do
        local g = p.grad
        if g ~= nil then
          g:mul_(inv)
          local d = g.device
          flags[d] = flags[d] or {}
          local f = flags[d]
          f[#f + 1] = g:isfinite():all()
        end
      end
    end
    local found = false
    for _, f in pairs(flags) do
      if not dl.stack(f):all():item() then found = true end
    end
    st.found_inf = found
  end)
  st.unscaled = true
end

-- Unscales (unless unscale_ ran) and runs opt:step(...) unless a gradient
-- was inf or NaN.  Returns what opt:step returned (nil when skipped on the
-- host).
function GradScaler:step(opt, ...)
  if not self._enabled then return opt:step(...) end
  local st = opt_state(self, opt)
  if st.stepped then fail("step() has already been called since the last update().") end
  if not st.unscaled then self:unscale_(opt) end
  local ret
  if st.found_t then
    -- the optimizer skips on the device (or reads the flag itself)
    opt._skip_if = st.found_t
    local ok, r = pcall(opt.step, opt, ...)
    opt._skip_if = nil
    if not ok then error(r, 0) end
    ret = r
  elseif not st.found_inf then
    ret = opt:step(...)
  end
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
    if self._scale_t then self._scale_t:fill_(self._scale) end
    self._per_opt = {}
    return
  end
  local any, found, found_t = false, false, nil
  for _, st in pairs(self._per_opt) do
    any = true
    found = found or st.found_inf
    if st.found_t then found_t = found_t and found_t:logical_or(st.found_t) or st.found_t end
  end
  if not any then fail("GradScaler:update: no inf checks were recorded prior to update (call step or unscale_ first)") end
  if found_t then
    -- on the device: scale and tracker follow the same rule as below
    dl.no_grad(function()
      if found then found_t = dl.ones({}, {dtype = dl.bool, device = found_t.device}) end
      local s, tr = self._scale_t, self._tracker_t
      local grown = tr + 1
      local full = grown:eq(self._growth_interval)
      local clean_scale = dl.where(full, s * self._growth_factor, s)
      local clean_tracker = dl.where(full, dl.zeros_like(grown), grown)
      s:copy_(dl.where(found_t, s * self._backoff_factor, clean_scale))
      tr:copy_(dl.where(found_t, dl.zeros_like(grown), clean_tracker))
    end)
  elseif found then
    self._scale = self._scale * self._backoff_factor
    self._growth_tracker = 0
  else
    self._growth_tracker = self._growth_tracker + 1
    if self._growth_tracker == self._growth_interval then
      self._scale = self._scale * self._growth_factor
      self._growth_tracker = 0
    end
  end
  self._per_opt = {}
end

function GradScaler:state_dict()
  if not self._enabled then return {} end
  local tracker = self._tracker_t and math.tointeger(self._tracker_t:item()) or self._growth_tracker
  return {scale = self:get_scale(), growth_factor = self._growth_factor, backoff_factor = self._backoff_factor,
    growth_interval = self._growth_interval, _growth_tracker = tracker}
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
  if self._scale_t then
    self._scale_t:fill_(self._scale)
    self._tracker_t:fill_(self._growth_tracker)
  end
end

function GradScaler:__tostring()
  return string.format("GradScaler(scale=%s, enabled=%s)", util.pyrepr(self:get_scale()), tostring(self._enabled))
end

return amp
