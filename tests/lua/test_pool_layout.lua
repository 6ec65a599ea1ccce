-- test_pool_layout.lua - the CPU pooling kernels' two fast paths against the
-- reference loops: the float32 AVX-512 max pool (planar) against the
-- one-window-at-a-time float64 loops, and the channels-last kernels against
-- the planar ones (values, indices and gradients bit-equal; results laid out
-- channels-last).  Also float64 gradient checks through channels-last
-- inputs, PyTorch's channels-last results, and bad indices.
-- (test_pool.lua and test_pool_torch.lua cover the planar kernels.)
local T = require "testlib"
local dl = require "dl"
local nn = dl._nn
local F = dl.nn.functional

local F32, F64 = dl.float32, dl.float64
dl.manual_seed(11)

local cl, same = T.channels_last, T.same_bits
local function is_cl(t, msg) T.truthy(T.is_channels_last(t), (msg or "result") .. " channels-last strides") end

-- Values with many ties (a few integers, +-0), and when special, NaN and
-- -inf sprinkled in: max pooling's tie and NaN rules get exercised.
local function tricky(dt, special, ...)
  local x = dl.randn(...):mul(1.5):round():clamp(-2, 2)
  local flat = x:view(-1)
  local n = flat:numel()
  for k = 1, n, 7 do flat[k] = -0.0 end
  if special then
    for k = 5, n, 53 do flat[k] = 0 / 0 end
    for k = 11, n, 41 do flat[k] = -1 / 0 end
  end
  return x:to(dt)
end

-- --- float32 vector kernel vs the one-window loops -------------------------------------

-- kernel, stride, padding, dilation, ceil_mode; rows from narrower than one
-- vector (a masked one: 1..15 inner columns) to several vectors wide
local MAX_CFGS = {
  {3, 2, 1, 1, false}, -- ResNet's stem
  {3, 2, 1, 1, true},
  {2, 2, 0, 1, false},
  {3, 1, 1, 1, false},
  {{3, 5}, {1, 2}, {1, 2}, 1, true},
  {3, 3, 1, 1, true},
  {3, 2, 1, 2, false},
  {{2, 3}, {2, 1}, 0, {1, 3}, false},
  {5, 4, 2, 1, true},
  {1, 1, 0, 1, false},
}

local function opts(c)
  return {stride = c[2], padding = c[3], dilation = c[4], ceil_mode = c[5]}
end

T.case("max_pool2d float32 vector kernel = the float64 loops (values, indices, ties, NaN)", function()
  for i, c in ipairs(MAX_CFGS) do
    for _, w in ipairs({7, 8, 11, 16, 21, 29, 32, 33, 37, 70}) do
      local x = tricky(F32, i % 2 == 0, 2, 3, 9, w)
      local y, ind = nn.max_pool2d_forward(x, c[1], opts(c))
      local y64, ind64 = nn.max_pool2d_forward(x:double(), c[1], opts(c))
      local msg = string.format("config %d width %d", i, w)
      same(y:double(), y64, msg .. " values")
      same(ind, ind64, msg .. " indices")
    end
  end
end)

-- --- channels-last vs planar -------------------------------------------------------------

T.case("channels-last max_pool2d: bit-equal to planar, channels-last results", function()
  for _, dt in ipairs({F32, F64}) do
    for i, c in ipairs(MAX_CFGS) do
      -- 300 channels: two channel blocks
      local shape = i == 3 and {2, 300, 6, 7} or {2, 5, 11, 13}
      local x = tricky(dt, i % 2 == 1, table.unpack(shape))
      local xc = cl(x)
      local msg = string.format("%s config %d", dt.name, i)
      local y, ind = nn.max_pool2d_forward(x, c[1], opts(c))
      local yc, indc = nn.max_pool2d_forward(xc, c[1], opts(c))
      is_cl(yc, msg .. " y")
      is_cl(indc, msg .. " indices")
      same(yc, y, msg .. " y")
      same(indc, ind, msg .. " indices")
      local gy = dl.randn(y.shape):to(dt)
      local gx = nn.max_pool2d_backward(gy, x, ind, c[1], opts(c))
      -- gy and indices in either layout: they follow x's, not x theirs
      for _, g in ipairs({gy, cl(gy)}) do
        for _, id in ipairs({indc, ind}) do
          local gxc = nn.max_pool2d_backward(g, xc, id, c[1], opts(c))
          is_cl(gxc, msg .. " gx")
          same(gxc, gx, msg .. " gx")
        end
      end
    end
  end
end)

-- Under dl.no_grad nothing reads the indices: float32 channels-last max
-- pooling then runs a values-only kernel (32 channels in four registers,
-- then 8 a register, a scalar tail); its values must be the indexed
-- kernel's, NaN and ties included.
T.case("channels-last max_pool2d without indices (no grad) = with indices", function()
  for i, c in ipairs(MAX_CFGS) do
    for _, C in ipairs({3, 8, 20, 40, 64, 300}) do
      local x = cl(tricky(F32, i % 2 == 1, 2, C, 11, 13))
      local msg = string.format("config %d, %d channels", i, C)
      local want = nn.max_pool2d_forward(x, c[1], opts(c))
      local y = dl.no_grad(function() return F.max_pool2d(x, c[1], opts(c)) end)
      is_cl(y, msg)
      same(y, want, msg)
    end
  end
end)

T.case("channels-last adaptive max/avg pooling: bit-equal to planar", function()
  for _, dt in ipairs({F32, F64}) do
    for _, c in ipairs({{{2, 6, 7, 7}, {1, 1}}, {{2, 5, 9, 10}, {4, 3}}, {{1, 4, 5, 5}, {7, 7}},
        {{2, 260, 7, 6}, {2, 5}}, {{3, 3, 8, 8}, {4, 4}}}) do
      local x = tricky(dt, true, table.unpack(c[1]))
      x = x + dl.randn(x.shape):to(dt) -- sums that round
      local xc = cl(x)
      local msg = string.format("%s %s -> %s", dt.name, T.fmt(c[1]), T.fmt(c[2]))
      local ya, yac = nn.adaptive_avg_pool2d_forward(x, c[2]), nn.adaptive_avg_pool2d_forward(xc, c[2])
      is_cl(yac, msg .. " avg y")
      same(yac, ya, msg .. " avg y")
      local gy = dl.randn(ya.shape):to(dt)
      local ga = nn.adaptive_avg_pool2d_backward(gy, x)
      for _, g in ipairs({gy, cl(gy)}) do
        local gac = nn.adaptive_avg_pool2d_backward(g, xc)
        is_cl(gac, msg .. " avg gx")
        same(gac, ga, msg .. " avg gx")
      end
      local ym, im = nn.adaptive_max_pool2d_forward(x, c[2])
      local ymc, imc = nn.adaptive_max_pool2d_forward(xc, c[2])
      is_cl(ymc, msg .. " max y")
      same(ymc, ym, msg .. " max y")
      same(imc, im, msg .. " max indices")
      local gmc = nn.adaptive_max_pool2d_backward(cl(gy), xc, imc)
      is_cl(gmc, msg .. " max gx")
      same(gmc, nn.adaptive_max_pool2d_backward(gy, x, im), msg .. " max gx")
    end
  end
end)

-- kernel, {stride, padding, ceil_mode, count_include_pad, divisor_override}
local AVG_CFGS = {
  {3, {stride = 2, padding = 1}},
  {2, {stride = 2}},
  {3, {stride = 2, padding = 1, ceil_mode = true}}, -- overhang past the padding
  {3, {stride = 2, padding = 1, ceil_mode = true, count_include_pad = false}},
  {{3, 2}, {stride = {1, 2}, padding = {1, 0}, divisor_override = 5}},
  {7, {stride = 1}},
}

T.case("channels-last avg_pool2d: equal to planar", function()
  for _, dt in ipairs({F32, F64}) do
    for i, c in ipairs(AVG_CFGS) do
      local x = dl.randn(2, 6, 9, 8):to(dt)
      local xc = cl(x)
      local msg = string.format("%s config %d", dt.name, i)
      local y, yc = nn.avg_pool2d_forward(x, c[1], c[2]), nn.avg_pool2d_forward(xc, c[1], c[2])
      is_cl(yc, msg .. " y")
      local gy = dl.randn(y.shape):to(dt)
      local gx, gxc = nn.avg_pool2d_backward(gy, x, c[1], c[2]), nn.avg_pool2d_backward(cl(gy), xc, c[1], c[2])
      is_cl(gxc, msg .. " gx")
      -- float32 without a divisor override or an overhang runs on oneDNN in
      -- both layouts (nchw and nhwc primitives): equal to float32 rounding;
      -- everything else runs on the loops: bit-equal
      if dt == F32 and (i == 1 or i == 2 or i == 4 or i == 6) then
        T.tensor_eq(yc, y, 1e-6, msg .. " y")
        T.tensor_eq(gxc, gx, 1e-6, msg .. " gx")
      else
        same(yc, y, msg .. " y")
        same(gxc, gx, msg .. " gx")
      end
    end
  end
end)

T.case("channels-last pooling: ResNet shapes, batch of one, float16/bfloat16", function()
  local x = dl.randn(2, 64, 40, 40):relu()
  local y, ind = nn.max_pool2d_forward(x, 3, {stride = 2, padding = 1})
  local yc, indc = nn.max_pool2d_forward(cl(x), 3, {stride = 2, padding = 1})
  T.truthy(dl.equal(yc, y) and dl.equal(indc, ind), "stem max pool")
  local gy = dl.randn(y.shape)
  T.truthy(dl.equal(nn.max_pool2d_backward(cl(gy), cl(x), indc, 3, {stride = 2, padding = 1}),
    nn.max_pool2d_backward(gy, x, ind, 3, {stride = 2, padding = 1})), "stem max pool gx")
  local h = dl.randn(1, 512, 7, 7) -- one image: parallel over channel blocks
  local ha = nn.adaptive_avg_pool2d_forward(cl(h), 1)
  is_cl(ha, "head")
  same(ha, nn.adaptive_avg_pool2d_forward(h, 1), "head")
  for _, dt in ipairs({dl.float16, dl.bfloat16}) do
    local xh = dl.randn(2, 6, 9, 9):to(dt)
    local yh, ih = nn.max_pool2d_forward(cl(xh), 3, {stride = 2, padding = 1})
    local yp, ip = nn.max_pool2d_forward(xh, 3, {stride = 2, padding = 1})
    is_cl(yh, dt.name .. " y")
    T.eq(yh.dtype, dt)
    same(yh, yp, dt.name .. " y")
    same(ih, ip, dt.name .. " indices")
    local ah = nn.adaptive_avg_pool2d_forward(cl(xh), {2, 3})
    is_cl(ah, dt.name .. " adaptive")
    same(ah, nn.adaptive_avg_pool2d_forward(xh, {2, 3}), dt.name .. " adaptive")
  end
end)

-- --- gradients ---------------------------------------------------------------------------

T.case("max_pool2d_nhwc: the CUDA switch reads and sets, the CPU ignores it", function()
  local before = nn.max_pool2d_nhwc()
  T.eq(type(before), "boolean")
  T.eq(nn.max_pool2d_nhwc(false), before)
  T.eq(nn.max_pool2d_nhwc(), false)
  local x = cl(dl.randn(2, 4, 9, 9))
  local y1, i1 = nn.max_pool2d_forward(x, 3, {stride = 2, padding = 1})
  T.eq(nn.max_pool2d_nhwc(true), false)
  local y2, i2 = nn.max_pool2d_forward(x, 3, {stride = 2, padding = 1})
  same(y1, y2, "y")
  same(i1, i2, "indices")
  T.raises(function() nn.max_pool2d_nhwc("yes") end, "boolean expected")
  nn.max_pool2d_nhwc(before)
end)

T.case("float64 gradient checks through channels-last inputs", function()
  local x = dl.randn(2, 3, 7, 6, {dtype = F64}):requires_grad_()
  local fns = {
    max = function(t) return F.max_pool2d(cl(t), 3, {stride = 2, padding = 1}) end,
    max_dilated = function(t) return F.max_pool2d(cl(t), 2, {stride = 1, dilation = 2, ceil_mode = true}) end,
    avg = function(t) return F.avg_pool2d(cl(t), 3, {stride = 2, padding = 1, count_include_pad = false}) end,
    adaptive_avg = function(t) return F.adaptive_avg_pool2d(cl(t), {3, 4}) end,
    adaptive_max = function(t) return F.adaptive_max_pool2d(cl(t), {2, 4}) end,
  }
  for name, fn in pairs(fns) do
    T.gradcheck(fn, {x}, name)
    local xc = cl(x:detach()):requires_grad_()
    local y = fn(xc)
    is_cl(y, name .. " y")
    is_cl(dl.autograd.grad(y:sum(), {xc})[1], name .. " gradient")
  end
end)

-- --- PyTorch --------------------------------------------------------------------------------

local torch = T.torch([[
import torch.nn.functional as F
x = torch.randn(2, 5, 11, 13).relu()
xc = x.contiguous(memory_format=torch.channels_last).requires_grad_()
y, ind = F.max_pool2d(xc, 3, 2, 1, return_indices=True)
gy = torch.randn(y.shape)
gx, = torch.autograd.grad(y, xc, gy)
a = torch.randn(2, 6, 7, 7)
ac = a.contiguous(memory_format=torch.channels_last).requires_grad_()
ya = F.adaptive_avg_pool2d(ac, (3, 2))
gya = torch.randn(ya.shape)
gxa, = torch.autograd.grad(ya, ac, gya)
emit(dict(x=x, y=y, ind=ind, cl=[y.is_contiguous(memory_format=torch.channels_last),
          ind.is_contiguous(memory_format=torch.channels_last)], gy=gy, gx=gx,
          a=a, ya=ya, gya=gya, gxa=gxa))
]])

T.case("channels-last max and adaptive average pooling vs torch", function()
  T.truthy(torch.cl[1] and torch.cl[2], "torch keeps channels-last")
  local x = cl(T.from_torch(torch.x))
  local y, ind = nn.max_pool2d_forward(x, 3, {stride = 2, padding = 1})
  T.match_torch(y, torch.y, 0, 0, "max y")
  T.match_torch(ind, torch.ind, 0, 0, "max indices")
  T.match_torch(nn.max_pool2d_backward(T.from_torch(torch.gy), x, ind, 3, {stride = 2, padding = 1}),
    torch.gx, 0, 0, "max gx")
  local a = cl(T.from_torch(torch.a))
  T.match_torch(nn.adaptive_avg_pool2d_forward(a, {3, 2}), torch.ya, 1e-5, 1e-6, "adaptive avg y")
  T.match_torch(nn.adaptive_avg_pool2d_backward(T.from_torch(torch.gya), a), torch.gxa, 1e-5, 1e-6,
    "adaptive avg gx")
end)

-- --- bad input -----------------------------------------------------------------------------

T.case("channels-last scatter: out-of-range indices are an error", function()
  local x = cl(dl.randn(1, 3, 4, 4))
  local y, ind = nn.max_pool2d_forward(x, 2)
  local bad = ind:clone():contiguous() -- clone keeps the channels-last layout
  bad:view(-1)[2] = 16
  bad:view(-1)[5] = -1
  T.raises(function() nn.max_pool2d_backward(dl.ones(y.shape), x, cl(bad), 2) end,
    "max_pool2d_backward: 2 indices are outside the input plane of 16 elements")
  T.raises(function() nn.adaptive_max_pool2d_backward(dl.ones(y.shape), x, cl(bad)) end,
    "indices are outside the input plane")
end)

T.done()
