-- dl.nn.functional: PyTorch's torch.nn.functional.  The kernels are the C
-- table dl._F (conv2d, batch_norm, layer_norm, rms_norm, the poolings,
-- softmax, log_softmax, relu, dropout, pad, scaled_dot_product_attention
-- and the losses, all recording autograd); this file returns that table
-- after adding what is composed from tensor ops in Lua (linear = matmul +
-- add, flatten).  A C version of the same name wins.
--
-- Conventions (PyTorch's signatures, the Lua way): dims are 1-based, class
-- indices in targets are 1-based, options come as a trailing table.
--
-- Autocast (dl.amp): while dl.autocast is on, conv2d, linear, matmul and
-- scaled_dot_product_attention cast float32 CUDA tensors to the half dtype;
-- softmax, log_softmax, the losses, layer_norm and rms_norm (input, weight
-- and bias, as PyTorch's autocast: the result is float32) and batch_norm
-- cast half CUDA tensors up to float32 (batch_norm first tries half input
-- with float32 weights and remembers whether the kernel takes it).  CPU
-- tensors are never cast.  While autocast is off a wrapper costs one table
-- read.
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
  for _, name in ipairs {"conv2d", "linear", "matmul", "scaled_dot_product_attention"} do
    wrap(name, to_half)
  end
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
