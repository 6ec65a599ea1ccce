-- dl.models fusion: evaluation-mode batch norm folded into the convolution
-- before it (PyTorch's torch.nn.utils.fuse_conv_bn_eval), and a ResNet
-- prepared for inference with every convolution + batch norm pair folded.
--
--   dl.models.fuse_conv_bn_eval(conv, bn)    -> conv, with a new weight and bias
--   dl.models.optimize_for_inference(model)  -> model (a ResNet, or an imported
--                                               dl.onnx model), folded, in eval mode
--
-- Invariants: with s = gamma / sqrt(running_var + eps) per output channel,
-- the folded convolution has w' = w * s and b' = (b - running_mean) * s + beta,
-- computed in float64 and cast to the weight's dtype, so a folded float32
-- model differs from the unfused one by rounding only.  New tensors are
-- assigned; the old ones (an optimizer may hold them) are not written.  The
-- batch norm is replaced by Identity, so the model is for inference only
-- afterwards: ResNet:train() refuses a folded model.
--
-- A folded ResNet also runs each convolution's ReLU, and each block's
-- residual add, inside the convolution (dl._nn.conv2d_fused: oneDNN post-ops
-- on the CPU), whenever no gradient is wanted (under dl.no_grad, or with
-- parameters and input that do not require grad); otherwise the same modules
-- run one by one, with autograd.  One difference beyond rounding: oneDNN's
-- fused ReLU gives 0 for a NaN (torch.relu and the unfused model keep NaN),
-- except on 1x1 planar layers, whose bias, add and ReLU are a pass of dlua's.
local dl = require "dl"
local util = require "dl.util"
local nn = require "dl.nn"

local fail = util.fail
local M = {}

function M.fuse_conv_bn_eval(conv, bn)
  if not (nn.Module.isinstance(conv, nn.Conv2d)) then fail("fuse_conv_bn_eval: conv must be a Conv2d") end
  if not (nn.Module.isinstance(bn, nn.BatchNorm2d)) then
    fail("fuse_conv_bn_eval: bn must be a BatchNorm2d")
  end
  if conv.training or bn.training then fail("fuse_conv_bn_eval: both modules must be in eval mode") end
  if bn.running_mean == nil or bn.running_var == nil then
    fail("fuse_conv_bn_eval: the batch norm has no running statistics (track_running_stats=false)")
  end
  if bn.num_features ~= conv.out_channels then
    fail("fuse_conv_bn_eval: the batch norm has %d features, the convolution %d output channels",
      bn.num_features, conv.out_channels)
  end
  dl.no_grad(function()
    local w = conv.weight:detach()
    local C = conv.out_channels
    local s = (bn.running_var:double() + bn.eps):sqrt()
    s = (bn.weight and bn.weight:detach():double() or dl.ones(C, {dtype = dl.float64, device = w.device})) / s
    local b = conv.bias and conv.bias:detach():double() or dl.zeros(C, {dtype = dl.float64, device = w.device})
    b = (b - bn.running_mean:double()) * s
    if bn.bias then b = b + bn.bias:detach():double() end
    conv.weight = nn.Module.Parameter((w:double() * s:reshape({C, 1, 1, 1})):to(w.dtype))
    conv.bias = nn.Module.Parameter(b:to(w.dtype))
  end)
  return conv
end

-- Folds m[conv_name] and m[bn_name] when both are there.
local function fold(m, conv_name, bn_name)
  local conv, bn = m[conv_name], m[bn_name]
  if conv == nil or bn == nil then return end
  M.fuse_conv_bn_eval(conv, bn)
  m[bn_name] = nn.Identity()
end

function M.optimize_for_inference(model)
  -- a model that knows how (dl.onnx's OnnxModel) folds itself
  if nn.is_module(model) and type(model.optimize_for_inference) == "function" then
    return (model:optimize_for_inference())
  end
  local resnet = require "dl.models.resnet"
  if not (nn.Module.isinstance(model, resnet.ResNet)) then
    fail("optimize_for_inference: expected a ResNet, got %s", tostring(model and model:_get_name()))
  end
  model:eval()
  fold(model, "conv1", "bn1")
  for _, layer in ipairs({model.layer1, model.layer2, model.layer3, model.layer4}) do
    for _, block in ipairs(layer:children()) do
      for k = 1, 3 do fold(block, "conv" .. k, "bn" .. k) end
      if block.downsample then fold(block.downsample, "0", "1") end
      block._folded = true
    end
  end
  model._folded = true
  return model
end

-- --- fused forwards of folded ResNets ------------------------------------------

-- Whether a folded module's forward may skip autograd: no gradient can flow.
function M.no_grad_needed(m, x)
  if not dl.is_grad_enabled() then return true end
  if x.requires_grad then return false end
  for _, p in ipairs(m:parameters()) do
    if p.requires_grad then return false end
  end
  return true
end

-- relu?(conv(x) + add?) in one call, or nil when conv's options do not allow it.
-- reuse: add is not read again (its memory may take the result).
local function conv_fused(conv, x, add, relu, reuse)
  if type(conv.padding) ~= "table" or conv.padding_mode ~= "zeros" then return nil end
  return dl._nn.conv2d_fused(x, conv.weight, conv.bias, {stride = conv.stride,
    padding = conv.padding, dilation = conv.dilation, groups = conv.groups, add = add,
    relu = relu, reuse_add = reuse})
end

local function is_identity(m) return nn.Module.isinstance(m, nn.Identity) end

-- A residual block (BasicBlock: convs 1-2, Bottleneck: 1-3) whose batch norms
-- are folded, with the fused calls; nil when it cannot be fused.  owned: x
-- is an intermediate of the caller's forward that nothing reads after this
-- block, so the residual sum may be written into it (else into a copy).
function M.block_forward(block, x, owned)
  local n = block.conv3 and 3 or 2
  for k = 1, n do
    if not is_identity(block["bn" .. k]) then return nil end
  end
  local identity = x
  local ds = block.downsample
  if ds then
    local c, bn = ds["0"], ds["1"]
    if not (c and bn and is_identity(bn) and nn.Module.isinstance(c, nn.Conv2d)) or ds["2"] then
      return nil
    end
    identity = conv_fused(c, x, nil, false)
    if identity == nil then return nil end
  end
  -- the block's own intermediates are released as soon as the next
  -- convolution has read them (their buffers then serve the next layers
  -- while in cache); x may be the caller's and stays
  local out = x
  for k = 1, n - 1 do
    local nxt = conv_fused(block["conv" .. k], out, nil, true)
    if nxt == nil then return nil end
    if out ~= x then getmetatable(out).__close(out) end
    out = nxt
  end
  -- the downsampled identity is this block's own, so it may take the sum;
  -- x itself only when the caller gives it up
  local y = conv_fused(block["conv" .. n], out, identity, true, ds ~= nil or owned == true)
  if y ~= nil and out ~= x then getmetatable(out).__close(out) end
  return y
end

-- The stem's conv + ReLU of a folded ResNet; nil when it cannot be fused.
function M.stem_forward(model, x)
  if not is_identity(model.bn1) then return nil end
  return conv_fused(model.conv1, x, nil, true)
end

return M
