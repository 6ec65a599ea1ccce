-- test_testlib.lua - the shared helpers of testlib.lua fail when they should:
-- T.gradcheck and T.kernel_gradcheck on a wrong gradient, T.close norm-wise
-- (2-norm and max), T.randn's seeds, dtypes and shapes, T.seq, T.to,
-- T.torch_tol.
local T = require "testlib"
local dl = require "dl"

local f64 = {dtype = dl.float64}

-- y = 2x with a backward that returns 3 * grad (wrong) or 2 * grad (right)
local function doubler(factor)
  return dl.autograd.Function{
    forward = function(_, x) return x * 2 end,
    backward = function(_, g) return g * factor end,
  }
end

T.case("T.gradcheck passes a right gradient and names a wrong one", function()
  local x = dl.randn(3, 4, f64):requires_grad_()
  T.truthy(T.gradcheck(function(a) return doubler(2)(a) end, {x}, "right"))
  T.truthy(T.gradcheck(function(a) return (a * a):sum() end, x, {atol = 1e-7, rtol = 1e-6}))
  T.raises(function() T.gradcheck(function(a) return doubler(3)(a) end, {x}, "wrong one") end,
    "wrong one: gradcheck: input 1 element 1: analytic")
  T.raises(function() T.gradcheck(function(a) return a:detach() * 2 end, {x}, "detached") end,
    "detached: the output does not require grad")
  local y = dl.randn(2, f64):requires_grad_()
  T.raises(function() T.gradcheck(function(a) return a * 2 end, {x, y}, "unused") end,
    "unused: no gradient for input 2")
  T.truthy(T.gradcheck(function(a) return a * 2 end, {x, y}, {allow_unused = true}))
  T.raises(function() T.gradcheck(function(a) return a * 2 end, {dl.randn(3):requires_grad_()}) end,
    "use float64")
end)

T.case("T.kernel_gradcheck: explicit analytic gradients, all elements or probes, any strides", function()
  local x = dl.randn(3, 4, f64)
  local gy = dl.randn(3, 4, f64)
  local function fwd() return x * x end
  T.kernel_gradcheck("square", fwd, {x}, {x * 2 * gy}, gy)
  T.kernel_gradcheck("square probes", fwd, {x}, {x * 2 * gy}, gy, {probes = 3})
  T.kernel_gradcheck("skipped", fwd, {x}, {nil}, gy)
  T.raises(function() T.kernel_gradcheck("bad", fwd, {x}, {x * 2.001 * gy}, gy) end, "bad: input 1 element")
  T.raises(function() T.kernel_gradcheck("shape", fwd, {x}, {dl.zeros(4, 3, f64)}, gy) end,
    "shape: gradient 1 has shape")
  -- a transposed input is perturbed through its own strides
  local xt = dl.randn(4, 3, f64):t()
  T.kernel_gradcheck("transposed", function() return xt * xt end, {xt}, {xt * 2 * gy}, gy)
  T.raises(function() T.kernel_gradcheck("transposed", function() return xt * xt end, {xt}, {xt * gy}, gy) end,
    "transposed: input 1 element 1")
end)

T.case("T.close is norm-wise and reports the norms", function()
  local b = dl.tensor({3.0, 4.0})
  local d, n = T.close(b + dl.tensor({0, 1e-6}), b, 1e-6, 0)
  T.near(n, 5, 1e-12)
  T.near(d, 1e-6, 1e-3)
  T.raises(function() T.close(b + dl.tensor({0, 1e-4}), b, 1e-6, 0, "far") end, "far: ||a - b|| = ")
  T.raises(function() T.close(b + dl.tensor({0, 1e-4}), b, 1e-6, 0, "far") end, "||b|| = 5 (2 norm)")
  -- max norm: 4.5e-6 <= 1e-6 * max|b| = 4e-6 fails, the 2-norm 5e-6 passes
  T.close(b + dl.tensor({4.5e-6, 0}), b, 1e-6, 0)
  T.raises(function() T.close(b + dl.tensor({4.5e-6, 0}), b, 1e-6, 0, "m", "max") end, "(max norm)")
  T.close(dl.zeros(0), dl.zeros(0), 0, 0)
  T.raises(function() T.close(dl.zeros(2), dl.zeros(3), 1, 1) end, "shape")
  T.close({dl.ones(2), {dl.zeros(1)}}, {dl.ones(2), {dl.zeros(1)}}, 0, 0)
  T.raises(function() T.close({x = dl.ones(2)}, {x = dl.zeros(2)}, 0, 0.5, "t") end, "t.x:")
  T.close(dl.ones(2, f64), dl.ones(2), 0, 0) -- values, not dtypes
end)

T.case("T.torch_tol: one op's rounding and long sums per dtype", function()
  local r, a = T.torch_tol("float64")
  T.eq(r, 1e-10)
  T.eq(a, 1e-12)
  T.eq(select(1, T.torch_tol("float16")), 2e-5) -- as float32
  T.eq(select(1, T.torch_tol("float32", "sum")), 1e-4)
  T.eq(select(2, T.torch_tol("float16", "sum")), 2e-3)
end)

T.case("T.randn and T.seq: shapes, seeds, dtypes, devices", function()
  T.shape_eq(T.randn(2, 3), {2, 3})
  T.shape_eq(T.randn({2, 3}), {2, 3})
  T.shape_eq(T.randn({}), {})
  T.same_bits(T.randn(5, {seed = 3}), T.randn({5}, {seed = 3}))
  T.truthy(not dl.equal(T.randn(5, {seed = 3}), T.randn(5, {seed = 4})))
  local d = T.randn(2, 2, {seed = 3, dtype = dl.float64, device = "cpu"})
  T.eq(d.dtype, dl.float64)
  T.same_bits(d, T.randn(2, 2, {seed = 3}):double())
  dl.manual_seed(9)
  T.same_bits(T.randn(4), (function() dl.manual_seed(9) return dl.randn(4) end)())
  T.tensor_eq(T.seq(dl.float64, 2, 2), {{1, 2}, {3, 4}}, 0)
  T.eq(T.seq(dl.int64, 3).dtype, dl.int64)
  local a, b = T.to("cpu", dl.ones(1), dl.zeros(2))
  T.shape_eq(b, {2})
  T.eq(tostring(a.device), "cpu")
end)

T.done()
