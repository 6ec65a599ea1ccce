-- test_models_fuse.lua - batch norm folded into convolutions for inference
-- (dl.models.fuse_conv_bn_eval, dl.models.optimize_for_inference): the
-- folded model computes the unfused model's logits up to float32 rounding
-- (float64: to 1e-12), leaves the tensors it replaced untouched, refuses
-- training afterwards, and bad arguments get clear errors.  Without autograd
-- a folded ResNet runs conv + ReLU (+ residual add) as one call
-- (dl._nn.conv2d_fused, oneDNN post-ops): same values as the separate ops,
-- in NCHW and channels-last; with autograd it runs them one by one.
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

T.case("conv2d_fused: relu(conv + add) equals the separate ops", function()
  dl.manual_seed(5)
  local F = dl.nn.functional
  local CL = {memory_format = "channels_last"}
  -- C, O, kernel, stride, padding, groups, bias
  for _, c in ipairs({{3, 8, 7, 2, 3, 1, true}, {8, 16, 3, 1, 1, 1, false}, {8, 16, 1, 2, 0, 1, true},
                      {8, 16, 1, 1, 0, 1, false}, {8, 8, 3, 1, 1, 4, true}}) do
    local C, O, k, st, pad, g, has_b = table.unpack(c)
    local x, w = dl.randn(2, C, 10, 9), dl.randn(O, C // g, k, k)
    local b = has_b and dl.randn(O) or nil
    local o = {stride = st, padding = pad, groups = g}
    local y = F.conv2d(x, w, b, o)
    local add = dl.randn(y.shape)
    for _, cl in ipairs({false, true}) do
      local xi = cl and x:contiguous(CL) or x
      for _, case in ipairs({{nil, true}, {add, false}, {add, true}, {nil, false}}) do
        local a, relu = case[1], case[2]
        local want = a and y + a or y
        if relu then want = F.relu(want) end
        local got = dl._nn.conv2d_fused(xi, w, b, {stride = st, padding = pad, groups = g, add = a,
          relu = relu})
        T.truthy(relerr(got, want) <= 1e-6, string.format("C%d O%d k%d g%d cl=%s add=%s relu=%s", C, O,
          k, g, tostring(cl), tostring(a ~= nil), tostring(relu)))
        T.eq(got:is_contiguous(), not cl, "output layout follows the input's")
        if k == 1 and not cl then -- bias, add and ReLU in one pass of ours: the same sums
          T.eq((got - want):abs():max():item(), 0, "1x1 planar: bit-equal to the separate ops")
        end
      end
    end
  end
  -- a NaN in the residual: kept by the 1x1 planar pass (as torch.relu);
  -- oneDNN's ReLU post-op (3x3) gives 0 for it (see dl/models/fuse.lua)
  for _, k in ipairs({1, 3}) do
    local x, w = dl.randn(1, 4, 5, 5), dl.randn(4, 4, k, k)
    local add = dl.zeros(1, 4, 5, 5)
    add[1][2][3][4] = 0 / 0
    local got = dl._nn.conv2d_fused(x, w, dl.randn(4), {padding = (k - 1) // 2, add = add, relu = true})
    local v = got[1][2][3][4]:item()
    if k == 1 then
      T.truthy(v ~= v, "kernel 1: NaN kept")
      T.eq(got:isnan():sum():item(), 1)
    else
      T.eq(v, 0, "kernel 3: oneDNN's ReLU post-op")
      T.eq(got:isnan():sum():item(), 0)
    end
  end
  -- float64 and an unbatched input take the plain ops
  local x64, w64 = dl.randn(3, 6, 6, {dtype = dl.float64}), dl.randn(4, 3, 3, 3, {dtype = dl.float64})
  T.truthy(relerr(dl._nn.conv2d_fused(x64, w64, nil, {relu = true}), F.relu(F.conv2d(x64, w64))) <= 1e-15,
    "float64 unbatched")
  -- no gradient: refused when one would be needed, fine under no_grad
  local xg = dl.randn(1, 3, 6, 6):requires_grad_()
  T.raises(function() dl._nn.conv2d_fused(xg, dl.randn(4, 3, 3, 3), nil, {relu = true}) end,
    "conv2d_fused: computes no gradient")
  T.truthy(dl.no_grad(function() return dl._nn.conv2d_fused(xg, dl.randn(4, 3, 3, 3), nil, {}) end),
    "no_grad")
  T.raises(function() dl._nn.conv2d_fused(x64, w64, nil, {add = dl.zeros(4, 3, 3, {dtype = dl.float64})}) end,
    "conv2d: the tensor to add has shape")
  T.raises(function() dl._nn.conv2d_fused(x64, w64, nil, {relu = true, bogus = 1}) end, "bogus")
end)

T.case("folded resnet: fused without autograd, separate ops with it, channels-last", function()
  local m = trained("resnet50", dl.float32)
  local x = dl.randn(2, 3, 32, 32)
  local y0 = dl.no_grad(function() return m(x) end)
  dl.models.optimize_for_inference(m)
  local fused = dl.no_grad(function() return m(x) end)
  local xg = x:clone():requires_grad_()
  local plain = m(xg) -- parameters and input require grad: the modules one by one
  T.truthy(relerr(fused, y0) <= 1e-5 and relerr(plain, y0) <= 1e-5, "both paths")
  plain:sum():backward()
  T.truthy(xg.grad ~= nil and xg.grad:abs():max():item() > 0, "the input's gradient flows")
  local CL = {memory_format = "channels_last"}
  m:to(CL)
  local cl = dl.no_grad(function() return m(x:contiguous(CL)) end)
  T.truthy(relerr(cl, y0) <= 1e-5, "channels-last folded model")
end)

T.case("folded resnet: a block takes the residual sum into its input only when the model gives it up", function()
  for _, arch in ipairs({"resnet18", "resnet50"}) do
    local m = trained(arch, dl.float32)
    dl.models.optimize_for_inference(m)
    -- channels-last: every layer then runs oneDNN's sum post-op (NCHW 1x1
    -- layers add in a pass of their own, into a new tensor)
    local CL = {memory_format = "channels_last"}
    local x = dl.randn(2, 3, 32, 32):contiguous(CL)
    local x0 = x:clone()
    local y = dl.no_grad(function() return m(x) end)
    T.same_bits(x, x0, arch .. ": the model's input is untouched")
    -- the same forward with every stage run as a plain Sequential (its blocks
    -- write the sum into a copy of their input): the same bits
    local seq = nn.Sequential.forward
    for _, name in ipairs({"layer1", "layer2", "layer3", "layer4"}) do
      m[name].forward = function(self, h) return seq(self, h) end
    end
    local ref = dl.no_grad(function() return m(x) end)
    T.same_bits(y, ref, arch .. ": blocks given up their input vs copies")
    -- a block called directly keeps its caller's tensor; given up, the
    -- result is the input's own tensor
    local b = m.layer1["1"]
    local h = dl.randn(2, arch == "resnet18" and 64 or 256, 8, 8):contiguous(CL)
    local h0 = h:clone()
    local out = dl.no_grad(function() return b(h) end)
    T.same_bits(h, h0, arch .. ": a direct call leaves the input alone")
    T.truthy(not rawequal(out, h), arch .. ": a direct call returns a new tensor")
    local out2 = dl.no_grad(function() return b(h, true) end)
    T.truthy(rawequal(out2, h), arch .. ": given up, the input holds the result")
    T.same_bits(out2, out, arch .. ": same values either way")
  end
end)

T.done()
