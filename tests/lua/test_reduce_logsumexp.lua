-- test_reduce_logsumexp.lua - logsumexp over inner dims (the reduced dims are
-- not the last: x:logsumexp(2) of (A, B, C), several non-trailing dims,
-- reduced dims on both sides of a kept one): the CPU's one fused pass (a
-- running max and sum per result) against PyTorch 1.13 in float32 and
-- float64, NaN/inf columns as PyTorch, the thread count; and its fused
-- backward: float64 gradcheck over inner-dim layouts, the op-by-op formula's
-- bits, NaN/inf.
local T = require "testlib"

local nan, inf = 0 / 0, math.huge

local data = T.torch([==[
import torch
torch.manual_seed(7)
inputs, cases = [], []
def add(shape, dims, dt=torch.float32, keep=False, scale=3.0):
    x = (torch.randn(shape, dtype=torch.float64) * scale).to(dt)
    inputs.append(x)
    cases.append({"x": len(inputs), "dims": list(dims), "keep": keep,
                  "res": torch.logsumexp(x, dim=list(dims), keepdim=keep)})
add((6, 300, 37), [1])
add((6, 300, 37), [1], torch.float64, True)
add((4, 5, 6, 7), [1, 2])
add((4, 5, 6, 7), [0, 1, 2], keep=True)
add((5, 6, 7), [0, 2])          # reduced dims on both sides of a kept one
add((300, 517), [0], scale=40)  # columns, several column blocks
add((3, 2000, 3), [1])          # long thin columns: row chunks
add((2, 70000, 2), [1], torch.float64)
add((2, 3, 300, 2), [1, 2])
add((7, 1, 5, 1, 9), [0, 2])
# a column of -inf, one with +inf, one with NaN, one with +inf and -inf
e = torch.randn(5, 4, 6)
e[:, 1, 0] = float("-inf")
e[2, 1, 1] = float("inf")
e[3, 1, 2] = float("nan")
e[0, 1, 3], e[4, 1, 3] = float("inf"), float("-inf")
inputs.append(e)
cases.append({"x": len(inputs), "dims": [0], "keep": False, "res": torch.logsumexp(e, 0)})
cases.append({"x": len(inputs), "dims": [0, 2], "keep": False, "res": torch.logsumexp(e, [0, 2])})
emit({"inputs": inputs, "cases": cases})
]==])

local X = {}
for i, rec in ipairs(data.inputs) do X[i] = T.from_torch(rec) end

for i, c in ipairs(data.cases) do
  local x = X[c.x]
  local dims = {}
  for k, d in ipairs(c.dims) do dims[k] = d + 1 end
  T.case(string.format("torch #%d: logsumexp(%s) of %s %s", i, T.fmt(dims), x.dtype.name,
                       T.fmt(x.shape)), function()
    local tol = x.dtype == dl.float64 and {1e-12, 1e-12} or {2e-6, 2e-6}
    T.match_torch(x:logsumexp(dims, c.keep), c.res, tol[1], tol[2], "values")
  end)
end

T.case("inner dims: NaN, +inf and -inf columns exactly as PyTorch", function()
  for _, dt in ipairs({dl.float32, dl.float64, dl.float16, dl.bfloat16}) do
    local x = dl.tensor({{1, nan, -inf, inf, -inf, inf},
                         {2, 1, -inf, 1, -inf, nan},
                         {3, 2, -inf, 5, inf, 1}}, {dtype = dt})
    local r = x:logsumexp(1):double():tolist()
    local tol = ({float32 = 1e-6, float64 = 1e-12})[dt.name] or 2e-2
    T.near(r[1], math.log(math.exp(1) + math.exp(2) + math.exp(3)), tol, dt.name)
    T.truthy(r[2] ~= r[2], "a NaN column")
    T.eq(r[3], -inf, "an all -inf column")
    T.eq(r[4], inf, "a +inf column")
    T.eq(r[5], inf, "+inf with -inf")
    T.truthy(r[6] ~= r[6], "+inf with NaN")
    T.eq(dl.zeros({3, 0, 4}, {dtype = dt}):logsumexp(2):double():tolist()[1][1], -inf, "empty")
  end
end)

T.case("inner dims: the result does not depend on the thread count", function()
  dl.manual_seed(3)
  local x = dl.randn(3, 20000, 5):mul(4)
  T.same_across_threads(function()
    return {x:logsumexp(2), x:double():logsumexp(2), x:logsumexp({1, 2}), x:half():logsumexp(2)}
  end, {1, 2}, "logsumexp inner")
end)

-- backward
local function leaf(...) return dl.randn({...}, {dtype = dl.float64}):mul(2):requires_grad_() end

T.case("backward: float64 gradcheck over inner-dim layouts", function()
  local x3, x4 = leaf(3, 4, 5), leaf(2, 3, 4, 3)
  for _, dims in ipairs({{2}, {1}, {1, 2}, {-2}, {1, 3}}) do
    for _, kd in ipairs({false, true}) do
      T.gradcheck(function(a) return a:logsumexp(dims, kd) end, {x3}, "(3,4,5) dims " .. T.fmt(dims))
    end
  end
  for _, dims in ipairs({{2, 3}, {1, 2, 3}, {2}, {1, 3}}) do
    T.gradcheck(function(a) return a:logsumexp(dims) end, {x4}, "(2,3,4,3) dims " .. T.fmt(dims))
  end
  local x5 = dl.randn({7, 1, 5, 1, 9}, {dtype = dl.float64}):requires_grad_()
  T.gradcheck(function(a) return a:logsumexp({1, 3}) end, {x5}, "size-1 dims between")
  T.gradcheck(function(a) return a:logsumexp(2) * a:sum(2) end, {x3}, "in a product")
end)

T.case("backward: the fused inner pass equals the op-by-op formula to the bit", function()
  for _, dt in ipairs({dl.float32, dl.float64}) do
    local x = dl.randn({5, 300, 7}, {dtype = dt}) * 5
    x[1]:select(2, 1):fill_(-inf) -- column (1, 1) all -inf
    x[2][3][2], x[3][4][3], x[4][5][4] = inf, nan, -inf
    local g = dl.randn({5, 7}, {dtype = dt})
    local a = x:clone():requires_grad_()
    local fused = dl.autograd.grad(a:logsumexp(2), {a}, {grad_outputs = g})[1]
    local formula = g:view(5, 1, 7) * (x - x:logsumexp(2, true)):exp()
    T.same_bits(fused, formula, "fused vs op by op " .. dt.name)
    local v = fused:tolist()
    T.truthy(v[1][1][1] ~= v[1][1][1], "an all -inf column gives NaN (as torch 1.13)")
    T.truthy(v[2][3][2] ~= v[2][3][2], "a +inf element's grad is NaN")
    T.eq(v[2][1][2], 0.0, "the others of a +inf column get 0")
    T.truthy(v[3][1][3] ~= v[3][1][3], "a NaN column's grads are NaN")
    -- several inner dims, and the same values through the op chain (a strided leaf)
    local y = dl.randn({3, 4, 5, 6}, {dtype = dt})
    local gy = dl.randn({3, 6}, {dtype = dt})
    local b = y:clone():requires_grad_()
    local f2 = dl.autograd.grad(b:logsumexp({2, 3}), {b}, {grad_outputs = gy})[1]
    T.same_bits(f2, gy:view(3, 1, 1, 6) * (y - y:logsumexp({2, 3}, true)):exp(), "dims {2, 3}")
    local yt = y:permute(4, 1, 2, 3):contiguous():permute(2, 3, 4, 1):requires_grad_()
    T.truthy(not yt:is_contiguous(), "a strided leaf")
    local f3 = dl.autograd.grad(yt:logsumexp({2, 3}), {yt}, {grad_outputs = gy})[1]
    T.close(f3, f2, dt == dl.float64 and 1e-12 or 1e-6, 0, "strided leaf " .. dt.name)
  end
end)

T.done()
