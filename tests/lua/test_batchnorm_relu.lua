-- test_batchnorm_relu.lua - the fused batch norm + ReLU (+ residual add):
-- dl.nn.functional.batch_norm_relu / batch_norm_add_relu and their kernel
-- pair (dl._nn.batch_norm_relu_forward / backward) on the CPU.
--
-- The fused ops must equal the unfused sequence (batch_norm, add, relu) to
-- float rounding; on the CPU they are bit-equal for float32 and float64 in
-- both layouts (the same sums, the same roundings), which these tests
-- assert: outputs, the gradients of x, weight, bias and the residual, and the
-- running statistics, in training and evaluation, affine or not, contiguous
-- and channels-last, 2-D to 4-D.  Also: against PyTorch (relu(batch_norm(x)
-- + r)), float64 finite differences (autograd and the kernel pair), the mask
-- (1 bit per element, rounded up per unit of 32), half inputs, NaN and
-- signed zeros as torch.relu, the BatchNorm2d:forward_relu method, a ResNet
-- with the fused blocks against the unfused ones (R.fused_bn), the
-- implementation switch, and bad input.
local T = require "testlib"
local dl = require "dl"
local F = dl.nn.functional
local nn = dl._nn

local F32, F64 = dl.float32, dl.float64
dl.manual_seed(11)
math.randomseed(11)

-- The unfused sequence and the fused op on copies of the same inputs; every
-- result of both, gradients included.  cfg: shape, dtype, cl (channels-last
-- x), training, add, affine, track (running stats).
local function both(cfg)
  local shape, dt, C = cfg.shape, cfg.dtype or F32, cfg.shape[2]
  local x = T.randn(shape, {seed = cfg.seed or 1, dtype = dt})
  if cfg.cl then x = T.channels_last(x) end
  local r = T.randn(shape, {seed = (cfg.seed or 1) + 1, dtype = dt})
  local gy = T.randn(shape, {seed = (cfg.seed or 1) + 2, dtype = dt})
  local w = cfg.affine ~= false and T.randn({C}, {seed = 5, dtype = dt}) or nil
  local b = cfg.affine ~= false and T.randn({C}, {seed = 6, dtype = dt}) or nil
  local rm0 = cfg.track ~= false and T.randn({C}, {seed = 7, dtype = dt}) or nil
  local rv0 = cfg.track ~= false and (dl.rand(C) + 0.5):to(dt) or nil
  local function run(fused)
    local leaf = function(t) return t and t:clone():requires_grad_(true) or nil end
    local xi, ri, wi, bi = leaf(x), leaf(r), leaf(w), leaf(b)
    if cfg.cl then xi = T.channels_last(x:clone()):requires_grad_(true) end -- a new leaf
    local rm, rv = rm0 and rm0:clone(), rv0 and rv0:clone()
    local y
    if fused then
      if cfg.add then
        y = F.batch_norm_add_relu(xi, ri, rm, rv, wi, bi, cfg.training, 0.3, 1e-3)
      else
        y = F.batch_norm_relu(xi, rm, rv, wi, bi, cfg.training, 0.3, 1e-3)
      end
    else
      y = F.batch_norm(xi, rm, rv, wi, bi, cfg.training, 0.3, 1e-3)
      if cfg.add then y = y + ri end
      y = F.relu(y)
    end
    y:backward(gy)
    return {y = y:detach(), gx = xi.grad, gr = cfg.add and ri.grad or nil, gw = wi and wi.grad,
      gb = bi and bi.grad, rm = rm, rv = rv}
  end
  return run(false), run(true)
end

local function same_results(u, f, msg)
  for _, k in ipairs({"y", "gx", "gr", "gw", "gb", "rm", "rv"}) do
    if u[k] ~= nil or f[k] ~= nil then
      T.truthy(u[k] ~= nil and f[k] ~= nil, msg .. ": " .. k .. " missing on one side")
      T.same_bits(f[k], u[k], msg .. ": " .. k)
    end
  end
end

-- --- equal to the unfused ops, bit for bit ----------------------------------------------

local shapes = {{4, 5, 7, 9}, {3, 40, 5, 5}, {2, 64, 1, 1}, {6, 7}, {2, 33, 3}, {5, 3, 33, 1}}

for _, dt in ipairs({F32, F64}) do
  for _, training in ipairs({true, false}) do
    T.case(string.format("fused = unfused, %s, %s", dt.name, training and "training" or "evaluation"),
      function()
        for _, shape in ipairs(shapes) do
          for _, cl in ipairs({false, true}) do
            if not cl or #shape >= 3 then
              for _, add in ipairs({false, true}) do
                local msg = string.format("%s cl=%s add=%s", table.concat(shape, "x"), cl, add)
                local u, f = both({shape = shape, dtype = dt, cl = cl, training = training, add = add})
                if cl and #shape == 4 and shape[3] * shape[4] > 1 then T.truthy(T.is_channels_last(f.gx), msg .. ": gx layout") end
                same_results(u, f, msg)
              end
            end
          end
        end
      end)
  end
end

T.case("fused = unfused: no affine, no running statistics", function()
  for _, add in ipairs({false, true}) do
    local u, f = both({shape = {3, 6, 4, 5}, training = true, add = add, affine = false, track = false})
    same_results(u, f, "no affine, no stats, add=" .. tostring(add))
    T.eq(f.gw, nil)
  end
end)

T.case("fused = unfused: ResNet-sized channels-last planes", function()
  local u, f = both({shape = {4, 256, 14, 14}, cl = true, training = true, add = true, seed = 40})
  same_results(u, f, "4x256x14x14 channels-last")
  u, f = both({shape = {2, 64, 28, 28}, training = true, add = false, seed = 41})
  same_results(u, f, "2x64x28x28")
end)

T.case("float16/bfloat16 inputs on the CPU: equal to float rounding", function()
  for _, dt in ipairs({dl.float16, dl.bfloat16}) do
    local u, f = both({shape = {3, 8, 5, 5}, dtype = dt, training = true, add = true})
    for _, k in ipairs({"y", "gx", "gr"}) do
      T.eq(f[k].dtype, dt)
      T.truthy(dl.allclose(f[k]:float(), u[k]:float(), {rtol = 2e-2, atol = 2e-2}), dt.name .. " " .. k)
    end
    T.eq(f.gw.dtype, dt)
  end
end)

T.case("NaN and signed zeros pass the ReLU as torch.relu does", function()
  -- one channel, eval with mean 0, var 1 - eps, w 1, b 0: y = x exactly
  local x = dl.tensor({{0 / 0}, {-0.0}, {0.0}, {-2}, {3}}):reshape(5, 1)
  local rm, rv = dl.zeros(1), dl.ones(1)
  local y = F.batch_norm_relu(x, rm, rv, nil, nil, false, 0.1, 0)
  local ref = F.relu(F.batch_norm(x, rm, rv, nil, nil, false, 0.1, 0))
  T.same_bits(y, ref, "NaN, -0, 0")
  local yl = y:view(-1):tolist()
  T.truthy(yl[1] ~= yl[1], "NaN kept")
  -- the gradient passes where the output is NaN (threshold_backward's y <= 0 test)
  local xr = x:clone():requires_grad_(true)
  F.batch_norm_relu(xr, rm, rv, nil, nil, false, 0.1, 0):sum():backward()
  T.eq(xr.grad:view(-1):tolist()[1], 1)
  T.same_bits(xr.grad, dl.tensor({{1}, {0}, {0}, {0}, {1}}, {dtype = F32}), "gradient mask")
end)

-- --- against PyTorch --------------------------------------------------------------

local oracle = T.torch([[
import torch.nn.functional as F
cases = []
for dt in (torch.float32, torch.float64):
    for shape, training, add, cl in [((4, 6, 5, 7), True, True, False), ((4, 6, 5, 7), True, False, True),
                                     ((3, 10, 8, 8), False, True, True), ((8, 12), True, True, False),
                                     ((5, 4, 9), False, False, False)]:
        C = shape[1]
        x = (torch.randn(shape) * 2 + 0.3).to(dt)
        r = torch.randn(shape).to(dt)
        w, b = (torch.rand(C) + 0.5).to(dt), torch.randn(C).to(dt)
        rm, rv = torch.randn(C).to(dt), (torch.rand(C) + 0.5).to(dt)
        gy = torch.randn(shape).to(dt)
        case = dict(dtype=str(dt)[6:], training=training, add=add, cl=cl, x=x, r=r, w=w, b=b,
                    rm=rm, rv=rv, gy=gy)
        leaves = [t.clone().requires_grad_() for t in (x, r, w, b)]
        rm2, rv2 = rm.clone(), rv.clone()
        y = F.batch_norm(leaves[0], rm2, rv2, leaves[2], leaves[3], training=training,
                         momentum=0.2, eps=1e-4)
        if add:
            y = y + leaves[1]
        y = F.relu(y)
        g = torch.autograd.grad(y, leaves, gy, allow_unused=True)
        case.update(y=y, gx=g[0], gr=g[1] if add else None, gw=g[2], gb=g[3], rm_after=rm2,
                    rv_after=rv2)
        cases.append(case)
emit(cases)
]])

T.case("batch_norm_relu / batch_norm_add_relu against torch", function()
  for i, c in ipairs(oracle) do
    local msg = string.format("torch case %d (%s, training=%s, add=%s)", i, c.dtype, c.training, c.add)
    local rtol, atol = T.torch_tol(c.dtype, "sum")
    local x = T.from_torch(c.x)
    if c.cl then x = T.channels_last(x) end
    x:requires_grad_(true)
    local r = T.from_torch(c.r):requires_grad_(true)
    local w, b = T.from_torch(c.w):requires_grad_(true), T.from_torch(c.b):requires_grad_(true)
    local rm, rv = T.from_torch(c.rm), T.from_torch(c.rv)
    local y = c.add and F.batch_norm_add_relu(x, r, rm, rv, w, b, c.training, 0.2, 1e-4)
      or F.batch_norm_relu(x, rm, rv, w, b, c.training, 0.2, 1e-4)
    y:backward(T.from_torch(c.gy))
    T.match_torch(y, c.y, rtol, atol, msg .. " y")
    T.match_torch(x.grad, c.gx, rtol, atol, msg .. " gx")
    if c.add then T.match_torch(r.grad, c.gr, rtol, atol, msg .. " gresidual") end
    T.match_torch(w.grad, c.gw, rtol, atol, msg .. " gweight")
    T.match_torch(b.grad, c.gb, rtol, atol, msg .. " gbias")
    T.match_torch(rm, c.rm_after, rtol, atol, msg .. " running_mean")
    T.match_torch(rv, c.rv_after, rtol, atol, msg .. " running_var")
  end
end)

-- --- finite differences (float64) ---------------------------------------------------

-- Inputs kept away from the ReLU's kink: an element whose pre-activation lies
-- within the probe of 0 would make the finite difference meaningless.
T.case("float64 gradcheck through autograd: training and evaluation, with and without residual", function()
  for _, training in ipairs({true, false}) do
    for _, cl in ipairs({false, true}) do
      local C = 3
      local x = T.randn({3, C, 4, 2}, {seed = 20, dtype = F64})
      if cl then x = T.channels_last(x) end
      x:requires_grad_(true)
      local r = (T.randn({3, C, 4, 2}, {seed = 21, dtype = F64})):requires_grad_(true)
      local w = (dl.rand(C, {dtype = F64}) + 0.5):requires_grad_(true)
      local b = T.randn({C}, {seed = 22, dtype = F64}):requires_grad_(true)
      local rm, rv = T.randn({C}, {seed = 23, dtype = F64}), dl.rand(C, {dtype = F64}) + 0.5
      local what = string.format("training=%s cl=%s", training, cl)
      T.gradcheck(function(xx, ww, bb)
        return F.batch_norm_relu(xx, rm:clone(), rv:clone(), ww, bb, training, 0.1, 1e-3)
      end, {x, w, b}, {atol = 1e-5, rtol = 1e-4}, "batch_norm_relu " .. what)
      T.gradcheck(function(xx, rr, ww, bb)
        return F.batch_norm_add_relu(xx, rr, rm:clone(), rv:clone(), ww, bb, training, 0.1, 1e-3)
      end, {x, r, w, b}, {atol = 1e-5, rtol = 1e-4}, "batch_norm_add_relu " .. what)
    end
  end
end)

T.case("kernel pair: the mask is one bit per element, finite differences at probes", function()
  for _, cl in ipairs({false, true}) do
    local x = T.randn({2, 37, 3, 5}, {seed = 30, dtype = F64})
    if cl then x = T.channels_last(x) end
    local r = T.randn({2, 37, 3, 5}, {seed = 31, dtype = F64})
    local w, b = dl.rand(37, {dtype = F64}) + 0.5, T.randn({37}, {seed = 32, dtype = F64})
    local gy = T.randn({2, 37, 3, 5}, {seed = 33, dtype = F64})
    local y, sm, si, mask, impl = nn.batch_norm_relu_forward(x, r, w, b, nil, nil, {training = true, eps = 1e-3})
    T.eq(mask.dtype, dl.uint8)
    -- units: (n, c) planes of 15 (one word each) or rows of 37 channels (two words)
    T.eq(mask:numel(), cl and 2 * 15 * 2 * 4 or 2 * 37 * 4, "mask bytes")
    T.eq(impl, 1, "native on the CPU")
    local gx, gw, gb, gr = nn.batch_norm_relu_backward(gy, x, nil, w, b, sm, si, mask, impl,
      {training = true, eps = 1e-3, residual = true})
    T.kernel_gradcheck("batch_norm_add_relu cl=" .. tostring(cl), function()
      return (nn.batch_norm_relu_forward(x, r, w, b, nil, nil, {training = true, eps = 1e-3, keep_mask = false}))
    end, {x, w, b, r}, {gx, gw, gb, gr}, gy, {probes = 8, tol = 1e-5})
    -- the unfused kernels agree
    local yb, sm2, si2 = nn.batch_norm_forward(x, w, b, nil, nil, {training = true, eps = 1e-3})
    T.same_bits(y, F.relu(yb + r), "forward cl=" .. tostring(cl))
    T.same_bits(sm, sm2, "save_mean")
    T.same_bits(si, si2, "save_invstd")
  end
end)

-- --- modules and models -------------------------------------------------------------

T.case("BatchNorm2d:forward_relu: module bookkeeping and results as bn then relu", function()
  local function pair(momentum)
    dl.manual_seed(50)
    local a = dl.nn.BatchNorm2d(6, {momentum = momentum})
    dl.manual_seed(50)
    local b = dl.nn.BatchNorm2d(6, {momentum = momentum})
    return a, b
  end
  for _, momentum in ipairs({0.1, false}) do
    local a, b = pair(momentum)
    for step = 1, 3 do
      local x = T.randn({4, 6, 3, 3}, {seed = 60 + step})
      local res = T.randn({4, 6, 3, 3}, {seed = 70 + step})
      T.same_bits(a:forward_relu(x, res), F.relu(b(x) + res), "step " .. step)
    end
    T.same_bits(a.running_mean, b.running_mean, "running_mean")
    T.same_bits(a.running_var, b.running_var, "running_var")
    T.eq(a.num_batches_tracked:item(), 3)
    a:eval(); b:eval()
    local x = T.randn({2, 6, 3, 3}, {seed = 80})
    T.same_bits(a:forward_relu(x), F.relu(b(x)), "evaluation")
  end
end)

T.case("resnet18 with fused blocks equals the unfused one: logits, grads, running stats", function()
  local resnet = require "dl.models.resnet"
  local saved = resnet.fused_bn
  local function run(fused)
    resnet.fused_bn = fused
    dl.manual_seed(90)
    local m = dl.models.resnet18({num_classes = 10})
    local x = T.randn({2, 3, 32, 32}, {seed = 91})
    local loss = dl.nn.functional.cross_entropy(m(x), dl.tensor({3, 7}))
    loss:backward()
    local sd = m:state_dict()
    local keys = {}
    for k in pairs(sd) do keys[#keys + 1] = k end
    table.sort(keys)
    return {loss = loss:detach(), g1 = m.conv1.weight.grad, g4 = m.layer4[2].bn2.weight.grad,
      gfc = m.fc.weight.grad, rm = sd["layer3.1.bn2.running_mean"], rv = sd["bn1.running_var"],
      keys = table.concat(keys, " ")}
  end
  local ok, err = pcall(function()
    local u, f = run(false), run(true)
    for _, k in ipairs({"loss", "g1", "g4", "gfc", "rm", "rv"}) do T.same_bits(f[k], u[k], k) end
    T.eq(f.keys, u.keys, "state_dict keys")
  end)
  resnet.fused_bn = saved
  if not ok then error(err, 0) end
end)

-- --- the implementation switch and bad input ---------------------------------------------

T.case("batch_norm_impl: get and set the CUDA training implementation", function()
  local before = nn.batch_norm_impl()
  T.truthy(before == "auto" or before == "native" or before == "cudnn")
  T.eq(nn.batch_norm_impl("native"), before)
  T.eq(nn.batch_norm_impl(), "native")
  T.eq(nn.batch_norm_impl("cudnn"), "native")
  T.raises(function() nn.batch_norm_impl("fast") end,
    'batch_norm_impl: expected "auto", "native" or "cudnn", got "fast"')
  T.eq(nn.batch_norm_impl(before), "cudnn")
  -- the CPU ignores it: same results either way
  local x = T.randn({2, 3, 4, 4}, {seed = 100})
  local y1 = F.batch_norm_relu(x, nil, nil, nil, nil, true)
  nn.batch_norm_impl("cudnn")
  local y2 = F.batch_norm_relu(x, nil, nil, nil, nil, true)
  nn.batch_norm_impl(before)
  T.same_bits(y1, y2, "CPU results do not depend on the switch")
end)

T.case("bad input: clear errors naming the op", function()
  local x, C = dl.randn(2, 3, 4, 4), 3
  local rm, rv = dl.zeros(C), dl.ones(C)
  T.raises(function() F.batch_norm_add_relu(x, dl.randn(2, 3, 4, 5), rm, rv, nil, nil, true) end,
    "batch_norm_add_relu: residual of shape [2, 3, 4, 5] does not match input of shape [2, 3, 4, 4]")
  T.raises(function() F.batch_norm_add_relu(x, dl.randn(2, 3, 4, 4):double(), rm, rv, nil, nil, true) end,
    "batch_norm_add_relu: residual (float64) must have the input's dtype (float32)")
  T.raises(function() F.batch_norm_relu(x, nil, nil, nil, nil, false) end,
    "batch_norm_relu: running_mean and running_var are required when not training")
  T.raises(function() F.batch_norm_relu(dl.randn(1, 3), nil, nil, nil, nil, true) end,
    "batch_norm_relu: expected more than 1 value per channel when training, got input size [1, 3]")
  T.raises(function() F.batch_norm_relu(x, nil, nil, dl.ones(4), nil, true) end,
    "batch_norm_relu: weight must have shape [3] (one value per channel), got [4]")
  T.raises(function() F.batch_norm_add_relu(x, nil, rm, rv) end, "tensor")
  T.raises(function() F.batch_norm_relu(dl.tensor({1, 2}, {dtype = dl.int64}), nil, nil, nil, nil, true) end,
    "batch_norm_relu: input must be a floating-point tensor")
  T.raises(function() nn.batch_norm_relu_forward(x, nil, nil, nil, rm, rv, {bogus = 1}) end, "bogus")
  -- the backward needs the mask, of the right size
  local y, sm, si, mask = nn.batch_norm_relu_forward(x, nil, nil, nil, nil, nil, {training = true})
  T.raises(function() nn.batch_norm_relu_backward(x, x, nil, nil, nil, sm, si, nil, 1, {training = true}) end,
    "batch_norm_relu_backward: the ReLU mask is required")
  T.raises(function()
    nn.batch_norm_relu_backward(x, x, nil, nil, nil, sm, si, mask:narrow(1, 1, 4), 1, {training = true})
  end, "batch_norm_relu_backward: the ReLU mask must be a contiguous uint8 vector of at least 24 bytes")
  T.raises(function() nn.batch_norm_relu_backward(x, x, nil, nil, nil, sm, si, mask, 7, {training = true}) end,
    "batch_norm_relu_backward: unknown implementation 7")
  T.raises(function() nn.batch_norm_relu_backward(x, x, nil, nil, nil, sm, si, mask, 2, {training = true}) end,
    "batch_norm_relu_backward: cuDNN's backward needs the forward's output")
  -- an empty batch passes through
  local ye = F.batch_norm_add_relu(dl.zeros(0, 3, 2, 2), dl.zeros(0, 3, 2, 2), rm, rv, nil, nil, true)
  T.shape_eq(ye, {0, 3, 2, 2})
  -- healthy afterwards
  T.shape_eq(y, {2, 3, 4, 4})
  T.truthy(F.batch_norm_relu(x, rm, rv, nil, nil, false):min():item() >= 0)
end)

T.done()
