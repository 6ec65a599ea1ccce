-- dl.nn.functional: PyTorch's torch.nn.functional.  The kernels are the C
-- table dl._F (conv2d, batch_norm, layer_norm, rms_norm, the poolings,
-- softmax, log_softmax, relu, dropout, pad and the losses, all recording
-- autograd); this file returns
-- that table after adding what is composed from tensor ops in Lua (linear =
-- matmul + add, flatten).  A C version of the same name wins.
--
-- Conventions (PyTorch's signatures, the Lua way): dims are 1-based, class
-- indices in targets are 1-based, options come as a trailing table.
--
-- Autocast (dl.amp): while dl.autocast is on, conv2d, linear and matmul cast
-- float32 CUDA tensors to the half dtype; softmax, log_softmax, the losses,
-- layer_norm and rms_norm (input, weight and bias, as PyTorch's autocast:
-- the result is float32) and batch_norm cast half CUDA tensors up to
-- float32 (batch_norm first tries half input with float32 weights and
-- remembers whether the kernel takes it).  CPU tensors are never cast.  While autocast is off a wrapper costs
-- one table read.
local dl = require "dl"
local util = require "dl.util"
local amp = require "dl.amp"

local fail = util.fail
local F = {}

local function check_tensor(x, op, what)
  if not dl.is_tensor(x) then fail("%s: %s must be a tensor, got %s", op, what, type(x)) end
  return x
end

-- linear(x, w, b): x @ w^T + b;  x is (*, in), w is (out, in), b is (out)
function F.linear(x, w, b)
  check_tensor(x, "linear", "input")
  check_tensor(w, "linear", "weight")
  if w:dim() ~= 2 then fail("linear: weight must be 2-D, got %d-D", w:dim()) end
  local y = dl.matmul(x, w:t())
  if b ~= nil then y = y + check_tensor(b, "linear", "bias") end
  return y
end

function F.flatten(x, start_dim, end_dim)
  check_tensor(x, "flatten", "input")
  return x:flatten(start_dim or 1, end_dim or -1)
end

-- conv_transpose2d(x, w, b, {stride=1, padding=0, output_padding=0,
-- groups=1, dilation=1}): PyTorch's transposed convolution.  x is (N, Cin,
-- H, W) or unbatched (Cin, H, W), w is (Cin, Cout/groups, kH, kW).  It is
-- conv2d's input gradient, so it runs on conv2d's backward kernel (oneDNN
-- on the CPU, cuDNN on CUDA); its own backward is conv2d (for x) and
-- conv2d's weight gradient (for w), recorded as one autograd node.
local function pair(v, what, min)
  if v == nil then return nil end
  if math.type(v) == "integer" then v = {v, v} end
  if type(v) ~= "table" or math.type(v[1]) ~= "integer" or math.type(v[2]) ~= "integer" or #v ~= 2 then
    fail("conv_transpose2d: %s must be an integer or a pair of integers", what)
  end
  if v[1] < min or v[2] < min then fail("conv_transpose2d: %s must be >= %d, got {%d, %d}", what, min, v[1], v[2]) end
  return v
end

local ConvTranspose -- the autograd Function, made on first use
local function conv_transpose_fn()
  if ConvTranspose then return ConvTranspose end
  local nnk = dl._nn
  ConvTranspose = require("dl.autograd").Function{
    name = "ConvTranspose2DBackward",
    forward = function(ctx, x, w, o)
      ctx.o = o
      ctx:save_for_backward(x, w)
      local out = dl.empty(o.out_shape, {dtype = x.dtype, device = x.device})
      return (nnk.conv2d_backward(x, out, w, {stride = o.stride, padding = o.padding, dilation = o.dilation,
        groups = o.groups, need = {true, false, false}}))
    end,
    backward = function(ctx, g)
      local x, w = ctx.saved_tensors[1], ctx.saved_tensors[2]
      local o = ctx.o
      local gx, gw
      if ctx.needs_input_grad[1] then
        gx = nnk.conv2d_forward(g, w, nil, {stride = o.stride, padding = o.padding, dilation = o.dilation,
          groups = o.groups})
      end
      if ctx.needs_input_grad[2] then
        local _
        _, gw = nnk.conv2d_backward(x, g, w, {stride = o.stride, padding = o.padding, dilation = o.dilation,
          groups = o.groups, need = {false, true, false}})
      end
      return gx, gw
    end,
  }
  return ConvTranspose
end

function F.conv_transpose2d(x, w, b, opts)
  check_tensor(x, "conv_transpose2d", "input")
  check_tensor(w, "conv_transpose2d", "weight")
  opts = util.check_options(opts, "conv_transpose2d", {"stride", "padding", "output_padding", "groups", "dilation"})
  local stride = pair(opts.stride, "stride", 1) or {1, 1}
  local padding = pair(opts.padding, "padding", 0) or {0, 0}
  local outpad = pair(opts.output_padding, "output_padding", 0) or {0, 0}
  local dilation = pair(opts.dilation, "dilation", 1) or {1, 1}
  local groups = opts.groups or 1
  if math.type(groups) ~= "integer" or groups < 1 then fail("conv_transpose2d: groups must be a positive integer") end
  local unbatched = x:dim() == 3
  if unbatched then x = x:unsqueeze(1) end
  if x:dim() ~= 4 then fail("conv_transpose2d: input must be 3-D or 4-D, got %d-D", x:dim()) end
  if w:dim() ~= 4 then fail("conv_transpose2d: weight must be 4-D (Cin, Cout/groups, kH, kW), got %d-D", w:dim()) end
  local N, C, H, W = x.shape[1], x.shape[2], x.shape[3], x.shape[4]
  if w.shape[1] ~= C then
    fail("conv_transpose2d: input has %d channels, weight expects %d", C, w.shape[1])
  end
  if C % groups ~= 0 then fail("conv_transpose2d: %d input channels are not divisible by groups=%d", C, groups) end
  local out = {N, w.shape[2] * groups}
  for i = 1, 2 do
    if outpad[i] >= stride[i] then
      fail("conv_transpose2d: output_padding (%d) must be smaller than stride (%d)", outpad[i], stride[i])
    end
    local size = ({H, W})[i]
    out[i + 2] = (size - 1) * stride[i] - 2 * padding[i] + dilation[i] * (w.shape[i + 2] - 1) + outpad[i] + 1
    if out[i + 2] <= 0 then
      fail("conv_transpose2d: the output would be empty (size %d along spatial dim %d)", out[i + 2], i)
    end
  end
  local y = conv_transpose_fn()(x, w, {stride = stride, padding = padding, dilation = dilation, groups = groups,
    out_shape = out})
  if b ~= nil then y = y + check_tensor(b, "conv_transpose2d", "bias"):reshape(1, -1, 1, 1) end
  if unbatched then y = y:squeeze(1) end
  return y
end

-- The C table wins; the Lua versions only fill names it lacks.
local C = assert(rawget(dl, "_F"), "dl._F is missing: the C library is incomplete")
for k, v in pairs(F) do
  if C[k] == nil then C[k] = v end
end

-- --- autocast wrappers (installed once per state: dl._F is shared) -----------------

local state, to_half, to_float, applies = amp._state, amp._to_half, amp._to_float, amp._applies

-- Every tensor among the arguments passed through cast.
local function cast_all(cast, ...)
  local n = select("#", ...)
  local a = table.pack(...)
  for i = 1, n do a[i] = cast(a[i]) end
  return table.unpack(a, 1, n)
end

local function wrap(name, cast)
  local f = C[name]
  if f == nil then return end
  C[name] = function(x, ...)
    if state.enabled and applies(x) then return f(cast_all(cast, x, ...)) end
    return f(x, ...)
  end
end

if not rawget(C, "_autocast_wrapped") then
  rawset(C, "_autocast_wrapped", true)
  for _, name in ipairs {"conv2d", "linear", "matmul"} do wrap(name, to_half) end
  for _, name in ipairs {"softmax", "log_softmax", "cross_entropy", "nll_loss", "mse_loss", "l1_loss",
    "binary_cross_entropy_with_logits", "layer_norm", "rms_norm"} do
    wrap(name, to_float)
  end
  -- batch_norm(x, running_mean, running_var, weight, bias, ...): the
  -- statistics and affine parameters stay float32; x stays half when the
  -- kernel takes mixed input, else it is cast up.
  local bn = C.batch_norm
  local half_ok -- nil: not tried yet
  C.batch_norm = function(x, ...)
    if not (state.enabled and applies(x)) then return bn(x, ...) end
    local args = table.pack(...)
    for i = 1, args.n do args[i] = to_float(args[i]) end
    if half_ok == false or x.dtype == dl.float32 then
      return bn(to_float(x), table.unpack(args, 1, args.n))
    end
    if half_ok then return bn(x, table.unpack(args, 1, args.n)) end
    local ok, y = pcall(bn, x, table.unpack(args, 1, args.n))
    if ok then
      half_ok = true
      return y
    end
    local y2 = bn(to_float(x), table.unpack(args, 1, args.n))
    half_ok = false
    return y2
  end
end
return C
