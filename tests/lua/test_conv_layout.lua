-- test_conv_layout.lua - float32 networks run channels-last on the CPU:
-- conv2d binds NHWC activations (and OHWI weights) to oneDNN directly, keeps
-- the layout for its output and gradients, and agrees with the NCHW path to
-- float32 rounding; a leaf's gradient takes the leaf's layout; a whole ResNet
-- trained channels-last matches the same ResNet trained NCHW.  (Elementwise
-- results keeping a channels-last layout: test_elementwise.lua.)
-- Inference-only convolutions (no gradient taken) may run Winograd.
local T = require "testlib"
local dl = require "dl"
local F = dl.nn.functional

local CL = {memory_format = "channels_last"}

local function is_cl(t) return t:dim() == 4 and t:is_contiguous(CL) and not t:is_contiguous() end

-- float32 rounding: max |a - b| <= tol * (1 + max |b|)
local function close(a, b, tol, what) T.close(a, b, tol, tol, what, "max") end

T.case("conv2d channels-last: values, layouts and gradients match NCHW", function()
  dl.manual_seed(3)
  -- C, O, kernel, stride, padding, dilation, groups, bias
  local configs = {
    {3, 16, 7, 2, 3, 1, 1, false},
    {16, 24, 3, 1, 1, 1, 1, true},
    {16, 32, 1, 2, 0, 1, 1, false},
    {16, 32, 3, 1, 2, 2, 1, true},
    {16, 32, 3, 2, 1, 1, 4, true},
    {8, 8, 3, 1, 1, 1, 8, false},
  }
  for _, c in ipairs(configs) do
    local C, O, k, st, pad, dil, g, has_b = table.unpack(c)
    local opts = {stride = st, padding = pad, dilation = dil, groups = g}
    local x = dl.randn(2, C, 13, 11)
    local w = dl.randn(O, C // g, k, k)
    local b = has_b and dl.randn(O) or nil
    local xr, wr = x:clone():requires_grad_(), w:clone():requires_grad_()
    local br = b and b:clone():requires_grad_() or nil
    local y = F.conv2d(xr, wr, br, opts)
    local gy = dl.randn(y.shape)
    y:backward(gy)
    for _, wcl in ipairs({false, true}) do
      local xc = x:contiguous(CL):requires_grad_()
      local wc = (wcl and w:contiguous(CL) or w:clone()):requires_grad_()
      local bc = b and b:clone():requires_grad_() or nil
      local yc = F.conv2d(xc, wc, bc, opts)
      local what = string.format("C%d O%d k%d s%d p%d d%d g%d w%s", C, O, k, st, pad, dil, g,
        wcl and "CL" or "plain")
      T.truthy(is_cl(yc), what .. ": output channels-last")
      close(yc, y, 1e-5, what .. ": output")
      yc:backward(gy)
      T.truthy(is_cl(xc.grad), what .. ": input gradient channels-last")
      close(xc.grad, xr.grad, 1e-5, what .. ": input gradient")
      T.truthy(wc.grad:is_contiguous(wcl and CL or nil), what .. ": weight gradient in the weight's layout")
      close(wc.grad, wr.grad, 1e-5, what .. ": weight gradient")
      if b then close(bc.grad, br.grad, 1e-5, what .. ": bias gradient") end
    end
  end
end)

T.case("conv2d channels-last: gradient of a channels-last grad_output, bias alone", function()
  dl.manual_seed(4)
  local x = dl.randn(2, 8, 9, 9):contiguous(CL)
  local w = dl.randn(16, 8, 3, 3)
  local b = dl.randn(16):requires_grad_()
  local y = F.conv2d(x, w, b, {padding = 1})
  local gy = dl.randn(2, 16, 9, 9):contiguous(CL)
  y:backward(gy)
  -- the bias gradient alone (no weight gradient): sum of gy over N, H, W
  close(b.grad, gy:sum({1, 3, 4}), 1e-6, "bias gradient")
end)

T.case("leaf gradients take the leaf's layout", function()
  local p = dl.randn(4, 3, 2, 2):contiguous(CL):requires_grad_()
  local q = dl.randn(4, 3, 2, 2):requires_grad_()
  local loss = (p * 2):sum() + (q:contiguous(CL) * 3):sum()
  loss:backward()
  T.truthy(is_cl(p.grad), "channels-last leaf: channels-last gradient")
  T.truthy(q.grad:is_contiguous(), "contiguous leaf: contiguous gradient")
  T.tensor_eq(p.grad, dl.full({4, 3, 2, 2}, 2), 0)
  T.tensor_eq(q.grad, dl.full({4, 3, 2, 2}, 3), 0)
end)

T.case("resnet18 channels-last: gradients as close to float64 as NCHW's, one SGD step", function()
  -- one training step of the same model in float64, float32 NCHW and
  -- float32 channels-last: loss and gradients against float64
  local function run(mode)
    dl.manual_seed(11)
    local model = dl.models.resnet18({num_classes = 10})
    local x = dl.randn(4, 3, 64, 64)
    local y = dl.tensor({3, 7, 1, 10})
    if mode == "f64" then
      model:to(dl.float64)
      x = x:double()
    elseif mode == "cl" then
      model:to(CL)
      x = x:contiguous(CL)
    end
    local opt = dl.optim.SGD(model:parameters(), {lr = 0.01, momentum = 0.9})
    local loss = F.cross_entropy(model(x), y)
    loss:backward()
    local r = {loss = loss:item(), grads = {model.conv1.weight.grad, model.layer2[1].conv2.weight.grad,
      model.layer4[2].bn2.weight.grad, model.fc.weight.grad}}
    opt:step()
    model:eval()
    r.out = dl.no_grad(function() return model(x) end)
    return r
  end
  local ref, plain, cl = run("f64"), run("nchw"), run("cl")
  for _, r in ipairs({plain, cl}) do
    T.truthy(math.abs(r.loss - ref.loss) < 1e-5, "loss")
    for i, g in ipairs(r.grads) do
      close(g:double(), ref.grads[i], 2e-5, "gradient " .. i)
    end
  end
  T.truthy(is_cl(cl.grads[1]) and is_cl(cl.grads[2]), "weight gradients channels-last")
  close(cl.out, plain.out, 1e-4, "evaluation output after the step")
end)

T.case("inference-only 3x3 convolutions: Winograd within float32 rounding of direct", function()
  dl.manual_seed(9)
  local x, w, b = dl.randn(2, 32, 16, 16), dl.randn(48, 32, 3, 3) * 0.1, dl.randn(48)
  local was = dl._nn.conv2d_winograd(false)
  T.eq(was, true, "on by default")
  local direct = F.conv2d(x, w, b, {padding = 1})
  -- a forward autograd records (oneDNN's training kind: its kernels may sum
  -- in another order than the inference kind's)
  local direct_rec = F.conv2d(x, w:clone():requires_grad_(), b, {padding = 1}):detach()
  close(direct_rec, direct, 1e-5, "recorded vs inference, direct")
  dl._nn.conv2d_winograd(true)
  local wino = dl.no_grad(function() return F.conv2d(x, w, b, {padding = 1}) end)
  close(wino, direct, 1e-5, "Winograd vs direct")
  for _, cl in ipairs({false, true}) do
    local xi = cl and x:contiguous(CL) or x
    local y = dl.no_grad(function() return F.conv2d(xi, w, b, {padding = 1}) end)
    close(y, direct, 1e-5, "layout " .. tostring(cl))
    T.truthy(is_cl(y) == cl, "output layout follows the input's")
  end
  -- a convolution autograd records runs its forward direct: the same bits as
  -- with Winograd off
  local wg = w:clone():requires_grad_()
  local yg = F.conv2d(x, wg, b, {padding = 1})
  T.tensor_eq(yg:detach(), direct_rec, 0)
end)

T.case("weight gradients of 3x3 convolutions: Winograd at least as accurate as direct", function()
  dl.manual_seed(10)
  local x, w, gy = dl.randn(4, 32, 16, 16), dl.randn(32, 32, 3, 3) * 0.05, dl.randn(4, 32, 16, 16)
  local x64, w64 = x:double():requires_grad_(), w:double():requires_grad_()
  F.conv2d(x64, w64, nil, {padding = 1}):backward(gy:double())
  local function grads(wino)
    dl._nn.conv2d_winograd(wino)
    local xr, wr = x:clone():requires_grad_(), w:clone():requires_grad_()
    F.conv2d(xr, wr, nil, {padding = 1}):backward(gy)
    return xr.grad, wr.grad
  end
  local gx0, gw0 = grads(false)
  local gx1, gw1 = grads(true)
  local function err(a, ref) return (a:double() - ref):norm():item() / ref:norm():item() end
  local e0, e1 = err(gw0, w64.grad), err(gw1, w64.grad)
  T.truthy(e1 <= 1.5 * e0, string.format("weight gradient error: Winograd %g, direct %g", e1, e0))
  T.tensor_eq(gx1, gx0, 0, "input gradient always direct")
  T.truthy(err(gx1, x64.grad) < 1e-6, "input gradient")
end)

T.case("layouts from the facts: unbatched channels-last input, float64 and half weights", function()
  -- an unbatched (C,H,W) input laid out (H,W,C) runs channels-last: output
  -- and input gradient keep that layout, values as the plain input's
  dl.manual_seed(12)
  local xhwc = dl.randn(9, 10, 8)
  local w = dl.randn(16, 8, 3, 3)
  local x = xhwc:permute(3, 1, 2)
  T.eq(x:stride(1), 1, "the input is (H,W,C) in memory")
  local xr, xc = x:contiguous():requires_grad_(), x:detach():requires_grad_()
  local yr, yc = F.conv2d(xr, w, nil, {padding = 1}), F.conv2d(xc, w, nil, {padding = 1})
  T.eq(yc:stride(1), 1, "unbatched output channels-last")
  close(yc, yr, 1e-5, "unbatched output")
  local gy = dl.randn(16, 9, 10)
  yr:backward(gy)
  yc:backward(gy)
  T.eq(xc.grad:stride(1), 1, "unbatched input gradient channels-last")
  close(xc.grad, xr.grad, 1e-5, "unbatched input gradient")
  -- kernels computing float64 and float16 in plain layouts still hand a
  -- channels-last weight its gradient channels-last
  for _, dt in ipairs({dl.float64, dl.float16}) do
    local xd = dl.randn(2, 4, 7, 7):to(dt)
    local wd = dl.randn(6, 4, 3, 3):to(dt)
    local wp, wc = wd:clone():requires_grad_(), wd:contiguous(CL):requires_grad_()
    F.conv2d(xd, wp):sum():backward()
    F.conv2d(xd, wc):sum():backward()
    T.truthy(is_cl(wc.grad), tostring(dt) .. ": weight gradient channels-last")
    T.eq(wc.grad.dtype, dt, "dtype kept")
    T.tensor_eq(wc.grad, wp.grad, 0, tostring(dt) .. ": the same values")
  end
end)

T.done()
