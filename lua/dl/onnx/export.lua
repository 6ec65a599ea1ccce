-- dl.onnx.export: traces one forward of a dl.nn.Module into an ONNX graph.
--
--   dl.onnx.export(model, example_inputs, path, {opset = 17,
--     dynamic_batch = true, input_names = {...}, output_names = {...}})
--
-- How: while tracing, every dl function that takes tensors -- the dl.*
-- functions, the tensor methods and metamethods, dl.nn.functional and the
-- fused inference kernel -- is wrapped.  A wrapped call whose arguments
-- include a traced value (an input, a parameter, a buffer, or the result of
-- an earlier traced call) runs the real op, then records the ONNX node(s)
-- computing the same thing and names its result; calls made inside a
-- recorded call are not recorded again (the outermost known op wins, so
-- dl.nn.functional.linear is one Gemm, not a Transpose and a MatMul).  A
-- traced value reaching a function with no ONNX form, or read back into
-- Lua (item, tolist: data-dependent control flow), is an error naming the
-- function.  Parameters and buffers become initializers under their
-- state_dict names; other tensors a forward creates become constants.
-- Module calls push their names, so nodes are named "layer1.0.conv1/Conv".
--
-- Functions a module keeps in a field (a Transformer layer's activation) are
-- swapped for their wrappers as well.  The trace runs with autograd on and
-- floating inputs requiring grad: a tensor derived from the inputs or the
-- parameters that reaches the recorder without having been traced (a dl
-- function held in a local before the export) is an error, never a silent
-- constant.  With dynamic_batch, reshape and expand targets follow the
-- input's sizes where they agree, and export runs the graph on a batch one
-- larger than the example's to check that it generalizes.
--
-- Invariants: every wrapper is removed when the trace ends, also on error;
-- the model runs in eval mode and its mode is restored.
local dl = require "dl"
local Module = require "dl.nn.module"

local E = {}

local ELEM = {
  [tostring(dl.float32)] = 1, [tostring(dl.uint8)] = 2, [tostring(dl.int32)] = 6, [tostring(dl.int64)] = 7,
  [tostring(dl.bool)] = 9, [tostring(dl.float16)] = 10, [tostring(dl.float64)] = 11,
  [tostring(dl.bfloat16)] = 16,
}
local function elem_type(dt) return ELEM[tostring(dt)] or error("onnx.export: no ONNX type for " .. tostring(dt), 0) end

local function fail(fmt, ...) error("onnx.export: " .. string.format(fmt, ...), 0) end

-- --- the recorder ------------------------------------------------------------------------------

local Rec = {}
Rec.__index = Rec

local function new_rec(opts)
  return setmetatable({
    nodes = {}, inits = {}, names = setmetatable({}, {__mode = "k"}), params = {}, counter = 0,
    scope = {}, depth = 0, opset = opts.opset, used_names = {}, wrapped = {},
  }, Rec)
end

function Rec:fresh(hint)
  self.counter = self.counter + 1
  return string.format("%s_%d", hint or "v", self.counter)
end

function Rec:is_traced(t)
  return dl.is_tensor(t) and (self.names[t] ~= nil or self.params[t] ~= nil)
end

-- An initializer holding t (a copy on the CPU), named `name` or fresh.
function Rec:const(t, name)
  name = name or self:fresh("const")
  self.inits[#self.inits + 1] = {name = name, tensor = t:detach():cpu():contiguous()}
  return name
end

function Rec:const_ints(list)
  if #list == 0 then return self:const(dl.zeros({0}, {dtype = dl.int64})) end
  return self:const(dl.tensor(list, {dtype = dl.int64}))
end

-- The value name of argument v: a traced tensor's name, a parameter's
-- initializer, or a new constant (tensors, and numbers as 0-dim tensors of
-- `like`'s dtype).
function Rec:input(v, like)
  if dl.is_tensor(v) then
    local nm = self.names[v]
    if nm then return nm end
    local p = self.params[v]
    if p then
      if not p.added then
        p.added = true
        self.inits[#self.inits + 1] = {name = p.name, tensor = v:detach():cpu():contiguous()}
      end
      return p.name
    end
    if v.requires_grad then
      -- computed from the parameters or inputs where the trace could not see
      fail("%s got a tensor computed from the model's parameters or inputs by a function the trace does not " ..
        "see (a dl function held from before the export, or called from C); it would become a constant",
        self.current or "an op")
    end
    return self:const(v)
  end
  if type(v) == "number" or type(v) == "boolean" then
    local dt = like and like.dtype or (math.type(v) == "integer" and dl.int64 or dl.float32)
    if type(v) == "boolean" then v = v and 1 or 0 end
    return self:const(dl.full({}, v, {dtype = dt}))
  end
  fail("cannot export an argument of type %s", type(v))
end

local function attr_of(k, v)
  local a = {name = k}
  if math.type(v) == "integer" then a.type, a.value = "INT", v
  elseif type(v) == "number" then a.type, a.value = "FLOAT", v
  elseif type(v) == "string" then a.type, a.value = "STRING", v
  elseif dl.is_tensor(v) then a.type, a.value = "TENSOR", v:detach():cpu():contiguous()
  elseif type(v) == "table" then
    local float = false
    for _, x in ipairs(v) do if math.type(x) ~= "integer" then float = true end end
    a.type, a.value = float and "FLOATS" or "INTS", v
  else fail("attribute %s of type %s", k, type(v)) end
  return a
end

-- Adds a node; inputs are value names (false for an absent optional one);
-- returns its nout output names.
function Rec:node(op, inputs, attrs, nout)
  local outs = {}
  for i = 1, nout or 1 do outs[i] = self:fresh(op) end
  local al = {}
  local keys = {}
  for k in pairs(attrs or {}) do keys[#keys + 1] = k end
  table.sort(keys)
  for _, k in ipairs(keys) do al[#al + 1] = attr_of(k, attrs[k]) end
  local ins = {}
  for i, v in ipairs(inputs) do ins[i] = v or "" end
  local prefix = #self.scope > 0 and (self.scope[#self.scope] .. "/") or ""
  local base = prefix .. op
  local name = base
  local k = self.used_names[base]
  if k then name = base .. "_" .. k end
  self.used_names[base] = (k or 0) + 1
  self.nodes[#self.nodes + 1] = {name = name, op_type = op, input = ins, output = outs, attribute = al}
  return table.unpack(outs)
end

-- Names tensor t as value nm (the result of the last node).
function Rec:bind(t, nm)
  if not dl.is_tensor(t) then fail("internal: a result that is not a tensor") end
  self.names[t] = nm
end

-- Casts value nm (of dtype from) to dtype to when they differ.
function Rec:cast(nm, from, to)
  if from == to then return nm end
  return self:node("Cast", {nm}, {to = elem_type(to)})
end

-- --- argument helpers ------------------------------------------------------------------------------

-- dl's 1-based dim (negatives from the end) -> ONNX axis
local function axis(d) if d < 0 then return d end return d - 1 end

-- A list of integers from varargs or one table (dl's shape arguments).
local function int_args(...)
  local a = ...
  if type(a) == "table" then return a end
  local r = {}
  for i = 1, select("#", ...) do
    local v = select(i, ...)
    if math.type(v) ~= "integer" then break end
    r[#r + 1] = v
  end
  return r
end

local function pair(v, def)
  if v == nil then return {def, def} end
  if type(v) == "number" then return {v, v} end
  return {v[1], v[2]}
end

-- --- emitters: name -> function(rec, results, args...) ----------------------------------------------

local EM = {}

local function unary(op)
  return function(r, res, x) r:bind(res[1], r:node(op, {r:input(x)})) end
end

-- elementwise binary, inputs cast to the result's dtype (numbers take it too)
local function binary(op, cast_to_result)
  return function(r, res, a, b)
    local y = res[1]
    local ref = dl.is_tensor(a) and a or b
    local dt = ref.dtype
    if dl.is_tensor(a) and dl.is_tensor(b) and a.dtype ~= b.dtype then
      dt = (a:is_floating_point() or not b:is_floating_point()) and a.dtype or b.dtype
    end
    if cast_to_result then dt = y.dtype end
    local ta = dl.is_tensor(a) and r:cast(r:input(a), a.dtype, dt) or r:input(a, {dtype = dt})
    local tb = dl.is_tensor(b) and r:cast(r:input(b), b.dtype, dt) or r:input(b, {dtype = dt})
    r:bind(y, r:node(op, {ta, tb}))
  end
end

for name, op in pairs {add = "Add", sub = "Sub", mul = "Mul", div = "Div", true_divide = "Div", pow = "Pow",
  maximum = "Max", minimum = "Min"} do
  EM[name] = binary(op, true)
end
for name, op in pairs {eq = "Equal", lt = "Less", gt = "Greater", le = "LessOrEqual", ge = "GreaterOrEqual",
  logical_and = "And", logical_or = "Or", logical_xor = "Xor"} do
  EM[name] = binary(op, false)
end
EM.ne = function(r, res, a, b)
  binary("Equal", false)(r, {res[1]}, a, b)
  r:bind(res[1], r:node("Not", {r.names[res[1]]}))
end
-- add(a, b, {alpha=}) / sub(...): alpha scales b
local function add_like(op)
  return function(r, res, a, b, opts)
    if type(opts) == "table" and opts.alpha and opts.alpha ~= 1 then
      fail("%s with alpha has no export (write a + b * alpha)", op == "Add" and "add" or "sub")
    end
    binary(op, true)(r, res, a, b)
  end
end
EM.add, EM.sub = add_like("Add"), add_like("Sub")
EM.__add, EM.__sub, EM.__mul, EM.__div, EM.__pow = EM.add, EM.sub, EM.mul, EM.div, EM.pow
EM.div = function(r, res, a, b, opts)
  if type(opts) == "table" and opts.rounding_mode then fail("div with rounding_mode has no export") end
  binary("Div", true)(r, res, a, b)
end
EM.__div = EM.div
EM.__unm = unary("Neg")
for name, op in pairs {neg = "Neg", negative = "Neg", abs = "Abs", exp = "Exp", log = "Log", sqrt = "Sqrt",
  reciprocal = "Reciprocal", sigmoid = "Sigmoid", tanh = "Tanh", relu = "Relu", sin = "Sin", cos = "Cos",
  tan = "Tan", erf = "Erf", floor = "Floor", ceil = "Ceil", round = "Round", sign = "Sign", asin = "Asin",
  acos = "Acos", atan = "Atan", sinh = "Sinh", cosh = "Cosh", logical_not = "Not", isnan = "IsNaN",
  isinf = "IsInf"} do
  EM[name] = unary(op)
end
EM.rsqrt = function(r, res, x) r:bind(res[1], r:node("Reciprocal", {r:node("Sqrt", {r:input(x)})})) end
EM.square = function(r, res, x) local i = r:input(x); r:bind(res[1], r:node("Mul", {i, i})) end
EM.expm1 = function(r, res, x) r:bind(res[1], r:node("Sub", {r:node("Exp", {r:input(x)}), r:input(1, x)})) end
EM.log1p = function(r, res, x) r:bind(res[1], r:node("Log", {r:node("Add", {r:input(x), r:input(1, x)})})) end
-- in place: the same tensor now holds the new value (installed at the end)
local INPLACE = {"add", "sub", "mul", "div", "relu", "neg", "abs", "exp", "log", "sqrt", "sigmoid", "tanh",
  "clamp", "clip", "clamp_min", "clamp_max", "pow", "reciprocal", "floor", "ceil", "round", "sin", "cos",
  "erf", "rsqrt", "square", "masked_fill"}

local function clamp_emit(r, res, x, lo, hi)
  if type(lo) == "table" and not dl.is_tensor(lo) then lo, hi = lo.min, lo.max end
  local ins = {r:input(x)}
  ins[2] = lo ~= nil and r:input(lo, x) or false
  ins[3] = hi ~= nil and r:input(hi, x) or false
  r:bind(res[1], r:node("Clip", ins))
end
EM.clamp, EM.clip = clamp_emit, clamp_emit
EM.clamp_min = function(r, res, x, lo) clamp_emit(r, res, x, lo, nil) end
EM.clamp_max = function(r, res, x, hi) clamp_emit(r, res, x, nil, hi) end

EM.where = function(r, res, c, a, b)
  local y = res[1]
  r:bind(y, r:node("Where", {r:input(c), r:cast(r:input(a, y), dl.is_tensor(a) and a.dtype or y.dtype, y.dtype),
    r:cast(r:input(b, y), dl.is_tensor(b) and b.dtype or y.dtype, y.dtype)}))
end
EM.masked_fill = function(r, res, x, mask, v)
  r:bind(res[1], r:node("Where", {r:input(mask), r:input(v, x), r:input(x)}))
end

EM.matmul = function(r, res, a, b) r:bind(res[1], r:node("MatMul", {r:input(a), r:input(b)})) end
EM.mm, EM.bmm = EM.matmul, EM.matmul
EM.addmm = function(r, res, c, a, b, opts)
  local al = type(opts) == "table" and opts.alpha or 1.0
  local be = type(opts) == "table" and opts.beta or 1.0
  r:bind(res[1], r:node("Gemm", {r:input(a), r:input(b), r:input(c)}, {alpha = al + 0.0, beta = be + 0.0}))
end

-- --- shapes -----------------------------------------------------------------------------------------

local function reshape_emit(r, res, x, ...)
  local y = res[1]
  local target = {}
  for i, v in ipairs(y.shape) do target[i] = v end
  -- with a dynamic batch, 0 (copy the input's dim) wherever the traced sizes
  -- agree, so batch dims follow the input; export checks the result on
  -- another batch size, which catches a coincidence of sizes
  if r.dynamic_batch then
    for i = 1, math.min(#target, x:dim()) do
      if target[i] == x.shape[i] and target[i] ~= 0 then target[i] = 0 end
    end
  end
  r:bind(y, r:node("Reshape", {r:input(x), r:const_ints(target)}))
end
EM.reshape, EM.view = reshape_emit, reshape_emit
EM.view_as = reshape_emit
EM.flatten = function(r, res, x, s, e)
  s, e = s or 1, e or -1
  local rk = x:dim()
  if s < 0 then s = s + rk + 1 end
  if e < 0 then e = e + rk + 1 end
  -- ONNX's Flatten always makes 2-D: (d1, d2 * ... * dn) is flatten(2)
  if e == rk and s == 2 then return r:bind(res[1], r:node("Flatten", {r:input(x)}, {axis = 1})) end
  reshape_emit(r, res, x)
end
EM.permute = function(r, res, x, ...)
  local p = int_args(...)
  local perm = {}
  for i, d in ipairs(p) do perm[i] = (d < 0 and d + x:dim() + 1 or d) - 1 end
  r:bind(res[1], r:node("Transpose", {r:input(x)}, {perm = perm}))
end
EM.transpose = function(r, res, x, d0, d1)
  local n = x:dim()
  d0 = (d0 < 0 and d0 + n + 1 or d0)
  d1 = (d1 < 0 and d1 + n + 1 or d1)
  local perm = {}
  for i = 1, n do perm[i] = i - 1 end
  perm[d0], perm[d1] = d1 - 1, d0 - 1
  r:bind(res[1], r:node("Transpose", {r:input(x)}, {perm = perm}))
end
EM.t = function(r, res, x)
  if x:dim() < 2 then return r:bind(res[1], r:node("Identity", {r:input(x)})) end
  r:bind(res[1], r:node("Transpose", {r:input(x)}, {perm = {1, 0}}))
end
EM.unsqueeze = function(r, res, x, d)
  r:bind(res[1], r:node("Unsqueeze", {r:input(x), r:const_ints({d < 0 and d + x:dim() + 1 or d - 1})}))
end
EM.squeeze = function(r, res, x, d)
  if d == nil then return r:bind(res[1], r:node("Squeeze", {r:input(x)})) end
  r:bind(res[1], r:node("Squeeze", {r:input(x), r:const_ints({axis(d)})}))
end
local function identity(r, res, x) r:bind(res[1], r:node("Identity", {r:input(x)})) end
EM.contiguous, EM.clone, EM.detach = identity, identity, identity
EM.to = function(r, res, x)
  local y = res[1]
  if y.dtype ~= x.dtype then return r:bind(y, r:node("Cast", {r:input(x)}, {to = elem_type(y.dtype)})) end
  identity(r, res, x)
end
for _, name in ipairs {"float", "double", "half", "long", "int", "bool", "byte", "bfloat16", "cpu", "cuda"} do
  EM[name] = EM.to
end
EM.expand = function(r, res, x)
  local target = {}
  for i, v in ipairs(res[1].shape) do target[i] = v end
  -- with a dynamic batch, 1 (keep the input's size, ONNX broadcasting)
  -- wherever the input already has the size, so batch dims follow the input
  if r.dynamic_batch then
    local off = #target - x:dim()
    for i = 1, x:dim() do
      if x.shape[i] == target[i + off] then target[i + off] = 1 end
    end
  end
  r:bind(res[1], r:node("Expand", {r:input(x), r:const_ints(target)}))
end
EM.expand_as = EM.expand
EM.narrow = function(r, res, x, d, start, len)
  r:bind(res[1], r:node("Slice", {r:input(x), r:const_ints({start - 1}), r:const_ints({start - 1 + len}),
    r:const_ints({axis(d)})}))
end
EM.select = function(r, res, x, d, i)
  local idx = i > 0 and i - 1 or i
  r:bind(res[1], r:node("Gather", {r:input(x), r:input(dl.tensor(idx, {dtype = dl.int64}))}, {axis = axis(d)}))
end
local function cat_emit(r, res, list, d)
  local ins = {}
  for i, t in ipairs(list) do ins[i] = r:input(t) end
  r:bind(res[1], r:node("Concat", ins, {axis = axis(d or 1)}))
end
EM.cat, EM.concat = cat_emit, cat_emit
EM.stack = function(r, res, list, d)
  d = d or 1
  local ins = {}
  for i, t in ipairs(list) do
    local dd = d < 0 and d + t:dim() + 1 or d - 1
    ins[i] = r:node("Unsqueeze", {r:input(t), r:const_ints({dd})})
  end
  r:bind(res[1], r:node("Concat", ins, {axis = d < 0 and d or d - 1}))
end
local function split_emit(r, res, x, _, d)
  d = d or 1
  local parts = res[1]
  local sizes = {}
  for i, p in ipairs(parts) do sizes[i] = p.shape[d < 0 and d + x:dim() + 1 or d] end
  local outs = {r:node("Split", {r:input(x), r:const_ints(sizes)}, {axis = axis(d)}, #parts)}
  for i, p in ipairs(parts) do r:bind(p, outs[i]) end
end
EM.split, EM.chunk = split_emit, split_emit
EM.unbind = function(r, res, x, d)
  d = d or 1
  local parts = res[1]
  local sizes = {}
  for i = 1, #parts do sizes[i] = 1 end
  local outs = {r:node("Split", {r:input(x), r:const_ints(sizes)}, {axis = axis(d)}, #parts)}
  for i, p in ipairs(parts) do r:bind(p, r:node("Squeeze", {outs[i], r:const_ints({axis(d)})})) end
end
EM.index_select = function(r, res, x, d, idx)
  local i0 = r:node("Sub", {r:input(idx), r:input(1, idx)})
  r:bind(res[1], r:node("Gather", {r:input(x), i0}, {axis = axis(d)}))
end
EM.gather = function(r, res, x, d, idx)
  local i0 = r:node("Sub", {r:input(idx), r:input(1, idx)})
  r:bind(res[1], r:node("GatherElements", {r:input(x), i0}, {axis = axis(d)}))
end
EM.tril = function(r, res, x, k) r:bind(res[1], r:node("Trilu", {r:input(x), r:input(dl.tensor(k or 0, {dtype = dl.int64}))}, {upper = 0})) end
EM.triu = function(r, res, x, k) r:bind(res[1], r:node("Trilu", {r:input(x), r:input(dl.tensor(k or 0, {dtype = dl.int64}))}, {upper = 1})) end
EM.cumsum = function(r, res, x, d)
  r:bind(res[1], r:node("CumSum", {r:input(x), r:input(dl.tensor(axis(d), {dtype = dl.int64}))}))
end

-- --- reductions -----------------------------------------------------------------------------------------

-- (x [, dim|{dims}] [, keepdim] [, {dim=, keepdim=}]) -> axes list or nil, keepdims
local function reduce_args(a, b, c)
  local dims, keep
  if type(a) == "table" and a.dim == nil and a.keepdim == nil and a[1] then dims = a
  elseif type(a) == "number" then dims = {a}
  elseif type(a) == "table" then c = a end
  if type(b) == "boolean" then keep = b elseif type(b) == "table" then c = b end
  if type(c) == "table" then
    if c.dim ~= nil then dims = type(c.dim) == "table" and c.dim or {c.dim} end
    if c.keepdim ~= nil then keep = c.keepdim end
    if c.dtype ~= nil then fail("reductions with dtype= have no export") end
  end
  local axes
  if dims then
    axes = {}
    for i, d in ipairs(dims) do axes[i] = axis(d) end
  end
  return axes, keep and 1 or 0
end

local function reduce(op)
  return function(r, res, x, a, b, c)
    local axes, keep = reduce_args(a, b, c)
    if not axes then
      axes = {}
      for i = 1, x:dim() do axes[i] = i - 1 end
    end
    local y
    if op == "ReduceSum" or r.opset >= 18 then
      y = r:node(op, {r:input(x), r:const_ints(axes)}, {keepdims = keep})
    else
      y = r:node(op, {r:input(x)}, {axes = axes, keepdims = keep})
    end
    r:bind(res[1], r:cast(y, x.dtype, res[1].dtype))
  end
end
EM.sum, EM.mean, EM.amax, EM.amin, EM.prod = reduce("ReduceSum"), reduce("ReduceMean"), reduce("ReduceMax"),
  reduce("ReduceMin"), reduce("ReduceProd")
EM.logsumexp = reduce("ReduceLogSumExp")
local function arg_emit(op)
  return function(r, res, x, d, keep)
    if type(d) == "table" then d, keep = d.dim, d.keepdim end
    if d == nil then fail("%s without a dim has no export", op) end
    local i = r:node(op, {r:input(x)}, {axis = axis(d), keepdims = keep and 1 or 0})
    r:bind(res[1], r:node("Add", {i, r:input(1, res[1])}))
  end
end
EM.argmax, EM.argmin = arg_emit("ArgMax"), arg_emit("ArgMin")

-- --- nn.functional -----------------------------------------------------------------------------------------

EM.conv2d = function(r, res, x, w, b, opts)
  opts = opts or {}
  local s, p, d = pair(opts.stride, 1), pair(opts.padding, 0), pair(opts.dilation, 1)
  local ins = {r:input(x), r:input(w)}
  if b then ins[3] = r:input(b) end
  r:bind(res[1], r:node("Conv", ins, {strides = s, pads = {p[1], p[2], p[1], p[2]}, dilations = d,
    group = opts.groups or 1, kernel_shape = {w.shape[3], w.shape[4]}}))
end
EM.conv2d_forward = EM.conv2d
EM.conv2d_fused = function(r, res, x, w, b, opts)
  opts = opts or {}
  local s, p, d = pair(opts.stride, 1), pair(opts.padding, 0), pair(opts.dilation, 1)
  local ins = {r:input(x), r:input(w)}
  if b then ins[3] = r:input(b) end
  local y = r:node("Conv", ins, {strides = s, pads = {p[1], p[2], p[1], p[2]}, dilations = d,
    group = opts.groups or 1, kernel_shape = {w.shape[3], w.shape[4]}})
  if opts.add then y = r:node("Add", {y, r:input(opts.add)}) end
  if opts.relu then y = r:node("Relu", {y}) end
  r:bind(res[1], y)
end
-- A BatchNormalization node of x in eval mode (its output's name).
local function batch_norm_node(r, op, x, rm, rv, w, b, training, eps)
  if training then fail("%s in training mode has no export (the model is put in eval mode: a " ..
    "BatchNorm without running statistics cannot be exported)", op) end
  local C = x.shape[2]
  local ww = w or dl.ones({C}, {dtype = x.dtype})
  local bb = b or dl.zeros({C}, {dtype = x.dtype})
  return r:node("BatchNormalization", {r:input(x), r:input(ww), r:input(bb), r:input(rm), r:input(rv)},
    {epsilon = (eps or 1e-5) + 0.0})
end
EM.batch_norm = function(r, res, x, rm, rv, w, b, training, _, eps)
  r:bind(res[1], batch_norm_node(r, "batch_norm", x, rm, rv, w, b, training, eps))
end
-- the fused forms (what the ResNet blocks call) as BatchNormalization -> (Add ->) Relu
EM.batch_norm_relu = function(r, res, x, rm, rv, w, b, training, _, eps)
  r:bind(res[1], r:node("Relu", {batch_norm_node(r, "batch_norm_relu", x, rm, rv, w, b, training, eps)}))
end
EM.batch_norm_add_relu = function(r, res, x, residual, rm, rv, w, b, training, _, eps)
  local y = batch_norm_node(r, "batch_norm_add_relu", x, rm, rv, w, b, training, eps)
  r:bind(res[1], r:node("Relu", {r:node("Add", {y, r:input(residual)})}))
end
local function pool_attrs(k, opts, avg)
  opts = opts or {}
  local kk = pair(k)
  local s = opts.stride and pair(opts.stride) or kk
  local p = pair(opts.padding, 0)
  local a = {kernel_shape = kk, strides = s, pads = {p[1], p[2], p[1], p[2]}}
  if opts.ceil_mode then a.ceil_mode = 1 end
  if avg then
    a.count_include_pad = (opts.count_include_pad == nil or opts.count_include_pad) and 1 or 0
    if opts.divisor_override then fail("avg_pool2d with divisor_override has no export") end
  else
    local d = pair(opts.dilation, 1)
    if d[1] ~= 1 or d[2] ~= 1 then a.dilations = d end
  end
  return a
end
EM.max_pool2d = function(r, res, x, k, opts)
  r:bind(res[1], r:node("MaxPool", {r:input(x)}, pool_attrs(k, opts, false)))
  if res[2] and dl.is_tensor(res[2]) then r.names[res[2]] = nil end
end
EM.avg_pool2d = function(r, res, x, k, opts)
  r:bind(res[1], r:node("AveragePool", {r:input(x)}, pool_attrs(k, opts, true)))
end
local function adaptive(op, global)
  return function(r, res, x, size)
    local out = pair(size)
    local H, W = x.shape[x:dim() - 1], x.shape[x:dim()]
    out[1], out[2] = out[1] or H, out[2] or W
    if out[1] == 1 and out[2] == 1 then return r:bind(res[1], r:node(global, {r:input(x)})) end
    if H % out[1] ~= 0 or W % out[2] ~= 0 then
      fail("adaptive pooling to %dx%d from %dx%d (not a divisor) has no export", out[1], out[2], H, W)
    end
    local k = {H // out[1], W // out[2]}
    r:bind(res[1], r:node(op, {r:input(x)}, {kernel_shape = k, strides = k}))
  end
end
EM.adaptive_avg_pool2d = adaptive("AveragePool", "GlobalAveragePool")
EM.adaptive_max_pool2d = adaptive("MaxPool", "GlobalMaxPool")
EM.softmax = function(r, res, x, d) r:bind(res[1], r:node("Softmax", {r:input(x)}, {axis = axis(d)})) end
EM.log_softmax = function(r, res, x, d) r:bind(res[1], r:node("LogSoftmax", {r:input(x)}, {axis = axis(d)})) end
EM.linear = function(r, res, x, w, b)
  if x:dim() == 2 then
    local ins = {r:input(x), r:input(w)}
    if b then ins[3] = r:input(b) end
    return r:bind(res[1], r:node("Gemm", ins, {transB = 1}))
  end
  local y = r:node("MatMul", {r:input(x), r:node("Transpose", {r:input(w)}, {perm = {1, 0}})})
  if b then y = r:node("Add", {y, r:input(b)}) end
  r:bind(res[1], y)
end
EM.dropout = function(r, res, x, p, training)
  if training and (p or 0.5) > 0 then fail("dropout in training mode has no export") end
  identity(r, res, x)
end
EM.gelu = function(r, res, x, opts)
  local approx = type(opts) == "table" and opts.approximate or "none"
  local i = r:input(x)
  if approx == "tanh" then
    -- 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    local x3 = r:node("Mul", {r:node("Mul", {i, i}), i})
    local inner = r:node("Mul", {r:node("Add", {i, r:node("Mul", {x3, r:input(0.044715, x)})}),
      r:input(math.sqrt(2 / math.pi), x)})
    local t = r:node("Add", {r:node("Tanh", {inner}), r:input(1.0, x)})
    return r:bind(res[1], r:node("Mul", {r:node("Mul", {i, t}), r:input(0.5, x)}))
  end
  local e = r:node("Erf", {r:node("Div", {i, r:input(math.sqrt(2), x)})})
  r:bind(res[1], r:node("Mul", {r:node("Mul", {i, r:node("Add", {e, r:input(1.0, x)})}), r:input(0.5, x)}))
end
EM.silu = function(r, res, x)
  local i = r:input(x)
  r:bind(res[1], r:node("Mul", {i, r:node("Sigmoid", {i})}))
end
local PAD_MODE = {constant = "constant", reflect = "reflect", replicate = "edge"}
EM.pad = function(r, res, x, pads, mode, value)
  if type(mode) == "table" then mode, value = mode.mode, mode.value end
  mode = mode or "constant"
  if not PAD_MODE[mode] then fail("pad mode '%s' has no export", mode) end
  local n = x:dim()
  local onnx_pads = {}
  for i = 1, 2 * n do onnx_pads[i] = 0 end
  for j = 1, #pads // 2 do
    local d = n - j + 1
    onnx_pads[d] = pads[2 * j - 1]
    onnx_pads[d + n] = pads[2 * j]
  end
  local ins = {r:input(x), r:const_ints(onnx_pads)}
  if mode == "constant" then ins[3] = r:input(value or 0, x) end
  r:bind(res[1], r:node("Pad", ins, {mode = PAD_MODE[mode]}))
end

for _, name in ipairs(INPLACE) do EM[name .. "_"] = EM[name] end

-- --- the compositions of dl.nn.composed, each as its ONNX op ---------------------------------

-- v as a list of n integers (a number repeated)
local function nlist(v, n, def)
  if v == nil then v = def end
  if type(v) == "number" then
    local r = {}
    for i = 1, n do r[i] = v end
    return r
  end
  return {table.unpack(v, 1, n)}
end

local function conv_nd(n, transposed)
  return function(r, res, x, w, b, opts)
    opts = opts or {}
    local p = nlist(opts.padding, n, 0)
    local pads = {}
    for i = 1, n do pads[i], pads[i + n] = p[i], p[i] end
    local k = {}
    for i = 1, n do k[i] = w.shape[i + 2] end
    local a = {strides = nlist(opts.stride, n, 1), pads = pads, dilations = nlist(opts.dilation, n, 1),
      group = opts.groups or 1, kernel_shape = k}
    if transposed then a.output_padding = nlist(opts.output_padding, n, 0) end
    local ins = {r:input(x), r:input(w)}
    if b then ins[3] = r:input(b) end
    r:bind(res[1], r:node(transposed and "ConvTranspose" or "Conv", ins, a))
  end
end
EM.conv1d, EM.conv3d = conv_nd(1, false), conv_nd(3, false)
EM.conv_transpose1d, EM.conv_transpose2d = conv_nd(1, true), conv_nd(2, true)

local function pool_nd(n, op)
  return function(r, res, x, k, opts)
    opts = opts or {}
    local kk = nlist(k, n)
    local p = nlist(opts.padding, n, 0)
    local pads = {}
    for i = 1, n do pads[i], pads[i + n] = p[i], p[i] end
    local a = {kernel_shape = kk, strides = nlist(opts.stride, n, kk), pads = pads}
    if opts.ceil_mode then a.ceil_mode = 1 end
    if op == "MaxPool" then
      local d = nlist(opts.dilation, n, 1)
      for i = 1, n do if d[i] ~= 1 then a.dilations = d end end
    else
      a.count_include_pad = (opts.count_include_pad == nil or opts.count_include_pad) and 1 or 0
    end
    r:bind(res[1], r:node(op, {r:input(x)}, a))
  end
end
EM.max_pool1d, EM.max_pool3d = pool_nd(1, "MaxPool"), pool_nd(3, "MaxPool")
EM.avg_pool1d, EM.avg_pool3d = pool_nd(1, "AveragePool"), pool_nd(3, "AveragePool")

EM.prelu = function(r, res, x, w)
  local slope = w
  if w:numel() > 1 then
    local s = {w:numel()}
    for _ = 3, x:dim() do s[#s + 1] = 1 end
    slope = r:node("Reshape", {r:input(w), r:const_ints(s)})
  else
    slope = r:input(w)
  end
  r:bind(res[1], r:node("PRelu", {r:input(x), slope}))
end
EM.pixel_shuffle = function(r, res, x, f)
  if x:dim() ~= 4 then fail("pixel_shuffle of a %d-D input has no export (4-D only)", x:dim()) end
  r:bind(res[1], r:node("DepthToSpace", {r:input(x)}, {blocksize = f, mode = "CRD"}))
end
EM.pixel_unshuffle = function(r, res, x, f)
  if x:dim() ~= 4 then fail("pixel_unshuffle of a %d-D input has no export (4-D only)", x:dim()) end
  local N, C, H, W = table.unpack(x.shape)
  local t = r:node("Reshape", {r:input(x), r:const_ints({r.dynamic_batch and 0 or N, C, H // f, f, W // f, f})})
  t = r:node("Transpose", {t}, {perm = {0, 1, 3, 5, 2, 4}})
  r:bind(res[1], r:node("Reshape", {t, r:const_ints({r.dynamic_batch and 0 or N, C * f * f, H // f, W // f})}))
end
EM.instance_norm = function(r, res, x, _, _, w, b, use_input_stats, _, eps)
  if use_input_stats == false then fail("instance_norm with running statistics (eval, tracked) has no export") end
  local C = x.shape[2]
  local ww = w or dl.ones({C}, {dtype = x.dtype})
  local bb = b or dl.zeros({C}, {dtype = x.dtype})
  r:bind(res[1], r:node("InstanceNormalization", {r:input(x), r:input(ww), r:input(bb)}, {epsilon = (eps or 1e-5) + 0.0}))
end
EM.interpolate = function(r, res, x, opts)
  local mode = opts.mode or "nearest"
  local a = {}
  if mode == "nearest" then
    a.mode, a.coordinate_transformation_mode, a.nearest_mode = "nearest", "asymmetric", "floor"
  elseif mode == "nearest-exact" then
    a.mode, a.coordinate_transformation_mode, a.nearest_mode = "nearest", "half_pixel", "floor"
  else
    a.mode = mode == "bicubic" and "cubic" or "linear"
    a.coordinate_transformation_mode = opts.align_corners and "align_corners" or
      (mode == "bicubic" and "half_pixel" or "pytorch_half_pixel")
    if mode == "bicubic" then a.cubic_coeff_a = -0.75 end
  end
  local y = res[1]
  local sizes = {}
  for i, v in ipairs(y.shape) do sizes[i] = v end
  local ins = {r:input(x), "", ""}
  if opts.scale_factor ~= nil and not opts.recompute_scale_factor then
    local sc = {1.0, 1.0}
    for i = 3, x:dim() do
      local f = opts.scale_factor
      if type(f) == "table" then f = f[i - 2] end
      sc[i] = f + 0.0
    end
    ins[3] = r:const(dl.tensor(sc, {dtype = dl.float32}))
  else
    if r.dynamic_batch then
      -- the batch size from the input, the rest fixed
      local shape = r:node("Shape", {r:input(x)})
      local batch = r:node("Slice", {shape, r:const_ints({0}), r:const_ints({2}), r:const_ints({0})})
      ins[4] = r:node("Concat", {batch, r:const_ints({table.unpack(sizes, 3)})}, {axis = 0})
    else
      ins[4] = r:const_ints(sizes)
    end
  end
  r:bind(y, r:node("Resize", ins, a))
end
EM.layer_norm = function(r, res, x, shape, w, b, eps)
  local n = type(shape) == "table" and #shape or 1
  eps = (eps or 1e-5) + 0.0
  if r.opset >= 17 then
    local ins = {r:input(x), r:input(w or dl.ones(type(shape) == "table" and shape or {shape}, {dtype = x.dtype}))}
    if b then ins[3] = r:input(b) end
    return r:bind(res[1], r:node("LayerNormalization", ins, {axis = -n, epsilon = eps}))
  end
  -- opsets < 17: (x - mean) / sqrt(var + eps) * w + b over the last n dims
  local axes = {}
  for i = 1, n do axes[i] = -i end
  local xi = r:input(x)
  local mean = r:node("ReduceMean", {xi}, {axes = axes, keepdims = 1})
  local d = r:node("Sub", {xi, mean})
  local var = r:node("ReduceMean", {r:node("Mul", {d, d})}, {axes = axes, keepdims = 1})
  local y = r:node("Div", {d, r:node("Sqrt", {r:node("Add", {var, r:input(eps, x)})})})
  if w then y = r:node("Mul", {y, r:input(w)}) end
  if b then y = r:node("Add", {y, r:input(b)}) end
  r:bind(res[1], y)
end

-- embedding(ids, weight, opts): ids are 1-based in dlua, 0-based in ONNX
EM.embedding = function(r, res, ids, w, opts)
  if type(opts) == "table" and opts.max_norm then fail("embedding with max_norm has no export") end
  local i0 = r:node("Sub", {r:input(ids), r:input(1, ids)})
  r:bind(res[1], r:node("Gather", {r:input(w), i0}, {axis = 0}))
end

-- scaled_dot_product_attention(q, k, v, {attn_mask=, is_causal=, scale=}):
-- softmax(q k^T * scale + mask) v, a bool mask true where attention is kept
EM.scaled_dot_product_attention = function(r, res, q, k, v, opts)
  opts = opts or {}
  if (opts.dropout_p or 0) > 0 then fail("scaled_dot_product_attention with dropout has no export") end
  local E = q.shape[q:dim()]
  local scale = opts.scale or 1 / math.sqrt(E)
  local nk = k:dim()
  local perm = {}
  for i = 1, nk do perm[i] = i - 1 end
  perm[nk - 1], perm[nk] = nk - 1, nk - 2
  local kt = r:node("Transpose", {r:input(k)}, {perm = perm})
  local s = r:node("Mul", {r:node("MatMul", {r:input(q), kt}), r:input(scale + 0.0, q)})
  local L, S = q.shape[q:dim() - 1], k.shape[nk - 1]
  local m = opts.attn_mask
  if opts.is_causal then
    -- an additive (L, S) constant: -inf above the diagonal
    local c = dl.zeros({L, S}, {dtype = q.dtype})
    c = c:masked_fill(dl.ones({L, S}, {dtype = dl.bool}):triu(1), -math.huge)
    s = r:node("Add", {s, r:const(c)})
  end
  if m ~= nil then
    if m.dtype == dl.bool then
      s = r:node("Where", {r:input(m), s, r:input(-math.huge, q)})
    else
      s = r:node("Add", {s, r:input(m)})
    end
  end
  local p = r:node("Softmax", {s}, {axis = -1})
  r:bind(res[1], r:node("MatMul", {p, r:input(v)}))
end

EM.rms_norm = function(r, res, x, shape, w, eps)
  local n = type(shape) == "table" and #shape or 1
  if eps == nil then -- PyTorch's default: the compute dtype's machine epsilon
    eps = x.dtype == dl.float64 and 2.220446049250313e-16 or 1.1920928955078125e-07
  end
  local axes = {}
  for i = 1, n do axes[i] = -i end
  local xi = r:input(x)
  local ms = r:node("ReduceMean", {r:node("Mul", {xi, xi})}, {axes = axes, keepdims = 1})
  local y = r:node("Div", {xi, r:node("Sqrt", {r:node("Add", {ms, r:input(eps + 0.0, x)})})})
  if w then y = r:node("Mul", {y, r:input(w)}) end
  r:bind(res[1], y)
end

-- --- what refuses ----------------------------------------------------------------------------------------

-- functions that read a traced value back into Lua
local DATA_DEPENDENT = {item = true, tolist = true, equal = true, allclose = true, nonzero = true,
  masked_select = true, __index = true, __len = true, __close = true}
-- functions returning facts about a tensor, never tensors: run as they are
local PASSIVE = {dim = true, size = true, numel = true, stride = true, is_contiguous = true,
  is_floating_point = true, element_size = true, storage_offset = true, is_cuda = true, is_pinned = true,
  is_tensor = true, type = true, __tostring = true, __gc = true, __name = true, requires_grad_ = true,
  get_device = true, __newindex = true, is_grad_enabled = true, no_grad = true, enable_grad = true,
  set_grad_enabled = true, backward = true, zero_ = true, fill_ = true, copy_ = true, uniform_ = true,
  normal_ = true, bernoulli_ = true, random_ = true, index_fill_ = true}

-- --- the trace --------------------------------------------------------------------------------------------

-- Wraps tbl[key] (a function) for recording; keeps the original in saved.
local function wrap(rec, tbl, key, saved, where)
  local orig = rawget(tbl, key)
  if type(orig) ~= "function" or PASSIVE[key] then return end
  saved[#saved + 1] = {tbl, key, orig}
  local em = EM[key]
  local label = where .. key
  local wrapper
  wrapper = function(...)
    if rec.depth > 0 then return orig(...) end
    local traced = false
    local n = select("#", ...)
    for i = 1, n do
      local a = select(i, ...)
      if rec:is_traced(a) then traced = true break end
      if type(a) == "table" and not dl.is_tensor(a) then
        for _, v in pairs(a) do if rec:is_traced(v) then traced = true break end end
      end
    end
    if not traced then return orig(...) end
    if DATA_DEPENDENT[key] then
      fail("%s reads a traced tensor back into Lua (data-dependent control flow cannot be exported)", label)
    end
    if not em then fail("%s has no ONNX export (a traced tensor reached it)", label) end
    -- the op and the recording (which makes tensors too) run unrecorded
    rec.depth = rec.depth + 1
    local args = table.pack(...)
    local ok, res = pcall(function()
      local r = table.pack(orig(table.unpack(args, 1, args.n)))
      rec.current = label
      em(rec, r, table.unpack(args, 1, args.n))
      return r
    end)
    rec.depth = rec.depth - 1
    if not ok then error(res, 0) end
    return table.unpack(res, 1, res.n)
  end
  rawset(tbl, key, wrapper)
  if rec.wrapped[orig] == nil then rec.wrapped[orig] = wrapper end
end

-- Functions a module holds in a field (a Transformer layer's activation,
-- dl.nn.functional.relu taken when it was built) are swapped for their
-- wrappers too; saved lets the trace put them back.
local function wrap_module_fields(rec, model, saved)
  for _, m in ipairs(model:modules()) do
    local attrs = rawget(m, "_attrs")
    for k, v in pairs(attrs) do
      if type(v) == "function" and rec.wrapped[v] then
        saved[#saved + 1] = {attrs, k, v}
        rawset(attrs, k, rec.wrapped[v])
      end
    end
  end
end

local function collect_params(rec, model)
  for name, p in model:named_parameters() do rec.params[p] = {name = name} end
  for name, b in model:named_buffers() do
    if not rec.params[b] then rec.params[b] = {name = name} end
  end
end

-- Pushes module names while modules run (node names "layer1.0.conv1/Conv").
local function wrap_modules(rec, model, saved)
  local names = {}
  for name, m in model:named_modules() do names[m] = name end
  local classes = {}
  for m in pairs(names) do classes[getmetatable(m)] = true end
  for cls in pairs(classes) do
    local orig = rawget(cls, "__call")
    if orig then
      saved[#saved + 1] = {cls, "__call", orig}
      rawset(cls, "__call", function(self, ...)
        local nm = names[self]
        if nm and nm ~= "" then rec.scope[#rec.scope + 1] = nm end
        local res = table.pack(pcall(orig, self, ...))
        if nm and nm ~= "" then rec.scope[#rec.scope] = nil end
        if not res[1] then error(res[2], 0) end
        return table.unpack(res, 2, res.n)
      end)
    end
  end
end

local function value_info(t, name, dynamic)
  local shape = {}
  for i, d in ipairs(t.shape) do shape[i] = d end
  if dynamic and #shape >= 1 then shape[1] = "batch" end
  return {name = name, elem_type = elem_type(t.dtype), shape = shape}
end

-- Traces model(inputs...) and returns the ONNX model table.
function E.trace(model, inputs, opts)
  opts = opts or {}
  local rec = new_rec({opset = opts.opset or 17})
  rec.dynamic_batch = opts.dynamic_batch ~= false
  collect_params(rec, model)
  local in_names = opts.input_names or {}
  local graph_inputs = {}
  inputs = {table.unpack(inputs)}
  for i, x in ipairs(inputs) do
    if not dl.is_tensor(x) then fail("example input %d is not a tensor", i) end
    local nm = in_names[i] or (#inputs == 1 and "input" or ("input_" .. i))
    -- the trace runs with autograd on: whatever derives from a floating
    -- input or a parameter requires grad, so a value that slips past the
    -- wrappers is caught when it would become a constant (Rec:input)
    if x:is_floating_point() then
      x = x:detach():requires_grad_(true)
      inputs[i] = x
    end
    rec.names[x] = nm
    graph_inputs[i] = value_info(x, nm, rec.dynamic_batch)
  end
  local saved = {}
  local mt = getmetatable(inputs[1])
  local ok, outs = pcall(function()
    for k in pairs(mt.methods) do wrap(rec, mt.methods, k, saved, "Tensor:") end
    for _, k in ipairs {"__add", "__sub", "__mul", "__div", "__unm", "__pow", "__idiv", "__mod"} do
      wrap(rec, mt, k, saved, "Tensor ")
    end
    for k, v in pairs(dl) do
      if type(v) == "function" and k ~= "is_tensor" then wrap(rec, dl, k, saved, "dl.") end
    end
    require "dl.nn.functional" -- its Lua functions (linear, conv_transpose2d) join dl._F
    for k in pairs(dl._F) do wrap(rec, dl._F, k, saved, "dl.nn.functional.") end
    wrap(rec, dl._nn, "conv2d_fused", saved, "dl._nn.")
    wrap_modules(rec, model, saved)
    wrap_module_fields(rec, model, saved)
    return table.pack(dl.enable_grad(function() return model(table.unpack(inputs)) end))
  end)
  for i = #saved, 1, -1 do rawset(saved[i][1], saved[i][2], saved[i][3]) end
  if not ok then error(outs, 0) end
  local graph_outputs = {}
  local out_names = opts.output_names or {}
  local results = outs
  if outs.n == 1 and type(outs[1]) == "table" and not dl.is_tensor(outs[1]) then results = outs[1] end
  for i = 1, #results do
    local y = results[i]
    if not dl.is_tensor(y) then fail("output %d is not a tensor", i) end
    local nm = rec.names[y]
    if not nm then fail("output %d does not depend on the inputs (a constant output cannot be exported)", i) end
    local want = out_names[i] or (#results == 1 and "output" or ("output_" .. i))
    local renamed = false
    for _, v in ipairs(graph_inputs) do if v.name == nm then renamed = true end end
    if renamed or nm ~= want then
      -- rename the producer's output (or add an Identity for an input passed through)
      local done = false
      if not renamed then
        for _, node in ipairs(rec.nodes) do
          for j, o in ipairs(node.output) do
            if o == nm then node.output[j] = want; done = true end
          end
        end
        if done then
          for _, node in ipairs(rec.nodes) do
            for j, v in ipairs(node.input) do if v == nm then node.input[j] = want end end
          end
        end
      end
      if not done then rec.nodes[#rec.nodes + 1] = {name = "output_identity_" .. i, op_type = "Identity",
        input = {nm}, output = {want}, attribute = {}} end
      nm = want
    end
    graph_outputs[i] = value_info(y, nm, rec.dynamic_batch)
  end
  return {
    ir_version = 8, producer_name = "dlua", producer_version = dl.__version__ or "",
    opset_import = {{domain = "", version = rec.opset}},
    graph = {name = opts.graph_name or (model._get_name and model:_get_name() or "dlua"), node = rec.nodes,
      initializer = rec.inits, input = graph_inputs, output = graph_outputs},
  }
end

function E.export(model, example_inputs, path, opts)
  if not Module.is_module(model) and type(model) ~= "function" then
    fail("model must be a dl.nn.Module, got %s", type(model))
  end
  if dl.is_tensor(example_inputs) then example_inputs = {example_inputs} end
  if type(example_inputs) ~= "table" or #example_inputs == 0 then
    fail("example_inputs must be a tensor or a list of tensors")
  end
  opts = opts or {}
  for k in pairs(opts) do
    if k ~= "opset" and k ~= "dynamic_batch" and k ~= "input_names" and k ~= "output_names" then
      fail("unknown option '%s'", tostring(k))
    end
  end
  local opset = opts.opset or 17
  if math.type(opset) ~= "integer" or opset < 13 or opset > 17 then
    fail("opset must be an integer from 13 to 17, got %s", tostring(opset))
  end
  if type(path) ~= "string" then fail("path must be a string, got %s", type(path)) end
  local was_training = model.training
  model:eval()
  local ok, m = pcall(E.trace, model, example_inputs, opts)
  if ok and opts.dynamic_batch ~= false then ok, m = pcall(E.check_batch, model, example_inputs, m) end
  if was_training then model:train() end
  if not ok then error(m, 0) end
  dl._onnx.save_model(path, m)
  return m
end

-- Runs the traced graph (dl.onnx's importer) and the model on the example
-- inputs with one more batch entry (the first repeated); they must agree,
-- else a size was fixed by the example's batch.  Returns m.
function E.check_batch(model, inputs, m)
  local bigger = {}
  for i, x in ipairs(inputs) do
    if x:dim() == 0 then return m end
    bigger[i] = dl.cat({x, x:narrow(1, 1, 1)}, 1)
  end
  local ok, g = pcall(require("dl.onnx.graph").build, m, "(export check)")
  if not ok then fail("the traced graph does not load: %s", tostring(g)) end
  local cpu = {}
  for i, x in ipairs(bigger) do cpu[i] = x:cpu() end
  local want = table.pack(dl.no_grad(function() return model(table.unpack(bigger)) end))
  if want.n == 1 and type(want[1]) == "table" and not dl.is_tensor(want[1]) then want = want[1] end
  local okr, got = pcall(function() return table.pack(dl.no_grad(function() return g(table.unpack(cpu)) end)) end)
  local why
  if not okr then
    why = tostring(got)
  else
    for i = 1, #want do
      local a, b = got[i], want[i]:cpu()
      if not dl.is_tensor(a) or #a.shape ~= #b.shape then why = "output " .. i .. " has another shape"; break end
      for d = 1, #b.shape do if a.shape[d] ~= b.shape[d] then why = "output " .. i .. " has another shape" end end
      if why then break end
      local af, bf = a:to(dl.float64), b:to(dl.float64)
      local bad = (af - bf):abs():gt(bf:abs() * 1e-3 + 1e-4):any():item()
      if bad then why = "output " .. i .. " differs"; break end
    end
  end
  if why then
    fail("the graph does not generalize to a batch of %d (%s): a size is fixed by the example's batch of %d; " ..
      "export with {dynamic_batch = false}, or trace with a batch size unlike the model's other sizes", bigger[1].shape[1],
      why, inputs[1].shape[1])
  end
  return m
end

return E
