-- test_random_cuda.lua - random fills on CUDA against the CPU (skipped
-- without a GPU).  One generator serves both devices, so the same seed gives
-- the same numbers: bit for bit for uniform, integers, bernoulli, randperm
-- and dropout masks; normal within an ulp or two (glibc's logf/sinf/cosf on
-- the CPU, correctly rounded equivalents on the GPU: see cuda/random.cu).
-- Also: the generator advances alike on both devices, dtypes, shapes, in-place
-- fills of strided CUDA views, creation with {device=} and bad input.
local T = require "testlib"
local dl = require "dl"
T.require_cuda()

local EXACT = {0, 0}   -- rtol, atol: bit for bit
local NORMAL = {2e-6, 2e-6} -- float32 normal: an ulp or two of values up to ~6

local function case(name, fn, tol)
  tol = tol or EXACT
  T.cuda_case(name, fn, tol[1], tol[2])
end

-- --- the CPU/CUDA equality of each distribution ------------------------------

case("rand: dl.manual_seed(0); dl.rand(1000, {device=...})", function(dev)
  dl.manual_seed(0)
  return dl.rand(1000, {device = dev})
end)

case("randn float32 (an ulp or two)", function(dev)
  dl.manual_seed(0)
  return dl.randn(1000, {device = dev})
end, NORMAL)

case("randn equals the CPU's moved with :cuda()", function(dev)
  dl.manual_seed(0)
  local a = dl.randn(1000, {device = dev})
  dl.manual_seed(0)
  local b = dl.randn(1000)
  if dev == "cuda" then b = b:cuda() end
  return (a - b):abs():max()
end, {0, 4e-6})

case("randint int64, int32, uint8, float32", function(dev)
  dl.manual_seed(3)
  return {
    dl.randint(-50, 50, {1001}, {device = dev}),
    dl.randint(0, 1 << 40, {7, 3}, {device = dev}),
    dl.randint(10, {33}, {dtype = dl.int32, device = dev}),
    dl.randint(0, 256, {100}, {dtype = dl.uint8, device = dev}),
    dl.randint(-1000, 1000, {99}, {dtype = dl.float32, device = dev}),
    dl.randint(-100, 100, {17}, {dtype = dl.float16, device = dev}),
  }
end)

case("random_ in place, several dtypes", function(dev)
  dl.manual_seed(4)
  local a = dl.empty(5, 7, {dtype = dl.int64, device = dev}):random_(3, 9)
  local b = dl.empty(65, {dtype = dl.bool, device = dev}):random_(2)
  local c = dl.empty(20, {dtype = dl.float64, device = dev}):random_(-5, 5)
  local d = dl.empty(20, {dtype = dl.bfloat16, device = dev}):random_(0, 200)
  return {a, b, c, d}
end)

case("bernoulli with a probability: float32, bool, uint8", function(dev)
  dl.manual_seed(5)
  return {
    dl.empty(1003, {device = dev}):bernoulli_(0.3),
    dl.empty(257, {dtype = dl.bool, device = dev}):bernoulli_(0.7),
    dl.empty(64, {dtype = dl.uint8, device = dev}):bernoulli_(),
    dl.empty(9, {dtype = dl.float16, device = dev}):bernoulli_(0.5),
  }
end)

case("bernoulli with per-element probabilities (broadcast)", function(dev)
  local p = dl.linspace(0, 1, 101):to(dev)
  local q = dl.tensor({{0.1}, {0.9}}):to(dev)
  dl.manual_seed(6)
  return {dl.bernoulli(p), dl.empty(2, 50, {device = dev}):bernoulli_(q), p:bernoulli()}
end)

case("uniform_ float32, float64, float16, bfloat16 with bounds", function(dev)
  dl.manual_seed(7)
  return {
    dl.empty(999, {device = dev}):uniform_(-2, 3),
    dl.empty(501, {dtype = dl.float64, device = dev}):uniform_(-1, 1),
    dl.empty(300, {dtype = dl.float16, device = dev}):uniform_(0, 1),
    dl.empty(300, {dtype = dl.bfloat16, device = dev}):uniform_(10, 10.5),
    dl.empty(10, {device = dev}):uniform_(4, 4),
    dl.rand(65, {dtype = dl.float64, device = dev}),
  }
end)

case("normal_ float64 and shifted float32", function(dev)
  dl.manual_seed(8)
  return {
    dl.empty(777, {dtype = dl.float64, device = dev}):normal_(1, 2),
    dl.empty(777, {device = dev}):normal_(-3, 0.5),
  }
end, NORMAL)

case("normal float16 and bfloat16 (rounding of an ulp-close float)", function(dev)
  dl.manual_seed(9)
  return {
    dl.randn(500, {dtype = dl.float16, device = dev}),
    dl.randn(500, {dtype = dl.bfloat16, device = dev}),
  }
end, {1e-2, 1e-3})

case("dl.normal with numbers and with tensors", function(dev)
  dl.manual_seed(10)
  local a = dl.normal(5, 2, {40}, {device = dev})
  local b = dl.normal(dl.arange(0.0, 10.0):to(dev), 0.1)
  return {a, b}
end, {1e-5, 1e-5})

case("randperm is built on the CPU and copied", function(dev)
  dl.manual_seed(11)
  return {dl.randperm(1000, {device = dev}), dl.randperm(17, {dtype = dl.int32, device = dev})}
end)

-- --- the generator advances alike ----------------------------------------------

case("the generator is in the same state after a CUDA fill", function(dev)
  dl.manual_seed(12)
  local x = dl.rand(13, {device = dev})          -- 4 blocks
  local y = dl.randint(0, 9, {5}, {device = dev}) -- 3 blocks
  local z = dl.randn(7, {dtype = dl.float64, device = dev})
  local after = dl.rand(6):to(dev) -- drawn on the CPU in both runs
  return {x, y, after, z:to(dl.float32)}
end, {1e-6, 1e-6})

if dl.cuda.manual_seed then
  T.case("dl.cuda.manual_seed seeds the one generator", function()
    dl.cuda.manual_seed(21)
    local a = dl.rand(100, {device = "cuda"}):cpu()
    dl.manual_seed(21)
    local b = dl.rand(100)
    T.eq(a:ne(b):sum():item(), 0, "elements that differ")
  end)
end

-- --- shapes and strided views ---------------------------------------------------

case("shapes: empty, 0-dim, odd sizes, large", function(dev)
  dl.manual_seed(13)
  return {
    dl.rand(0, {device = dev}),
    dl.rand({}, {device = dev}),
    dl.rand(1, {device = dev}),
    dl.rand(3, 5, 7, {device = dev}),
    dl.rand(1 << 20, {device = dev}),
    dl.randint(0, 3, {0, 4}, {device = dev}),
  }
end)

case("in-place fills of non-contiguous CUDA views", function(dev)
  dl.manual_seed(14)
  local x = dl.zeros(6, 8, {device = dev})
  x:t():uniform_()                   -- transposed: every element, in the view's order
  local y = dl.zeros(5, 9, {device = dev})
  y:narrow(2, 3, 4):bernoulli_(0.5)  -- a column block; the rest stays 0
  local z = dl.zeros(4, 10, {dtype = dl.int64, device = dev})
  z:select(2, 7):random_(100)        -- one column
  local w = dl.full({3, 4}, 7.0, {device = dev})
  w:t():narrow(1, 2, 2):fill_(0):uniform_(1, 2)
  return {x, y, z, w}
end)

case("strided normal_ view", function(dev)
  dl.manual_seed(15)
  local x = dl.zeros(7, 6, {device = dev})
  x:t():normal_()
  return x
end, NORMAL)

-- --- creation with a device -------------------------------------------------------

case("creation functions take {device=}", function(dev)
  local o = {device = dev}
  return {
    dl.zeros(2, 3, o), dl.ones(4, o), dl.full({2, 2}, 1.5, o), dl.empty(0, o),
    dl.full({3}, 7, {device = dev, dtype = dl.int32}),
    dl.arange(10, o), dl.arange(0, 1, 0.25, o), dl.linspace(-1, 1, 9, o), dl.eye(3, 4, o),
    dl.tensor({{1, 2}, {3, 4}}, o), dl.tensor({true, false}, o), dl.tensor({1.5, 2.5}, {device = dev, dtype = dl.float64}),
  }
end)

case("*_like functions keep the source's device", function(dev)
  local src = dl.zeros(3, 2, {dtype = dl.float64}):to(dev)
  dl.manual_seed(16)
  local r = dl.rand_like(src)
  local ri = dl.randint_like(src, 0, 10)
  return {dl.zeros_like(src), dl.ones_like(src), dl.full_like(src, 2), dl.empty_like(src):fill_(1), r, ri}
end)

T.case("like functions default to the source device; requires_grad", function()
  local src = dl.zeros(3, {device = "cuda"})
  for _, t in ipairs({dl.zeros_like(src), dl.ones_like(src), dl.full_like(src, 1), dl.empty_like(src),
                      dl.rand_like(src), dl.randn_like(src)}) do
    T.truthy(tostring(t.device):match("^cuda"), "on cuda: " .. tostring(t.device))
  end
  T.eq(tostring(dl.zeros_like(src, {device = "cpu"}).device), "cpu")
  local p = dl.randn(4, {device = "cuda", requires_grad = true})
  T.truthy(p.requires_grad, "requires_grad")
  T.truthy(tostring(p.device):match("^cuda"), "randn on cuda")
end)

T.case("bad devices and dtypes are refused", function()
  T.raises(function() dl.zeros(2, {device = "cuda:99"}) end)
  T.raises(function() dl.rand(2, {device = "gpu"}) end, "invalid device")
  T.raises(function() dl.rand(2, {device = "cuda", dtype = dl.int64}) end, "floating")
  T.raises(function() dl.empty(3, {device = "cuda"}):bernoulli_(1.5) end, "[0, 1]")
  T.raises(function() dl.empty(3, {dtype = dl.uint8, device = "cuda"}):random_(0, 300) end, "does not fit")
end)

-- --- dropout in train mode ----------------------------------------------------------

case("bool dropout masks: bernoulli_ on a CUDA bool tensor", function(dev)
  dl.manual_seed(17)
  return dl.empty(8, 33, {dtype = dl.bool, device = dev}):bernoulli_(0.75)
end)

case("F.dropout in train mode: the same mask as the CPU", function(dev)
  dl.manual_seed(18)
  local x = dl.randn(16, 33):to(dev)
  dl.manual_seed(19)
  local y = dl.nn.functional.dropout(x, 0.3, true)
  return {y, y:eq(0)}
end, {1e-6, 0})

case("nn.Dropout module in train mode", function(dev)
  dl.manual_seed(20)
  local x = dl.rand(4, 64):add(0.5):to(dev)
  local m = dl.nn.Dropout(0.5)
  m:train()
  dl.manual_seed(21)
  return m(x):eq(0)
end)

T.done()
