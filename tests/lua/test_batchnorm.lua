-- test_batchnorm.lua - the batch-norm kernels (dl._nn.batch_norm_forward /
-- backward) on known small values (batch statistics, running updates with
-- momentum and the cumulative average, evaluation), empty batches, expanded
-- and strided inputs, float16/bfloat16 data with float32 parameters,
-- finite-difference gradient checks in float64 (training and evaluation),
-- and bad input: each a clear error naming the op.  (test_batchnorm_torch.lua
-- compares with PyTorch; test_batchnorm_layout.lua covers channels-last.)
local T = require "testlib"
local dl = require "dl"
local nn = dl._nn

local F32, F64 = dl.float32, dl.float64
dl.manual_seed(7)
math.randomseed(7)

-- --- known values ---------------------------------------------------------------

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

-- --- layouts, shapes and dtypes ----------------------------------------------------------

T.case("batch_norm: empty batches", function()
  local yb, sm, si = nn.batch_norm_forward(dl.zeros(0, 3), nil, nil, nil, nil, {training = true})
  T.shape_eq(yb, {0, 3})
  T.shape_eq(sm, {3})
  T.shape_eq(si, {3})
end)

T.case("batch_norm: expanded, transposed and narrowed operands", function()
  for _, dt in ipairs({F32, F64}) do
    for _, x in ipairs(T.strided_inputs(dt)) do
      local gy = dl.randn(2, 3, 6, 5, {dtype = dt})
      T.tensor_eq(nn.batch_norm_forward(x, nil, nil, nil, nil, {training = true}),
        nn.batch_norm_forward(x:contiguous(), nil, nil, nil, nil, {training = true}), 1e-5)
      local _, m, s = nn.batch_norm_forward(x:contiguous(), nil, nil, nil, nil, {training = true})
      T.tensor_eq(nn.batch_norm_backward(gy:transpose(3, 4):contiguous():transpose(3, 4), x, nil, nil, nil, m, s, {training = true}),
        nn.batch_norm_backward(gy, x:contiguous(), nil, nil, nil, m, s, {training = true}), 1e-5)
    end
  end
end)

T.case("batch_norm: float16/bfloat16 data with float32 parameters and statistics", function()
  for _, dt in ipairs({dl.float16, dl.bfloat16}) do
    local x = dl.randn(2, 3, 6, 6):to(dt)
    local gy = dl.randn(2, 3, 6, 6):to(dt)
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
    local bgx, bgw = nn.batch_norm_backward(gy, x, bw, nil, nil, sm, si, {training = true})
    T.eq(bgx.dtype, dt)
    T.eq(bgw.dtype, F32)
  end
end)

-- --- finite differences (float64, T.kernel_gradcheck at random probes) ---------------------

local rnd = T.randn64

T.case("batch_norm backward: finite differences (training and evaluation)", function()
  for _, shape in ipairs({{5, 3}, {3, 2, 4}, {2, 3, 3, 4}}) do
    local C = shape[2]
    local x, w, b = rnd(table.unpack(shape)), dl.rand(C, {dtype = F64}) + 0.5, rnd(C)
    local gy = rnd(table.unpack(shape))
    local _, m, s = nn.batch_norm_forward(x, w, b, nil, nil, {training = true, eps = 1e-3})
    local gx, gw, gb = nn.batch_norm_backward(gy, x, w, nil, nil, m, s, {training = true, eps = 1e-3})
    T.kernel_gradcheck("batch_norm train " .. #shape .. "-D", function()
      return (nn.batch_norm_forward(x, w, b, nil, nil, {training = true, eps = 1e-3}))
    end, {x, w, b}, {gx, gw, gb}, gy, {probes = 6})
    local rm, rv = rnd(C), dl.rand(C, {dtype = F64}) + 0.5
    gx, gw, gb = nn.batch_norm_backward(gy, x, w, rm, rv, nil, nil, {eps = 1e-3})
    T.kernel_gradcheck("batch_norm eval " .. #shape .. "-D", function()
      return nn.batch_norm_forward(x, w, b, rm, rv, {eps = 1e-3})
    end, {x, w, b}, {gx, gw, gb}, gy, {probes = 6})
  end
end)

-- --- bad input ---------------------------------------------------------------------

T.case("batch_norm bad input: clear errors naming the op", function()
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
  -- the process is healthy after all that
  T.tensor_eq(nn.batch_norm_forward(dl.ones(2, 1), nil, nil, dl.zeros(1), dl.ones(1), {eps = 0}), {{1}, {1}})
end)

T.done()
