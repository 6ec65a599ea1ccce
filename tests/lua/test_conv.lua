-- test_conv.lua - the conv2d kernels (dl._nn.conv2d_forward/backward) on
-- known small values, edge cases (unbatched, empty batch, zero channels,
-- expanded and strided inputs, float16/bfloat16), finite-difference gradient
-- checks in float64, the oneDNN primitive cache's bound, the cuDNN plan
-- cache's statistics (zero without a GPU), and bad input: each a clear error
-- naming the op.  (test_conv_torch.lua compares with PyTorch;
-- test_conv_layout.lua covers channels-last and Winograd on the CPU.)
local T = require "testlib"
local dl = require "dl"
local nn = dl._nn

local F32, F64 = dl.float32, dl.float64
dl.manual_seed(7)
math.randomseed(7)

-- --- known values ---------------------------------------------------------------

T.case("conv2d: 2x2 window sums and their gradients", function()
  for _, dt in ipairs({F32, F64}) do
    local x = T.seq(dt, 1, 1, 4, 4)
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

-- --- layouts, shapes and dtypes ----------------------------------------------------------

T.case("conv2d: unbatched (C,H,W) inputs match the batched results", function()
  local x = dl.randn(3, 7, 6)
  local w = dl.randn(4, 3, 3, 3)
  local y = nn.conv2d_forward(x, w, nil, {padding = 1})
  T.shape_eq(y, {4, 7, 6})
  T.tensor_eq(y, nn.conv2d_forward(x:unsqueeze(1), w, nil, {padding = 1}):squeeze(1), 1e-5)
  local gx, gw = nn.conv2d_backward(dl.ones(4, 7, 6), x, w, {padding = 1})
  T.shape_eq(gx, {3, 7, 6})
  T.shape_eq(gw, {4, 3, 3, 3})
end)

T.case("conv2d: empty batches and zero channels", function()
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
end)

T.case("conv2d: expanded, transposed and narrowed operands", function()
  for _, dt in ipairs({F32, F64}) do
    local xs = T.strided_inputs(dt)
    local w = dl.randn(4, 3, 3, 2, {dtype = dt}):transpose(3, 4):contiguous():transpose(3, 4)
    for _, x in ipairs(xs) do
      local o = {padding = 1, stride = {1, 2}}
      T.tensor_eq(nn.conv2d_forward(x, w, nil, o), nn.conv2d_forward(x:contiguous(), w:contiguous(), nil, o), 1e-5)
    end
  end
end)

T.case("conv2d: float16/bfloat16 compute in float32 and round once", function()
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

-- --- finite differences (float64, T.kernel_gradcheck at random probes) ---------------------

local rnd = T.randn64

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
    T.kernel_gradcheck("conv2d " .. n, function() return nn.conv2d_forward(x, w, b, c[3]) end,
      {x, w, b}, {gx, gw, gb}, gy, {probes = 6})
  end
end)

-- --- bad input ---------------------------------------------------------------------

T.case("conv2d bad input: clear errors naming the op", function()
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
  T.raises(function() nn.conv2d_backward(dl.randn(2, 4, 4, 4), x, w) end,
    "conv2d_backward: grad_output has shape [2, 4, 4, 4], expected the output's [2, 4, 3, 3]")
  T.raises(function() nn.conv2d_backward(dl.randn(2, 4, 3, 3), x, w, {need = {1, 2}}) end,
    "conv2d_backward: need must be a table of 3 booleans")
  T.raises(function() nn.conv2d_layout("nhwc") end,
    "conv2d_layout: unknown layout 'nhwc' (expected plain, any or auto)")
  T.eq(nn.conv2d_layout(), "auto")
  -- the process is healthy after all that
  T.tensor_eq(nn.conv2d_forward(dl.ones(1, 1, 2, 2), dl.ones(1, 1, 2, 2)), {{{{4}}}})
end)

T.case("the cuDNN plan cache's statistics: all zero without a GPU", function()
  local p = nn.conv2d_plans()
  local keys = {"size", "capacity", "hits", "misses", "evictions", "executed", "built", "no_plan", "timed"}
  for _, k in ipairs(keys) do T.eq(math.type(p[k]), "integer", k) end
  if dl.cuda.is_available() then return end
  nn.conv2d_forward(dl.ones(1, 1, 3, 3), dl.ones(1, 1, 2, 2)) -- the CPU does not touch it
  p = nn.conv2d_plans()
  for _, k in ipairs(keys) do T.eq(p[k], 0, k) end
end)

T.done()
