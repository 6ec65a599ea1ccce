-- dl.nn: the neural-network namespace (PyTorch's torch.nn).
--
--   dl.nn.Module, dl.nn.Parameter          base class (module.lua)
--   Sequential, ModuleList                 containers (containers.lua)
--   Linear, Conv2d, BatchNorm2d, ReLU, ... layers (layers.lua)
--   Conv1d, Conv3d, ConvTranspose2d, PReLU, InstanceNorm2d, Upsample, ... (layers_composed.lua)
--   Embedding, EmbeddingBag               embeddings (embedding.lua)
--   LSTM, GRU, LSTMCell, GRUCell           recurrent layers (rnn.lua)
--   CrossEntropyLoss, MSELoss, ...         losses (loss.lua)
--   MultiheadAttention                     attention layers (attention.lua)
--   TransformerEncoderLayer, Transformer.. Transformer layers (transformer.lua)
--   dl.nn.functional (also dl.nn.F)        functional ops (functional.lua)
--   dl.nn.init                             initialisers (initializers.lua)
--   dl.nn.utils                            count_parameters, clip_grad_norm_, clip_grad_value_,
--                                          get_total_norm, clip_grads_with_norm_
--   dl.nn.utils.rnn                        packed sequences (rnn_utils.lua)
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

for _, family in ipairs {"dl.nn.containers", "dl.nn.layers", "dl.nn.layers_composed", "dl.nn.embedding",
  "dl.nn.loss", "dl.nn.attention", "dl.nn.transformer", "dl.nn.rnn"} do
  for k, v in pairs(require(family)) do nn[k] = v end
end

-- true when v is a Module instance
nn.is_module = Module.is_module

-- DistributedDataParallel, SyncBatchNorm (lua/dl/nn/parallel.lua)
nn.parallel = require "dl.nn.parallel"
nn.SyncBatchNorm = nn.parallel.SyncBatchNorm

nn.utils = {}

-- pack_padded_sequence, pad_packed_sequence, pack_sequence, pad_sequence,
-- PackedSequence (lua/dl/nn/rnn_utils.lua)
nn.utils.rnn = require "dl.nn.rnn_utils"

-- The number of parameter elements of a module ({trainable_only=true}: only
-- those that require grad).
function nn.utils.count_parameters(m, opts)
  if not Module.is_module(m) then util.fail("count_parameters: a Module is required, got %s", type(m)) end
  return m:num_parameters(opts)
end

-- --- gradient clipping (PyTorch's torch.nn.utils.clip_grad) ----------------------
-- params: a tensor, an array of tensors or a Module (its parameters); those
-- without a gradient are skipped, and a tensor listed twice (a tied weight)
-- counts once.  The work is one multi-tensor pass over all gradients (C:
-- src/ops/clipgrad.c); on CUDA the total norm stays on the device and the
-- scaling reads it there, so nothing waits for the GPU unless
-- error_if_nonfinite asks for the check.  foreach is accepted for PyTorch's
-- signature: every path is the multi-tensor one.

local function norm_type_of(v, op)
  if v == nil then return 2.0 end
  if v == "inf" then return math.huge end
  if v == "-inf" then return -math.huge end
  return util.check_number(v, op, "norm_type")
end

-- The distinct tensors of params (a tensor, an array or a Module).
local function tensor_list(params, op)
  if Module.is_module(params) then params = params:parameters() end
  if dl.is_tensor(params) then params = {params} end
  if type(params) ~= "table" then
    util.fail("%s: parameters must be a tensor, an array of tensors or a Module, got %s", op, type(params))
  end
  local out, seen = {}, {}
  for i, p in ipairs(params) do
    if not dl.is_tensor(p) then util.fail("%s: parameters[%d] is a %s, expected a tensor", op, i, type(p)) end
    if not seen[p] then
      seen[p] = true
      out[#out + 1] = p
    end
  end
  return out
end

-- The gradients of the distinct parameters that have one.
local function grads_of(params, op)
  local grads = {}
  for _, p in ipairs(tensor_list(params, op)) do
    if p.grad ~= nil then grads[#grads + 1] = p.grad end
  end
  return grads
end

local function check_finite(total, norm_type, op)
  local t = total:item()
  if t ~= t or t == math.huge or t == -math.huge then
    util.fail("%s: the total norm of order %s for gradients from `parameters` is non-finite, so it cannot be clipped. " ..
      "To disable this error and scale the gradients by the non-finite norm anyway, set error_if_nonfinite=false",
      op, util.pyrepr(norm_type))
  end
end

-- get_total_norm(tensors, {norm_type=2, error_if_nonfinite=false, foreach=}):
-- the norm of all the tensors' elements together, a 0-dim tensor.
function nn.utils.get_total_norm(tensors, opts)
  local op = "get_total_norm"
  opts = util.check_options(opts, op, {"norm_type", "error_if_nonfinite", "foreach"})
  local p = norm_type_of(opts.norm_type, op)
  local total = dl._nn.grads_total_norm(tensor_list(tensors, op), p)
  if opts.error_if_nonfinite then check_finite(total, p, op) end
  return total
end

-- clip_grads_with_norm_(params, max_norm, total_norm, {foreach=}): scales the
-- gradients by min(max_norm / (total_norm + 1e-6), 1) in place.
function nn.utils.clip_grads_with_norm_(params, max_norm, total_norm, opts)
  local op = "clip_grads_with_norm_"
  util.check_options(opts, op, {"foreach"})
  util.check_number(max_norm, op, "max_norm")
  if not dl.is_tensor(total_norm) then util.fail("%s: total_norm must be a tensor, got %s", op, type(total_norm)) end
  local grads = grads_of(params, op)
  if #grads > 0 then dl._nn.grads_scale_by_norm_(grads, total_norm, max_norm) end
end

-- clip_grad_norm_(params, max_norm, {norm_type=2, error_if_nonfinite=false,
-- foreach=}): scales the gradients in place so that their joint norm is at
-- most max_norm; returns the norm before clipping (a 0-dim tensor on the
-- gradients' device), as PyTorch.
function nn.utils.clip_grad_norm_(params, max_norm, opts)
  local op = "clip_grad_norm_"
  opts = util.check_options(opts, op, {"norm_type", "error_if_nonfinite", "foreach"})
  util.check_number(max_norm, op, "max_norm")
  local p = norm_type_of(opts.norm_type, op)
  local grads = grads_of(params, op)
  if #grads == 0 then return dl.tensor(0.0) end
  local total = dl._nn.grads_total_norm(grads, p)
  if opts.error_if_nonfinite then check_finite(total, p, op) end
  dl._nn.grads_scale_by_norm_(grads, total, max_norm)
  return total
end

-- clip_grad_value_(params, clip_value, {foreach=}): clamps the gradients in
-- place to [-clip_value, clip_value].
function nn.utils.clip_grad_value_(params, clip_value, opts)
  local op = "clip_grad_value_"
  util.check_options(opts, op, {"foreach"})
  util.check_number(clip_value, op, "clip_value")
  local grads = grads_of(params, op)
  if #grads > 0 then dl._nn.grads_clamp_(grads, clip_value) end
end

return nn
