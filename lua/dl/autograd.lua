-- dl.autograd: reverse-mode differentiation from Lua.
--   dl.autograd.backward(tensors [, grads] [, {retain_graph=}])
--   dl.autograd.grad(outputs, inputs [, {grad_outputs=, retain_graph=, allow_unused=}])
--   dl.autograd.Function{forward = function(ctx, ...) end, backward = function(ctx, grad...) end}
--   dl.autograd.gradcheck(fn, inputs [, {eps=, atol=, rtol=}])  (float64, finite differences)
local dl = require "dl"
local raw = dl._autograd
local util = require "dl.util"

local M = {}

local function as_list(x)
  if dl.is_tensor(x) then return {x} end
  return x
end

function M.backward(tensors, grads, opts)
  if type(grads) == "table" and not dl.is_tensor(grads) and grads[1] == nil and next(grads) then
    opts, grads = grads, nil
  end
  opts = util.check_options(opts, "autograd.backward", {"retain_graph"})
  raw.backward(as_list(tensors), grads and as_list(grads), opts.retain_graph or false)
end

function M.grad(outputs, inputs, opts)
  opts = util.check_options(opts, "autograd.grad", {"grad_outputs", "retain_graph", "allow_unused"})
  local go = opts.grad_outputs and as_list(opts.grad_outputs)
  local single = dl.is_tensor(inputs)
  local r = raw.grad(as_list(outputs), as_list(inputs), go, opts.retain_graph or false,
    opts.allow_unused or false)
  if single then return r[1] end
  return r
end

-- ctx for custom Functions
local Ctx = {}
Ctx.__index = Ctx
function Ctx:save_for_backward(...)
  self.saved_tensors = table.pack(...)
end

function M.Function(def)
  assert(type(def) == "table" and type(def.forward) == "function" and type(def.backward) == "function",
    "autograd.Function: expects {forward = function(ctx, ...), backward = function(ctx, grad, ...)}")
  local name = def.name or "LuaFunctionBackward"
  local F = {}
  function F.apply(...)
    local args = table.pack(...)
    local inputs, needs = {}, {}
    for i = 1, args.n do
      local a = args[i]
      inputs[i] = dl.is_tensor(a) and a or false
      needs[i] = dl.is_tensor(a) and a.requires_grad or false
    end
    local ctx = setmetatable({needs_input_grad = needs}, Ctx)
    local outs = table.pack(dl.no_grad(def.forward, ctx, ...))
    -- false placeholders keep positions; the C side sees non-tensors as "no gradient"
    return raw.record_function(name, ctx, def.backward, inputs, table.unpack(outs, 1, outs.n))
  end
  return setmetatable(F, {__call = function(_, ...) return F.apply(...) end})
end

-- The dimension order in which t's elements lie in memory (outermost
-- first), when t is dense: t:permute(order) is contiguous.  nil otherwise
-- (slices with gaps, expanded dimensions).
local function memory_order(t)
  local stride, order = t:stride(), {}
  for d = 1, t:dim() do order[d] = d end
  table.sort(order, function(a, b)
    if stride[a] ~= stride[b] then return stride[a] > stride[b] end
    return a < b
  end)
  if t:permute(table.unpack(order)):is_contiguous() then return order end
end

-- Compares analytic gradients of sum(fn(inputs...) * random weights) with
-- central finite differences, in float64.  Returns true, or false and a message.
-- Inputs may be non-contiguous if dense (channels-last, transposed): their
-- elements are perturbed in memory order.
function M.gradcheck(fn, inputs, opts)
  opts = util.check_options(opts, "gradcheck", {"eps", "atol", "rtol", "raise"})
  local eps, atol, rtol = opts.eps or 1e-6, opts.atol or 1e-5, opts.rtol or 1e-3
  inputs = as_list(inputs)
  for i, x in ipairs(inputs) do
    if dl.is_tensor(x) and x.requires_grad and x.dtype ~= dl.float64 then
      error("gradcheck: input " .. i .. " is " .. tostring(x.dtype) .. "; use float64", 2)
    end
  end
  local function outputs()
    local r = table.pack(fn(table.unpack(inputs)))
    local out = {}
    for i = 1, r.n do if dl.is_tensor(r[i]) and r[i]:is_floating_point() then out[#out + 1] = r[i] end end
    return out
  end
  local outs = outputs()
  local weights = {}
  for i, o in ipairs(outs) do weights[i] = dl.randn(o.shape, {dtype = dl.float64}) end
  local function scalar(os)
    local s = 0
    for i, o in ipairs(os) do s = s + (o:double() * weights[i]):sum():item() end
    return s
  end
  local loss
  for i, o in ipairs(outs) do
    local term = (o * weights[i]):sum()
    loss = loss and loss + term or term
  end
  local wanted = {}
  for _, x in ipairs(inputs) do if dl.is_tensor(x) and x.requires_grad then wanted[#wanted + 1] = x end end
  local analytic = M.grad(loss, wanted, {allow_unused = true})
  for k, x in ipairs(wanted) do
    local flat, order = x:detach(), nil
    if not x:is_contiguous() then
      order = memory_order(x)
      if not order then
        error("gradcheck: input " .. k .. " is not dense (strides " .. table.concat(x:stride(), ", ")
          .. "); pass a contiguous or permuted tensor", 2)
      end
      flat = flat:permute(table.unpack(order))
    end
    flat = flat:view(-1)
    local g = analytic[k]
    if g and order then g = g:permute(table.unpack(order)) end
    local a = g and g:contiguous():view(-1):tolist() or {}
    for j = 1, flat:numel() do
      local old = flat[j]:item()
      dl.no_grad(function() flat[j] = old + eps end)
      local fp = scalar(dl.no_grad(outputs))
      dl.no_grad(function() flat[j] = old - eps end)
      local fm = scalar(dl.no_grad(outputs))
      dl.no_grad(function() flat[j] = old end)
      local numeric = (fp - fm) / (2 * eps)
      local an = a[j] or 0
      if math.abs(numeric - an) > atol + rtol * math.abs(numeric) then
        local msg = string.format("gradcheck: input %d element %d: analytic %.10g, numeric %.10g", k, j, an, numeric)
        if opts.raise == false then return false, msg end
        error(msg, 2)
      end
    end
  end
  return true
end

-- dl.no_grad etc. live in the dl table; re-export for PyTorch habits
M.no_grad = dl.no_grad
M.enable_grad = dl.enable_grad
M.set_grad_enabled = dl.set_grad_enabled

return M
