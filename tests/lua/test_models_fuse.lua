-- test_models_fuse.lua - batch norm folded into convolutions for inference
-- (dl.models.fuse_conv_bn_eval, dl.models.optimize_for_inference): the
-- folded model computes the unfused model's logits up to float32 rounding
-- (float64: to 1e-12), leaves the tensors it replaced untouched, refuses
-- training afterwards, and bad arguments get clear errors.
local T = require "testlib"
local nn = dl.nn

local function relerr(a, b)
  return (a:double() - b:double()):norm():item() / b:double():norm():item()
end

-- a model whose batch norms have non-trivial running statistics and affine terms
local function trained(arch, dtype)
  dl.manual_seed(0)
  local m = dl.models[arch]({num_classes = 10}):to(dtype)
  dl.no_grad(function()
    for _, p in ipairs(m:modules()) do
      if p:isinstance(nn.BatchNorm2d) then
        p.weight:copy_(dl.rand(p.num_features):to(dtype) + 0.5)
        p.bias:copy_(dl.randn(p.num_features):to(dtype) * 0.1)
      end
    end
    m:train()
    for _ = 1, 2 do m((dl.randn(4, 3, 32, 32) * 2 + 0.5):to(dtype)) end
  end)
  return m:eval()
end

for _, c in ipairs({{"resnet18", dl.float32}, {"resnet18", dl.float64}, {"resnet50", dl.float32}}) do
  local arch, dtype = c[1], c[2]
  do
    T.case(arch .. " " .. tostring(dtype), function()
      local m = trained(arch, dtype)
      local x = dl.randn(2, 3, 32, 32):to(dtype)
      local y0 = dl.no_grad(function() return m(x) end)
      local w0 = m.conv1.weight
      local w0copy = w0:clone()
      T.truthy(dl.models.optimize_for_inference(m) == m, "returns the model")
      local y1 = dl.no_grad(function() return m(x) end)
      local e = relerr(y1, y0)
      T.truthy(e <= (dtype == dl.float64 and 1e-12 or 1e-5), string.format("folded logits: relative error %.3g", e))
      T.truthy(m.conv1.weight ~= w0 and (w0 - w0copy):abs():max():item() == 0, "old weight untouched")
      T.truthy(m.conv1.bias ~= nil, "folded conv has a bias")
      for _, sub in ipairs(m:modules()) do
        T.truthy(not sub:isinstance(nn.BatchNorm2d), "no batch norm left")
      end
      T.raises(function() m:train() end, "folded for inference")
      m:eval() -- still allowed
    end)
  end
end

T.case("fuse_conv_bn_eval arguments", function()
  local conv, bn = nn.Conv2d(3, 4, 3, {bias = true}), nn.BatchNorm2d(4)
  T.raises(function() dl.models.fuse_conv_bn_eval(conv, bn) end, "eval mode")
  conv:eval(); bn:eval()
  T.raises(function() dl.models.fuse_conv_bn_eval(bn, conv) end, "conv must be a Conv2d")
  T.raises(function() dl.models.fuse_conv_bn_eval(conv, nn.BatchNorm2d(5):eval()) end, "5 features")
  local x = dl.randn(1, 3, 8, 8)
  local y0 = dl.no_grad(function() return bn(conv(x)) end)
  dl.models.fuse_conv_bn_eval(conv, bn)
  T.truthy(relerr(dl.no_grad(function() return conv(x) end), y0) <= 1e-6, "conv with its own bias folds")
  T.raises(function() dl.models.optimize_for_inference(conv) end, "expected a ResNet")
  -- no conv bias, no affine batch norm
  conv, bn = nn.Conv2d(3, 4, 3, {bias = false}):eval(), nn.BatchNorm2d(4, {affine = false}):eval()
  dl.no_grad(function()
    bn.running_mean:copy_(dl.randn(4))
    bn.running_var:copy_(dl.rand(4) + 0.5)
  end)
  y0 = dl.no_grad(function() return bn(conv(x)) end)
  dl.models.fuse_conv_bn_eval(conv, bn)
  T.truthy(relerr(dl.no_grad(function() return conv(x) end), y0) <= 1e-6, "plain batch norm folds")
end)

T.done()
