-- test_conv_packed.lua - inference convolutions on the CPU keep their weights
-- prepacked in oneDNN's layout on the weights' storage (cpu/conv.c): the
-- results equal a fresh computation's; a write to the weights (in place,
-- copy_, an optimizer step) is seen by the next call; weights that are views
-- into one storage at different offsets each get their own copy; the copies
-- die with the storage.  Also conv2d_fused's reuse_add: the result may take
-- the addend's memory, but never when another tensor shares it.
local T = require "testlib"
local dl = require "dl"
local F = dl.nn.functional

local CL = {memory_format = "channels_last"}

-- float32 rounding: max |a - b| <= tol * (1 + max |b|)
local function close(a, b, tol, what) T.close(a, b, tol, tol, what, "max") end

-- The float64 reference of conv2d (the im2col path, no oneDNN).
local function ref(x, w, b, opts)
  return F.conv2d(x:double(), w:double(), b and b:double(), opts):float()
end

local function infer(x, w, b, opts)
  return dl.no_grad(function() return F.conv2d(x, w, b, opts) end)
end

T.case("packed weights: layouts, kernels and batch sizes agree with float64", function()
  dl.manual_seed(1)
  for _, c in ipairs({
    {16, 32, 1, {}}, {16, 32, 3, {padding = 1}}, {3, 16, 7, {stride = 2, padding = 3}},
    {32, 32, 3, {stride = 2, padding = 1}}, {16, 48, 3, {padding = 1}}, -- the last: Winograd
  }) do
    local w, b = dl.randn(c[2], c[1], c[3], c[3]) * 0.1, dl.randn(c[2])
    for _, n in ipairs({1, 3, 1}) do -- batch 1 again: after another batch size's primitive
      local x = dl.randn(n, c[1], 16, 16)
      for _, cl in ipairs({false, true}) do
        local xi = cl and x:contiguous(CL) or x
        local what = string.format("%d->%d k%d batch %d %s", c[1], c[2], c[3], n, cl and "NHWC" or "NCHW")
        close(infer(xi, w, b, c[4]), ref(x, w, b, c[4]), 2e-5, what)
      end
    end
  end
end)

-- Channels-last (OHWI) weights of a Winograd-eligible layer: oneDNN has no
-- direct reorder into its Winograd layout from OHWI, so the packing goes
-- through OIHW (a wrong step shows as wrong values here).
T.case("packed weights: OHWI weights into Winograd, packed and unpacked", function()
  dl.manual_seed(6)
  local x = dl.randn(1, 32, 16, 16):contiguous(CL)
  local w, b = (dl.randn(48, 32, 3, 3) * 0.1):contiguous(CL), dl.randn(48)
  T.truthy(w:is_contiguous(CL) and not w:is_contiguous(), "OHWI weights")
  local want = ref(x, w, b, {padding = 1})
  for _ = 1, 2 do
    close(infer(x, w, b, {padding = 1}), want, 2e-5, "conv2d")
    local y = dl.no_grad(function()
      return dl._nn.conv2d_fused(x, w, b, {padding = {1, 1}, relu = true})
    end)
    close(y, want:relu(), 2e-5, "conv2d_fused")
  end
end)

T.case("packed weights: in-place writes, copy_ and optimizer steps are seen", function()
  dl.manual_seed(2)
  local x = dl.randn(2, 16, 12, 12):contiguous(CL)
  local w, b = dl.randn(32, 16, 3, 3) * 0.1, dl.randn(32)
  close(infer(x, w, b, {padding = 1}), ref(x, w, b, {padding = 1}), 2e-5, "first")
  dl.no_grad(function() w:mul_(-2) end)
  close(infer(x, w, b, {padding = 1}), ref(x, w, b, {padding = 1}), 2e-5, "after mul_")
  w:copy_(dl.randn(32, 16, 3, 3))
  close(infer(x, w, b, {padding = 1}), ref(x, w, b, {padding = 1}), 2e-5, "after copy_")
  -- a layer trained between inference calls (a validation pass each epoch)
  local conv = dl.nn.Conv2d(16, 8, 1)
  local opt = dl.optim.SGD(conv:parameters(), {lr = 0.5})
  for step = 1, 3 do
    local y = dl.no_grad(function() return conv(x) end)
    close(y, ref(x, conv.weight:detach(), conv.bias:detach(), {}), 2e-5, "step " .. step)
    opt:zero_grad()
    conv(x):square():sum():backward()
    opt:step()
  end
end)

T.case("packed weights: views of one storage at different offsets", function()
  dl.manual_seed(3)
  local flat = dl.randn(2 * 24 * 16 * 9) * 0.1
  local w1 = flat:narrow(1, 1, 24 * 16 * 9):view(24, 16, 3, 3)
  local w2 = flat:narrow(1, 24 * 16 * 9 + 1, 24 * 16 * 9):view(24, 16, 3, 3)
  local x = dl.randn(1, 16, 10, 10):contiguous(CL)
  for _ = 1, 2 do
    close(infer(x, w1, nil, {padding = 1}), ref(x, w1, nil, {padding = 1}), 2e-5, "first view")
    close(infer(x, w2, nil, {padding = 1}), ref(x, w2, nil, {padding = 1}), 2e-5, "second view")
  end
  -- writing through one view changes the storage's version: both repack
  dl.no_grad(function() w1:zero_() end)
  close(infer(x, w1, nil, {padding = 1}), dl.zeros(1, 24, 10, 10), 0, "zeroed view")
  close(infer(x, w2, nil, {padding = 1}), ref(x, w2, nil, {padding = 1}), 2e-5, "other view")
end)

T.case("packed weights die with their storage", function()
  dl.manual_seed(4)
  local x = dl.randn(1, 64, 14, 14):contiguous(CL)
  local function run()
    local w = dl.randn(128, 64, 3, 3)
    infer(x, w, nil, {padding = 1})
  end
  -- host bytes in use now (tensors, scratch and packed copies alike)
  local function in_use()
    collectgarbage()
    collectgarbage()
    dl.reset_peak_memory_stats()
    return dl.max_memory_allocated()
  end
  run()
  local before = in_use()
  for _ = 1, 20 do run() end
  -- 20 weights of 295 KB, each with a packed copy: all gone again
  local held = in_use() - before
  T.truthy(held < 64 * 1024, string.format("bytes held after 20 dead weights: %d", held))
end)

T.case("conv2d_fused reuse_add: takes the addend's memory only when it is alone", function()
  dl.manual_seed(5)
  local x = dl.randn(1, 16, 8, 8):contiguous(CL)
  local w, b = dl.randn(32, 16, 3, 3) * 0.1, dl.randn(32)
  local opts = {padding = 1}
  local function fused(add, reuse)
    return dl.no_grad(function()
      return dl._nn.conv2d_fused(x, w, b, {padding = {1, 1}, add = add, relu = true, reuse_add = reuse})
    end)
  end
  local a0 = dl.randn(1, 32, 8, 8):contiguous(CL)
  local want = (ref(x, w, b, opts) + a0):relu()
  -- alone: the result is the addend's own value, overwritten
  local a = a0:contiguous():contiguous(CL)
  local y = fused(a, true)
  close(y, want, 2e-5, "reused")
  T.truthy(rawequal(y, a), "the result is the addend itself")
  -- shared by a view, or not laid out as the output: a fresh result, the
  -- addend untouched
  local base = a0:contiguous():contiguous(CL)
  local view = base:view(base.shape)
  local y2 = fused(view, true)
  close(y2, want, 2e-5, "shared: value")
  T.tensor_eq(base, a0, 0, "shared: the other tensor is untouched")
  local plain = a0:contiguous()
  local y3 = fused(plain, true)
  close(y3, want, 2e-5, "other layout: value")
  T.tensor_eq(plain, a0, 0, "other layout: untouched")
  -- without reuse_add the addend is never written
  local keep = a0:contiguous():contiguous(CL)
  close(fused(keep, false), want, 2e-5, "no reuse")
  T.tensor_eq(keep, a0, 0, "no reuse: untouched")
end)
T.done()
