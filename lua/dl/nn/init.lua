-- dl.nn: the neural-network namespace (PyTorch's torch.nn).
--
--   dl.nn.Module, dl.nn.Parameter          base class (module.lua)
--   Sequential, ModuleList                 containers (containers.lua)
--   Linear, Conv2d, BatchNorm2d, ReLU, ... layers (layers.lua)
--   Conv1d, Conv3d, ConvTranspose2d, PReLU, InstanceNorm2d, Upsample, ... (layers_composed.lua)
--   CrossEntropyLoss, MSELoss, ...         losses (loss.lua)
--   dl.nn.functional (also dl.nn.F)        functional ops (functional.lua)
--   dl.nn.init                             initialisers (initializers.lua)
--   dl.nn.utils                            count_parameters, clip_grad_norm_
--
-- Loaded lazily by `dl` on first access of dl.nn.
local dl = require "dl"
local util = require "dl.util"
local Module = require "dl.nn.module"

local nn = {}

nn.Module = Module
nn.Parameter = Module.Parameter
nn.functional = require "dl.nn.functional"
nn.F = nn.functional
nn.init = require "dl.nn.initializers"

for _, family in ipairs {"dl.nn.containers", "dl.nn.layers", "dl.nn.layers_composed", "dl.nn.loss"} do
  for k, v in pairs(require(family)) do nn[k] = v end
end

-- true when v is a Module instance
nn.is_module = Module.is_module

-- DistributedDataParallel (lua/dl/nn/parallel.lua)
nn.parallel = require "dl.nn.parallel"

nn.utils = {}

-- The number of parameter elements of a module ({trainable_only=true}: only
-- those that require grad).
function nn.utils.count_parameters(m, opts)
  if not Module.is_module(m) then util.fail("count_parameters: a Module is required, got %s", type(m)) end
  return m:num_parameters(opts)
end

-- Scales the grads of params (a tensor, an array of tensors or a Module) in
-- place so that their joint norm is at most max_norm; returns the norm before
-- clipping (a 0-dim tensor), as PyTorch's clip_grad_norm_.
function nn.utils.clip_grad_norm_(params, max_norm, opts)
  opts = util.check_options(opts, "clip_grad_norm_", {"norm_type", "error_if_nonfinite"})
  if Module.is_module(params) then params = params:parameters() end
  if dl.is_tensor(params) then params = {params} end
  util.check_number(max_norm, "clip_grad_norm_", "max_norm")
  local norm_type = opts.norm_type or 2.0
  local grads = {}
  for _, p in ipairs(params) do
    if p.grad ~= nil then grads[#grads + 1] = p.grad end
  end
  if #grads == 0 then return dl.tensor(0.0) end
  return dl.no_grad(function()
    local total
    if norm_type == math.huge then
      local m = {}
      for i, g in ipairs(grads) do m[i] = g:abs():amax() end
      total = dl.stack(m):amax()
    else
      local n = {}
      for i, g in ipairs(grads) do n[i] = g:norm({p = norm_type}) end
      total = dl.stack(n):norm({p = norm_type})
    end
    local tn = total:item()
    if opts.error_if_nonfinite and (tn ~= tn or tn == math.huge) then
      util.fail("clip_grad_norm_: the total norm of order %s for gradients is non-finite", util.pyrepr(norm_type))
    end
    local coef = max_norm / (tn + 1e-6)
    if coef < 1 then
      for _, g in ipairs(grads) do g:mul_(coef) end
    end
    return total
  end)
end

return nn
