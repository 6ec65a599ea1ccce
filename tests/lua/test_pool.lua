-- test_pool.lua - the pooling kernels (dl._nn max/avg/adaptive pooling,
-- forward and backward) on known small values (indices, ties, NaN, padding
-- and the divisor), unbatched and empty inputs, expanded and strided inputs,
-- finite-difference gradient checks in float64, and bad input: each a clear
-- error naming the op.  (test_pool_torch.lua compares with PyTorch;
-- test_pool_layout.lua covers the vector and channels-last kernels.)
local T = require "testlib"
local dl = require "dl"
local nn = dl._nn

local F32, F64 = dl.float32, dl.float64
dl.manual_seed(7)
math.randomseed(7)

-- --- known values ---------------------------------------------------------------

T.case("pooling: known windows, indices and gradients", function()
  for _, dt in ipairs({F32, F64}) do
    local x = T.seq(dt, 1, 1, 4, 4)
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

T.case("pooling: unbatched (C,H,W) inputs", function()
  local x = dl.randn(3, 7, 6)
  local p, i = nn.max_pool2d_forward(x, 2)
  T.shape_eq(p, {3, 3, 3})
  T.shape_eq(nn.max_pool2d_backward(dl.ones(3, 3, 3), x, i, 2), {3, 7, 6})
  T.shape_eq(nn.avg_pool2d_backward(dl.ones(3, 3, 3), x, 2), {3, 7, 6})
  T.shape_eq(nn.adaptive_avg_pool2d_forward(x, 2), {3, 2, 2})
end)

T.case("pooling: empty batches and empty outputs", function()
  local p = nn.max_pool2d_forward(dl.zeros(0, 2, 4, 4), 2)
  T.shape_eq(p, {0, 2, 2, 2})
  T.shape_eq(nn.adaptive_avg_pool2d_forward(dl.zeros(1, 2, 4, 4), {0, 3}), {1, 2, 0, 3})
end)

T.case("pooling: expanded, transposed and narrowed operands", function()
  for _, dt in ipairs({F32, F64}) do
    for _, x in ipairs(T.strided_inputs(dt)) do
      local y, i = nn.max_pool2d_forward(x, 2, {stride = 1})
      local yc, ic = nn.max_pool2d_forward(x:contiguous(), 2, {stride = 1})
      T.tensor_eq(y, yc, 0)
      T.tensor_eq(nn.avg_pool2d_forward(x, 3, {padding = 1}), nn.avg_pool2d_forward(x:contiguous(), 3, {padding = 1}), 1e-6)
      T.eq(#i.shape, 4)
      T.tensor_eq(i, ic, 0)
    end
  end
end)

-- --- finite differences (float64, T.kernel_gradcheck at random probes) ---------------------

local rnd = T.randn64

T.case("pooling backward: finite differences", function()
  local x = rnd(2, 3, 9, 8)
  local maxcfgs = {{3, {stride = 2, padding = 1}}, {3, {stride = 2, padding = 1, ceil_mode = true}},
    {{2, 3}, {stride = 1, dilation = {2, 1}}}}
  for n, c in ipairs(maxcfgs) do
    local y, ind = nn.max_pool2d_forward(x, c[1], c[2])
    local gy = rnd(table.unpack(y.shape))
    local gx = nn.max_pool2d_backward(gy, x, ind, c[1], c[2])
    T.kernel_gradcheck("max_pool2d " .. n, function() return (nn.max_pool2d_forward(x, c[1], c[2])) end,
      {x}, {gx}, gy, {probes = 10})
  end
  local avgcfgs = {{3, {stride = 2, padding = 1}}, {3, {stride = 2, padding = 1, ceil_mode = true}},
    {3, {stride = 2, padding = 1, ceil_mode = true, count_include_pad = false}},
    {{2, 3}, {stride = {1, 2}, divisor_override = 4}}}
  for n, c in ipairs(avgcfgs) do
    local y = nn.avg_pool2d_forward(x, c[1], c[2])
    local gy = rnd(table.unpack(y.shape))
    local gx = nn.avg_pool2d_backward(gy, x, c[1], c[2])
    T.kernel_gradcheck("avg_pool2d " .. n, function() return nn.avg_pool2d_forward(x, c[1], c[2]) end,
      {x}, {gx}, gy, {probes = 10})
  end
  for n, o in ipairs({{4, 3}, {2, 5}, 1}) do
    local y = nn.adaptive_avg_pool2d_forward(x, o)
    local gy = rnd(table.unpack(y.shape))
    T.kernel_gradcheck("adaptive_avg_pool2d " .. n, function() return nn.adaptive_avg_pool2d_forward(x, o) end,
      {x}, {nn.adaptive_avg_pool2d_backward(gy, x)}, gy, {probes = 10})
    local ym, im = nn.adaptive_max_pool2d_forward(x, o)
    T.kernel_gradcheck("adaptive_max_pool2d " .. n, function() return (nn.adaptive_max_pool2d_forward(x, o)) end,
      {x}, {nn.adaptive_max_pool2d_backward(gy, x, im)}, gy, {probes = 10})
    T.shape_eq(ym, y.shape)
  end
end)

-- --- bad input ---------------------------------------------------------------------

T.case("pooling bad input: clear errors naming the op", function()
  local x = dl.randn(2, 3, 5, 5)
  T.raises(function() nn.max_pool2d_forward(x, {2, 1 << 62}) end,
    "max_pool2d: kernel_size 4611686018427387904 is too large")
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
  -- the process is healthy after all that
  T.tensor_eq(nn.max_pool2d_forward(dl.ones(1, 1, 2, 2), 2), {{{{1}}}})
end)

T.done()
