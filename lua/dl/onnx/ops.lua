-- dl.onnx.ops: one builder per ONNX op type (default domain, opsets 1-17).
--
-- A builder receives the node context n (lua/dl/onnx/graph.lua: n:attr,
-- n:input, n:const, n.opset, n:fail) at LOAD time, reads and checks every
-- attribute and the opset-dependent forms (attribute in old opsets, input
-- in new ones), and returns the function that runs the node on tensors:
-- run(input1, input2, ...) -> output1, output2, ...  (absent optional inputs
-- are nil).  Ops are compositions of dl's own ops, so autograd, the CPU and
-- CUDA all work through them.
--
-- Invariants: a run function captures Lua values only (numbers, lists),
-- never tensors; ONNX's 0-based, negative-wrapping axes and indices are
-- turned into dl's 1-based ones here; integer results keep ONNX's dtype
-- (dl promotes as PyTorch does, so results are cast back where they differ).
local dl = require "dl"
local G = require "dl.onnx.graph"
local F = require "dl.nn.functional"
local composed = require "dl.nn.composed"

local OPS = {}
local list = G.list
local FLOAT = G.FLOAT

local DTYPES, TYPE_NAMES = G.DTYPES, G.TYPE_NAMES
local function is_float(t) return FLOAT[t.dtype] == true end

-- --- small helpers ----------------------------------------------------------------------

-- ONNX axis (0-based, negative from the end) of a rank-r tensor -> dl dim.
local function dim_of(n, a, r, what)
  local d = a < 0 and a + r or a
  if d < 0 or d >= r then
    error(string.format("%s %d is out of range for a tensor of rank %d", what or "axis", a, r), 0)
  end
  return d + 1
end

local function prod(t, i, j)
  local p = 1
  for k = i, j do p = p * t[k] end
  return p
end

local function shape_of(x)
  local s = x.shape
  local r = {}
  for i = 1, #s do r[i] = s[i] end
  return r
end

-- moves a (small) tensor to ref's device when they differ (CPU shape
-- arithmetic meeting CUDA data)
local function on(t, ref)
  if t.device ~= ref.device then return t:to(ref.device) end
  return t
end

local function int_list_input(n, i, what, required)
  -- returns a function(v) -> list, using the constant when known
  local c = n:const(i)
  if c then
    local l = list(c)
    return function() return l end, l
  end
  if required and not n:input(i) then n:fail("input '%s' is required", what) end
  return function(v) return v and list(v) or nil end, nil
end

-- Numbers to a tensor like x (dtype and device).
local function scalar_like(v, x) return dl.full({}, v, {dtype = x.dtype, device = x.device}) end

local function cast_back(y, x)
  if y.dtype ~= x.dtype then return y:to(x.dtype) end
  return y
end

-- --- elementwise ------------------------------------------------------------------------

local function legacy_broadcast(n)
  -- opsets < 7: B broadcast to A from `axis` when broadcast=1
  n:ignore("consumed_inputs")
  if n.opset >= 7 then return nil end
  local b = n:attr("broadcast", "INT", 0)
  local axis = n:attr("axis", "INT")
  if b ~= 1 or axis == nil then return nil end
  return function(a, bb)
    local r = a:dim()
    local ax = axis < 0 and axis + r or axis
    local s = shape_of(bb)
    for _ = #s + ax + 1, r do s[#s + 1] = 1 end
    return bb:reshape(s)
  end
end

local function binary(fn)
  return function(n)
    local fix = legacy_broadcast(n)
    return function(a, b)
      if fix then b = fix(a, b) end
      if a.device ~= b.device then
        if b:dim() == 0 or b.device == "cpu" then b = b:to(a.device) else a = a:to(b.device) end
      end
      return fn(a, b)
    end
  end
end

OPS.Add = binary(function(a, b) return cast_back(a + b, a) end)
OPS.Sub = binary(function(a, b) return cast_back(a - b, a) end)
OPS.Mul = binary(function(a, b) return cast_back(a * b, a) end)
OPS.Div = binary(function(a, b)
  if is_float(a) then return a / b end
  return dl.div(a, b, {rounding_mode = "trunc"})
end)
OPS.Pow = function(n)
  return function(a, b)
    if a.device ~= b.device then b = b:to(a.device) end
    return cast_back(dl.pow(a, b), a)
  end
end
OPS.Mod = function(n)
  local fmod = n:attr("fmod", "INT", 0)
  if fmod == 0 and n:input_type(1) and FLOAT[DTYPES[n:input_type(1).elem_type or 0] or false] then
    n:fail("fmod=0 on floating-point inputs is not allowed by ONNX")
  end
  return function(a, b)
    if fmod == 1 then return dl.fmod(a, b) end
    return dl.remainder(a, b)
  end
end

local function cmp(method)
  return binary(function(a, b) return a[method](a, b) end)
end
OPS.Equal = cmp("eq")
OPS.Less = cmp("lt")
OPS.Greater = cmp("gt")
OPS.LessOrEqual = cmp("le")
OPS.GreaterOrEqual = cmp("ge")
OPS.And = binary(function(a, b) return dl.logical_and(a, b) end)
OPS.Or = binary(function(a, b) return dl.logical_or(a, b) end)
OPS.Xor = binary(function(a, b) return dl.logical_xor(a, b) end)

local function variadic(fn, mean)
  return function(n)
    n:ignore("consumed_inputs")
    return function(...)
      local args = table.pack(...)
      local y = args[1]
      for i = 2, args.n do y = fn(y, on(args[i], y)) end
      if mean then y = y / args.n end
      return y
    end
  end
end
OPS.Sum = variadic(function(a, b) return a + b end)
OPS.Mean = variadic(function(a, b) return a + b end, true)
OPS.Max = variadic(function(a, b) return dl.maximum(a, b) end)
OPS.Min = variadic(function(a, b) return dl.minimum(a, b) end)

local function unary(method)
  return function(n)
    n:ignore("consumed_inputs")
    return function(x) return x[method](x) end
  end
end
for op, m in pairs {
  Abs = "abs", Neg = "neg", Exp = "exp", Log = "log", Sqrt = "sqrt", Reciprocal = "reciprocal",
  Sigmoid = "sigmoid", Tanh = "tanh", Erf = "erf", Floor = "floor", Ceil = "ceil", Round = "round",
  Sign = "sign", Sin = "sin", Cos = "cos", Tan = "tan", Asin = "asin", Acos = "acos", Atan = "atan",
  Sinh = "sinh", Cosh = "cosh", Not = "logical_not", IsNaN = "isnan", Relu = "relu",
} do OPS[op] = unary(m) end

OPS.Asinh = function() return function(x) return x:sign() * (x:abs() + (x * x + 1):sqrt()):log() end end
OPS.Acosh = function() return function(x) return (x + (x * x - 1):sqrt()):log() end end
OPS.Atanh = function() return function(x) return ((x + 1) / (-x + 1)):log() * 0.5 end end

OPS.IsInf = function(n)
  local neg = n:attr("detect_negative", "INT", 1)
  local pos = n:attr("detect_positive", "INT", 1)
  return function(x)
    local inf = x:isinf()
    if neg == 1 and pos == 1 then return inf end
    if neg == 1 then return dl.logical_and(inf, x:lt(0)) end
    if pos == 1 then return dl.logical_and(inf, x:gt(0)) end
    return dl.logical_and(inf, x:ne(x))
  end
end

OPS.Identity = function() return function(x) return x end end

-- --- activations ---------------------------------------------------------------------------

OPS.LeakyRelu = function(n)
  local alpha = n:attr("alpha", "FLOAT", 0.01)
  n:ignore("consumed_inputs")
  return function(x) return x:clamp_min(0) + x:clamp_max(0) * alpha end
end
OPS.Elu = function(n)
  local alpha = n:attr("alpha", "FLOAT", 1.0)
  n:ignore("consumed_inputs")
  return function(x) return x:clamp_min(0) + x:clamp_max(0):expm1() * alpha end
end
OPS.Selu = function(n)
  local alpha = n:attr("alpha", "FLOAT", 1.67326319217681884765625)
  local gamma = n:attr("gamma", "FLOAT", 1.05070102214813232421875)
  n:ignore("consumed_inputs")
  return function(x) return (x:clamp_min(0) + x:clamp_max(0):expm1() * alpha) * gamma end
end
OPS.Celu = function(n)
  local alpha = n:attr("alpha", "FLOAT", 1.0)
  return function(x) return x:clamp_min(0) + (x / alpha):clamp_max(0):expm1() * alpha end
end
OPS.HardSigmoid = function(n)
  local alpha = n:attr("alpha", "FLOAT", 0.2)
  local beta = n:attr("beta", "FLOAT", 0.5)
  n:ignore("consumed_inputs")
  return function(x) return (x * alpha + beta):clamp(0, 1) end
end
OPS.HardSwish = function()
  return function(x) return x * (x * (1 / 6) + 0.5):clamp(0, 1) end
end
OPS.Softplus = function()
  return function(x) return x:clamp_min(0) + (-x:abs()):exp():log1p() end
end
OPS.Softsign = function()
  return function(x) return x / (x:abs() + 1) end
end
OPS.ThresholdedRelu = function(n)
  local alpha = n:attr("alpha", "FLOAT", 1.0)
  return function(x) return x * x:gt(alpha):to(x.dtype) end
end
OPS.Shrink = function(n)
  local lambd = n:attr("lambd", "FLOAT", 0.5)
  local bias = n:attr("bias", "FLOAT", 0.0)
  return function(x)
    local lo, hi = x:lt(-lambd):to(x.dtype), x:gt(lambd):to(x.dtype)
    return cast_back((x + bias) * lo + (x - bias) * hi, x)
  end
end
OPS.PRelu = function(n)
  n:ignore("consumed_inputs")
  return function(x, slope)
    slope = on(slope, x)
    -- opsets < 7: a slope of shape (C) applies per channel of (N, C, ...)
    if n.opset < 7 and slope:dim() == 1 and x:dim() > 2 and slope.shape[1] == x.shape[2] and
      slope.shape[1] ~= x.shape[x:dim()] then
      local s = {slope.shape[1]}
      for _ = 3, x:dim() do s[#s + 1] = 1 end
      slope = slope:reshape(s)
    end
    return x:clamp_min(0) + x:clamp_max(0) * slope
  end
end
OPS.Gelu = function(n)
  local approx = n:attr("approximate", "STRING", "none")
  if approx ~= "none" and approx ~= "tanh" then n:fail("approximate='%s' is not supported", approx) end
  return function(x) return F.gelu(x, {approximate = approx}) end
end
OPS.Clip = function(n)
  n:ignore("consumed_inputs")
  if n.opset < 11 then
    local lo = n:attr("min", "FLOAT", -math.huge)
    local hi = n:attr("max", "FLOAT", math.huge)
    return function(x) return x:clamp(lo, hi) end
  end
  return function(x, lo, hi)
    if lo then x = dl.maximum(x, on(lo, x)) end
    if hi then x = dl.minimum(x, on(hi, x)) end
    return x
  end
end

-- softmax family: opsets < 13 flatten to 2-D at axis (default 1); from 13
-- one axis (default -1)
local function softmax_like(fn)
  return function(n)
    local old = n.opset < 13
    local axis = n:attr("axis", "INT", old and 1 or -1)
    return function(x)
      local r = x:dim()
      if old then
        local a = axis < 0 and axis + r or axis
        if a < 0 or a > r then error(string.format("axis %d is out of range for rank %d", axis, r), 0) end
        local s = shape_of(x)
        local y = fn(x:reshape(prod(s, 1, a), prod(s, a + 1, r)), 2)
        return y:reshape(s)
      end
      return fn(x, dim_of(n, axis, r))
    end
  end
end
local function hardmax(x, d)
  local idx = x:argmax(d, true)
  local size = x.shape[d]
  local s = {}
  for i = 1, x:dim() do s[i] = 1 end
  s[d] = size
  local ar = dl.arange(1, size + 1, 1, {dtype = dl.int64, device = x.device}):reshape(s)
  return ar:eq(idx):to(x.dtype)
end
OPS.Softmax = softmax_like(function(x, d) return F.softmax(x, d) end)
OPS.LogSoftmax = softmax_like(function(x, d) return F.log_softmax(x, d) end)
OPS.Hardmax = softmax_like(hardmax)

-- --- matrix products --------------------------------------------------------------------------

OPS.MatMul = function()
  return function(a, b) return dl.matmul(a, b) end
end
OPS.Gemm = function(n)
  local alpha = n:attr("alpha", "FLOAT", 1.0)
  local beta = n:attr("beta", "FLOAT", 1.0)
  local ta = n:attr("transA", "INT", 0)
  local tb = n:attr("transB", "INT", 0)
  n:ignore("broadcast")
  return function(a, b, c)
    if ta ~= 0 then a = a:t() end
    if tb ~= 0 then b = b:t() end
    local y = dl.matmul(a, b)
    if alpha ~= 1 then y = y * alpha end
    if c then
      if beta ~= 1 then c = c * beta end
      y = y + c
    end
    return y
  end
end

-- --- convolution and pooling geometry ------------------------------------------------------

-- Reads kernel geometry attributes for `nsp` spatial dims; kernel taken from
-- kshape when kernel_shape is absent.
local function geometry(n, nsp, kernel)
  local g = {}
  g.auto_pad = n:attr("auto_pad", "STRING", "NOTSET")
  if g.auto_pad ~= "NOTSET" and g.auto_pad ~= "SAME_UPPER" and g.auto_pad ~= "SAME_LOWER" and
    g.auto_pad ~= "VALID" then
    n:fail("auto_pad='%s' is not supported", g.auto_pad)
  end
  g.kernel = n:attr("kernel_shape", "INTS", kernel)
  g.strides = n:attr("strides", "INTS")
  g.dilations = n:attr("dilations", "INTS")
  g.pads = n:attr("pads", "INTS")
  return g
end

-- Completes g for an input of spatial sizes `in_`: pads {begin..., end...}.
local function resolve(g, in_, ceil_mode)
  local nsp = #in_
  local k, s, d = g.kernel, g.strides or {}, g.dilations or {}
  local pb, pe = {}, {}
  for i = 1, nsp do
    local si, di = s[i] or 1, d[i] or 1
    local ek = (k[i] - 1) * di + 1
    if g.auto_pad == "SAME_UPPER" or g.auto_pad == "SAME_LOWER" then
      local out = (in_[i] + si - 1) // si
      local total = math.max(0, (out - 1) * si + ek - in_[i])
      local half = total // 2
      if g.auto_pad == "SAME_UPPER" then pb[i], pe[i] = half, total - half
      else pb[i], pe[i] = total - half, half end
    elseif g.auto_pad == "VALID" then
      pb[i], pe[i] = 0, 0
    else
      local p = g.pads or {}
      pb[i], pe[i] = p[i] or 0, p[i + nsp] or 0
    end
  end
  return pb, pe
end

-- Pads the trailing #pb dims of x (ONNX order: dim by dim, begin then end).
local function pad_spatial(x, pb, pe, value)
  local pads = {}
  local any = false
  for i = #pb, 1, -1 do
    pads[#pads + 1] = pb[i]
    pads[#pads + 1] = pe[i]
    if pb[i] ~= 0 or pe[i] ~= 0 then any = true end
  end
  if not any then return x end
  return F.pad(x, pads, {mode = "constant", value = value or 0})
end

local function all_eq(a, b)
  for i = 1, #a do if a[i] ~= b[i] then return false end end
  return true
end

local function fill(t, n, v)
  local r = {}
  for i = 1, n do r[i] = t and t[i] or v end
  return r
end

local CHANNELS_LAST = {memory_format = "channels_last"}

-- A fused convolution's input as the CPU's inference plans run it: float32
-- activations channels-last (and every later layer follows), where with the
-- weights prepacked oneDNN's NHWC kernels ran ResNet-50 at batch 1 about 6%
-- faster than NCHW, whose 1x1 layers take its GEMM path.
local function fused_input(x)
  if x.device == "cpu" and x.dtype == dl.float32 and not x:is_contiguous(CHANNELS_LAST) then
    return x:contiguous(CHANNELS_LAST)
  end
  return x
end

OPS.Conv = function(n)
  local g = geometry(n, nil, nil)
  local group = n:attr("group", "INT", 1)
  local conv
  -- inference plans (graph.lua) fuse a following Add and/or Relu: fused =
  -- {add = tensor or nil, relu = bool, reuse_add = bool}; other ranks compose
  -- them after
  -- a 2-D fused call whose padding does not depend on the input (explicit,
  -- symmetric pads or VALID) reuses one options table: the geometry is
  -- worked out once, not on every call
  local fixed
  if g.auto_pad == "NOTSET" or g.auto_pad == "VALID" then
    local p = g.auto_pad == "VALID" and {} or (g.pads or {})
    if #p <= 4 and (p[1] or 0) == (p[3] or 0) and (p[2] or 0) == (p[4] or 0) then
      fixed = {stride = fill(g.strides, 2, 1), padding = {p[1] or 0, p[2] or 0}, dilation = fill(g.dilations, 2, 1),
        groups = group}
    end
  end
  n.fuse = function(x, w, b, add, relu, reuse_add)
    if fixed and w:dim() == 4 and x:dim() == 4 then
      x = fused_input(x)
      fixed.add, fixed.relu, fixed.reuse_add = add, relu, reuse_add
      local y = dl._nn.conv2d_fused(x, w, b, fixed)
      fixed.add = nil -- the table must not keep the addend alive
      return y
    end
    if w:dim() ~= 4 then
      local y = conv(x, w, b)
      if add then y = y + add end
      if relu then y = y:relu() end
      return y
    end
    return conv(x, w, b, {add = add, relu = relu, reuse_add = reuse_add})
  end
  conv = function(x, w, b, fused)
    local nsp = w:dim() - 2
    if nsp < 1 or nsp > 3 then error(string.format("weight of rank %d: Conv%dd is not supported", w:dim(), nsp), 0) end
    if x:dim() ~= nsp + 2 then
      error(string.format("input must have %d dims (N, C, spatial...), got %d", nsp + 2, x:dim()), 0)
    end
    local kernel = {}
    for i = 1, nsp do kernel[i] = w.shape[i + 2] end
    local gg = {auto_pad = g.auto_pad, kernel = g.kernel or kernel, strides = g.strides, dilations = g.dilations,
      pads = g.pads}
    local in_ = {}
    for i = 1, nsp do in_[i] = x.shape[i + 2] end
    local pb, pe = resolve(gg, in_)
    local s, d = fill(g.strides, nsp, 1), fill(g.dilations, nsp, 1)
    if not all_eq(pb, pe) then
      x = pad_spatial(x, pb, pe, 0)
      pb = fill(nil, nsp, 0)
    end
    if nsp == 2 then
      if fused then
        -- relu?(conv + add?) in one oneDNN call (inference only)
        return dl._nn.conv2d_fused(fused_input(x), w, b, {stride = s, padding = pb, dilation = d, groups = group,
          add = fused.add, relu = fused.relu, reuse_add = fused.reuse_add})
      end
      return F.conv2d(x, w, b, {stride = s, padding = pb, dilation = d, groups = group})
    elseif nsp == 1 then
      return F.conv1d(x, w, b, {stride = s, padding = pb, dilation = d, groups = group})
    end
    return F.conv3d(x, w, b, {stride = s, padding = pb, dilation = d, groups = group})
  end
  return function(x, w, b) return conv(x, w, b) end
end
OPS.ConvTranspose = function(n)
  local g = geometry(n, nil, nil)
  local group = n:attr("group", "INT", 1)
  local out_pad = n:attr("output_padding", "INTS")
  local out_shape = n:attr("output_shape", "INTS")
  return function(x, w, b)
    local nsp = w:dim() - 2
    if nsp < 1 or nsp > 2 then error(string.format("ConvTranspose%dd is not supported", nsp), 0) end
    local k = {}
    for i = 1, nsp do k[i] = w.shape[i + 2] end
    local s, d = fill(g.strides, nsp, 1), fill(g.dilations, nsp, 1)
    local op = fill(out_pad, nsp, 0)
    local in_ = {}
    for i = 1, nsp do in_[i] = x.shape[i + 2] end
    local pb, pe = {}, {}
    local os = out_shape and {table.unpack(out_shape, #out_shape - nsp + 1)} or nil
    for i = 1, nsp do
      local full = s[i] * (in_[i] - 1) + op[i] + (k[i] - 1) * d[i] + 1
      if os or g.auto_pad == "SAME_UPPER" or g.auto_pad == "SAME_LOWER" then
        local target = os and os[i] or in_[i] * s[i]
        local total = full - target
        if g.auto_pad == "SAME_UPPER" then pb[i], pe[i] = total // 2, total - total // 2
        else pb[i], pe[i] = total - total // 2, total // 2 end
      elseif g.auto_pad == "VALID" then pb[i], pe[i] = 0, 0
      else
        local p = g.pads or {}
        pb[i], pe[i] = p[i] or 0, p[i + nsp] or 0
      end
    end
    if nsp == 1 then x, w = x:unsqueeze(3), w:unsqueeze(3) end
    local s2 = nsp == 1 and {1, s[1]} or s
    local d2 = nsp == 1 and {1, d[1]} or d
    local y = F.conv_transpose2d(x, w, nil, {stride = s2, dilation = d2, groups = group})
    -- y covers the full output; take [pb, full + op - pe) of each spatial dim
    for i = 1, nsp do
      local dim = nsp == 1 and 4 or i + 2
      local full = y.shape[dim]
      local want = full + op[i] - pb[i] - pe[i]
      if pb[i] < 0 or pb[i] + want > full then
        local before, after = math.max(0, -pb[i]), math.max(0, pb[i] + want - full)
        local pads = {}
        for _ = dim + 1, y:dim() do pads[#pads + 1] = 0; pads[#pads + 1] = 0 end
        pads[#pads + 1] = before
        pads[#pads + 1] = after
        y = F.pad(y, pads)
        y = y:narrow(dim, math.max(0, pb[i]) + 1, want)
      else
        y = y:narrow(dim, pb[i] + 1, want)
      end
    end
    if nsp == 1 then y = y:squeeze(3) end
    if b then
      local sh = {b.shape[1]}
      for _ = 1, nsp do sh[#sh + 1] = 1 end
      y = y + b:reshape(sh)
    end
    return y
  end
end

-- pooling: 1-D and 3-D through 2-D (3-D is separable: the D axis after H, W)
local function pool_builder(kind)
  return function(n)
    local g = geometry(n)
    if not g.kernel then n:fail("attribute 'kernel_shape' is required") end
    local nsp = #g.kernel
    if nsp < 1 or nsp > 3 then n:fail("%d-D pooling is not supported", nsp) end
    local ceil_mode = n:attr("ceil_mode", "INT", 0) == 1
    local count_include_pad = kind == "avg" and n:attr("count_include_pad", "INT", 0) == 1
    local storage_order = kind == "max" and n:attr("storage_order", "INT", 0) or 0
    if kind == "avg" and g.dilations and not all_eq(g.dilations, fill(nil, nsp, 1)) then
      n:fail("dilations in AveragePool are not supported")
    end
    local want_indices = kind == "max" and n:has_output(2)
    if want_indices and nsp ~= 2 then n:fail("the Indices output is supported for 2-D MaxPool only") end
    local k = g.kernel
    local s, d = fill(g.strides, nsp, 1), fill(g.dilations, nsp, 1)

    -- one 2-D pool with symmetric padding p (or explicit pre-padding)
    local pool2
    function pool2(x, kk, ss, pb, pe, dd)
      local symmetric = pb[1] == pe[1] and pb[2] == pe[2] and pb[1] <= kk[1] // 2 and pb[2] <= kk[2] // 2
      if kind == "max" then
        if not is_float(x) then
          -- integer maxima are exact in float64
          return pool2(x:to(dl.float64), kk, ss, pb, pe, dd):to(x.dtype)
        end
        if not symmetric then
          x = pad_spatial(x, pb, pe, -math.huge)
          pb = {0, 0}
        end
        return F.max_pool2d(x, kk, {stride = ss, padding = pb, dilation = dd, ceil_mode = ceil_mode})
      end
      if symmetric then
        return F.avg_pool2d(x, kk, {stride = ss, padding = pb, ceil_mode = ceil_mode,
          count_include_pad = count_include_pad})
      end
      -- asymmetric: sums over zero padding, divided by the count wanted
      local xp = pad_spatial(x, pb, pe, 0)
      local y = F.avg_pool2d(xp, kk, {stride = ss, ceil_mode = ceil_mode, count_include_pad = true})
      if count_include_pad then return y end
      local ones = dl.ones({1, 1, x.shape[3], x.shape[4]}, {dtype = x.dtype, device = x.device})
      local cnt = F.avg_pool2d(pad_spatial(ones, pb, pe, 0), kk, {stride = ss, ceil_mode = ceil_mode,
        count_include_pad = true})
      return y / cnt
    end

    return function(x)
      if x:dim() ~= nsp + 2 then
        error(string.format("input must have %d dims (N, C, spatial...), got %d", nsp + 2, x:dim()), 0)
      end
      local in_ = {}
      for i = 1, nsp do in_[i] = x.shape[i + 2] end
      local pb, pe = resolve({auto_pad = g.auto_pad, kernel = k, strides = s, dilations = d, pads = g.pads}, in_)
      if nsp == 2 then
        if want_indices then
          local y, ind = dl._nn.max_pool2d_forward(pad_spatial(x, pb, pe, -math.huge), k,
            {stride = s, dilation = d, ceil_mode = ceil_mode})
          -- flat positions within each padded plane -> within the tensor (ONNX)
          local W = x.shape[4] + pb[2] + pe[2]
          local hh, ww = ind // W - pb[1], ind % W - pb[2]
          local plane
          if storage_order == 1 then plane = ww * x.shape[3] + hh else plane = hh * x.shape[4] + ww end
          local N, C = x.shape[1], x.shape[2]
          local base = dl.arange(0, N * C, 1, {dtype = dl.int64, device = x.device}):reshape(N, C, 1, 1)
          return y, plane + base * (x.shape[3] * x.shape[4])
        end
        return pool2(x, k, s, pb, pe, d)
      elseif nsp == 1 then
        local y = pool2(x:unsqueeze(3), {1, k[1]}, {1, s[1]}, {0, pb[1]}, {0, pe[1]}, {1, d[1]})
        return y:squeeze(3)
      end
      -- 3-D: H, W per depth slice, then D
      local N, C, D = x.shape[1], x.shape[2], x.shape[3]
      local y = pool2(x:reshape(N, C * D, x.shape[4], x.shape[5]), {k[2], k[3]}, {s[2], s[3]}, {pb[2], pb[3]},
        {pe[2], pe[3]}, {d[2], d[3]})
      local OH, OW = y.shape[3], y.shape[4]
      y = y:reshape(N, C, D, OH * OW)
      y = pool2(y, {k[1], 1}, {s[1], 1}, {pb[1], 0}, {pe[1], 0}, {d[1], 1})
      return y:reshape(N, C, y.shape[3], OH, OW)
    end
  end
end
OPS.MaxPool = pool_builder("max")
OPS.AveragePool = pool_builder("avg")

local function spatial_dims(x)
  local dims = {}
  for i = 3, x:dim() do dims[#dims + 1] = i end
  return dims
end
OPS.GlobalAveragePool = function()
  return function(x)
    -- 2-D float32/float64: the pooling kernel (dl.models' own path), which
    -- reads a channels-last input in place and splits the channels over the
    -- threads (1x2048x7x7: 26 us against the mean's 54, with cold caches);
    -- half precision would pool through a float32 copy
    if x:dim() == 4 and (x.dtype == dl.float32 or x.dtype == dl.float64) then
      return F.adaptive_avg_pool2d(x, {1, 1})
    end
    return x:mean(spatial_dims(x), true)
  end
end
OPS.GlobalMaxPool = function()
  return function(x) return x:amax(spatial_dims(x), true) end
end

-- --- normalization ----------------------------------------------------------------------------

OPS.BatchNormalization = function(n)
  local eps = n:attr("epsilon", "FLOAT", 1e-5)
  local momentum = n:attr("momentum", "FLOAT", 0.9)
  n:ignore("consumed_inputs", "is_test")
  n:only("spatial", "INT", 1)
  local training = n:attr("training_mode", "INT", 0) == 1
  n.training, n.eps = training, eps -- for OnnxModel:optimize_for_inference
  if not training and n:noutputs() > 1 then
    -- opsets < 14 list the training outputs; they must be unused in inference
    for i = 2, n:noutputs() do
      if n:has_output(i) and n.opset >= 9 and n:attr("is_test", "INT", 1) ~= 1 then
        n:fail("training outputs are not supported")
      end
    end
  end
  return function(x, scale, bias, mean, var)
    if training then
      local dims = {1}
      for i = 3, x:dim() do dims[#dims + 1] = i end
      local bm = x:mean(dims, true)
      local bv = ((x - bm) * (x - bm)):mean(dims, true)
      local sh = {1, x.shape[2]}
      for _ = 3, x:dim() do sh[#sh + 1] = 1 end
      local y = (x - bm) / (bv + eps):sqrt() * scale:reshape(sh) + bias:reshape(sh)
      local rm = mean * momentum + bm:reshape(-1) * (1 - momentum)
      local rv = var * momentum + bv:reshape(-1) * (1 - momentum)
      return y, rm, rv
    end
    local s = x.shape
    if x:dim() > 4 then
      return F.batch_norm(x:reshape(s[1], s[2], s[3], -1), mean, var, scale, bias, false, 0, eps):reshape(shape_of(x))
    end
    return F.batch_norm(x, mean, var, scale, bias, false, 0, eps)
  end
end

OPS.InstanceNormalization = function(n)
  local eps = n:attr("epsilon", "FLOAT", 1e-5)
  return function(x, scale, bias) return F.instance_norm(x, nil, nil, scale, bias, true, 0, eps) end
end

OPS.LayerNormalization = function(n)
  local axis = n:attr("axis", "INT", -1)
  local eps = n:attr("epsilon", "FLOAT", 1e-5)
  local stash = n:attr("stash_type", "INT", 1)
  local stats = n:has_output(2) or n:has_output(3)
  return function(x, scale, bias)
    local r = x:dim()
    local a = dim_of(n, axis, r)
    if not stats and F.layer_norm and (x.dtype == dl.float32 or x.dtype == dl.float64) then
      -- dl's fused kernel when the weights cover the normalized dims exactly
      local ns, same = {}, scale:dim() == r - a + 1
      for i = a, r do
        ns[#ns + 1] = x.shape[i]
        if same and scale.shape[i - a + 1] ~= x.shape[i] then same = false end
      end
      if same and (not bias or bias:dim() == scale:dim()) then return F.layer_norm(x, ns, scale, bias, eps) end
    end
    local dims = {}
    for i = a, r do dims[#dims + 1] = i end
    local xs = x
    if stash == 1 and x.dtype ~= dl.float32 and x.dtype ~= dl.float64 then xs = x:to(dl.float32) end
    local mean = xs:mean(dims, true)
    local dx = xs - mean
    local var = (dx * dx):mean(dims, true)
    local inv = (var + eps):rsqrt()
    local y = (dx * inv):to(x.dtype) * scale
    if bias then y = y + bias end
    return y, mean, inv
  end
end

OPS.LRN = function(n)
  local alpha = n:attr("alpha", "FLOAT", 0.0001)
  local beta = n:attr("beta", "FLOAT", 0.75)
  local bias = n:attr("bias", "FLOAT", 1.0)
  local size = n:attr("size", "INT")
  if not size then n:fail("attribute 'size' is required") end
  return function(x)
    local C = x.shape[2]
    local sq = x * x
    local before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
    -- sum over the channel window through a cumulative sum with a zero row
    local s = shape_of(x)
    local flat = sq:reshape(s[1], C, -1)
    local padded = F.pad(flat, {0, 0, before + 1, after})
    local cs = padded:cumsum(2)
    local win = cs:narrow(2, size + 1, C) - cs:narrow(2, 1, C)
    win = win:reshape(s)
    return x / (win * (alpha / size) + bias):pow(beta)
  end
end

OPS.MeanVarianceNormalization = function(n)
  local axes = n:attr("axes", "INTS", {0, 2, 3})
  return function(x)
    local dims = {}
    for i, a in ipairs(axes) do dims[i] = dim_of(n, a, x:dim()) end
    local mean = x:mean(dims, true)
    local d = x - mean
    local var = (d * d):mean(dims, true)
    return d / (var + 1e-9):sqrt()
  end
end

-- --- shapes and views ----------------------------------------------------------------------------

OPS.Reshape = function(n)
  local allowzero = n:attr("allowzero", "INT", 0)
  local get
  if n.opset < 5 then
    local shp = n:attr("shape", "INTS")
    n:ignore("consumed_inputs")
    if not shp then n:fail("attribute 'shape' is required (opset %d)", n.opset) end
    get = function() return shp end
  else
    get = int_list_input(n, 2, "shape", true)
  end
  return function(x, shape_t)
    local want = get(shape_t)
    local s = {}
    for i, v in ipairs(want) do
      if v == 0 and allowzero == 0 then
        if i > x:dim() then error(string.format("shape entry %d is 0 but the input has %d dims", i, x:dim()), 0) end
        s[i] = x.shape[i]
      else
        s[i] = v
      end
    end
    return x:reshape(s)
  end
end

OPS.Flatten = function(n)
  local axis = n:attr("axis", "INT", 1)
  return function(x)
    local r = x:dim()
    local a = axis < 0 and axis + r or axis
    if a < 0 or a > r then error(string.format("axis %d is out of range for rank %d", axis, r), 0) end
    local s = shape_of(x)
    return x:reshape(prod(s, 1, a), prod(s, a + 1, r))
  end
end

OPS.Transpose = function(n)
  local perm = n:attr("perm", "INTS")
  return function(x)
    local p = {}
    local r = x:dim()
    if perm then
      if #perm ~= r then error(string.format("perm has %d entries for a rank-%d input", #perm, r), 0) end
      for i, v in ipairs(perm) do p[i] = dim_of(n, v, r, "perm entry") end
    else
      for i = 1, r do p[i] = r - i + 1 end
    end
    if r == 0 then return x end
    return x:permute(p)
  end
end

local function axes_form(n, idx)
  -- opsets < 13: attribute axes; from 13: optional input
  if n.opset < 13 then
    local a = n:attr("axes", "INTS")
    return function() return a end
  end
  return (int_list_input(n, idx, "axes", false))
end

OPS.Squeeze = function(n)
  local get = axes_form(n, 2)
  return function(x, axes_t)
    local axes = get(axes_t)
    if not axes or #axes == 0 then
      local s = {}
      for _, v in ipairs(x.shape) do if v ~= 1 then s[#s + 1] = v end end
      return x:reshape(s)
    end
    local r = x:dim()
    local drop = {}
    for _, a in ipairs(axes) do
      local d = dim_of(n, a, r)
      if x.shape[d] ~= 1 then error(string.format("cannot squeeze axis %d of size %d", a, x.shape[d]), 0) end
      drop[d] = true
    end
    local s = {}
    for i, v in ipairs(x.shape) do if not drop[i] then s[#s + 1] = v end end
    return x:reshape(s)
  end
end

OPS.Unsqueeze = function(n)
  local get = axes_form(n, 2)
  return function(x, axes_t)
    local axes = get(axes_t)
    if not axes then error("axes are required", 0) end
    local r = x:dim() + #axes
    local ins = {}
    for _, a in ipairs(axes) do
      local d = dim_of(n, a, r)
      if ins[d] then error(string.format("axis %d is repeated", a), 0) end
      ins[d] = true
    end
    local s, j = {}, 1
    for i = 1, r do
      if ins[i] then s[i] = 1 else s[i] = x.shape[j]; j = j + 1 end
    end
    return x:reshape(s)
  end
end

OPS.Concat = function(n)
  local axis = n:attr("axis", "INT")
  if axis == nil then
    if n.opset < 4 then axis = 1 else n:fail("attribute 'axis' is required") end
  end
  return function(...)
    local xs = table.pack(...)
    local ts = {}
    for i = 1, xs.n do
      if xs[i] then ts[#ts + 1] = ts[1] and on(xs[i], ts[1]) or xs[i] end
    end
    local r = ts[1]:dim()
    return dl.cat(ts, dim_of(n, axis, r))
  end
end

OPS.Split = function(n)
  local axis = n:attr("axis", "INT", 0)
  local nout = n:noutputs()
  local get
  if n.opset < 13 then
    local sp = n:attr("split", "INTS")
    get = function(v) return sp or (v and list(v)) end
  else
    get = int_list_input(n, 2, "split", false)
  end
  return function(x, split_t)
    local d = dim_of(n, axis, x:dim())
    local sizes = get(split_t)
    if not sizes or #sizes == 0 then
      local size = x.shape[d]
      if size % nout ~= 0 then
        error(string.format("axis of size %d does not split into %d equal parts", size, nout), 0)
      end
      sizes = {}
      for i = 1, nout do sizes[i] = size // nout end
    end
    if #sizes ~= nout then error(string.format("split has %d sizes for %d outputs", #sizes, nout), 0) end
    local parts, start = {}, 1
    for i, sz in ipairs(sizes) do
      parts[i] = x:narrow(d, start, sz)
      start = start + sz
    end
    return table.unpack(parts, 1, nout)
  end
end

-- one axis of a Slice: start, end, step (ONNX clamping), then narrow or select
local function slice_axis(x, d, st, en, step)
  local size = x.shape[d]
  if step == 0 then error("slice step cannot be 0", 0) end
  if st < 0 then st = st + size end
  if en < 0 then en = en + size end
  if step > 0 then
    st = math.max(0, math.min(st, size))
    en = math.max(0, math.min(en, size))
    if step == 1 then return x:narrow(d, st + 1, math.max(0, en - st)) end
  else
    st = math.max(0, math.min(st, size - 1))
    en = math.max(-1, math.min(en, size - 1))
  end
  local idx = {}
  local i = st
  while (step > 0 and i < en) or (step < 0 and i > en) do
    idx[#idx + 1] = i + 1
    i = i + step
  end
  if #idx == 0 then return x:narrow(d, 1, 0) end
  return x:index_select(d, dl.tensor(idx, {dtype = dl.int64, device = x.device}))
end

local BIG = math.maxinteger
OPS.Slice = function(n)
  if n.opset < 10 then
    local starts = n:attr("starts", "INTS")
    local ends = n:attr("ends", "INTS")
    local axes = n:attr("axes", "INTS")
    if not starts or not ends then n:fail("attributes 'starts' and 'ends' are required") end
    return function(x)
      for i = 1, #starts do
        local d = dim_of(n, axes and axes[i] or i - 1, x:dim())
        x = slice_axis(x, d, starts[i], ends[i], 1)
      end
      return x
    end
  end
  local gs = int_list_input(n, 2, "starts", true)
  local ge = int_list_input(n, 3, "ends", true)
  local ga = int_list_input(n, 4, "axes", false)
  local gst = int_list_input(n, 5, "steps", false)
  return function(x, st, en, ax, sp)
    local starts, ends, axes, steps = gs(st), ge(en), ga(ax), gst(sp)
    if #starts ~= #ends then error("starts and ends differ in length", 0) end
    for i = 1, #starts do
      local d = dim_of(n, axes and axes[i] or i - 1, x:dim())
      local e = ends[i]
      if e >= BIG then e = x.shape[d] end
      if e <= -BIG then e = -x.shape[d] - 1 end
      local s = starts[i]
      if s >= BIG then s = x.shape[d] end
      if s <= -BIG then s = -x.shape[d] - 1 end
      x = slice_axis(x, d, s, e, steps and steps[i] or 1)
    end
    return x
  end
end

-- ONNX indices (0-based, negatives from the end) -> int64 1-based
local function fix_indices(idx, size, ref)
  idx = on(idx, ref)
  if idx.dtype ~= dl.int64 then idx = idx:to(dl.int64) end
  local neg = idx:lt(0):to(dl.int64)
  return idx + neg * size + 1
end

OPS.Gather = function(n)
  local axis = n:attr("axis", "INT", 0)
  return function(x, idx)
    local r = x:dim()
    local d = dim_of(n, axis, r)
    local size = x.shape[d]
    local i1 = fix_indices(idx, size, x)
    local y = x:index_select(d, i1:reshape(-1))
    local s = {}
    for i = 1, d - 1 do s[#s + 1] = x.shape[i] end
    for _, v in ipairs(idx.shape) do s[#s + 1] = v end
    for i = d + 1, r do s[#s + 1] = x.shape[i] end
    return y:reshape(s)
  end
end

OPS.GatherElements = function(n)
  local axis = n:attr("axis", "INT", 0)
  return function(x, idx)
    local d = dim_of(n, axis, x:dim())
    return x:gather(d, fix_indices(idx, x.shape[d], x))
  end
end

OPS.GatherND = function(n)
  local bd = n:attr("batch_dims", "INT", 0)
  return function(x, idx)
    idx = on(idx, x)
    local r, q = x:dim(), idx:dim()
    local k = idx.shape[q]
    if bd + k > r then error("indices address more dims than the data has", 0) end
    local xs, is = shape_of(x), shape_of(idx)
    -- flatten the batch dims, then the k addressed dims into one
    local B = prod(xs, 1, bd)
    local inner = prod(xs, bd + k + 1, r)
    local addressed = prod(xs, bd + 1, bd + k)
    local xf = x:reshape(B * addressed, inner)
    local ii = idx:to(dl.int64):reshape(B, -1, k)
    local flat
    local stride = 1
    for j = k, 1, -1 do
      local size = xs[bd + j]
      local c = ii:select(3, j)
      c = c + c:lt(0):to(dl.int64) * size
      flat = flat and flat + c * stride or c * stride
      stride = stride * size
    end
    local base = dl.arange(0, B, 1, {dtype = dl.int64, device = x.device}):reshape(B, 1) * addressed
    flat = (flat + base):reshape(-1) + 1
    local y = xf:index_select(1, flat)
    local s = {}
    for i = 1, q - 1 do s[#s + 1] = is[i] end
    for i = bd + k + 1, r do s[#s + 1] = xs[i] end
    return y:reshape(s)
  end
end

local function scatter_builder(n)
  local axis = n:attr("axis", "INT", 0)
  local red = n:attr("reduction", "STRING", "none")
  if red ~= "none" and red ~= "add" then n:fail("reduction='%s' is not supported", red) end
  return function(x, idx, upd)
    local d = dim_of(n, axis, x:dim())
    local i1 = fix_indices(idx, x.shape[d], x)
    if red == "add" then return x:scatter_add(d, i1, on(upd, x)) end
    return x:scatter(d, i1, on(upd, x))
  end
end
OPS.ScatterElements = scatter_builder
OPS.Scatter = scatter_builder

OPS.ScatterND = function(n)
  local red = n:attr("reduction", "STRING", "none")
  if red ~= "none" and red ~= "add" then n:fail("reduction='%s' is not supported", red) end
  return function(x, idx, upd)
    local r = x:dim()
    local k = idx.shape[idx:dim()]
    local xs = shape_of(x)
    local inner = prod(xs, k + 1, r)
    local outer = prod(xs, 1, k)
    local ii = on(idx, x):to(dl.int64):reshape(-1, k)
    local flat, stride = nil, 1
    for j = k, 1, -1 do
      local c = ii:select(2, j)
      c = c + c:lt(0):to(dl.int64) * xs[j]
      flat = flat and flat + c * stride or c * stride
      stride = stride * xs[j]
    end
    flat = (flat or dl.zeros({1}, {dtype = dl.int64, device = x.device})) + 1
    local xf = x:reshape(outer, inner)
    local uf = on(upd, x):reshape(-1, inner)
    local y
    if red == "add" then
      y = xf:scatter_add(1, flat:reshape(-1, 1):expand(flat.shape[1], inner), uf)
    else
      y = xf:index_copy(1, flat, uf)
    end
    return y:reshape(xs)
  end
end

local function broadcast_shape(a, b)
  local r = math.max(#a, #b)
  local out = {}
  for i = 1, r do
    local x = a[#a - r + i] or 1
    local y = b[#b - r + i] or 1
    if x ~= y and x ~= 1 and y ~= 1 then
      error(string.format("shapes cannot be broadcast (%d vs %d at dim %d)", x, y, i), 0)
    end
    out[i] = (x == 1) and y or x
  end
  return out
end

OPS.Expand = function(n)
  local get = int_list_input(n, 2, "shape", true)
  return function(x, shape_t)
    local s = broadcast_shape(shape_of(x), get(shape_t))
    local xs = shape_of(x)
    while #xs < #s do table.insert(xs, 1, 1) end
    return x:reshape(xs):expand(s)
  end
end

OPS.Tile = function(n)
  local get = int_list_input(n, 2, "repeats", true)
  return function(x, reps_t)
    local reps = get(reps_t)
    local r = x:dim()
    if #reps ~= r then error(string.format("repeats has %d entries for a rank-%d input", #reps, r), 0) end
    local v, e, out = {}, {}, {}
    for i = 1, r do
      v[#v + 1], v[#v + 2] = 1, x.shape[i]
      e[#e + 1], e[#e + 2] = reps[i], x.shape[i]
      out[i] = reps[i] * x.shape[i]
    end
    if r == 0 then return x end
    return x:reshape(v):expand(e):reshape(out)
  end
end

local PAD_MODES = {constant = "constant", reflect = "reflect", edge = "replicate"}
OPS.Pad = function(n)
  local mode = n:attr("mode", "STRING", "constant")
  if not PAD_MODES[mode] then n:fail("mode='%s' is not supported", mode) end
  local gp, value
  if n.opset < 11 then
    local pads = n:attr(n.opset < 2 and "paddings" or "pads", "INTS")
    if not pads then n:fail("attribute 'pads' is required") end
    value = n:attr("value", "FLOAT", 0.0)
    gp = function() return pads end
  else
    gp = int_list_input(n, 2, "pads", true)
    if n:input(4) then n:fail("the 'axes' input is not supported") end
  end
  return function(x, pads_t, cval)
    local pads = gp(pads_t)
    local r = x:dim()
    if #pads ~= 2 * r then error(string.format("pads has %d entries for a rank-%d input", #pads, r), 0) end
    local v = value or 0
    if cval then v = cval:item() end
    -- F.pad's order: last dim first; negatives crop afterwards
    local fp, crop = {}, false
    local first = 0 -- the outermost padded dim
    for d = r, 1, -1 do
      if pads[d] ~= 0 or pads[d + r] ~= 0 then first = d end
    end
    for d = r, math.max(first, 1), -1 do
      fp[#fp + 1] = math.max(0, pads[d])
      fp[#fp + 1] = math.max(0, pads[d + r])
      if pads[d] < 0 or pads[d + r] < 0 then crop = true end
    end
    local y = x
    if first > 0 then
      if mode == "constant" then
        y = F.pad(x, fp, {mode = "constant", value = v})
      else
        y = F.pad(x, fp, {mode = PAD_MODES[mode]})
      end
    end
    if crop then
      for d = 1, r do
        local b, e = math.min(0, pads[d]), math.min(0, pads[d + r])
        if b < 0 or e < 0 then y = y:narrow(d, -b + 1, y.shape[d] + b + e) end
      end
    end
    return y
  end
end

OPS.Shape = function(n)
  local st = n:attr("start", "INT", 0)
  local en = n:attr("end", "INT")
  return function(x)
    local r = x:dim()
    local a = st < 0 and math.max(0, st + r) or math.min(st, r)
    local b = en == nil and r or (en < 0 and math.max(0, en + r) or math.min(en, r))
    local s = {}
    for i = a + 1, b do s[#s + 1] = x.shape[i] end
    if #s == 0 then return dl.zeros({0}, {dtype = dl.int64}) end
    return dl.tensor(s, {dtype = dl.int64})
  end
end

OPS.Size = function()
  return function(x) return dl.tensor(x:numel(), {dtype = dl.int64}) end
end

OPS.Constant = function(n)
  local v
  if n:has_attr("value") then v = n:attr("value", "TENSOR")
  elseif n:has_attr("value_float") then v = dl.tensor(n:attr("value_float", "FLOAT"), {dtype = dl.float32})
  elseif n:has_attr("value_floats") then v = dl.tensor(n:attr("value_floats", "FLOATS"), {dtype = dl.float32})
  elseif n:has_attr("value_int") then v = dl.tensor(n:attr("value_int", "INT"), {dtype = dl.int64})
  elseif n:has_attr("value_ints") then
    local l = n:attr("value_ints", "INTS")
    v = #l > 0 and dl.tensor(l, {dtype = dl.int64}) or dl.zeros({0}, {dtype = dl.int64})
  elseif n:has_attr("value_string") or n:has_attr("value_strings") then
    n:fail("string constants are not supported (dlua has no string tensors)")
  elseif n:has_attr("sparse_value") then
    n:fail("sparse constants are not supported")
  else
    n:fail("no value attribute")
  end
  return function() return v end
end

OPS.ConstantOfShape = function(n)
  local v = n:attr("value", "TENSOR")
  local val, dtype = 0.0, dl.float32
  if v then
    val = list(v)[1]
    if val == true then val = 1 elseif val == false then val = 0 end
    dtype = v.dtype
  end
  local get = int_list_input(n, 1, "shape", true)
  return function(s)
    local shape = get(s)
    return dl.full(shape, val, {dtype = dtype})
  end
end

local function cast_dtype(n, et)
  local dt = DTYPES[et]
  if not dt then
    n:fail("Cast to %s: dlua has no such dtype", TYPE_NAMES[et] or tostring(et))
  end
  return dt
end

OPS.Cast = function(n)
  local to = n:attr("to", nil)
  if type(to) == "string" then
    local map = {FLOAT = 1, UINT8 = 2, INT32 = 6, INT64 = 7, BOOL = 9, FLOAT16 = 10, DOUBLE = 11}
    to = map[to:upper()] or 0
  end
  if to == nil then n:fail("attribute 'to' is required") end
  local dt = cast_dtype(n, to)
  n:ignore("saturate")
  return function(x)
    if x.dtype == dt then return x end
    if FLOAT[x.dtype] and not FLOAT[dt] and dt ~= dl.bool then x = x:trunc() end
    return x:to(dt)
  end
end

OPS.CastLike = function()
  return function(x, like) return x:to(like.dtype) end
end

OPS.Range = function()
  return function(a, b, c)
    local st, lim, d = a:item(), b:item(), c:item()
    local count = math.max(math.ceil((lim - st) / d), 0)
    if count == 0 then return dl.zeros({0}, {dtype = a.dtype, device = a.device}) end
    local idx = dl.arange(0, count, 1, {dtype = a.dtype == dl.float64 and dl.float64 or
      (FLOAT[a.dtype] and dl.float32 or dl.int64), device = a.device})
    return cast_back(idx * d + st, a)
  end
end

OPS.Trilu = function(n)
  local upper = n:attr("upper", "INT", 1)
  return function(x, k)
    local kk = k and k:item() or 0
    if upper == 1 then return dl.triu(x, kk) end
    return dl.tril(x, kk)
  end
end

OPS.CumSum = function(n)
  local exclusive = n:attr("exclusive", "INT", 0) == 1
  local reverse = n:attr("reverse", "INT", 0) == 1
  return function(x, axis)
    local d = dim_of(n, axis:item(), x:dim())
    if reverse then x = x:flip({d}) end
    local y = x:cumsum(d)
    if exclusive then
      local size = x.shape[d]
      local pads = {}
      for _ = d + 1, x:dim() do pads[#pads + 1] = 0; pads[#pads + 1] = 0 end
      pads[#pads + 1] = 1
      pads[#pads + 1] = 0
      y = F.pad(y, pads):narrow(d, 1, size)
    end
    if reverse then y = y:flip({d}) end
    return cast_back(y, x)
  end
end

OPS.TopK = function(n)
  local axis = n:attr("axis", "INT", -1)
  local largest = n:attr("largest", "INT", 1) == 1
  n:attr("sorted", "INT") -- unsorted results may be in any order: sorted ones are
  local kattr = n.opset < 10 and n:attr("k", "INT") or nil
  local getk = n.opset >= 10 and int_list_input(n, 2, "K", true) or nil
  return function(x, kt)
    local k = kattr or getk(kt)[1]
    local d = dim_of(n, axis, x:dim())
    -- a stable sort puts equal values in index order, as ONNX wants
    local v, i = x:sort(d, largest, {stable = true})
    return v:narrow(d, 1, k), i:narrow(d, 1, k) - 1
  end
end

local function arg_builder(method)
  return function(n)
    local axis = n:attr("axis", "INT", 0)
    local keep = n:attr("keepdims", "INT", 1) == 1
    local last = n:attr("select_last_index", "INT", 0) == 1
    return function(x)
      local d = dim_of(n, axis, x:dim())
      if last then
        local size = x.shape[d]
        local i = x:flip({d})[method](x:flip({d}), d, keep)
        return (i * -1) + size
      end
      return x[method](x, d, keep) - 1
    end
  end
end
OPS.ArgMax = arg_builder("argmax")
OPS.ArgMin = arg_builder("argmin")

-- reductions: axes an attribute (opsets < 13; < 18 for all but ReduceSum),
-- or an input
local function reduce_builder(fn, int_keeps)
  return function(n)
    local keep = n:attr("keepdims", "INT", 1) == 1
    local noop = n:attr("noop_with_empty_axes", "INT", 0) == 1
    local get
    if n.op_type == "ReduceSum" and n.opset >= 13 or n.opset >= 18 then
      get = int_list_input(n, 2, "axes", false)
    else
      local a = n:attr("axes", "INTS")
      get = function() return a end
    end
    return function(x, axes_t)
      local axes = get(axes_t)
      local dims = {}
      if not axes or #axes == 0 then
        if noop then return x end
        for i = 1, x:dim() do dims[i] = i end
      else
        for i, a in ipairs(axes) do dims[i] = dim_of(n, a, x:dim()) end
        table.sort(dims)
      end
      if #dims == 0 then return fn(x, nil, keep) end
      local y = fn(x, dims, keep)
      if int_keeps and y.dtype ~= x.dtype then y = y:to(x.dtype) end
      return y
    end
  end
end
local function multi(fn)
  -- a reduction that takes one dim at a time
  return function(x, dims, keep)
    local y = x
    for i = #dims, 1, -1 do y = fn(y, dims[i], keep) end
    return y
  end
end
OPS.ReduceSum = reduce_builder(function(x, d, k) if not d then return x end return x:sum(d, k) end, true)
OPS.ReduceMean = reduce_builder(function(x, d, k) if not d then return x end return x:mean(d, k) end)
OPS.ReduceMax = reduce_builder(function(x, d, k) if not d then return x end return x:amax(d, k) end)
OPS.ReduceMin = reduce_builder(function(x, d, k) if not d then return x end return x:amin(d, k) end)
OPS.ReduceProd = reduce_builder(function(x, d, k)
  if not d then return x end
  return multi(function(t, dd, kk) return t:prod(dd, kk) end)(x, d, k)
end, true)
OPS.ReduceL1 = reduce_builder(function(x, d, k) if not d then return x:abs() end return x:abs():sum(d, k) end, true)
OPS.ReduceL2 = reduce_builder(function(x, d, k)
  if not d then return x:abs() end
  return cast_back((x * x):sum(d, k):to(FLOAT[x.dtype] and x.dtype or dl.float64):sqrt(), x)
end)
OPS.ReduceSumSquare = reduce_builder(function(x, d, k) if not d then return x * x end return (x * x):sum(d, k) end, true)
OPS.ReduceLogSum = reduce_builder(function(x, d, k) if not d then return x:log() end return x:sum(d, k):log() end)
OPS.ReduceLogSumExp = reduce_builder(function(x, d, k)
  if not d then return x end
  return x:logsumexp(d, k)
end)

OPS.OneHot = function(n)
  local axis = n:attr("axis", "INT", -1)
  return function(idx, depth, values)
    local dp = math.floor(depth:item())
    local r = idx:dim() + 1
    local d = dim_of(n, axis, r)
    local i = on(idx, values)
    if FLOAT[i.dtype] then i = i:trunc() end
    i = i:to(dl.int64)
    i = i + i:lt(0):to(dl.int64) * dp
    local s = {}
    for j = 1, r do s[j] = 1 end
    s[d] = dp
    local ar = dl.arange(0, dp, 1, {dtype = dl.int64, device = values.device}):reshape(s)
    local hot = i:unsqueeze(d):eq(ar)
    local off, onv = values:select(1, 1), values:select(1, 2)
    return dl.where(hot, onv, off)
  end
end

OPS.DepthToSpace = function(n)
  local b = n:attr("blocksize", "INT")
  local mode = n:attr("mode", "STRING", "DCR")
  if not b then n:fail("attribute 'blocksize' is required") end
  if mode ~= "DCR" and mode ~= "CRD" then n:fail("mode='%s' is not supported", mode) end
  return function(x)
    local N, C, Hh, W = table.unpack(x.shape)
    local c = C // (b * b)
    local y
    if mode == "DCR" then
      y = x:reshape(N, b, b, c, Hh, W):permute(1, 4, 5, 2, 6, 3)
    else
      y = x:reshape(N, c, b, b, Hh, W):permute(1, 2, 5, 3, 6, 4)
    end
    return y:reshape(N, c, Hh * b, W * b)
  end
end

OPS.SpaceToDepth = function(n)
  local b = n:attr("blocksize", "INT")
  if not b then n:fail("attribute 'blocksize' is required") end
  return function(x)
    local N, C, Hh, W = table.unpack(x.shape)
    return x:reshape(N, C, Hh // b, b, W // b, b):permute(1, 4, 6, 2, 3, 5):reshape(N, C * b * b, Hh // b, W // b)
  end
end

OPS.Dropout = function(n)
  n:ignore("is_test", "consumed_inputs", "seed")
  local ratio_attr = n.opset < 12 and n:attr("ratio", "FLOAT") or nil
  local function mask_of(x) return dl.ones(x.shape, {dtype = dl.bool, device = x.device}) end
  local training = n:const(3)
  if not n:input(3) or (training and list(training)[1] == 0) then
    return function(x) return x, mask_of(x) end
  end
  -- training mode: only a ratio of 0 (no random draw) has a defined result
  n.nofold = true
  return function(x, ratio_t, mode)
    local on = mode and list(mode)[1] ~= 0
    local ratio = ratio_t and ratio_t:item() or ratio_attr or 0.5
    if on and ratio ~= 0 then
      error("training_mode=true with ratio > 0 is not supported (dlua runs ONNX graphs for inference)", 0)
    end
    return x, mask_of(x)
  end
end

OPS.Where = function()
  return function(c, a, b)
    a = on(a, c)
    b = on(b, c)
    if c.dtype ~= dl.bool then c = c:to(dl.bool) end
    return dl.where(c, a, b)
  end
end

OPS.NonZero = function()
  return function(x)
    if x:dim() == 0 then x = x:reshape(1) end
    local nz = x:nonzero()
    return (nz - 1):t():contiguous()
  end
end

OPS.EyeLike = function(n)
  local k = n:attr("k", "INT", 0)
  local dtype = n:attr("dtype", "INT")
  local dt = dtype and cast_dtype(n, dtype)
  return function(x)
    local R, C = x.shape[1], x.shape[2]
    local rows = dl.arange(0, R, 1, {dtype = dl.int64, device = x.device}):reshape(R, 1)
    local cols = dl.arange(0, C, 1, {dtype = dl.int64, device = x.device}):reshape(1, C)
    return (cols - rows):eq(k):to(dt or x.dtype)
  end
end

OPS.Compress = function(n)
  local axis = n:attr("axis", "INT")
  return function(x, cond)
    cond = on(cond, x)
    if axis == nil then x = x:reshape(-1) end
    local d = axis and dim_of(n, axis, x:dim()) or 1
    local c = cond:to(dl.bool)
    local size = x.shape[d]
    if c.shape[1] > size then c = c:narrow(1, 1, size) end
    local idx = c:nonzero():reshape(-1)
    return x:index_select(d, idx)
  end
end

-- --- interpolation (Resize, Upsample) ------------------------------------------------------------

-- source coordinate of output position o (0-based) along one axis
local function source_coord(mode, o, scale, in_size, out_size, roi_lo, roi_hi)
  if mode == "half_pixel" then return (o + 0.5) / scale - 0.5
  elseif mode == "pytorch_half_pixel" then
    if out_size > 1 then return (o + 0.5) / scale - 0.5 end
    return 0
  elseif mode == "align_corners" then
    -- ONNX's length_resized is in_size * scale, not rounded
    local len = in_size * scale
    if len == 1 then return 0 end
    return o * (in_size - 1) / (len - 1)
  elseif mode == "asymmetric" then return o / scale
  elseif mode == "tf_half_pixel_for_nn" then return (o + 0.5) / scale
  elseif mode == "tf_crop_and_resize" then
    local len = in_size * scale
    if len > 1 then
      return roi_lo * (in_size - 1) + o * (roi_hi - roi_lo) * (in_size - 1) / (len - 1)
    end
    return 0.5 * (roi_lo + roi_hi) * (in_size - 1)
  end
  error("coordinate_transformation_mode '" .. mode .. "' is not supported", 0)
end

local function nearest_index(nmode, x)
  if nmode == "round_prefer_floor" then
    if x == math.floor(x) + 0.5 then return math.floor(x) end
    return math.floor(x + 0.5)
  elseif nmode == "round_prefer_ceil" then return math.floor(x + 0.5)
  elseif nmode == "floor" then return math.floor(x)
  elseif nmode == "ceil" then return math.ceil(x) end
  error("nearest_mode '" .. nmode .. "' is not supported", 0)
end

-- Resamples dim d of x to out_size: ONNX's taps, dl.nn.composed's gathers.
local function resample_axis(x, d, out_size, p)
  local in_size = x.shape[d]
  local taps = {} -- per output position: list of {index (0-based), weight}
  for o = 0, out_size - 1 do
    local c = source_coord(p.ctm, o, p.scale, in_size, out_size, p.roi_lo, p.roi_hi)
    local tl = {}
    if p.ctm == "tf_crop_and_resize" and (c < 0 or c > in_size - 1) then
      tl = {{-1, 1}} -- extrapolation
    elseif p.mode == "nearest" then
      local i = nearest_index(p.nearest, c)
      tl = {{math.max(0, math.min(in_size - 1, i)), 1}}
    elseif p.mode == "linear" then
      local cc = math.max(0, math.min(in_size - 1, c))
      if p.ctm ~= "tf_crop_and_resize" then cc = math.max(0, c) end
      local i0 = math.floor(cc)
      local t = cc - i0
      local i1 = math.min(i0 + 1, in_size - 1)
      i0 = math.min(i0, in_size - 1)
      tl = {{i0, 1 - t}, {i1, t}}
    else -- cubic
      local i0 = math.floor(c)
      local ws = composed._cubic(c - i0, p.cubic_a)
      local sum = 0
      for j = 1, 4 do
        local idx = i0 - 2 + j
        if p.exclude_outside and (idx < 0 or idx >= in_size) then ws[j] = 0 end
        sum = sum + ws[j]
      end
      for j = 1, 4 do
        local idx = math.max(0, math.min(in_size - 1, i0 - 2 + j))
        tl[j] = {idx, p.exclude_outside and ws[j] / sum or ws[j]}
      end
    end
    taps[o + 1] = tl
  end
  return composed._resample_axis(x, d, taps, p.extrapolation)
end

local function resize_run(x, scales, sizes, p, roi)
  local r = x:dim()
  local y = x
  for d = 1, r do
    local in_size = x.shape[d]
    local out_size, scale
    if sizes then
      out_size = sizes[d]
      scale = out_size / in_size
    else
      scale = scales[d]
      out_size = math.floor(in_size * scale)
    end
    local lo, hi = 0, 1
    if roi and #roi == 2 * r then lo, hi = roi[d], roi[d + r] end
    if out_size ~= in_size or scale ~= 1 or p.ctm == "tf_crop_and_resize" then
      local q = {}
      for k, v in pairs(p) do q[k] = v end
      q.scale, q.roi_lo, q.roi_hi = scale, lo, hi
      y = resample_axis(y, d, out_size, q)
    end
  end
  return y
end

OPS.Resize = function(n)
  local p = {}
  p.mode = n:attr("mode", "STRING", "nearest")
  if p.mode ~= "nearest" and p.mode ~= "linear" and p.mode ~= "cubic" then n:fail("mode='%s' is not supported", p.mode) end
  p.ctm = n:attr("coordinate_transformation_mode", "STRING", n.opset < 11 and "asymmetric" or "half_pixel")
  p.nearest = n:attr("nearest_mode", "STRING", "round_prefer_floor")
  p.cubic_a = n:attr("cubic_coeff_a", "FLOAT", -0.75)
  p.exclude_outside = n:attr("exclude_outside", "INT", 0) == 1
  p.extrapolation = n:attr("extrapolation_value", "FLOAT", 0.0)
  if n:has_attr("antialias") or n:has_attr("axes") or n:has_attr("keep_aspect_ratio_policy") then
    n:fail("antialias/axes/keep_aspect_ratio_policy (opset 18) are not supported")
  end
  if n.opset < 11 then
    local gs = int_list_input(n, 2, "scales", true)
    p.ctm = "asymmetric"
    return function(x, s) return resize_run(x, gs(s), nil, p) end
  end
  local groi = int_list_input(n, 2, "roi", false)
  local gsc = int_list_input(n, 3, "scales", false)
  local gsz = int_list_input(n, 4, "sizes", false)
  return function(x, roi, scales, sizes)
    local sc = gsc(scales)
    local sz = gsz(sizes)
    if sc and #sc == 0 then sc = nil end
    if sz and #sz == 0 then sz = nil end
    if not sc and not sz then error("one of scales and sizes is required", 0) end
    return resize_run(x, sc, sz, p, p.ctm == "tf_crop_and_resize" and groi(roi) or nil)
  end
end

OPS.Upsample = function(n)
  local p = {}
  p.mode = n:attr("mode", "STRING", "nearest")
  if p.mode == "bilinear" then p.mode = "linear" end
  if p.mode ~= "nearest" and p.mode ~= "linear" then n:fail("mode='%s' is not supported", p.mode) end
  p.ctm, p.nearest = "asymmetric", "floor"
  if n.opset < 9 then
    local sc = n:attr("scales", "FLOATS")
    if not sc then
      local hs, ws = n:attr("height_scale", "FLOAT"), n:attr("width_scale", "FLOAT")
      if hs and ws then sc = {1, 1, hs, ws} end
    end
    if not sc then n:fail("attribute 'scales' is required") end
    return function(x) return resize_run(x, sc, nil, p) end
  end
  local gs = int_list_input(n, 2, "scales", true)
  return function(x, s) return resize_run(x, gs(s), nil, p) end
end

-- --- losses ----------------------------------------------------------------------------------------

-- ONNX's NLL on log-probabilities inp (N, C, d...) and targets (N, d...).
local function nll(inp, target, weight, reduction, ignore)
  target = on(target, inp):to(dl.int64)
  local valid
  if ignore then valid = target:ne(ignore) end
  local t = target
  if valid then t = dl.where(valid, target, dl.zeros({}, {dtype = dl.int64, device = inp.device})) end
  local picked = inp:gather(2, (t + 1):unsqueeze(2)):squeeze(2) -- (N, d...)
  local w
  if weight then
    w = on(weight, inp):index_select(1, (t + 1):reshape(-1)):reshape(shape_of(t))
  else
    w = dl.ones(shape_of(t), {dtype = inp.dtype, device = inp.device})
  end
  if valid then w = w * valid:to(inp.dtype) end
  local loss = -picked * w
  if reduction == "none" then return loss end
  if reduction == "sum" then return loss:sum() end
  return loss:sum() / w:sum()
end

local function loss_attrs(n)
  local reduction = n:attr("reduction", "STRING", "mean")
  if reduction ~= "none" and reduction ~= "sum" and reduction ~= "mean" then
    n:fail("reduction='%s' is not supported", reduction)
  end
  return reduction, n:attr("ignore_index", "INT")
end

OPS.NegativeLogLikelihoodLoss = function(n)
  local reduction, ignore = loss_attrs(n)
  return function(inp, target, weight) return nll(inp, target, weight, reduction, ignore) end
end

OPS.SoftmaxCrossEntropyLoss = function(n)
  local reduction, ignore = loss_attrs(n)
  return function(scores, labels, weight)
    local lp = F.log_softmax(scores, 2)
    return nll(lp, labels, weight, reduction, ignore), lp
  end
end

-- --- Einsum (two operands or one; no repeated letters within an operand) --------------------

local function einsum_parse(eq, shapes)
  eq = eq:gsub("%s", "")
  local lhs, rhs = eq:match("^(.-)%->(.*)$")
  if not lhs then lhs = eq end
  local terms = {}
  for t in (lhs .. ","):gmatch("([^,]*),") do terms[#terms + 1] = t end
  -- ellipsis -> fresh upper-case letters
  local ell_rank = 0
  for i, t in ipairs(terms) do
    if t:find("...", 1, true) then
      local r = #shapes[i] - (#t - 3)
      if r > ell_rank then ell_rank = r end
    end
  end
  local ell_letters = ("ABCDEFGHIJ"):sub(1, ell_rank)
  for i, t in ipairs(terms) do
    if t:find("...", 1, true) then
      local r = #shapes[i] - (#t - 3)
      terms[i] = t:gsub("%.%.%.", ell_letters:sub(ell_rank - r + 1))
    end
  end
  if rhs then
    rhs = rhs:gsub("%.%.%.", ell_letters)
  else
    local count = {}
    for _, t in ipairs(terms) do for c in t:gmatch(".") do count[c] = (count[c] or 0) + 1 end end
    local letters = {}
    for c, k in pairs(count) do if k == 1 and c:match("%l") then letters[#letters + 1] = c end end
    table.sort(letters)
    rhs = ell_letters .. table.concat(letters)
  end
  return terms, rhs
end

OPS.Einsum = function(n)
  local eq = n:attr("equation", "STRING")
  if not eq then n:fail("attribute 'equation' is required") end
  return function(...)
    local xs = table.pack(...)
    local shapes = {}
    for i = 1, xs.n do shapes[i] = shape_of(xs[i]) end
    local terms, out = einsum_parse(eq, shapes)
    if #terms ~= xs.n then error("the equation does not match the number of inputs", 0) end
    if #terms > 2 then error("Einsum with more than two operands is not supported", 0) end
    local size = {}
    for i, t in ipairs(terms) do
      local seen = {}
      for j = 1, #t do
        local c = t:sub(j, j)
        if seen[c] then error("repeated letters within one operand (diagonals) are not supported", 0) end
        seen[c] = true
        local s = shapes[i][j]
        if size[c] and size[c] ~= s and size[c] ~= 1 and s ~= 1 then
          error(string.format("letter %s has sizes %d and %d", c, size[c], s), 0)
        end
        size[c] = math.max(size[c] or 1, s)
      end
    end
    local inout = {}
    for c in out:gmatch(".") do inout[c] = true end
    -- sum letters that appear in one operand only and not in the output
    local ops_t, ops_s = {}, {}
    for i, t in ipairs(terms) do
      local other = terms[3 - i] or ""
      local x, keep = xs[i], {}
      local sumdims = {}
      for j = 1, #t do
        local c = t:sub(j, j)
        if not inout[c] and not other:find(c, 1, true) then sumdims[#sumdims + 1] = j
        else keep[#keep + 1] = c end
      end
      if #sumdims > 0 then x = x:sum(sumdims, false) end
      ops_t[i], ops_s[i] = x, table.concat(keep)
    end
    local function permute_to(x, from, to)
      local p = {}
      for j = 1, #to do p[j] = from:find(to:sub(j, j), 1, true) end
      if #p == 0 then return x end
      return x:permute(p)
    end
    if #terms == 1 then return permute_to(ops_t[1], ops_s[1], out) end
    local a, b, sa, sb = ops_t[1], ops_t[2], ops_s[1], ops_s[2]
    local batch, left, right, contract = {}, {}, {}, {}
    for c in sa:gmatch(".") do
      if sb:find(c, 1, true) then
        if inout[c] then batch[#batch + 1] = c else contract[#contract + 1] = c end
      else left[#left + 1] = c end
    end
    for c in sb:gmatch(".") do if not sa:find(c, 1, true) then right[#right + 1] = c end end
    local function dimsize(cs)
      local p = 1
      for _, c in ipairs(cs) do p = p * size[c] end
      return p
    end
    -- an operand permuted to the letters `to`, broadcast to the full sizes
    local function arrange(x, from, to)
      local sh = {}
      for c in to:gmatch(".") do sh[#sh + 1] = size[c] end
      return permute_to(x, from, to):expand(sh)
    end
    local A = arrange(a, sa, table.concat(batch) .. table.concat(left) .. table.concat(contract))
    local B = arrange(b, sb, table.concat(batch) .. table.concat(contract) .. table.concat(right))
    local nb, nl, nr, nc = dimsize(batch), dimsize(left), dimsize(right), dimsize(contract)
    local y = dl.matmul(A:reshape(nb, nl, nc), B:reshape(nb, nc, nr))
    local ys = {}
    local order = table.concat(batch) .. table.concat(left) .. table.concat(right)
    for c in order:gmatch(".") do ys[#ys + 1] = size[c] end
    y = y:reshape(ys)
    return permute_to(y, order, out)
  end
end

-- --- recurrent layers (RNN, GRU, LSTM) -----------------------------------------------------------

-- ONNX's activation functions by name, with its default alpha/beta
local ACT = {
  Sigmoid = function(x) return x:sigmoid() end,
  Tanh = function(x) return x:tanh() end,
  Relu = function(x) return x:relu() end,
  HardSigmoid = function(x, a, b) return (x * (a or 0.2) + (b or 0.5)):clamp(0, 1) end,
  LeakyRelu = function(x, a) return x:clamp_min(0) + x:clamp_max(0) * (a or 0.01) end,
  ThresholdedRelu = function(x, a) return x * x:gt(a or 1.0):to(x.dtype) end,
  ScaledTanh = function(x, a, b) return (x * (b or 1.0)):tanh() * (a or 1.0) end,
  Affine = function(x, a, b) return x * (a or 1.0) + (b or 0.0) end,
  Elu = function(x, a) return x:clamp_min(0) + x:clamp_max(0):expm1() * (a or 1.0) end,
  Softsign = function(x) return x / (x:abs() + 1) end,
  Softplus = function(x) return x:clamp_min(0) + (-x:abs()):exp():log1p() end,
}

-- A recurrent op: kind "RNN" (1 gate), "GRU" (3: z r h), "LSTM" (4: i o f c).
local function recurrent(kind)
  local ngates = ({RNN = 1, GRU = 3, LSTM = 4})[kind]
  local nact = ({RNN = 1, GRU = 2, LSTM = 3})[kind]
  local defaults = ({RNN = {"Tanh"}, GRU = {"Sigmoid", "Tanh"}, LSTM = {"Sigmoid", "Tanh", "Tanh"}})[kind]
  return function(n)
    local hidden = n:attr("hidden_size", "INT")
    if not hidden then n:fail("attribute 'hidden_size' is required") end
    local direction = n:attr("direction", "STRING", "forward")
    if direction ~= "forward" and direction ~= "reverse" and direction ~= "bidirectional" then
      n:fail("direction='%s' is not supported", direction)
    end
    local ndir = direction == "bidirectional" and 2 or 1
    local layout = n:attr("layout", "INT", 0)
    local clip = n:attr("clip", "FLOAT")
    local lbr = kind == "GRU" and n:attr("linear_before_reset", "INT", 0) ~= 0
    local input_forget = kind == "LSTM" and n:attr("input_forget", "INT", 0) ~= 0
    local names = n:attr("activations", "STRINGS")
    local alphas = n:attr("activation_alpha", "FLOATS") or {}
    local betas = n:attr("activation_beta", "FLOATS") or {}
    local acts = {}
    for d = 1, ndir do
      for j = 1, nact do
        local k = (d - 1) * nact + j
        local nm = names and names[k] or defaults[j]
        local f = ACT[nm]
        if not f then n:fail("activation '%s' is not supported", tostring(nm)) end
        local a, b = alphas[k], betas[k]
        acts[k] = function(x) return f(x, a, b) end
      end
    end
    n:ignore("output_sequence") -- opset 1's flag; Y is always produced
    return function(X, W, R, B, seq_lens, h0, c0, P)
      if layout == 1 then X = X:transpose(1, 2) end -- (seq, batch, input)
      local T, N = X.shape[1], X.shape[2]
      local G = ngates * hidden
      local Y, Hs, Cs = {}, {}, {}
      -- the steps each batch entry takes (all of them without sequence_lens)
      local lens
      if seq_lens then lens = list(seq_lens) end
      for d = 1, ndir do
        local act = function(j, x) return acts[(d - 1) * nact + j](x) end
        local w, r = W:select(1, d), R:select(1, d) -- (G, input), (G, hidden)
        local wb, rb
        if B then
          local bd = B:select(1, d)
          wb, rb = bd:narrow(1, 1, G), bd:narrow(1, G + 1, G)
        end
        -- time order of this direction for every batch entry (reverse: within its length)
        local order = {}
        for t = 1, T do order[t] = t end
        local Xd = X
        local gather -- (T, N) 1-based source steps per output step, when lengths differ
        if d == 2 or direction == "reverse" then
          if lens then
            local idx = {}
            for t = 1, T do
              idx[t] = {}
              for b = 1, N do
                local L = lens[b]
                idx[t][b] = t <= L and (L - t + 1) or t
              end
            end
            gather = dl.tensor(idx, {dtype = dl.int64, device = X.device})
            Xd = X:gather(1, gather:unsqueeze(3):expand(T, N, X.shape[3]))
          else
            Xd = X:flip({1})
          end
        end
        -- the input projections of every step at once: (T, N, G)
        local xw = dl.matmul(Xd, w:t())
        if wb then xw = xw + wb end
        local h = h0 and h0:select(1, d) or dl.zeros({N, hidden}, {dtype = X.dtype, device = X.device})
        local c
        if kind == "LSTM" then c = c0 and c0:select(1, d) or dl.zeros({N, hidden}, {dtype = X.dtype, device = X.device}) end
        local p_i, p_o, p_f
        if P then
          local pd = P:select(1, d)
          p_i, p_o, p_f = pd:narrow(1, 1, hidden), pd:narrow(1, hidden + 1, hidden), pd:narrow(1, 2 * hidden + 1, hidden)
        end
        local outs = {}
        local function clipped(x) if clip then return x:clamp(-clip, clip) end return x end
        for t = 1, T do
          local g = xw:select(1, t)
          local hr = dl.matmul(h, r:t())
          if rb then hr = hr + rb end
          local hn, cn
          if kind == "RNN" then
            hn = act(1, clipped(g + hr))
          elseif kind == "GRU" then
            local z = act(1, clipped(g:narrow(2, 1, hidden) + hr:narrow(2, 1, hidden)))
            local rr = act(1, clipped(g:narrow(2, hidden + 1, hidden) + hr:narrow(2, hidden + 1, hidden)))
            local hh
            if lbr then
              hh = act(2, clipped(g:narrow(2, 2 * hidden + 1, hidden) + rr * hr:narrow(2, 2 * hidden + 1, hidden)))
            else
              local rh = dl.matmul(rr * h, r:narrow(1, 2 * hidden + 1, hidden):t())
              if rb then rh = rh + rb:narrow(1, 2 * hidden + 1, hidden) end
              hh = act(2, clipped(g:narrow(2, 2 * hidden + 1, hidden) + rh))
            end
            hn = (-z + 1) * hh + z * h
          else
            local s = g + hr
            local gi, go = s:narrow(2, 1, hidden), s:narrow(2, hidden + 1, hidden)
            local gf, gc = s:narrow(2, 2 * hidden + 1, hidden), s:narrow(2, 3 * hidden + 1, hidden)
            if p_i then gi, gf = gi + p_i * c, gf + p_f * c end
            local i = act(1, clipped(gi))
            local f = input_forget and (-i + 1) or act(1, clipped(gf))
            cn = f * c + i * act(2, clipped(gc))
            if p_o then go = go + p_o * cn end
            hn = act(1, clipped(go)) * act(3, cn)
          end
          if lens then
            -- entries past their length keep their state and output zeros
            local m = {}
            for b = 1, N do m[b] = t <= lens[b] and 1 or 0 end
            local mask = dl.tensor(m, {dtype = X.dtype, device = X.device}):reshape(N, 1)
            hn = hn * mask + h * (-mask + 1)
            if cn then cn = cn * mask + c * (-mask + 1) end
            outs[t] = hn * mask
          else
            outs[t] = hn
          end
          h, c = hn, cn
        end
        local y = dl.stack(outs, 1) -- (T, N, hidden) in this direction's time order
        if d == 2 or direction == "reverse" then
          if gather then y = y:gather(1, gather:unsqueeze(3):expand(T, N, hidden)) else y = y:flip({1}) end
        end
        Y[d], Hs[d], Cs[d] = y, h, c
      end
      local y = dl.stack(Y, 2) -- (T, ndir, N, hidden)
      local yh = dl.stack(Hs, 1)
      local yc = kind == "LSTM" and dl.stack(Cs, 1) or nil
      if layout == 1 then
        y = y:permute(3, 1, 2, 4)
        yh = yh:transpose(1, 2)
        if yc then yc = yc:transpose(1, 2) end
      end
      return y, yh, yc
    end
  end
end
OPS.RNN = recurrent("RNN")
OPS.GRU = recurrent("GRU")
OPS.LSTM = recurrent("LSTM")

-- --- GridSample (PyTorch's grid_sample: 4-D input, (N, Ho, Wo, 2) grid) -----------------------------

-- coordinates reflected into [low/2, high/2] (twice the bounds given), as PyTorch
local function reflect(t, twice_low, twice_high)
  if twice_low == twice_high then return t * 0 end
  local lo, span = twice_low / 2, (twice_high - twice_low) / 2
  local a = (t - lo):abs()
  local extra = dl.fmod(a, span)
  local flips = (a / span):floor()
  local even = dl.remainder(flips, 2):eq(0):to(t.dtype)
  return (extra + lo) * even + ((-extra) + span + lo) * (-even + 1)
end

OPS.GridSample = function(n)
  local mode = n:attr("mode", "STRING", "bilinear")
  local pad = n:attr("padding_mode", "STRING", "zeros")
  local align = n:attr("align_corners", "INT", 0) == 1
  if mode ~= "bilinear" and mode ~= "nearest" and mode ~= "bicubic" then n:fail("mode='%s' is not supported", mode) end
  if pad ~= "zeros" and pad ~= "border" and pad ~= "reflection" then n:fail("padding_mode='%s' is not supported", pad) end
  return function(x, grid)
    if x:dim() ~= 4 then error("GridSample: only 4-D inputs are supported", 0) end
    local N, C, H, W = table.unpack(x.shape)
    local Ho, Wo = grid.shape[2], grid.shape[3]
    grid = on(grid, x):to(x.dtype)
    local function unnorm(g, size)
      if align then return (g + 1) * ((size - 1) / 2) end
      return ((g + 1) * size - 1) / 2
    end
    local function padc(t, size)
      if pad == "border" then return t:clamp(0, size - 1) end
      if pad == "reflection" then
        local r = align and reflect(t, 0, 2 * (size - 1)) or reflect(t, -1, 2 * size - 1)
        return r:clamp(0, size - 1)
      end
      return t
    end
    local ix = unnorm(grid:select(4, 1), W)
    local iy = unnorm(grid:select(4, 2), H)
    local flat = x:reshape(N, C, H * W)
    -- the value at integer coordinates (xi, yi) of each output point, 0 outside
    local function at(xi, yi)
      local valid = dl.logical_and(dl.logical_and(xi:ge(0), xi:le(W - 1)), dl.logical_and(yi:ge(0), yi:le(H - 1)))
      local idx = (yi:clamp(0, H - 1) * W + xi:clamp(0, W - 1)):to(dl.int64):reshape(N, 1, Ho * Wo) + 1
      local v = flat:gather(3, idx:expand(N, C, Ho * Wo)):reshape(N, C, Ho, Wo)
      return v * valid:to(x.dtype):unsqueeze(2)
    end
    if mode == "nearest" then
      return at(padc(ix, W):round(), padc(iy, H):round())
    elseif mode == "bilinear" then
      ix, iy = padc(ix, W), padc(iy, H)
      local x0, y0 = ix:floor(), iy:floor()
      local tx, ty = (ix - x0):unsqueeze(2), (iy - y0):unsqueeze(2)
      return at(x0, y0) * (-tx + 1) * (-ty + 1) + at(x0 + 1, y0) * tx * (-ty + 1) +
        at(x0, y0 + 1) * (-tx + 1) * ty + at(x0 + 1, y0 + 1) * tx * ty
    end
    -- bicubic: 4x4 taps around the point, each tap's integer coordinate padded
    local x0, y0 = ix:floor(), iy:floor()
    local tx, ty = ix - x0, iy - y0
    local function weights(t)
      local A = -0.75
      local function near(d) return ((d * (A + 2) - (A + 3)) * d * d + 1) end
      local function far(d) return ((d * A - 5 * A) * d + 8 * A) * d - 4 * A end
      return {far(t + 1), near(t), near(-t + 1), far(-t + 2)}
    end
    local wx, wy = weights(tx), weights(ty)
    local y
    for j = 1, 4 do
      for i = 1, 4 do
        local xi, yi = x0 + (i - 2), y0 + (j - 2)
        if pad ~= "zeros" then xi, yi = padc(xi, W), padc(yi, H) end
        local term = at(xi, yi) * (wx[i] * wy[j]):unsqueeze(2)
        y = y and y + term or term
      end
    end
    return y
  end
end

-- --- NonMaxSuppression (on the host: its output's size depends on the data) ------------------------

OPS.NonMaxSuppression = function(n)
  local center = n:attr("center_point_box", "INT", 0) == 1
  n.nofold = true
  return function(boxes, scores, max_out, iou_t, score_t)
    local B, S = boxes.shape[1], boxes.shape[2]
    local C = scores.shape[2]
    local maxo = max_out and max_out:item() or 0
    local iou_th = iou_t and iou_t:item() or 0
    local score_th = score_t and score_t:item()
    local bx, sc = boxes:to(dl.float64):tolist(), scores:to(dl.float64):tolist()
    local out = {}
    local function corners(b)
      if center then return b[2] - b[4] / 2, b[1] - b[3] / 2, b[2] + b[4] / 2, b[1] + b[3] / 2 end
      return math.min(b[1], b[3]), math.min(b[2], b[4]), math.max(b[1], b[3]), math.max(b[2], b[4])
    end
    local function iou(a, b)
      local ay1, ax1, ay2, ax2 = corners(a)
      local by1, bx1, by2, bx2 = corners(b)
      local ih = math.min(ay2, by2) - math.max(ay1, by1)
      local iw = math.min(ax2, bx2) - math.max(ax1, bx1)
      if ih <= 0 or iw <= 0 then return 0 end
      local inter = ih * iw
      local union = (ay2 - ay1) * (ax2 - ax1) + (by2 - by1) * (bx2 - bx1) - inter
      return union > 0 and inter / union or 0
    end
    for b = 1, B do
      for c = 1, C do
        local cand = {}
        for i = 1, S do
          local v = sc[b][c][i]
          if not score_th or v > score_th then cand[#cand + 1] = i end
        end
        table.sort(cand, function(p, q)
          local sp, sq = sc[b][c][p], sc[b][c][q]
          if sp ~= sq then return sp > sq end
          return p < q
        end)
        local kept = {}
        for _, i in ipairs(cand) do
          if #kept >= maxo then break end
          local ok = true
          for _, k in ipairs(kept) do
            if iou(bx[b][i], bx[b][k]) > iou_th then ok = false break end
          end
          if ok then
            kept[#kept + 1] = i
            out[#out + 1] = {b - 1, c - 1, i - 1}
          end
        end
      end
    end
    if #out == 0 then return dl.zeros({0, 3}, {dtype = dl.int64}) end
    return dl.tensor(out, {dtype = dl.int64})
  end
end

-- --- ReverseSequence, MaxUnpool, Unique ----------------------------------------------------------------

OPS.ReverseSequence = function(n)
  local ba = n:attr("batch_axis", "INT", 1)
  local ta = n:attr("time_axis", "INT", 0)
  if not ((ba == 1 and ta == 0) or (ba == 0 and ta == 1)) then n:fail("batch_axis and time_axis must be 0 and 1") end
  return function(x, lens_t)
    local y = ta == 0 and x or x:transpose(1, 2) -- (T, B, ...)
    local T, B = y.shape[1], y.shape[2]
    local lens = list(lens_t)
    local idx = {}
    for t = 1, T do
      idx[t] = {}
      for b = 1, B do idx[t][b] = t <= lens[b] and lens[b] - t + 1 or t end
    end
    local it = dl.tensor(idx, {dtype = dl.int64, device = x.device})
    local s = shape_of(y)
    local v = {T, B}
    for _ = 3, #s do v[#v + 1] = 1 end
    y = y:gather(1, it:reshape(v):expand(s))
    return ta == 0 and y or y:transpose(1, 2)
  end
end

OPS.MaxUnpool = function(n)
  local k = n:attr("kernel_shape", "INTS")
  if not k then n:fail("attribute 'kernel_shape' is required") end
  local pads = n:attr("pads", "INTS") or {}
  local strides = n:attr("strides", "INTS") or {}
  local gshape = int_list_input(n, 3, "output_shape", false)
  return function(x, ind, shape_t)
    -- indices address the default output shape; output_shape pads its end
    local out = {x.shape[1], x.shape[2]}
    for i = 1, #k do
      out[i + 2] = (x.shape[i + 2] - 1) * (strides[i] or 1) + k[i] - (pads[i] or 0) - (pads[i + #k] or 0)
    end
    local total = 1
    for _, v in ipairs(out) do total = total * v end
    local y = dl.zeros({total}, {dtype = x.dtype, device = x.device})
    y = y:scatter(1, on(ind, x):to(dl.int64):reshape(-1) + 1, x:reshape(-1)):reshape(out)
    local want = gshape(shape_t)
    if want then
      local fp = {}
      for i = #out, 3, -1 do
        if want[i] < out[i] then error("output_shape is smaller than the unpooled shape", 0) end
        fp[#fp + 1], fp[#fp + 2] = 0, want[i] - out[i]
      end
      y = F.pad(y, fp)
    end
    return y
  end
end

OPS.Unique = function(n)
  local axis = n:attr("axis", "INT")
  local sorted = n:attr("sorted", "INT", 1) == 1
  n.nofold = true
  return function(x)
    local d = axis and dim_of(n, axis, x:dim()) or nil
    local xs = d and x or x:reshape(-1)
    d = d or 1
    local count = xs.shape[d]
    -- each slice along d as a key (its values' text, for equality and order)
    local keys, vals = {}, {}
    for i = 1, count do
      local v = list(xs:select(d, i):to(dl.float64))
      vals[i] = v
      local parts = {}
      for j, e in ipairs(v) do parts[j] = string.format("%.17g", e) end
      keys[i] = table.concat(parts, ",")
    end
    local first, order, pos = {}, {}, {}
    for i = 1, count do
      if not first[keys[i]] then
        first[keys[i]] = i
        order[#order + 1] = i
      end
    end
    if sorted then
      table.sort(order, function(a, b)
        local va, vb = vals[a], vals[b]
        for j = 1, #va do if va[j] ~= vb[j] then return va[j] < vb[j] end end
        return false
      end)
    end
    for j, i in ipairs(order) do pos[keys[i]] = j end
    local first0, inverse, counts = {}, {}, {}
    for j, i in ipairs(order) do first0[j], counts[j] = i - 1, 0 end
    for i = 1, count do
      local j = pos[keys[i]]
      inverse[i] = j - 1
      counts[j] = counts[j] + 1
    end
    local sel = {}
    for j, i in ipairs(order) do sel[j] = i end
    local y = xs:index_select(d, dl.tensor(sel, {dtype = dl.int64, device = x.device}))
    local I = function(t) return dl.tensor(t, {dtype = dl.int64}) end
    return y, I(first0), I(inverse), I(counts)
  end
end

-- --- quantization (uint8 and int32: the integer dtypes dlua has) ------------------------------------

-- per-axis parameters broadcast along `axis` of x
local function along(t, x, axis, n)
  if t:dim() == 0 or t:numel() == 1 then return t:reshape({}) end
  local d = dim_of(n, axis, x:dim())
  local s = {}
  for i = 1, x:dim() do s[i] = 1 end
  s[d] = t:numel()
  return t:reshape(s)
end

OPS.QuantizeLinear = function(n)
  local axis = n:attr("axis", "INT", 1)
  n:ignore("saturate")
  return function(x, scale, zp)
    local dt = zp and zp.dtype or dl.uint8
    if dt ~= dl.uint8 then error("QuantizeLinear to " .. tostring(dt) .. " is not supported (uint8 only)", 0) end
    local q = (x:to(dl.float32) / along(scale, x, axis, n)):round()
    if zp then q = q + along(zp, x, axis, n):to(dl.float32) end
    return q:clamp(0, 255):to(dl.uint8)
  end
end

OPS.DequantizeLinear = function(n)
  local axis = n:attr("axis", "INT", 1)
  return function(x, scale, zp)
    local v = x:to(dl.float32)
    if zp then v = v - along(zp, x, axis, n):to(dl.float32) end
    return v * along(scale, x, axis, n)
  end
end

OPS.DynamicQuantizeLinear = function()
  return function(x)
    local lo = math.min(0, x:min():item())
    local hi = math.max(0, x:max():item())
    local scale = (hi - lo) / 255
    local st = dl.tensor(scale, {dtype = dl.float32})
    scale = st:item() -- as float32
    local zp = scale == 0 and 0 or math.max(0, math.min(255, dl.tensor(-lo / scale, {dtype = dl.float32}):round():item()))
    local q = scale == 0 and x * 0 or (x / scale):round() + zp
    return q:clamp(0, 255):to(dl.uint8), st, dl.tensor(zp, {dtype = dl.uint8})
  end
end

OPS.BitShift = function(n)
  local dir = n:attr("direction", "STRING")
  if dir ~= "LEFT" and dir ~= "RIGHT" then n:fail("direction must be LEFT or RIGHT, got %s", tostring(dir)) end
  return function(x, k)
    local wide = x:to(dl.int64)
    local p = dl.pow(dl.full({}, 2, {dtype = dl.int64, device = x.device}), on(k, x):to(dl.int64))
    local y = dir == "LEFT" and wide * p or dl.div(wide, p, {rounding_mode = "floor"})
    if x.dtype == dl.uint8 then y = dl.remainder(y, 256) end
    return y:to(x.dtype)
  end
end

-- --- signal windows -----------------------------------------------------------------------------

local function window(coeffs)
  return function(n)
    local periodic = n:attr("periodic", "INT", 1) == 1
    local dt = DTYPES[n:attr("output_datatype", "INT", 1)]
    if not dt then n:fail("output_datatype %d: dlua has no such dtype", n:attr("output_datatype", "INT")) end
    return function(size_t)
      local N = math.floor(size_t:item())
      local denom = periodic and N or N - 1
      local k = dl.arange(0, N, 1, {dtype = dl.float64})
      local y = dl.zeros({N}, {dtype = dl.float64})
      for j, a in ipairs(coeffs) do
        local term = (k * (2 * math.pi * (j - 1) / denom)):cos() * a
        if j % 2 == 0 then y = y - term else y = y + term end
      end
      return y:to(dt)
    end
  end
end
OPS.HannWindow = window({0.5, 0.5})
OPS.HammingWindow = window({25 / 46, 21 / 46})
OPS.BlackmanWindow = window({0.42, 0.5, 0.08})

-- --- control flow ------------------------------------------------------------------------------

-- A subgraph of node n compiled in n's scope (its free names come from the
-- enclosing graph as n's extra inputs) and a runner: run(free, inputs) ->
-- the subgraph's outputs in order; free maps the extra names to values,
-- inputs are bound to the subgraph's inputs by position.
local function subgraph(n, g)
  local outer = {}
  for _, nm in ipairs(n.extra) do outer[nm] = true end
  local plan = n.compile(g, {opset = n.opset, src = n.src, outer = outer, fold = n.fold})
  n.nofold = true
  local function run(free, inputs)
    local env = {}
    for nm, v in pairs(free) do env[nm] = v end
    for nm, t in pairs(plan.consts) do env[nm] = t end
    for i, v in ipairs(plan.inputs) do env[v.name] = inputs[i] end
    G.run_steps(plan, env)
    local out = {}
    for i, nm in ipairs(plan.outputs) do out[i] = env[nm] end
    return out
  end
  return plan, run
end

-- subgraph() of n's required attribute 'body' (Loop, SequenceMap).
local function body_subgraph(n)
  local body = n:attr("body", "GRAPH")
  if not body then n:fail("attribute 'body' is required") end
  return subgraph(n, body)
end

-- the extra (free-name) values among a run function's trailing arguments
local function free_values(n, args, from)
  local free = {}
  for i, nm in ipairs(n.extra) do free[nm] = args[from + i - 1] end
  return free
end

OPS.If = function(n)
  local tg = n:attr("then_branch", "GRAPH")
  local eg = n:attr("else_branch", "GRAPH")
  if not tg or not eg then n:fail("then_branch and else_branch are required") end
  local tp, trun = subgraph(n, tg)
  local _, erun = subgraph(n, eg)
  return function(cond, ...)
    local out = (cond:item() and trun or erun)(free_values(n, table.pack(...), 1), {})
    return table.unpack(out, 1, #tp.outputs)
  end
end

-- Loop(M, cond, carried...): the body runs while i < M and cond; outputs the
-- final carried values, then each scan output stacked along a new dim 1.
OPS.Loop = function(n)
  local plan, run = body_subgraph(n)
  local ncarried = #n.inputs - 2
  local nscan = #plan.outputs - 1 - ncarried
  if nscan < 0 then n:fail("the body has %d outputs for %d loop-carried values", #plan.outputs, ncarried) end
  return function(M, cond, ...)
    local args = table.pack(...)
    local free = free_values(n, args, ncarried + 1)
    local carried = {}
    for i = 1, ncarried do carried[i] = args[i] end
    local limit = M and M:item() or math.huge
    local c = cond == nil or cond:item()
    local scans = {}
    for j = 1, nscan do scans[j] = {} end
    local i = 0
    while i < limit and c do
      local inputs = {dl.tensor(i, {dtype = dl.int64}), dl.tensor(c, {dtype = dl.bool})}
      for k = 1, ncarried do inputs[k + 2] = carried[k] end
      local out = run(free, inputs)
      c = out[1]:item()
      for k = 1, ncarried do carried[k] = out[k + 1] end
      for j = 1, nscan do scans[j][#scans[j] + 1] = out[ncarried + 1 + j] end
      i = i + 1
    end
    local res = {}
    for k = 1, ncarried do res[k] = carried[k] end
    for j = 1, nscan do
      if #scans[j] == 0 then error("a Loop that runs no iteration has no shape for its scan outputs", 0) end
      res[ncarried + j] = dl.stack(scans[j], 1)
    end
    return table.unpack(res, 1, ncarried + nscan)
  end
end

-- Scan (opsets 9+): states carried through the body, scan inputs sliced and
-- scan outputs stacked along their axes (reversed for direction 1).  Opset
-- 8's form has a leading batch dim and an optional sequence_lens input.
OPS.Scan = function(n)
  local body = n:attr("body", "GRAPH")
  local nscan_in = n:attr("num_scan_inputs", "INT")
  if not body or not nscan_in then n:fail("attributes 'body' and 'num_scan_inputs' are required") end
  local in_axes = n:attr("scan_input_axes", "INTS")
  local in_dirs = n:attr("scan_input_directions", "INTS") or n:attr("directions", "INTS")
  local out_axes = n:attr("scan_output_axes", "INTS")
  local out_dirs = n:attr("scan_output_directions", "INTS")
  local plan, run = subgraph(n, body)
  local old = n.opset < 9
  local first = old and 2 or 1 -- opset 8: input 1 is sequence_lens
  local nstate = #n.inputs - (first - 1) - nscan_in
  local nscan_out = #plan.outputs - nstate
  -- one scan over tensors without a batch dim: states, inputs -> states, scan outputs
  local function scan(free, states, ins)
    local slices, T = {}, nil
    for j, x in ipairs(ins) do
      local d = dim_of(n, in_axes and in_axes[j] or 0, x:dim())
      local len = x.shape[d]
      if T and T ~= len then error("scan inputs differ in length along their axes", 0) end
      T = len
      slices[j] = {x = x, d = d, rev = in_dirs and in_dirs[j] == 1}
    end
    local outs = {}
    for j = 1, nscan_out do outs[j] = {} end
    for t = 1, T do
      local inputs = {}
      for k = 1, nstate do inputs[k] = states[k] end
      for j, sl in ipairs(slices) do inputs[nstate + j] = sl.x:select(sl.d, sl.rev and T - t + 1 or t) end
      local out = run(free, inputs)
      for k = 1, nstate do states[k] = out[k] end
      for j = 1, nscan_out do outs[j][t] = out[nstate + j] end
    end
    local res = {}
    for k = 1, nstate do res[k] = states[k] end
    for j = 1, nscan_out do
      local list_j = outs[j]
      if out_dirs and out_dirs[j] == 1 then
        local r = {}
        for t = 1, #list_j do r[t] = list_j[#list_j - t + 1] end
        list_j = r
      end
      local y = dl.stack(list_j, 1)
      local ax = out_axes and out_axes[j] or 0
      if ax ~= 0 then
        -- the stacked dim 1 moves to the output axis
        local d = dim_of(n, ax, y:dim())
        local p = {}
        for i = 2, y:dim() do p[#p + 1] = i end
        table.insert(p, d, 1)
        y = y:permute(p)
      end
      res[nstate + j] = y
    end
    return res
  end
  return function(...)
    local args = table.pack(...)
    local free = free_values(n, args, #n.inputs + 1)
    local states, ins = {}, {}
    for k = 1, nstate do states[k] = args[first - 1 + k] end
    for j = 1, nscan_in do ins[j] = args[first - 1 + nstate + j] end
    if not old then return table.unpack(scan(free, states, ins), 1, nstate + nscan_out) end
    if args[1] then error("Scan's sequence_lens (opset 8) is not supported", 0) end
    -- opset 8: batch dim 1 of everything, scanned along dim 2 (axis 1)
    local B = (states[1] or ins[1]).shape[1]
    local per = {}
    for b = 1, B do
      local st, xs = {}, {}
      for k = 1, nstate do st[k] = states[k]:select(1, b) end
      for j = 1, nscan_in do xs[j] = ins[j]:select(1, b) end
      per[b] = scan(free, st, xs)
    end
    local res = {}
    for k = 1, nstate + nscan_out do
      local parts = {}
      for b = 1, B do parts[b] = per[b][k] end
      res[k] = dl.stack(parts, 1)
    end
    return table.unpack(res, 1, nstate + nscan_out)
  end
end

-- --- sequences (values inside a graph: a Lua list of tensors) ------------------------------------

local seq = G.seq
local function check_seq(v, what)
  if not G.is_seq(v) then error((what or "input") .. " must be a sequence", 0) end
  return v
end
local function seq_pos(p, len, insert)
  local i = p and list(p)[1] or (insert and len or len - 1)
  if i < 0 then i = i + len end
  if i < 0 or i > (insert and len or len - 1) then error(string.format("position %d is out of range", i), 0) end
  return i + 1
end

OPS.SequenceEmpty = function(n)
  n:attr("dtype", "INT")
  n.nofold = true
  return function() return seq({}) end
end
OPS.SequenceConstruct = function(n)
  n.nofold = true
  return function(...) return seq({...}) end
end
OPS.SequenceInsert = function(n)
  n.nofold = true
  return function(s, t, p)
    local items = {table.unpack(check_seq(s).items)}
    table.insert(items, seq_pos(p, #items, true), t)
    return seq(items)
  end
end
OPS.SequenceErase = function(n)
  n.nofold = true
  return function(s, p)
    local items = {table.unpack(check_seq(s).items)}
    table.remove(items, seq_pos(p, #items, false))
    return seq(items)
  end
end
OPS.SequenceAt = function(n)
  n.nofold = true
  return function(s, p) local it = check_seq(s).items return it[seq_pos(p, #it, false)] end
end
OPS.SequenceLength = function(n)
  n.nofold = true
  return function(s) return dl.tensor(#check_seq(s).items, {dtype = dl.int64}) end
end
OPS.SplitToSequence = function(n)
  local axis = n:attr("axis", "INT", 0)
  local keep = n:attr("keepdims", "INT", 1) == 1
  n.nofold = true
  return function(x, split)
    local d = dim_of(n, axis, x:dim())
    local size = x.shape[d]
    local sizes
    if split then
      sizes = list(split)
      if split:dim() == 0 then
        local k = sizes[1]
        sizes = {}
        local left = size
        while left > 0 do sizes[#sizes + 1] = math.min(k, left); left = left - k end
      end
    end
    local items, start = {}, 1
    if not sizes then
      for i = 1, size do
        local t = x:narrow(d, i, 1)
        items[i] = keep and t or t:squeeze(d)
      end
    else
      for i, sz in ipairs(sizes) do
        items[i] = x:narrow(d, start, sz)
        start = start + sz
      end
    end
    return seq(items)
  end
end
-- SequenceMap(seq, more...): the body once per position; sequence inputs
-- give their element at that position, tensors themselves every time
OPS.SequenceMap = function(n)
  local plan, run = body_subgraph(n)
  local nin = #n.inputs
  return function(...)
    local args = table.pack(...)
    local free = free_values(n, args, nin + 1)
    local len = #check_seq(args[1]).items
    local outs = {}
    for j = 1, #plan.outputs do outs[j] = {} end
    for i = 1, len do
      local inputs = {}
      for k = 1, nin do inputs[k] = G.is_seq(args[k]) and args[k].items[i] or args[k] end
      local out = run(free, inputs)
      for j = 1, #plan.outputs do outs[j][i] = out[j] end
    end
    for j = 1, #plan.outputs do outs[j] = seq(outs[j]) end
    return table.unpack(outs, 1, #plan.outputs)
  end
end

OPS.ConcatFromSequence = function(n)
  local axis = n:attr("axis", "INT")
  local new_axis = n:attr("new_axis", "INT", 0) == 1
  if axis == nil then n:fail("attribute 'axis' is required") end
  n.nofold = true
  return function(s)
    local items = check_seq(s).items
    if #items == 0 then error("an empty sequence has nothing to concatenate", 0) end
    local r = items[1]:dim()
    if new_axis then return dl.stack(items, dim_of(n, axis, r + 1)) end
    return dl.cat(items, dim_of(n, axis, r))
  end
end

return OPS
