-- dl.nn.functional: PyTorch's torch.nn.functional.  The kernels are the C
-- table dl._F (conv2d, batch_norm, the poolings, softmax, log_softmax, relu,
-- dropout, pad and the losses, all recording autograd); this file returns
-- that table after adding what is composed from tensor ops in Lua (linear =
-- matmul + add, flatten).  A C version of the same name wins.
--
-- Conventions (PyTorch's signatures, the Lua way): dims are 1-based, class
-- indices in targets are 1-based, options come as a trailing table.
local dl = require "dl"
local util = require "dl.util"

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
return C
