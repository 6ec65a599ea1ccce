-- dl.nn.functional: PyTorch's torch.nn.functional.  The kernels are the C
-- table dl._F (softmax, log_softmax, relu, dropout, pad and the losses, all
-- recording autograd); this file returns that table after adding, for the
-- names it does not have yet, Lua versions composed from tensor ops
-- (linear = matmul + add, flatten, batch_norm from mean/var, and
-- adaptive_avg_pool2d to 1x1 as a mean) and clear "not available yet" errors
-- (conv2d, max_pool2d, avg_pool2d).  A C version registered later wins.
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

-- batch_norm(x, running_mean, running_var, weight, bias, training, momentum, eps)
-- x is (N, C, *); statistics per channel (dim 2).  When training, the batch
-- statistics normalise and the running ones (if given) move by momentum:
-- running = (1 - momentum) * running + momentum * batch (unbiased variance).
function F.batch_norm(x, running_mean, running_var, weight, bias, training, momentum, eps)
  check_tensor(x, "batch_norm", "input")
  momentum = momentum or 0.1
  eps = eps or 1e-5
  if x:dim() < 2 then fail("batch_norm: expected an input with at least 2 dimensions, got %d", x:dim()) end
  local shape = x.shape
  local C = shape[2]
  local bshape = {1, C}
  for i = 3, #shape do bshape[i] = 1 end
  local dims = {1}
  for i = 3, #shape do dims[#dims + 1] = i end
  local mean, var
  if training then
    local n = x:numel() // C
    if n <= 1 then
      fail("batch_norm: expected more than 1 value per channel when training, got input size %s",
        util.shape_str(shape))
    end
    mean = x:mean({dim = dims, keepdim = true})
    var = x:var({dim = dims, unbiased = false, keepdim = true})
    if running_mean ~= nil then
      dl.no_grad(function()
        running_mean:mul_(1 - momentum):add_(mean:detach():view(C), {alpha = momentum})
      end)
    end
    if running_var ~= nil then
      dl.no_grad(function()
        running_var:mul_(1 - momentum):add_(var:detach():view(C):mul(n / (n - 1)), {alpha = momentum})
      end)
    end
  else
    if running_mean == nil or running_var == nil then
      fail("batch_norm: running_mean and running_var must be defined in evaluation mode")
    end
    mean = running_mean:view(bshape)
    var = running_var:view(bshape)
  end
  local y = (x - mean) * (var + eps):rsqrt()
  if weight ~= nil then y = y * weight:view(bshape) end
  if bias ~= nil then y = y + bias:view(bshape) end
  return y
end

function F.adaptive_avg_pool2d(x, output_size)
  check_tensor(x, "adaptive_avg_pool2d", "input")
  local o = util.check_tuple(output_size, 2, "adaptive_avg_pool2d", "output_size", 1)
  if x:dim() ~= 3 and x:dim() ~= 4 then
    fail("adaptive_avg_pool2d: expected a 3-D or 4-D input, got %d-D", x:dim())
  end
  if o[1] == 1 and o[2] == 1 then return x:mean({dim = {-2, -1}, keepdim = true}) end
  fail("adaptive_avg_pool2d: output sizes other than 1x1 are not available yet in this build")
end

local function unavailable(name)
  return function()
    fail("%s: not available yet in this build (the C functional ops have not landed)", name)
  end
end

for _, name in ipairs {"conv2d", "max_pool2d", "avg_pool2d"} do
  F[name] = unavailable(name)
end

-- The C table wins; the Lua versions only fill names it lacks.
local C = rawget(dl, "_F")
if type(C) ~= "table" then return F end
for k, v in pairs(F) do
  if C[k] == nil then C[k] = v end
end
return C
