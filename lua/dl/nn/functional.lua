-- dl.nn.functional: PyTorch's torch.nn.functional.  The real thing is the C
-- table dl._F (autograd-recording kernels); this file returns it.  Until it
-- exists, and for any name it lacks, pure-Lua versions composed from the
-- tensor ops stand in (linear, relu, softmax, log_softmax, dropout,
-- batch_norm, adaptive_avg_pool2d to 1x1, nll_loss, cross_entropy without
-- label smoothing, mse_loss, l1_loss, binary_cross_entropy_with_logits,
-- flatten); the rest raise "not available yet".
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

local function check_reduction(r, op)
  r = r or "mean"
  if r ~= "mean" and r ~= "sum" and r ~= "none" then
    fail("%s: %s is not a valid value for reduction (none, mean, sum)", op, tostring(r))
  end
  return r
end

local function reduce(loss, reduction)
  if reduction == "mean" then return loss:mean() end
  if reduction == "sum" then return loss:sum() end
  return loss
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

function F.relu(x, opts)
  check_tensor(x, "relu", "input")
  opts = util.check_options(opts, "relu", {"inplace"})
  if opts.inplace then return x:relu_() end
  return x:relu()
end

local function check_dim(x, dim, op)
  if dim == nil then fail("%s: dim is required", op) end
  dim = util.check_int(dim, op, "dim")
  local n = x:dim()
  local lo, hi = -math.max(n, 1), math.max(n, 1)
  if dim == 0 or dim < lo or dim > hi then
    fail("%s: dim %d out of range for a %d-dimensional tensor (expected %d..%d, not 0)", op, dim, n, lo, hi)
  end
  return dim
end

-- softmax(x, dim): exp(x - max) / sum(exp(x - max)) along dim
function F.softmax(x, dim)
  check_tensor(x, "softmax", "input")
  dim = check_dim(x, dim, "softmax")
  if x:dim() == 0 then return dl.ones_like(x) end
  local e = (x - x:amax(dim, {keepdim = true})):exp()
  return e / e:sum(dim, {keepdim = true})
end

-- log_softmax(x, dim): (x - max) - log(sum(exp(x - max))) along dim
function F.log_softmax(x, dim)
  check_tensor(x, "log_softmax", "input")
  dim = check_dim(x, dim, "log_softmax")
  if x:dim() == 0 then return dl.zeros_like(x) end
  local t = x - x:amax(dim, {keepdim = true})
  return t - t:exp():sum(dim, {keepdim = true}):log()
end

function F.flatten(x, start_dim, end_dim)
  check_tensor(x, "flatten", "input")
  return x:flatten(start_dim or 1, end_dim or -1)
end

-- dropout(x, p, training): zeroes elements with probability p and scales the
-- rest by 1/(1-p) when training.
function F.dropout(x, p, training, inplace)
  check_tensor(x, "dropout", "input")
  p = p == nil and 0.5 or util.check_number(p, "dropout", "p")
  if p < 0 or p > 1 then fail("dropout: dropout probability has to be between 0 and 1, but got %s", util.pyrepr(p)) end
  if training == false or p == 0 or x:numel() == 0 then return x end
  local mask
  if p == 1 then
    mask = dl.zeros_like(x)
  else
    mask = dl.bernoulli(dl.full_like(x, 1 - p)):div_(1 - p)
  end
  if inplace then return x:mul_(mask) end
  return x * mask
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

-- nll_loss(x, target, {weight=, ignore_index=-100, reduction='mean'})
-- x is (N, C, d1...) or (C) log-probabilities; target (N, d1...) or () holds
-- 1-based class indices.
function F.nll_loss(x, target, opts)
  check_tensor(x, "nll_loss", "input")
  check_tensor(target, "nll_loss", "target")
  opts = util.check_options(opts, "nll_loss", {"weight", "ignore_index", "reduction"})
  local reduction = check_reduction(opts.reduction, "nll_loss")
  local ignore = opts.ignore_index or -100
  local weight = opts.weight
  if target.dtype ~= dl.int64 then fail("nll_loss: expected target of dtype int64, got %s", target.dtype.name) end
  local tshape = target.shape
  if x:dim() == 1 then
    x, target = x:unsqueeze(1), target:reshape(1)
  elseif x:dim() > 2 then
    local perm = {1}
    for i = 3, x:dim() do perm[#perm + 1] = i end
    perm[#perm + 1] = 2
    x = x:permute(perm):reshape(-1, x.shape[2])
    target = target:reshape(-1)
  end
  if x:dim() ~= 2 or target:dim() ~= 1 or target.shape[1] ~= x.shape[1] then
    fail("nll_loss: input %s and target %s do not match", util.shape_str(x.shape), util.shape_str(tshape))
  end
  local C = x.shape[2]
  local valid = target:ne(ignore)
  local safe = dl.where(valid, target, 1)
  local lo = safe:amin():item()
  local hi = safe:amax():item()
  if safe:numel() > 0 and (lo < 1 or hi > C) then
    fail("nll_loss: target %d is out of bounds (classes are 1..%d)", lo < 1 and lo or hi, C)
  end
  local picked = x:gather(2, safe:unsqueeze(2)):squeeze(2)
  local w = valid:to(x.dtype)
  if weight ~= nil then w = w * weight:index_select(1, safe) end
  local loss = -(picked * w)
  if reduction == "none" then return loss:reshape(tshape) end
  if reduction == "sum" then return loss:sum() end
  return loss:sum() / w:sum()
end

-- cross_entropy(x, target, {weight=, ignore_index=, reduction=, label_smoothing=})
function F.cross_entropy(x, target, opts)
  check_tensor(x, "cross_entropy", "input")
  opts = util.check_options(opts, "cross_entropy", {"weight", "ignore_index", "reduction", "label_smoothing"})
  if (opts.label_smoothing or 0) ~= 0 then
    fail("cross_entropy: label_smoothing is not available yet in this build")
  end
  local dim = x:dim() == 1 and 1 or 2
  return F.nll_loss(F.log_softmax(x, dim), target,
    {weight = opts.weight, ignore_index = opts.ignore_index, reduction = opts.reduction})
end

function F.mse_loss(x, y, opts)
  check_tensor(x, "mse_loss", "input")
  check_tensor(y, "mse_loss", "target")
  opts = util.check_options(opts, "mse_loss", {"reduction"})
  return reduce((x - y):square(), check_reduction(opts.reduction, "mse_loss"))
end

function F.l1_loss(x, y, opts)
  check_tensor(x, "l1_loss", "input")
  check_tensor(y, "l1_loss", "target")
  opts = util.check_options(opts, "l1_loss", {"reduction"})
  return reduce((x - y):abs(), check_reduction(opts.reduction, "l1_loss"))
end

-- binary_cross_entropy_with_logits(x, y, {weight=, pos_weight=, reduction=}),
-- in PyTorch's stable form with m = max(-x, 0):
-- (1 - y) x + lw (log(exp(-m) + exp(-x - m)) + m),  lw = 1 + (pos_weight - 1) y
function F.binary_cross_entropy_with_logits(x, y, opts)
  local op = "binary_cross_entropy_with_logits"
  check_tensor(x, op, "input")
  check_tensor(y, op, "target")
  opts = util.check_options(opts, op, {"weight", "pos_weight", "reduction"})
  local reduction = check_reduction(opts.reduction, op)
  local m = (-x):clamp_min(0)
  local lse = ((-m):exp() + (-x - m):exp()):log() + m
  local loss
  if opts.pos_weight ~= nil then
    local lw = (opts.pos_weight - 1) * y + 1
    loss = (1 - y) * x + lw * lse
  else
    loss = (1 - y) * x + lse
  end
  if opts.weight ~= nil then loss = loss * opts.weight end
  return reduce(loss, reduction)
end

local function unavailable(name)
  return function()
    fail("%s: not available yet in this build (the C functional ops have not landed)", name)
  end
end

for _, name in ipairs {"conv2d", "max_pool2d", "avg_pool2d", "pad"} do
  F[name] = unavailable(name)
end

-- The C table wins; the Lua versions only fill names it lacks.
local C = rawget(dl, "_F")
if type(C) == "table" then
  for k, v in pairs(F) do
    if C[k] == nil then C[k] = v end
  end
  return C
end
return F
