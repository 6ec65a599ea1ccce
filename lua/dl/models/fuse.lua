-- dl.models fusion: evaluation-mode batch norm folded into the convolution
-- before it (PyTorch's torch.nn.utils.fuse_conv_bn_eval), and a ResNet
-- prepared for inference with every convolution + batch norm pair folded.
--
--   dl.models.fuse_conv_bn_eval(conv, bn)    -> conv, with a new weight and bias
--   dl.models.optimize_for_inference(model)  -> model (a ResNet), folded, in eval mode
--
-- Invariants: with s = gamma / sqrt(running_var + eps) per output channel,
-- the folded convolution has w' = w * s and b' = (b - running_mean) * s + beta,
-- computed in float64 and cast to the weight's dtype, so a folded float32
-- model differs from the unfused one by rounding only.  New tensors are
-- assigned; the old ones (an optimizer may hold them) are not written.  The
-- batch norm is replaced by Identity, so the model is for inference only
-- afterwards: ResNet:train() refuses a folded model.
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
    end
  end
  model._folded = true
  return model
end

return M
