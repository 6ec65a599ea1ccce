-- test_nn_conv.lua - the conv2d, batch-norm and pooling kernels (dl._nn) on
-- known small values, edge cases (unbatched, empty batch, zero channels,
-- expanded and strided inputs, float16/bfloat16), finite-difference gradient
-- checks in float64 for every backward, the oneDNN primitive cache's bound,
-- and bad input: each a clear error naming the op.
-- (test_nn_conv_torch.lua compares everything with PyTorch.)
local T = require "testlib"
local dl = require "dl"
local nn = dl._nn

local F32, F64 = dl.float32, dl.float64
dl.manual_seed(7)
math.randomseed(7)

-- 1..n as a (shape) tensor of dtype dt
local function seq(dt, ...)
  local n = 1
  for _, s in ipairs({...}) do n = n * s end
  return dl.arange(1, n + 1):to(dt):reshape(...)
end

-- --- known values ---------------------------------------------------------------

T.case("conv2d: 2x2 window sums and their gradients", function()
  for _, dt in ipairs({F32, F64}) do
    local x = seq(dt, 1, 1, 4, 4)
    local w = dl.ones(1, 1, 2, 2, {dtype = dt})
    local b = dl.full({1}, 1, {dtype = dt})
    local y = nn.conv2d_forward(x, w, b)
    T.shape_eq(y, {1, 1, 3, 3})
    T.eq(y.dtype, dt)
    T.tensor_eq(y, {{{{15, 19, 23}, {31, 35, 39}, {47, 51, 55}}}})
    T.tensor_eq(nn.conv2d_forward(x, w, nil, {stride = 2}), {{{{14, 22}, {46, 54}}}})
    T.tensor_eq(nn.conv2d_forward(x, w, nil, {padding = {1, 0}}),
      {{{{3, 5, 7}, {14, 18, 22}, {30, 34, 38}, {46, 50, 54}, {27, 29, 31}}}})
    T.tensor_eq(nn.conv2d_forward(x, w, nil, {dilation = 2}), {{{{24, 28}, {40, 44}}}})
    local gx, gw, gb = nn.conv2d_backward(dl.ones(1, 1, 3, 3, {dtype = dt}), x, w)
    T.tensor_eq(gx, {{{{1, 2, 2, 1}, {2, 4, 4, 2}, {2, 4, 4, 2}, {1, 2, 2, 1}}}})
    T.tensor_eq(gw, {{{{54, 63}, {90, 99}}}})
    T.tensor_eq(gb, {9})
    T.eq(gx.dtype, dt)
  end
end)

T.case("conv2d: groups keep channels apart; need skips outputs", function()
  -- two groups of one channel each: output channel g sees input channel g only
  for _, dt in ipairs({F32, F64}) do
    local x = dl.cat({dl.ones(1, 1, 3, 3, {dtype = dt}), dl.full({1, 1, 3, 3}, 10, {dtype = dt})}, 2)
    local w = dl.ones(2, 1, 3, 3, {dtype = dt})
    T.tensor_eq(nn.conv2d_forward(x, w, nil, {groups = 2}), {{{{9}}, {{90}}}})
    local gx, gw, gb = nn.conv2d_backward(dl.tensor({{{{1}}, {{2}}}}, {dtype = dt}), x, w,
      {groups = 2, need = {false, true, false}})
    T.eq(gx, nil)
    T.eq(gb, nil)
    T.tensor_eq(gw, {{{{1, 1, 1}, {1, 1, 1}, {1, 1, 1}}}, {{{20, 20, 20}, {20, 20, 20}, {20, 20, 20}}}})
  end
end)

T.case("batch_norm: batch statistics, running updates, evaluation", function()
  for _, dt in ipairs({F32, F64}) do
    local x = dl.tensor({{1, 2}, {3, 4}, {5, 6}}, {dtype = dt})
    local rm, rv = dl.zeros(2, {dtype = dt}), dl.ones(2, {dtype = dt})
    local y, mean, invstd = nn.batch_norm_forward(x, nil, nil, rm, rv, {training = true, eps = 0})
    local s = math.sqrt(3 / 8) -- biased variance 8/3
    T.tensor_eq(y, {{-2 * s, -2 * s}, {0, 0}, {2 * s, 2 * s}}, 1e-6)
    T.tensor_eq(mean, {3, 4})
    T.tensor_eq(invstd, {s, s}, 1e-6)
    T.tensor_eq(rm, {0.3, 0.4}, 1e-6)  -- 0.9 * 0 + 0.1 * mean
    T.tensor_eq(rv, {1.3, 1.3}, 1e-6)  -- 0.9 * 1 + 0.1 * unbiased variance 4
    -- the cumulative average of PyTorch's momentum=None: factor 1/num_batches_tracked
    nn.batch_norm_forward(x, nil, nil, rm, rv,
      {training = true, eps = 0, cumulative = true, num_batches_tracked = 2})
    T.tensor_eq(rm, {0.5 * 0.3 + 0.5 * 3, 0.5 * 0.4 + 0.5 * 4}, 1e-6)
    T.tensor_eq(rv, {0.5 * 1.3 + 0.5 * 4, 0.5 * 1.3 + 0.5 * 4}, 1e-6)
    -- evaluation: running statistics, weight and bias
    local w, b = dl.tensor({2, 3}, {dtype = dt}), dl.tensor({1, -1}, {dtype = dt})
    local m2, v2 = dl.tensor({1, 2}, {dtype = dt}), dl.tensor({4, 16}, {dtype = dt})
    local ye = nn.batch_norm_forward(x, w, b, m2, v2, {eps = 0})
    T.tensor_eq(ye, {{1, -1}, {3, 0.5}, {5, 2}}, 1e-6)
    -- training backward: gy = x gives gw = sum((x - m) * xhat) and gb = sum(x)
    local gx, gw, gb = nn.batch_norm_backward(x, x, w, nil, nil, mean, invstd,
      {training = true, eps = 0})
    T.tensor_eq(gw, {math.sqrt(24), math.sqrt(24)}, 1e-6)
    T.tensor_eq(gb, {9, 12})
    -- gy = ones has no component the normalisation keeps: gx = 0
    gx = nn.batch_norm_backward(dl.ones_like(x), x, w, nil, nil, mean, invstd,
      {training = true, eps = 0})
    T.tensor_eq(gx, {{0, 0}, {0, 0}, {0, 0}}, 1e-6)
    -- evaluation backward: gx = gy * w / sqrt(running_var + eps)
    gx = nn.batch_norm_backward(dl.ones_like(x), x, w, m2, v2, nil, nil, {eps = 0})
    T.tensor_eq(gx, {{1, 0.75}, {1, 0.75}, {1, 0.75}}, 1e-6)
  end
end)

T.case("pooling: known windows, indices and gradients", function()
  for _, dt in ipairs({F32, F64}) do
    local x = seq(dt, 1, 1, 4, 4)
    local y, ind = nn.max_pool2d_forward(x, 2)
    T.tensor_eq(y, {{{{6, 8}, {14, 16}}}})
    T.eq(ind.dtype, dl.int64)
    T.tensor_eq(ind, {{{{5, 7}, {13, 15}}}}) -- 0-based flat positions in the plane
    local gx = nn.max_pool2d_backward(dl.ones(1, 1, 2, 2, {dtype = dt}), x, ind, 2)
    T.tensor_eq(gx, {{{{0, 0, 0, 0}, {0, 1, 0, 1}, {0, 0, 0, 0}, {0, 1, 0, 1}}}})
    -- overlapping windows add their gradients
    local y2, i2 = nn.max_pool2d_forward(x, 3, {stride = 1})
    T.tensor_eq(y2, {{{{11, 12}, {15, 16}}}})
    gx = nn.max_pool2d_backward(dl.ones(1, 1, 2, 2, {dtype = dt}), x, i2, 3, {stride = 1})
    T.tensor_eq(gx:sum(), 4)
    T.tensor_eq(nn.avg_pool2d_forward(x, 2), {{{{3.5, 5.5}, {11.5, 13.5}}}})
    -- padding counts in the divisor unless count_include_pad is false
    T.tensor_eq(nn.avg_pool2d_forward(x, 2, {padding = 1}),
      {{{{0.25, 1.25, 1}, {3.5, 8.5, 5}, {3.25, 7.25, 4}}}})
    T.tensor_eq(nn.avg_pool2d_forward(x, 2, {padding = 1, count_include_pad = false}),
      {{{{1, 2.5, 4}, {7, 8.5, 10}, {13, 14.5, 16}}}})
    T.tensor_eq(nn.avg_pool2d_forward(x, 2, {divisor_override = 2}), {{{{7, 11}, {23, 27}}}})
    gx = nn.avg_pool2d_backward(dl.ones(1, 1, 2, 2, {dtype = dt}), x, 2)
    T.tensor_eq(gx, dl.full({1, 1, 4, 4}, 0.25))
    T.tensor_eq(nn.adaptive_avg_pool2d_forward(x, 1), {{{{8.5}}}})
    T.tensor_eq(nn.adaptive_avg_pool2d_forward(x, {1, 2}), {{{{7.5, 9.5}}}})
    -- 4 -> 3 cells: rows [0,2) [1,3) [2,4)
    local ya = nn.adaptive_avg_pool2d_forward(x, {3, 1})
    T.tensor_eq(ya, {{{{4.5}, {8.5}, {12.5}}}})
    local ym, im = nn.adaptive_max_pool2d_forward(x, {3, 1})
    T.tensor_eq(ym, {{{{8}, {12}, {16}}}})
    T.tensor_eq(im, {{{{7}, {11}, {15}}}})
    gx = nn.adaptive_max_pool2d_backward(dl.ones(1, 1, 3, 1, {dtype = dt}), x, im)
    T.tensor_eq(gx:sum(), 3)
    gx = nn.adaptive_avg_pool2d_backward(dl.ones(1, 1, 1, 1, {dtype = dt}), x)
    T.tensor_eq(gx, dl.full({1, 1, 4, 4}, 1 / 16))
  end
end)

T.case("max pooling: first maximum wins ties, NaN wins over numbers", function()
  local x = dl.tensor({{{{1.0, 3, 3, 0}, {3, 2, 0, 0}}}})
  local y, ind = nn.max_pool2d_forward(x, 2)
  T.tensor_eq(y, {{{{3, 3}}}})
  T.tensor_eq(ind, {{{{1, 2}}}})
  local z = dl.tensor({{{{1.0, 0 / 0}, {5, 2}}}})
  local yn, iz = nn.max_pool2d_forward(z, 2)
  T.truthy(yn:tolist()[1][1][1][1] ~= yn:tolist()[1][1][1][1], "NaN expected")
  T.tensor_eq(iz, {{{{1}}}})
end)

-- --- layouts, shapes and dtypes ----------------------------------------------------------

T.case("unbatched (C,H,W) inputs match the batched results", function()
  local x = dl.randn(3, 7, 6)
  local w = dl.randn(4, 3, 3, 3)
  local y = nn.conv2d_forward(x, w, nil, {padding = 1})
  T.shape_eq(y, {4, 7, 6})
  T.tensor_eq(y, nn.conv2d_forward(x:unsqueeze(1), w, nil, {padding = 1}):squeeze(1), 1e-5)
  local gx, gw = nn.conv2d_backward(dl.ones(4, 7, 6), x, w, {padding = 1})
  T.shape_eq(gx, {3, 7, 6})
  T.shape_eq(gw, {4, 3, 3, 3})
  local p, i = nn.max_pool2d_forward(x, 2)
  T.shape_eq(p, {3, 3, 3})
  T.shape_eq(nn.max_pool2d_backward(dl.ones(3, 3, 3), x, i, 2), {3, 7, 6})
  T.shape_eq(nn.avg_pool2d_backward(dl.ones(3, 3, 3), x, 2), {3, 7, 6})
  T.shape_eq(nn.adaptive_avg_pool2d_forward(x, 2), {3, 2, 2})
end)

T.case("empty batches and zero channels", function()
  local w = dl.randn(4, 3, 3, 3)
  local y = nn.conv2d_forward(dl.zeros(0, 3, 5, 5), w, dl.ones(4))
  T.shape_eq(y, {0, 4, 3, 3})
  local gx, gw, gb = nn.conv2d_backward(dl.zeros(0, 4, 3, 3), dl.zeros(0, 3, 5, 5), w)
  T.shape_eq(gx, {0, 3, 5, 5})
  T.tensor_eq(gw, dl.zeros(4, 3, 3, 3))
  T.tensor_eq(gb, {0, 0, 0, 0})
  -- no input channels: the output is the bias
  local y0 = nn.conv2d_forward(dl.zeros(2, 0, 4, 4), dl.zeros(2, 0, 3, 3), dl.tensor({1.0, 2.0}))
  T.tensor_eq(y0, dl.tensor({1.0, 2.0}):view(1, 2, 1, 1):expand(2, 2, 2, 2))
  local _, _, gb0 = nn.conv2d_backward(dl.ones(2, 2, 2, 2), dl.zeros(2, 0, 4, 4), dl.zeros(2, 0, 3, 3))
  T.tensor_eq(gb0, {8, 8})
  local yb, sm, si = nn.batch_norm_forward(dl.zeros(0, 3), nil, nil, nil, nil, {training = true})
  T.shape_eq(yb, {0, 3})
  T.shape_eq(sm, {3})
  T.shape_eq(si, {3})
  local p = nn.max_pool2d_forward(dl.zeros(0, 2, 4, 4), 2)
  T.shape_eq(p, {0, 2, 2, 2})
  T.shape_eq(nn.adaptive_avg_pool2d_forward(dl.zeros(1, 2, 4, 4), {0, 3}), {1, 2, 0, 3})
end)

T.case("expanded, transposed and narrowed operands", function()
  for _, dt in ipairs({F32, F64}) do
    local base = dl.randn(2, 3, 1, 1, {dtype = dt})
    local xe = base:expand(2, 3, 6, 5)
    local xt = dl.randn(2, 3, 5, 6, {dtype = dt}):transpose(3, 4)
    local xn = dl.randn(2, 5, 8, 9, {dtype = dt}):narrow(2, 2, 3):narrow(4, 3, 5):narrow(3, 2, 6)
    local w = dl.randn(4, 3, 3, 2, {dtype = dt}):transpose(3, 4):contiguous():transpose(3, 4)
    for _, x in ipairs({xe, xt, xn}) do
      T.truthy(not x:is_contiguous())
      local o = {padding = 1, stride = {1, 2}}
      T.tensor_eq(nn.conv2d_forward(x, w, nil, o), nn.conv2d_forward(x:contiguous(), w:contiguous(), nil, o), 1e-5)
      local y, i = nn.max_pool2d_forward(x, 2, {stride = 1})
      local yc, ic = nn.max_pool2d_forward(x:contiguous(), 2, {stride = 1})
      T.tensor_eq(y, yc, 0)
      T.tensor_eq(nn.avg_pool2d_forward(x, 3, {padding = 1}), nn.avg_pool2d_forward(x:contiguous(), 3, {padding = 1}), 1e-6)
      local gy = dl.randn(2, 3, 6, 5, {dtype = dt})
      T.tensor_eq(nn.batch_norm_forward(x, nil, nil, nil, nil, {training = true}),
        nn.batch_norm_forward(x:contiguous(), nil, nil, nil, nil, {training = true}), 1e-5)
      local _, m, s = nn.batch_norm_forward(x:contiguous(), nil, nil, nil, nil, {training = true})
      T.tensor_eq(nn.batch_norm_backward(gy:transpose(3, 4):contiguous():transpose(3, 4), x, nil, nil, nil, m, s, {training = true}),
        nn.batch_norm_backward(gy, x:contiguous(), nil, nil, nil, m, s, {training = true}), 1e-5)
      T.eq(#i.shape, 4)
      T.tensor_eq(i, ic, 0)
    end
  end
end)

T.case("float16/bfloat16 compute in float32 and round once", function()
  for _, dt in ipairs({dl.float16, dl.bfloat16}) do
    local x = dl.randn(2, 3, 6, 6):to(dt)
    local w = dl.randn(4, 3, 3, 3):to(dt)
    local b = dl.randn(4):to(dt)
    local y = nn.conv2d_forward(x, w, b, {padding = 1})
    T.eq(y.dtype, dt)
    T.tensor_eq(y:float(), nn.conv2d_forward(x:float(), w:float(), b:float(), {padding = 1}):to(dt):float(), 0)
    local gy = dl.randn(2, 4, 6, 6):to(dt)
    local gx, gw, gb = nn.conv2d_backward(gy, x, w, {padding = 1})
    local fx, fw, fb = nn.conv2d_backward(gy:float(), x:float(), w:float(), {padding = 1})
    T.eq(gw.dtype, dt)
    T.tensor_eq(gx:float(), fx:to(dt):float(), 0)
    T.tensor_eq(gw:float(), fw:to(dt):float(), 0)
    T.tensor_eq(gb:float(), fb:to(dt):float(), 0)
    -- batch norm: half input with float32 parameters and statistics
    local bw, bb = dl.rand(3) + 0.5, dl.randn(3)
    local rm, rv = dl.zeros(3), dl.ones(3)
    local yh, sm, si = nn.batch_norm_forward(x, bw, bb, rm, rv, {training = true})
    T.eq(yh.dtype, dt)
    T.eq(sm.dtype, F32)
    local rm2, rv2 = dl.zeros(3), dl.ones(3)
    local yf, smf = nn.batch_norm_forward(x:float(), bw, bb, rm2, rv2, {training = true})
    T.tensor_eq(yh:float(), yf:to(dt):float(), 0)
    T.tensor_eq(sm, smf, 0)
    T.tensor_eq(rm, rm2, 0)
    local bgx, bgw = nn.batch_norm_backward(gy:narrow(2, 1, 3), x, bw, nil, nil, sm, si, {training = true})
    T.eq(bgx.dtype, dt)
    T.eq(bgw.dtype, F32)
  end
end)

T.case("the primitive cache stays within its bound", function()
  local _, cap = nn.primitive_cache()
  T.truthy(cap >= 16)
  local w = dl.randn(2, 1, 1, 1)
  for h = 1, cap + 10 do nn.conv2d_forward(dl.randn(1, 1, h, 1), w) end
  local n = nn.primitive_cache()
  T.truthy(n <= cap, "cache holds " .. n .. " entries, bound " .. cap)
  T.truthy(n >= cap // 2, "cache was emptied: " .. n)
  -- evicted shapes still compute right
  T.tensor_eq(nn.conv2d_forward(dl.ones(1, 1, 1, 1), dl.ones(1, 1, 1, 1)), {{{{1}}}})
end)

-- --- finite differences (float64) ----------------------------------------------------------

local EPS = 1e-6

-- d/dinput of sum(fwd() * gy) by central differences at `probes` random
-- elements of each input, against the analytic gradients (nil: skip).
-- Inputs are contiguous float64 tensors that fwd reads; they are perturbed in
-- place and restored.
local function fd_check(name, inputs, analytic, fwd, gy, probes)
  local function loss() return dl.mul(fwd(), gy):sum():item() end
  for i, x in ipairs(inputs) do
    local g = analytic[i]
    if g then
      local flat, gflat = x:view(-1), g:contiguous():view(-1)
      for _ = 1, probes or 6 do
        local k = math.random(flat:numel())
        local v = flat[k]:item()
        flat[k] = v + EPS
        local fp = loss()
        flat[k] = v - EPS
        local fm = loss()
        flat[k] = v
        local num, ana = (fp - fm) / (2 * EPS), gflat[k]:item()
        if math.abs(num - ana) > 1e-6 * math.max(1, math.abs(ana)) then
          error(string.format("%s: input %d element %d: numeric %.10g, analytic %.10g", name, i,
            k, num, ana), 2)
        end
      end
    end
  end
end

local function rnd(...) return dl.randn({...}, {dtype = F64}) end

T.case("conv2d backward: finite differences", function()
  local cfgs = {
    {{2, 3, 6, 5}, {4, 3, 3, 3}, {padding = 1}},
    {{1, 4, 7, 7}, {6, 2, 3, 2}, {stride = {2, 1}, padding = {1, 0}, dilation = {1, 2}, groups = 2}},
    {{2, 3, 5, 5}, {3, 1, 3, 3}, {groups = 3, dilation = 2, padding = 2}},
    {{1, 3, 9, 9}, {4, 3, 7, 7}, {stride = 2, padding = 3}},
    {{2, 4, 4, 4}, {5, 4, 1, 1}, {}},
  }
  for n, c in ipairs(cfgs) do
    local x, w, b = rnd(table.unpack(c[1])), rnd(table.unpack(c[2])), rnd(c[2][1])
    local y = nn.conv2d_forward(x, w, b, c[3])
    local gy = rnd(table.unpack(y.shape))
    local gx, gw, gb = nn.conv2d_backward(gy, x, w, c[3])
    fd_check("conv2d " .. n, {x, w, b}, {gx, gw, gb},
      function() return nn.conv2d_forward(x, w, b, c[3]) end, gy)
  end
end)

T.case("batch_norm backward: finite differences (training and evaluation)", function()
  for _, shape in ipairs({{5, 3}, {3, 2, 4}, {2, 3, 3, 4}}) do
    local C = shape[2]
    local x, w, b = rnd(table.unpack(shape)), dl.rand(C, {dtype = F64}) + 0.5, rnd(C)
    local gy = rnd(table.unpack(shape))
    local _, m, s = nn.batch_norm_forward(x, w, b, nil, nil, {training = true, eps = 1e-3})
    local gx, gw, gb = nn.batch_norm_backward(gy, x, w, nil, nil, m, s, {training = true, eps = 1e-3})
    fd_check("batch_norm train " .. #shape .. "-D", {x, w, b}, {gx, gw, gb}, function()
      return (nn.batch_norm_forward(x, w, b, nil, nil, {training = true, eps = 1e-3}))
    end, gy)
    local rm, rv = rnd(C), dl.rand(C, {dtype = F64}) + 0.5
    gx, gw, gb = nn.batch_norm_backward(gy, x, w, rm, rv, nil, nil, {eps = 1e-3})
    fd_check("batch_norm eval " .. #shape .. "-D", {x, w, b}, {gx, gw, gb}, function()
      return nn.batch_norm_forward(x, w, b, rm, rv, {eps = 1e-3})
    end, gy)
  end
end)

T.case("pooling backward: finite differences", function()
  local x = rnd(2, 3, 9, 8)
  local maxcfgs = {{3, {stride = 2, padding = 1}}, {3, {stride = 2, padding = 1, ceil_mode = true}},
    {{2, 3}, {stride = 1, dilation = {2, 1}}}}
  for n, c in ipairs(maxcfgs) do
    local y, ind = nn.max_pool2d_forward(x, c[1], c[2])
    local gy = rnd(table.unpack(y.shape))
    local gx = nn.max_pool2d_backward(gy, x, ind, c[1], c[2])
    fd_check("max_pool2d " .. n, {x}, {gx}, function() return (nn.max_pool2d_forward(x, c[1], c[2])) end, gy, 10)
  end
  local avgcfgs = {{3, {stride = 2, padding = 1}}, {3, {stride = 2, padding = 1, ceil_mode = true}},
    {3, {stride = 2, padding = 1, ceil_mode = true, count_include_pad = false}},
    {{2, 3}, {stride = {1, 2}, divisor_override = 4}}}
  for n, c in ipairs(avgcfgs) do
    local y = nn.avg_pool2d_forward(x, c[1], c[2])
    local gy = rnd(table.unpack(y.shape))
    local gx = nn.avg_pool2d_backward(gy, x, c[1], c[2])
    fd_check("avg_pool2d " .. n, {x}, {gx}, function() return nn.avg_pool2d_forward(x, c[1], c[2]) end, gy, 10)
  end
  for n, o in ipairs({{4, 3}, {2, 5}, 1}) do
    local y = nn.adaptive_avg_pool2d_forward(x, o)
    local gy = rnd(table.unpack(y.shape))
    fd_check("adaptive_avg_pool2d " .. n, {x}, {nn.adaptive_avg_pool2d_backward(gy, x)},
      function() return nn.adaptive_avg_pool2d_forward(x, o) end, gy, 10)
    local ym, im = nn.adaptive_max_pool2d_forward(x, o)
    fd_check("adaptive_max_pool2d " .. n, {x}, {nn.adaptive_max_pool2d_backward(gy, x, im)},
      function() return (nn.adaptive_max_pool2d_forward(x, o)) end, gy, 10)
    T.shape_eq(ym, y.shape)
  end
end)

-- --- bad input ---------------------------------------------------------------------

T.case("bad input: clear errors naming the op", function()
  local x, w = dl.randn(2, 3, 5, 5), dl.randn(4, 3, 3, 3)
  T.raises(function() nn.conv2d_forward(dl.randn(2, 4, 5, 5), w) end,
    "conv2d: input has 4 channels, weight [4, 3, 3, 3] expects 3 (groups=1)")
  T.raises(function() nn.conv2d_forward(x, dl.randn(4, 3, 7, 7)) end,
    "conv2d: kernel size 7x7 (dilated 7x7) is larger than the padded input 5x5")
  T.raises(function() nn.conv2d_forward(x, w, nil, {stride = 0}) end,
    "conv2d: stride must be positive, got (0, 0)")
  T.raises(function() nn.conv2d_forward(x, w, nil, {padding = {1, -1}}) end,
    "conv2d: padding must be non-negative")
  T.raises(function() nn.conv2d_forward(dl.randn(3, 5), w) end,
    "conv2d: expected a 3-D (C,H,W) or 4-D (N,C,H,W) input, got 2-D [3, 5]")
  T.raises(function() nn.conv2d_forward(x, dl.randn(4, 3, 3)) end, "conv2d: expected a 4-D")
  T.raises(function() nn.conv2d_forward(x:double(), w) end,
    "conv2d: input (float64) and weight (float32) must have the same dtype")
  T.raises(function() nn.conv2d_forward(dl.randn(1, 4, 5, 5), dl.randn(5, 2, 3, 3), nil, {groups = 2}) end,
    "conv2d: out_channels (5) must be divisible by groups (2)")
  T.raises(function() nn.conv2d_forward(x, w, nil, {groups = 0}) end, "conv2d: groups must be positive")
  T.raises(function() nn.conv2d_forward(x, w, dl.randn(3)) end,
    "conv2d: expected a bias of shape [4], got [3]")
  T.raises(function() nn.conv2d_forward(x:long(), w:long()) end,
    "conv2d: input must be a floating-point tensor, got int64")
  T.raises(function() nn.conv2d_forward(x, w, nil, {strides = 2}) end, "conv2d: unknown option 'strides'")
  T.raises(function() nn.conv2d_forward(x, w, nil, {stride = {1, 2, 3}}) end,
    "conv2d: stride must be a number or a pair {h, w}")
  T.raises(function() nn.conv2d_forward(x, w, nil, {stride = 1.5}) end,
    "conv2d: stride must be an integer or a pair of integers")
  T.raises(function() nn.conv2d_forward(x, "w") end, "tensor")
  T.raises(function() nn.conv2d_forward(x, w, nil, {dilation = 1 << 40}) end,
    "conv2d: dilation 1099511627776 is too large")
  T.raises(function() nn.max_pool2d_forward(x, {2, 1 << 62}) end,
    "max_pool2d: kernel_size 4611686018427387904 is too large")
  T.raises(function() nn.conv2d_backward(dl.randn(2, 4, 4, 4), x, w) end,
    "conv2d_backward: grad_output has shape [2, 4, 4, 4], expected the output's [2, 4, 3, 3]")
  T.raises(function() nn.conv2d_backward(dl.randn(2, 4, 3, 3), x, w, {need = {1, 2}}) end,
    "conv2d_backward: need must be a table of 3 booleans")

  T.raises(function() nn.batch_norm_forward(dl.randn(1, 3), nil, nil, nil, nil, {training = true}) end,
    "batch_norm: expected more than 1 value per channel when training, got input size [1, 3]")
  T.raises(function() nn.batch_norm_forward(dl.randn(4, 3), dl.ones(4), nil, nil, nil, {training = true}) end,
    "batch_norm: weight must have shape [3] (one value per channel), got [4]")
  T.raises(function() nn.batch_norm_forward(dl.randn(4, 3)) end,
    "batch_norm: running_mean and running_var are required in evaluation mode")
  T.raises(function() nn.batch_norm_forward(dl.randn(4), nil, nil, nil, nil, {training = true}) end,
    "batch_norm: expected a 2-D (N,C), 3-D (N,C,L) or 4-D (N,C,H,W) input, got 1-D [4]")
  T.raises(function()
    nn.batch_norm_forward(dl.randn(4, 3), nil, nil, dl.zeros(1):expand(3), dl.ones(3), {training = true})
  end, "batch_norm: running_mean is an expanded view and cannot be updated in place")
  T.raises(function() nn.batch_norm_forward(dl.randn(4, 3), nil, nil, dl.zeros(3), nil, {training = true}) end,
    "batch_norm: running_mean and running_var must be given together")
  T.raises(function()
    nn.batch_norm_forward(dl.randn(4, 3), nil, nil, dl.zeros(3), dl.ones(3), {training = true, cumulative = true})
  end, "batch_norm: a cumulative average needs num_batches_tracked >= 1, got 0")
  T.raises(function() nn.batch_norm_forward(dl.randn(4, 3), dl.ones(3):double(), nil, dl.zeros(3), dl.ones(3)) end,
    "batch_norm: weight (float64) must have the input's dtype (float32)")
  T.raises(function() nn.batch_norm_backward(dl.randn(4, 3), dl.randn(4, 3), nil, nil, nil, nil, nil, {training = true}) end,
    "batch_norm_backward: save_mean and save_invstd are required in training mode")
  T.raises(function() nn.batch_norm_forward(dl.randn(4, 3), nil, nil, dl.zeros(3), dl.ones(3), {eps = -1}) end,
    "batch_norm: eps must be non-negative, got -1")

  T.raises(function() nn.max_pool2d_forward(x, 3, {padding = 2}) end,
    "max_pool2d: padding must be between 0 and half the kernel size, got padding (2, 2) for kernel (3, 3)")
  T.raises(function() nn.max_pool2d_forward(dl.randn(1, 1, 2, 2), 3) end,
    "max_pool2d: input plane 2x2 is too small for kernel (3, 3)")
  T.raises(function() nn.max_pool2d_forward(x, 0) end, "max_pool2d: kernel_size must be positive, got (0, 0)")
  T.raises(function() nn.max_pool2d_forward(x) end, "max_pool2d: kernel_size expected")
  T.raises(function() nn.max_pool2d_forward(x, 2, {stride = 0}) end, "max_pool2d: stride must be positive")
  T.raises(function() nn.max_pool2d_forward(dl.randn(2, 3, 0, 4), 2) end,
    "max_pool2d: expected non-zero channel and spatial sizes, got input [2, 3, 0, 4]")
  local y, ind = nn.max_pool2d_forward(x, 2)
  T.raises(function() nn.max_pool2d_backward(dl.ones_like(y), x, ind:float(), 2) end,
    "max_pool2d_backward: indices must be an int64 tensor, got float32")
  T.raises(function() nn.max_pool2d_backward(dl.ones_like(y), x, ind + 100, 2) end,
    "max_pool2d_backward: 24 indices are outside the input plane of 25 elements")
  T.raises(function() nn.max_pool2d_backward(dl.ones(2, 3, 3, 3), x, ind, 2) end,
    "max_pool2d_backward: grad_output has shape [2, 3, 3, 3], expected the output's [2, 3, 2, 2]")
  T.raises(function() nn.avg_pool2d_forward(x, 2, {divisor_override = 0}) end,
    "avg_pool2d: divisor_override must be non-zero")
  T.raises(function() nn.avg_pool2d_forward(x, 2, {dilation = 2}) end, "avg_pool2d: unknown option 'dilation'")
  T.raises(function() nn.adaptive_avg_pool2d_forward(x, {-1, 2}) end,
    "adaptive_avg_pool2d: output_size must be non-negative, got (-1, 2)")
  T.raises(function() nn.adaptive_max_pool2d_forward(x:long(), 2) end,
    "adaptive_max_pool2d: input must be a floating-point tensor, got int64")
  T.raises(function() nn.adaptive_avg_pool2d_backward(dl.ones(2, 3, 3), x) end,
    "adaptive_avg_pool2d_backward: grad_output has shape [2, 3, 3], expected the output's")
  T.raises(function() nn.conv2d_layout("nhwc") end,
    "conv2d_layout: unknown layout 'nhwc' (expected plain, any or auto)")
  T.eq(nn.conv2d_layout(), "auto")
  -- the process is healthy after all that
  T.tensor_eq(nn.conv2d_forward(dl.ones(1, 1, 2, 2), dl.ones(1, 1, 2, 2)), {{{{4}}}})
end)

T.done()
