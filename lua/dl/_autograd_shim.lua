-- dl._autograd_shim: a TEMPORARY stand-in for the autograd surface that the
-- C core is gaining (t:requires_grad_(), t.grad read/write, dl.no_grad,
-- dl.set_grad_enabled, dl.is_grad_enabled), so that dl.nn and dl.optim can be
-- written against the final API before it lands.
--
-- It does nothing at all when the tensor methods already have requires_grad_
-- (the real autograd): then this file is dead and can be deleted.  Otherwise
-- it keeps requires_grad flags and .grad tensors in a weak table keyed by the
-- tensor userdata, and wraps the tensor metatable's __index/__newindex for
-- exactly the keys "grad" and "requires_grad".  No gradients are computed:
-- t:backward() raises an error saying autograd is not available yet.
local dl = require "dl"

local mt = getmetatable(dl.zeros(0))
if mt.methods.requires_grad_ or rawget(mt, "_dl_grad_shim") then return false end

local side = setmetatable({}, {__mode = "k"}) -- tensor -> {rg = bool, grad = tensor}
local orig_index, orig_newindex = mt.__index, mt.__newindex

mt._dl_grad_shim = true

mt.methods.requires_grad_ = function(t, b)
  if b == nil then b = true end
  if type(b) ~= "boolean" then error("requires_grad_: expected a boolean, got " .. type(b), 2) end
  if b and not t.dtype.is_floating_point then
    error("requires_grad_: only Tensors of floating point dtype can require gradients", 2)
  end
  local s = side[t] or {}
  s.rg = b
  side[t] = s
  return t
end

mt.methods.backward = function()
  error("backward: autograd is not available yet in this build", 2)
end

mt.__index = function(t, k)
  if k == "requires_grad" then
    local s = side[t]
    if s and s.rg ~= nil then return s.rg end
  elseif k == "grad" then
    local s = side[t]
    return s and s.grad
  end
  return orig_index(t, k)
end

mt.__newindex = function(t, k, v)
  if k == "grad" then
    if v ~= nil and not dl.is_tensor(v) then
      error("assigned grad expected to be a Tensor or nil, got " .. type(v), 2)
    end
    if v ~= nil then
      local a, b = v.shape, t.shape
      local same = #a == #b
      for i = 1, #a do same = same and a[i] == b[i] end
      if not same then error("assigned grad has data of a different size", 2) end
    end
    local s = side[t] or {}
    s.grad = v
    side[t] = s
    return
  elseif k == "requires_grad" then
    return mt.methods.requires_grad_(t, v)
  end
  return orig_newindex(t, k, v)
end

local enabled = true
if rawget(dl, "no_grad") == nil then
  dl.no_grad = function(fn, ...)
    local prev = enabled
    enabled = false
    local res = table.pack(pcall(fn, ...))
    enabled = prev
    if not res[1] then error(res[2], 0) end
    return table.unpack(res, 2, res.n)
  end
  dl.set_grad_enabled = function(b) enabled = b and true or false end
  dl.is_grad_enabled = function() return enabled end
end

return true
