-- dl.nn containers: Sequential and ModuleList.
--
--   dl.nn.Sequential(m1, m2, m3)                     children "0", "1", "2"
--   dl.nn.Sequential{{"conv", m1}, {"relu", m2}}     named children, in order
--   dl.nn.ModuleList{m1, m2}
--
-- Children keep PyTorch's names ("0", "1", ... for positional ones) so that
-- state_dict keys match PyTorch's; integer indexing from Lua is 1-based
-- (seq[1] is child "0", seq[-1] the last), #seq counts the children and
-- ipairs(seq) walks them.
local dl = require "dl"
local util = require "dl.util"
local Module = require "dl.nn.module"

local fail = util.fail
local is_module = Module.is_module

local C = {}

local function child_list(self)
  local out = {}
  for _, m in rawget(self, "_modules"):items() do out[#out + 1] = m end
  return out
end

local function getitem(self, i)
  local list = child_list(self)
  local n = #list
  if i < 0 then i = n + 1 + i end
  if i < 1 or i > n then return nil end
  return list[i]
end

local function len(self)
  return #rawget(self, "_modules").keys
end

local function append(self, m, op)
  if not is_module(m) then
    fail("%s: expected a Module, got %s", op, dl.is_tensor(m) and "tensor" or type(m))
  end
  self:add_module(tostring(len(self)), m)
  return self
end

-- --- Sequential -------------------------------------------------------------

C.Sequential = Module:extend("Sequential")
C.Sequential.__getitem = getitem
C.Sequential.__len = len

function C.Sequential:__init(...)
  local n = select("#", ...)
  local first = ...
  -- named form: one plain table of {name, module} pairs; or a plain array of modules
  if n == 1 and type(first) == "table" and not is_module(first) and not dl.is_tensor(first) then
    for i, e in ipairs(first) do
      if is_module(e) then
        append(self, e, "Sequential")
      elseif type(e) == "table" and type(e[1]) == "string" and is_module(e[2]) then
        if rawget(self, "_modules").has[e[1]] then fail("Sequential: duplicate child name '%s'", e[1]) end
        self:add_module(e[1], e[2])
      else
        fail("Sequential: element %d must be a Module or a {name, module} pair", i)
      end
    end
    return
  end
  for i = 1, n do
    local m = select(i, ...)
    if not is_module(m) then
      fail("Sequential: argument %d must be a Module, got %s", i, dl.is_tensor(m) and "tensor" or type(m))
    end
    self:add_module(tostring(i - 1), m)
  end
end

function C.Sequential:forward(x)
  for _, m in rawget(self, "_modules"):items() do
    if m then x = m(x) end
  end
  return x
end

function C.Sequential:append(m)
  return append(self, m, "Sequential.append")
end

-- --- ModuleList -------------------------------------------------------------

C.ModuleList = Module:extend("ModuleList")
C.ModuleList.__getitem = getitem
C.ModuleList.__len = len

function C.ModuleList:__init(modules)
  if modules == nil then return end
  if type(modules) ~= "table" or is_module(modules) then
    fail("ModuleList: expected a table of modules, got %s", is_module(modules) and "a Module" or type(modules))
  end
  for _, m in ipairs(modules) do append(self, m, "ModuleList") end
end

function C.ModuleList:append(m)
  return append(self, m, "ModuleList.append")
end

-- On an instance: appends the modules of a table.  On the class itself,
-- ModuleList:extend("Name") makes a subclass like Module:extend.
function C.ModuleList:extend(modules)
  if rawget(self, "_modules") == nil then return Module.extend(self, modules) end
  if type(modules) ~= "table" then fail("ModuleList.extend: expected a table of modules, got %s", type(modules)) end
  for _, m in ipairs(modules) do append(self, m, "ModuleList.extend") end
  return self
end

function C.ModuleList:forward()
  fail("ModuleList: a ModuleList has no forward; call its modules")
end

return C
