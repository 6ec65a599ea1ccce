-- dl.nn.Module: the base class of every layer and model, PyTorch's
-- torch.nn.Module written the Lua way.
--
--   local Net = dl.nn.Module:extend("Net")
--   function Net:__init(n) self.fc = dl.nn.Linear(n, 2) end
--   function Net:forward(x) return self.fc(x) end
--   local net = Net(4); print(net); net(x)
--
-- Invariants:
--  * An instance keeps its registered members in ordered dictionaries stored
--    raw in the instance (_parameters, _buffers, _modules) and every other
--    field in _attrs, so each assignment goes through __newindex: assigning a
--    Module registers a child, a tensor that requires grad registers a
--    parameter, as PyTorch's __setattr__ does.  Registration order is the
--    order of names (state_dict, named_parameters, printing).
--  * Parameters may be nil (PyTorch's None, e.g. a conv without bias); nil
--    members are skipped by parameters() and state_dict().
--  * Names are PyTorch's dotted names ("layer1.0.conv1.weight"); integer
--    keys on containers are 1-based positions (seq[1] is child "0").
local dl = require "dl"
local util = require "dl.util"

local fail, pyrepr = util.fail, util.pyrepr

-- An ordered dictionary: keys in insertion order, values may be nil.
local OrderedDict = {}
OrderedDict.__index = OrderedDict

local function odict()
  return setmetatable({keys = {}, map = {}, has = {}}, OrderedDict)
end

function OrderedDict:set(k, v)
  if not self.has[k] then
    self.has[k] = true
    self.keys[#self.keys + 1] = k
  end
  self.map[k] = v
end

function OrderedDict:remove(k)
  if not self.has[k] then return end
  self.has[k] = nil
  self.map[k] = nil
  for i, key in ipairs(self.keys) do
    if key == k then
      table.remove(self.keys, i)
      break
    end
  end
end

-- iterator over (key, value) in order, values possibly nil
function OrderedDict:items()
  local i = 0
  return function()
    i = i + 1
    local k = self.keys[i]
    if k ~= nil then return k, self.map[k] end
  end
end

local Module = {}
Module.__name = "Module"
Module._is_module_class = true

local function is_module(v)
  if type(v) ~= "table" then return false end
  local mt = getmetatable(v)
  return type(mt) == "table" and mt._is_module_class == true and rawget(v, "_modules") ~= nil
end
Module.is_module = is_module

-- The class name PyTorch prints (_get_name).
function Module:_get_name()
  return getmetatable(self).__name
end

local function typename(v)
  if dl.is_tensor(v) then return "tensor" end
  if is_module(v) then return v:_get_name() end
  return type(v)
end

function Module.__index(self, k)
  local P = rawget(self, "_parameters")
  if P then
    if P.has[k] then return P.map[k] end
    local B = rawget(self, "_buffers")
    if B.has[k] then return B.map[k] end
    local M = rawget(self, "_modules")
    if M.has[k] then return M.map[k] end
    local v = rawget(self, "_attrs")[k]
    if v ~= nil then return v end
  end
  local cls = getmetatable(self)
  if math.type(k) == "integer" then
    local get = cls.__getitem
    if get then return get(self, k) end
    return nil
  end
  return cls[k]
end

function Module.__newindex(self, k, v)
  local P, B, M, A = rawget(self, "_parameters"), rawget(self, "_buffers"), rawget(self, "_modules"),
    rawget(self, "_attrs")
  if type(k) ~= "string" then
    fail("%s: module fields must be named by strings, got %s", self:_get_name(), type(k))
  end
  if is_module(v) then
    P:remove(k); B:remove(k); A[k] = nil
    M:set(k, v)
  elseif dl.is_tensor(v) and v.requires_grad then
    if B.has[k] then
      fail("%s: cannot assign a tensor that requires grad to buffer '%s'", self:_get_name(), k)
    end
    B:remove(k); M:remove(k); A[k] = nil
    P:set(k, v)
  elseif P.has[k] then
    if v ~= nil then
      fail("%s: cannot assign '%s' as parameter '%s' (a tensor that requires grad, or nil, expected)",
        self:_get_name(), dl.is_tensor(v) and "tensor without requires_grad" or typename(v), k)
    end
    P:set(k, nil)
  elseif M.has[k] then
    if v ~= nil then
      fail("%s: cannot assign '%s' as child module '%s' (a Module or nil expected)", self:_get_name(),
        typename(v), k)
    end
    M:set(k, nil)
  elseif B.has[k] then
    if v ~= nil and not dl.is_tensor(v) then
      fail("%s: cannot assign '%s' as buffer '%s' (a tensor or nil expected)", self:_get_name(),
        typename(v), k)
    end
    B:set(k, v)
  else
    A[k] = v
  end
end

function Module.__call(self, ...)
  return self:forward(...)
end

function Module.__tostring(self)
  return self:__repr()
end

-- The metamethods every class carries (Lua reads them raw from the metatable).
local METAMETHODS = {"__index", "__newindex", "__call", "__tostring", "__len", "__close"}

local function construct(cls, ...)
  local obj = setmetatable({
    _parameters = odict(),
    _buffers = odict(),
    _modules = odict(),
    _attrs = {training = true},
    _non_persistent = {},
  }, cls)
  obj:__init(...)
  return obj
end

-- Makes a subclass: local Net = dl.nn.Module:extend("Net").  The new class
-- is called to make instances (Net(...) runs Net.__init on a fresh module).
function Module.extend(parent, name)
  if type(name) ~= "string" then fail("Module.extend: a class name (string) is required") end
  local cls = {}
  for _, k in ipairs(METAMETHODS) do cls[k] = parent[k] end
  cls.__name = name
  cls.super = parent
  return setmetatable(cls, {
    __index = parent,
    __call = construct,
    __tostring = function() return "<class dl.nn." .. name .. ">" end,
  })
end

setmetatable(Module, {
  __call = construct,
  __tostring = function() return "<class dl.nn.Module>" end,
})

function Module:__init() end

function Module:forward()
  fail('Module [%s] is missing the required "forward" function', self:_get_name())
end

-- true when the module is an instance of cls (or of a subclass).
function Module:isinstance(cls)
  local c = getmetatable(self)
  while c do
    if c == cls then return true end
    local mt = getmetatable(c)
    c = mt and mt.__index
  end
  return false
end

-- --- registration -----------------------------------------------------------

local function check_name(self, what, name)
  if type(name) ~= "string" then
    fail("%s: %s name should be a string, got %s", self:_get_name(), what, type(name))
  end
  if name == "" then fail("%s: %s name can't be empty string \"\"", self:_get_name(), what) end
  if name:find(".", 1, true) then
    fail("%s: %s name can't contain \".\", got '%s'", self:_get_name(), what, name)
  end
end

local function check_free(self, what, name, own)
  local others = {_parameters = "parameter", _buffers = "buffer", _modules = "module"}
  for field, kind in pairs(others) do
    if field ~= own and rawget(self, field).has[name] then
      fail("%s: attribute '%s' already exists as a %s", self:_get_name(), name, kind)
    end
  end
  if rawget(self, "_attrs")[name] ~= nil then
    fail("%s: attribute '%s' already exists", self:_get_name(), name)
  end
  if getmetatable(self)[name] ~= nil then
    fail("%s: cannot register %s '%s': it is a method name", self:_get_name(), what, name)
  end
end

-- The checks before t (a tensor, or nil) is registered as a `what`
-- (parameter or buffer) called name in the dict self[store].
local function check_tensor_member(self, what, name, store, t)
  check_name(self, what, name)
  check_free(self, what, name, store)
  if t ~= nil and not dl.is_tensor(t) then
    fail("%s: cannot assign '%s' object to %s '%s' (a tensor or nil required)", self:_get_name(),
      typename(t), what, name)
  end
end

-- Registers t (a tensor, or nil for None) as parameter `name`.
function Module:register_parameter(name, t)
  check_tensor_member(self, "parameter", name, "_parameters", t)
  rawget(self, "_parameters"):set(name, t)
end

-- Registers t (a tensor, or nil) as buffer `name`; {persistent=false} keeps
-- it out of state_dict().
function Module:register_buffer(name, t, opts)
  opts = util.check_options(opts, "register_buffer", {"persistent"})
  check_tensor_member(self, "buffer", name, "_buffers", t)
  rawget(self, "_buffers"):set(name, t)
  rawget(self, "_non_persistent")[name] = (opts.persistent == false) or nil
end

-- Registers m (a Module, or nil) as child `name`.
function Module:add_module(name, m)
  check_name(self, "module", name)
  check_free(self, "module", name, "_modules")
  if m ~= nil and not is_module(m) then
    fail("%s: %s is not a Module subclass", self:_get_name(), typename(m))
  end
  rawget(self, "_modules"):set(name, m)
end
Module.register_module = Module.add_module

-- A parameter: t itself (detached from any graph), flagged requires_grad.
function Module.Parameter(t, requires_grad)
  if not dl.is_tensor(t) then fail("Parameter: a tensor is required, got %s", type(t)) end
  if requires_grad == nil then requires_grad = true end
  return t:detach():requires_grad_(requires_grad)
end

-- The {dtype, device} of a layer's options table, for creating its
-- parameters and buffers (PyTorch's factory_kwargs); nil fields mean the
-- defaults.
function Module.factory_kwargs(opts)
  return {dtype = opts.dtype, device = opts.device}
end

-- --- traversal --------------------------------------------------------------

local function join(prefix, name)
  if prefix == "" then return name end
  return prefix .. "." .. name
end

local function list_iter(list)
  local i = 0
  return function()
    i = i + 1
    local e = list[i]
    if e then return e[1], e[2] end
  end
end

-- Collects {name, module} pairs depth first, each module once.
local function collect_modules(m, prefix, memo, out)
  if memo[m] then return end
  memo[m] = true
  out[#out + 1] = {prefix, m}
  for name, child in rawget(m, "_modules"):items() do
    if child then collect_modules(child, join(prefix, name), memo, out) end
  end
end

local function named_modules_list(self, prefix)
  local out = {}
  collect_modules(self, prefix or "", {}, out)
  return out
end

local function named_members(self, field, opts, op)
  opts = util.check_options(opts, op, {"prefix", "recurse"})
  local prefix = opts.prefix or ""
  local mods
  if opts.recurse == false then mods = {{prefix, self}} else mods = named_modules_list(self, prefix) end
  local memo, out = {}, {}
  for _, e in ipairs(mods) do
    for k, v in rawget(e[2], field):items() do
      if v ~= nil and not memo[v] then
        memo[v] = true
        out[#out + 1] = {join(e[1], k), v}
      end
    end
  end
  return out
end

-- The members of one kind, without their names (each once, registration order).
local function members(self, kind, opts, what)
  local out = {}
  for i, e in ipairs(named_members(self, kind, opts, what)) do out[i] = e[2] end
  return out
end

-- for name, p in m:named_parameters() do ... end   ({prefix=, recurse=})
function Module:named_parameters(opts)
  return list_iter(named_members(self, "_parameters", opts, "named_parameters"))
end

-- An array of the parameters (each once, registration order).
function Module:parameters(opts) return members(self, "_parameters", opts, "parameters") end

function Module:named_buffers(opts)
  return list_iter(named_members(self, "_buffers", opts, "named_buffers"))
end

function Module:buffers(opts) return members(self, "_buffers", opts, "buffers") end

function Module:named_children()
  local out, memo = {}, {}
  for name, m in rawget(self, "_modules"):items() do
    if m and not memo[m] then
      memo[m] = true
      out[#out + 1] = {name, m}
    end
  end
  return list_iter(out)
end

function Module:children()
  local out = {}
  for _, m in self:named_children() do out[#out + 1] = m end
  return out
end

-- for name, m in model:named_modules() do ... end: the module itself first
-- (named ""), then every descendant once, depth first.
function Module:named_modules(opts)
  opts = util.check_options(opts, "named_modules", {"prefix"})
  return list_iter(named_modules_list(self, opts.prefix))
end

function Module:modules()
  local out = {}
  for i, e in ipairs(named_modules_list(self)) do out[i] = e[2] end
  return out
end

-- Sum of the parameters' element counts ({trainable_only=true}: only those
-- that require grad).
function Module:num_parameters(opts)
  opts = util.check_options(opts, "num_parameters", {"trainable_only"})
  local n = 0
  for _, p in ipairs(self:parameters()) do
    if not opts.trainable_only or p.requires_grad then n = n + p:numel() end
  end
  return n
end

-- --- modes and conversion ---------------------------------------------------

function Module:train(mode)
  if mode == nil then mode = true end
  if type(mode) ~= "boolean" then fail("train: training mode is expected to be boolean, got %s", type(mode)) end
  rawget(self, "_attrs").training = mode
  for _, m in ipairs(self:children()) do m:train(mode) end
  return self
end

function Module:eval()
  return self:train(false)
end

function Module:requires_grad_(b)
  if b == nil then b = true end
  for _, p in ipairs(self:parameters()) do p:requires_grad_(b) end
  return self
end

-- fn(m) on every child (recursively) and then on self, as PyTorch's apply.
function Module:apply(fn)
  if type(fn) ~= "function" then fail("apply: a function is required, got %s", type(fn)) end
  for _, m in ipairs(self:children()) do m:apply(fn) end
  fn(self)
  return self
end

-- Sets every parameter's grad to nil (default, PyTorch's set_to_none=True)
-- or zeroes it in place ({set_to_none=false}).
function Module:zero_grad(opts)
  opts = util.check_options(opts, "zero_grad", {"set_to_none"})
  local to_none = opts.set_to_none ~= false
  for _, p in ipairs(self:parameters()) do
    local g = p.grad
    if g then
      if to_none then p.grad = nil else g:zero_() end
    end
  end
end

-- Applies fn to every parameter and buffer, children first.  fn(t, is_param)
-- returns the new tensor or t itself.  A parameter keeps its identity (the
-- tensor object an optimizer holds): its data is replaced in place, as
-- PyTorch's `param.data = fn(param)`, and its grad is converted with it.
-- Buffers are replaced by the new tensors.
function Module:_apply(fn)
  for _, m in ipairs(self:children()) do m:_apply(fn) end
  local P = rawget(self, "_parameters")
  for k, p in P:items() do
    if p ~= nil then
      local q = dl.no_grad(fn, p, true)
      if q ~= p then
        local g = p.grad
        local gq = g and dl.no_grad(fn, g, true)
        if p.is_leaf then
          p.grad = nil
          p.data = q
          if gq then p.grad = gq end
        else
          q = q:detach():requires_grad_(p.requires_grad)
          if gq then q.grad = gq end
          P:set(k, q)
        end
      end
    end
  end
  local B = rawget(self, "_buffers")
  for k, b in B:items() do
    if b ~= nil then B:set(k, dl.no_grad(fn, b, false)) end
  end
  return self
end

-- A deep copy (PyTorch's copy.deepcopy(module)): new parameters and
-- buffers with the same values (parameters keep requires_grad, gradients are
-- not copied), children copied recursively, plain tables among the fields
-- copied, functions and other values shared.  A module or tensor reachable
-- twice is copied once.
function Module:deepcopy(memo)
  memo = memo or {}
  if memo[self] then return memo[self] end
  local obj = setmetatable({_parameters = odict(), _buffers = odict(), _modules = odict(), _attrs = {},
    _non_persistent = {}}, getmetatable(self))
  memo[self] = obj
  local function copy(v)
    if memo[v] ~= nil then return memo[v] end
    local c = v
    if dl.is_tensor(v) then
      c = dl.no_grad(function() return v:detach():clone() end)
      if v.requires_grad then c:requires_grad_(true) end
    elseif is_module(v) then
      c = v:deepcopy(memo)
    elseif type(v) == "table" and getmetatable(v) == nil then
      c = {}
      memo[v] = c
      for k, x in pairs(v) do c[k] = copy(x) end
    end
    if type(v) == "table" or type(v) == "userdata" then memo[v] = c end
    return c
  end
  for _, f in ipairs({"_parameters", "_buffers", "_modules"}) do
    for k, v in rawget(self, f):items() do rawget(obj, f):set(k, v ~= nil and copy(v) or nil) end
  end
  for k, v in pairs(rawget(self, "_attrs")) do rawget(obj, "_attrs")[k] = copy(v) end
  for k, v in pairs(rawget(self, "_non_persistent")) do rawget(obj, "_non_persistent")[k] = v end
  return obj
end

local function is_dtype(v)
  if type(v) ~= "table" then return false end
  local mt = getmetatable(v)
  return mt ~= nil and mt.__name == "dl.dtype"
end

local function is_device_string(s)
  return s:match("^cpu") ~= nil or s:match("^cuda") ~= nil
end

-- m:to(dtype) | m:to(device) | m:to(device, dtype) | m:to(tensor) |
-- m:to{dtype=, device=, memory_format=, non_blocking=}: converts floating
-- parameters and buffers to dtype, all of them to device, and 4-D ones to
-- memory_format ("channels_last" or "contiguous_format").  Parameters stay
-- the same tensor objects (their data is swapped in place, grads follow), so
-- an optimizer built before to() keeps working, as in PyTorch.
function Module:to(...)
  local dtype, device, memory_format, non_blocking
  for i = 1, select("#", ...) do
    local a = select(i, ...)
    if a == nil then
      -- skip
    elseif dl.is_tensor(a) then
      dtype, device = a.dtype, a.device
    elseif type(a) == "boolean" then
      non_blocking = a
    elseif type(a) == "string" and is_device_string(a) then
      device = a
    elseif type(a) == "string" or is_dtype(a) then
      dtype = a
    elseif type(a) == "table" then
      util.check_options(a, "to", {"dtype", "device", "memory_format", "non_blocking"})
      dtype = a.dtype or dtype
      device = a.device or device
      memory_format = a.memory_format or memory_format
      if a.non_blocking ~= nil then non_blocking = a.non_blocking end
    else
      fail("to: dtype, device or options table expected, got %s", type(a))
    end
  end
  if dtype ~= nil then
    local ok, probe = pcall(function() return dl.empty(0, {dtype = dtype}) end)
    if not ok then fail("to: %s", tostring(probe)) end
    dtype = probe.dtype
    if not dtype.is_floating_point then
      fail("to: nn.Module.to only accepts floating point dtypes, but got desired dtype=%s", dtype.name)
    end
  end
  if device ~= nil then
    local ok, probe = pcall(function() return dl.empty(0):to(device) end)
    if not ok then fail("%s", tostring(probe)) end
    device = probe.device
  end
  local channels_last = false
  if memory_format ~= nil then
    if memory_format == "channels_last" then
      channels_last = true
    elseif memory_format ~= "contiguous_format" and memory_format ~= "preserve_format" then
      fail("to: memory_format must be \"channels_last\", \"contiguous_format\" or \"preserve_format\", got %s",
        tostring(memory_format))
    end
  end
  local contiguous = memory_format == "contiguous_format"
  return self:_apply(function(t)
    local want_dt = (dtype and t.dtype.is_floating_point) and dtype or t.dtype
    local want_dev = device or t.device
    local four = t:dim() == 4
    local relayout = four and ((channels_last and not t:is_contiguous({memory_format = "channels_last"}))
      or (contiguous and not t:is_contiguous()))
    if want_dt == t.dtype and want_dev == t.device and not relayout then return t end
    local r = t:to({device = want_dev, dtype = want_dt, non_blocking = non_blocking,
      memory_format = (four and channels_last) and "channels_last" or nil})
    if four and contiguous then r = r:contiguous() end
    return r
  end)
end

function Module:float() return self:to(dl.float32) end
function Module:double() return self:to(dl.float64) end
function Module:half() return self:to(dl.float16) end
function Module:bfloat16() return self:to(dl.bfloat16) end
function Module:cpu() return self:to("cpu") end
-- m:cuda([device]): device an ordinal (0 is cuda:0) or "cuda:N"
function Module:cuda(device)
  if math.type(device) == "integer" then device = "cuda:" .. device end
  return self:to(device or "cuda")
end

-- --- state dict -------------------------------------------------------------

-- A flat table name -> tensor of every parameter and persistent buffer
-- (detached, sharing storage), pairs() in PyTorch's order.
function Module:state_dict(opts)
  opts = util.check_options(opts, "state_dict", {"prefix", "keep_vars"})
  local out = util.ordered_table()
  local function save(m, prefix)
    for k, p in rawget(m, "_parameters"):items() do
      if p ~= nil then out[prefix .. k] = opts.keep_vars and p or p:detach() end
    end
    local np = rawget(m, "_non_persistent")
    for k, b in rawget(m, "_buffers"):items() do
      if b ~= nil and not np[k] then out[prefix .. k] = opts.keep_vars and b or b:detach() end
    end
    for k, c in rawget(m, "_modules"):items() do
      if c then save(c, prefix .. k .. ".") end
    end
  end
  save(self, opts.prefix or "")
  return out
end

-- Copies the tensors of sd into the module's parameters and buffers in place.
-- {strict=true} (default): any missing or unexpected key, or a shape
-- mismatch, raises one error listing them all.  Returns missing, unexpected
-- (arrays of names).
function Module:load_state_dict(sd, opts)
  opts = util.check_options(opts, "load_state_dict", {"strict"})
  local strict = opts.strict ~= false
  if type(sd) ~= "table" or dl.is_tensor(sd) or is_module(sd) then
    fail("load_state_dict: expected a table of name -> tensor, got %s", typename(sd))
  end
  local missing, unexpected, errors = {}, {}, {}
  local known = {}
  local function load(m, prefix)
    local np = rawget(m, "_non_persistent")
    local function one(k, t)
      local key = prefix .. k
      known[key] = true
      local v = sd[key]
      if v == nil then
        missing[#missing + 1] = key
      elseif not dl.is_tensor(v) then
        errors[#errors + 1] = string.format(
          'While copying the parameter named "%s", expected a tensor from checkpoint but received %s', key,
          type(v))
      else
        local a, b = v.shape, t.shape
        local same = #a == #b
        for i = 1, #a do same = same and a[i] == b[i] end
        if not same then
          errors[#errors + 1] = string.format(
            "size mismatch for %s: copying a param with shape %s from checkpoint, the shape in current model is %s.",
            key, util.shape_str(a), util.shape_str(b))
        else
          local ok, err = pcall(dl.no_grad, function() t:copy_(v) end)
          if not ok then
            errors[#errors + 1] = string.format('While copying the parameter named "%s": %s', key, tostring(err))
          end
        end
      end
    end
    for k, p in rawget(m, "_parameters"):items() do
      if p ~= nil then one(k, p) end
    end
    for k, b in rawget(m, "_buffers"):items() do
      if b ~= nil and not np[k] then one(k, b) end
    end
    for k, c in rawget(m, "_modules"):items() do
      if c then load(c, prefix .. k .. ".") end
    end
  end
  load(self, "")
  for _, key in ipairs(util.keys(sd)) do
    if not known[key] then unexpected[#unexpected + 1] = key end
  end
  if strict then
    if #unexpected > 0 then
      local q = {}
      for i, k in ipairs(unexpected) do q[i] = '"' .. tostring(k) .. '"' end
      table.insert(errors, 1, "Unexpected key(s) in state_dict: " .. table.concat(q, ", ") .. ". ")
    end
    if #missing > 0 then
      local q = {}
      for i, k in ipairs(missing) do q[i] = '"' .. k .. '"' end
      table.insert(errors, 1, "Missing key(s) in state_dict: " .. table.concat(q, ", ") .. ". ")
    end
  end
  if #errors > 0 then
    fail("Error(s) in loading state_dict for %s:\n\t%s", self:_get_name(), table.concat(errors, "\n\t"))
  end
  return missing, unexpected
end

-- --- printing ---------------------------------------------------------------

-- The text inside the parentheses after the class name (PyTorch's extra_repr).
function Module:extra_repr()
  return ""
end

local function addindent(s, n)
  if not s:find("\n", 1, true) then return s end
  local pad = string.rep(" ", n)
  return (s:gsub("\n", "\n" .. pad))
end

function Module:__repr()
  local lines = {}
  local extra = self:extra_repr()
  local n_extra = 0
  if extra and extra ~= "" then
    for line in (extra .. "\n"):gmatch("(.-)\n") do
      lines[#lines + 1] = line
      n_extra = n_extra + 1
    end
  end
  local n_child = 0
  for k, m in rawget(self, "_modules"):items() do
    local s = m and tostring(m) or "None"
    lines[#lines + 1] = "(" .. k .. "): " .. addindent(s, 2)
    n_child = n_child + 1
  end
  local s = self:_get_name() .. "("
  if #lines > 0 then
    if n_extra == 1 and n_child == 0 then
      s = s .. lines[1]
    else
      s = s .. "\n  " .. table.concat(lines, "\n  ") .. "\n"
    end
  end
  return s .. ")"
end

Module.pyrepr = pyrepr
Module.OrderedDict = odict

return Module
