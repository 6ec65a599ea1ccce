-- dl.util: small helpers shared by the Lua half of the library (dl.nn,
-- dl.optim, dl.models): a plain class helper, option-table checking in the
-- style of the C bindings, and Python-style value formatting so that printed
-- modules read exactly like PyTorch's.
--
-- Invariants: nothing here touches tensors' data; errors are raised with
-- level 0 and start with the name of the operation.
local dl = require "dl"

local util = {}

-- Raises "op: message" (formatted) without a position prefix.
function util.fail(fmt, ...)
  error(string.format(fmt, ...), 0)
end
local fail = util.fail

-- Python's repr() of a value: None, True/False, ints as ints, floats in
-- Python's shortest round-trip form (0.1, 1e-05, 100.0), tables as tuples.
function util.pyrepr(v)
  local tv = type(v)
  if v == nil then return "None" end
  if tv == "boolean" then return v and "True" or "False" end
  if tv == "string" then return v end
  if tv == "table" then
    if dl.is_tensor(v) then return tostring(v) end
    local parts = {}
    for i = 1, #v do parts[i] = util.pyrepr(v[i]) end
    if #parts == 1 then return "(" .. parts[1] .. ",)" end
    return "(" .. table.concat(parts, ", ") .. ")"
  end
  if tv ~= "number" then return tostring(v) end
  if math.type(v) == "integer" then return string.format("%d", v) end
  if v ~= v then return "nan" end
  if v == math.huge then return "inf" end
  if v == -math.huge then return "-inf" end
  if v == 0 then return (1 / v < 0) and "-0.0" or "0.0" end
  -- shortest %e form that reads back as the same double
  local s
  for p = 0, 16 do
    s = string.format("%." .. p .. "e", v)
    if tonumber(s) == v then break end
  end
  local sign, int, frac, exp = s:match("^(-?)(%d)%.?(%d*)e([-+]%d+)$")
  local digits = (int .. frac):gsub("0+$", "")
  if digits == "" then digits = "0" end
  local e = tonumber(exp)
  if e >= -4 and e < 16 then
    if e >= 0 then
      if #digits <= e + 1 then
        return sign .. digits .. string.rep("0", e + 1 - #digits) .. ".0"
      end
      return sign .. digits:sub(1, e + 1) .. "." .. digits:sub(e + 2)
    end
    return sign .. "0." .. string.rep("0", -e - 1) .. digits
  end
  local mant = digits:sub(1, 1)
  if #digits > 1 then mant = mant .. "." .. digits:sub(2) end
  return string.format("%s%se%s%02d", sign, mant, e < 0 and "-" or "+", math.abs(e))
end

-- Checks that opts is nil or a table whose keys are all in `allowed` (a list).
-- Returns opts or an empty table.
function util.check_options(opts, op, allowed)
  if opts == nil then return {} end
  if type(opts) ~= "table" or dl.is_tensor(opts) then
    fail("%s: options table expected, got %s", op, dl.is_tensor(opts) and "tensor" or type(opts))
  end
  for k in pairs(opts) do
    if type(k) ~= "string" then fail("%s: option names must be strings", op) end
    local ok = false
    for _, a in ipairs(allowed) do
      if a == k then ok = true break end
    end
    if not ok then
      fail("%s: unknown option '%s' (expected: %s)", op, k, table.concat(allowed, ", "))
    end
  end
  return opts
end

-- Argument checkers that name the op and the argument.
function util.check_int(v, op, what, min)
  if math.type(v) ~= "integer" and not (type(v) == "number" and v == math.floor(v) and v == v
      and math.abs(v) < 2^53) then
    fail("%s: %s must be an integer, got %s", op, what, type(v) == "number" and util.pyrepr(v) or type(v))
  end
  v = math.tointeger(v)
  if min and v < min then fail("%s: %s must be at least %d, got %d", op, what, min, v) end
  return v
end

function util.check_number(v, op, what)
  if type(v) ~= "number" then fail("%s: %s must be a number, got %s", op, what, type(v)) end
  return v
end

function util.check_bool(v, op, what)
  if type(v) ~= "boolean" then fail("%s: %s must be a boolean, got %s", op, what, type(v)) end
  return v
end

-- v, or def when v is nil; a non-boolean is an error.
function util.opt_bool(v, def, op, what)
  if v == nil then return def end
  return util.check_bool(v, op, what)
end

function util.check_string(v, op, what, choices)
  if type(v) ~= "string" then fail("%s: %s must be a string, got %s", op, what, type(v)) end
  if choices then
    for _, c in ipairs(choices) do
      if c == v then return v end
    end
    fail("%s: %s must be one of %s, got '%s'", op, what, table.concat(choices, ", "), v)
  end
  return v
end

-- A number or a table of n integers -> a table of n integers (PyTorch's _pair).
function util.check_tuple(v, n, op, what, min)
  if type(v) == "number" then
    v = util.check_int(v, op, what, min)
    local t = {}
    for i = 1, n do t[i] = v end
    return t
  end
  if type(v) ~= "table" or dl.is_tensor(v) or #v ~= n then
    fail("%s: %s must be an integer or a table of %d integers", op, what, n)
  end
  local t = {}
  for i = 1, n do t[i] = util.check_int(v[i], op, what, min) end
  return t
end

-- A plain class: C = util.class("Name", Parent); C(...) makes an instance
-- and calls C.__init(self, ...).  Instances look methods up in their class.
function util.class(name, parent)
  local cls = {}
  cls.__index = cls
  cls.__name = name
  cls.super = parent
  if parent then
    for _, k in ipairs {"__tostring", "__call", "__len", "__close"} do
      if rawget(parent, k) then cls[k] = parent[k] end
    end
  end
  return setmetatable(cls, {
    __index = parent,
    __call = function(c, ...)
      local obj = setmetatable({}, c)
      if c.__init then c.__init(obj, ...) end
      return obj
    end,
    __tostring = function() return "class " .. name end,
  })
end

-- true when obj is an instance of cls (or of a subclass of it).
function util.isinstance(obj, cls)
  if type(obj) ~= "table" then return false end
  local c = getmetatable(obj)
  while c do
    if c == cls then return true end
    local mt = getmetatable(c)
    c = mt and mt.__index
    if type(c) ~= "table" then return false end
  end
  return false
end

-- A table whose pairs() walks its keys in insertion order (for state dicts).
-- The order lives in the metatable, so the table holds only the entries.
function util.ordered_table()
  local keys, known = {}, {}
  local mt = {}
  mt.__newindex = function(t, k, v)
    if v ~= nil and not known[k] then
      known[k] = true
      keys[#keys + 1] = k
    end
    rawset(t, k, v)
  end
  mt.__pairs = function(t)
    local i = 0
    return function()
      repeat
        i = i + 1
        local k = keys[i]
        if k == nil then return nil end
        local v = rawget(t, k)
        if v ~= nil then return k, v end
      until false
    end, t, nil
  end
  mt.keys = keys
  return setmetatable({}, mt)
end

-- The keys of a table in pairs() order, or sorted when the table has no order.
function util.keys(t)
  local mt = getmetatable(t)
  local out = {}
  if mt and mt.__pairs then
    for k in pairs(t) do out[#out + 1] = k end
    return out
  end
  for k in pairs(t) do out[#out + 1] = k end
  table.sort(out, function(a, b) return tostring(a) < tostring(b) end)
  return out
end

-- true when path names a file that can be opened for reading.
function util.file_exists(path)
  local f = io.open(path, "rb")
  if f then f:close() return true end
  return false
end

-- "[2, 3]" for a shape table.
function util.shape_str(shape)
  local p = {}
  for i, s in ipairs(shape) do p[i] = tostring(s) end
  return "[" .. table.concat(p, ", ") .. "]"
end

return util
