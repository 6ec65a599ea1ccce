-- test_linalg.lua - matmul, mm, bmm, addmm, dot, mv, outer against known
-- values and a plain-Lua reference: every 1-D/2-D/N-D shape case, batch
-- broadcasting, transposed/strided/expanded operands, empty dims, every dtype,
-- integer exactness, and bad input.
local T = require "testlib"

local FLOATS = {dl.float32, dl.float64, dl.float16, dl.bfloat16}
local NUMERIC = {dl.float32, dl.float64, dl.float16, dl.bfloat16, dl.int64, dl.int32, dl.uint8}

-- Deterministic pseudo-random integers in [lo, hi] (an LCG; no dl.rand needed).
local seed = 12345
local function rint(lo, hi)
  seed = (seed * 1103515245 + 12345) % 2147483648
  return lo + seed % (hi - lo + 1)
end
local function rtable(rows, cols, lo, hi)
  local t = {}
  for i = 1, rows do
    t[i] = {}
    for j = 1, cols do t[i][j] = rint(lo, hi) end
  end
  return t
end

-- Plain-Lua matrix product of nested tables (integers stay integers).
local function ref_mm(a, b)
  local n, k, m = #a, #b, #b[1]
  local c = {}
  for i = 1, n do
    c[i] = {}
    for j = 1, m do
      local s = 0
      for p = 1, k do s = s + a[i][p] * b[p][j] end
      c[i][j] = s
    end
  end
  return c
end

local A = {{1, 2, 3}, {4, 5, 6}}
local B = {{1, 2}, {3, 4}, {5, 6}}
local AB = {{22, 28}, {49, 64}}

T.case("mm: known values in every dtype", function()
  for _, dt in ipairs(NUMERIC) do
    local a, b = dl.tensor(A, {dtype = dt}), dl.tensor(B, {dtype = dt})
    local c = dl.mm(a, b)
    T.eq(c.dtype, dt, "mm dtype " .. dt.name)
    T.tensor_eq(c, AB, 0, "mm " .. dt.name)
    T.tensor_eq(a:mm(b), AB, 0, "method mm " .. dt.name)
    T.tensor_eq(dl.matmul(a, b), AB, 0, "matmul " .. dt.name)
    T.tensor_eq(a:matmul(b), AB, 0, "method matmul " .. dt.name)
  end
end)

T.case("matmul: 1-D and 2-D combinations", function()
  for _, dt in ipairs({dl.float32, dl.float64, dl.int64, dl.bfloat16}) do
    local a = dl.tensor(A, {dtype = dt})
    local v3 = dl.tensor({1, 2, 3}, {dtype = dt})
    local v2 = dl.tensor({1, 2}, {dtype = dt})
    local d = dl.matmul(v3, v3) -- dot -> 0-dim
    T.eq(d:dim(), 0, "1-D.1-D is 0-dim")
    T.eq(d:item(), 14)
    T.eq(d.dtype, dt)
    local mv = dl.matmul(a, v3) -- (2,3)@(3) -> (2)
    T.shape_eq(mv, {2})
    T.tensor_eq(mv, {14, 32}, 0)
    local vm = dl.matmul(v2, a) -- (2)@(2,3) -> (3)
    T.shape_eq(vm, {3})
    T.tensor_eq(vm, {9, 12, 15}, 0)
  end
  -- N-D with a 1-D operand: the added dimension is removed again
  local x = dl.arange(24):view(2, 3, 4)
  local v4, v3 = dl.tensor({1, -1, 2, 0}), dl.tensor({2, 0, 1})
  local r = dl.matmul(x, v4)
  T.shape_eq(r, {2, 3})
  for i = 1, 2 do
    T.tensor_eq(r[i], {ref_mm(x[i]:tolist(), {{1}, {-1}, {2}, {0}})[1][1],
                       ref_mm(x[i]:tolist(), {{1}, {-1}, {2}, {0}})[2][1],
                       ref_mm(x[i]:tolist(), {{1}, {-1}, {2}, {0}})[3][1]}, 0)
  end
  local l = dl.matmul(v3, x)
  T.shape_eq(l, {2, 4})
  for i = 1, 2 do T.tensor_eq(l[i], ref_mm({{2, 0, 1}}, x[i]:tolist())[1], 0) end
end)

T.case("matmul: batched with broadcasting (2,1,3,4)@(5,4,2)", function()
  for _, dt in ipairs({dl.float32, dl.float64, dl.int64, dl.int32}) do
    local xt, yt = {}, {}
    for i = 1, 2 do xt[i] = {rtable(3, 4, -9, 9)} end
    for j = 1, 5 do yt[j] = rtable(4, 2, -9, 9) end
    local x, y = dl.tensor(xt, {dtype = dt}), dl.tensor(yt, {dtype = dt})
    local r = dl.matmul(x, y)
    T.shape_eq(r, {2, 5, 3, 2})
    T.eq(r.dtype, dt)
    for i = 1, 2 do
      for j = 1, 5 do T.tensor_eq(r[i][j], ref_mm(xt[i][1], yt[j]), 0, dt.name .. " batch") end
    end
    -- the other way round: (5,2,4)@(2,1,4,3) -> (2,5,2,3)
    local p, q = dl.tensor({rtable(2, 4, -5, 5), rtable(2, 4, -5, 5), rtable(2, 4, -5, 5),
      rtable(2, 4, -5, 5), rtable(2, 4, -5, 5)}, {dtype = dt}), dl.tensor({{rtable(4, 3, -5, 5)},
      {rtable(4, 3, -5, 5)}}, {dtype = dt})
    local s = dl.matmul(p, q)
    T.shape_eq(s, {2, 5, 2, 3})
    for i = 1, 2 do
      for j = 1, 5 do T.tensor_eq(s[i][j], ref_mm(p[j]:tolist(), q[i][1]:tolist()), 0) end
    end
  end
  -- (B,M,K)@(K,N): one folded GEMM
  local xt = {rtable(3, 5, -9, 9), rtable(3, 5, -9, 9), rtable(3, 5, -9, 9), rtable(3, 5, -9, 9)}
  local wt = rtable(5, 6, -9, 9)
  for _, dt in ipairs({dl.float32, dl.float64, dl.int64}) do
    local r = dl.matmul(dl.tensor(xt, {dtype = dt}), dl.tensor(wt, {dtype = dt}))
    T.shape_eq(r, {4, 3, 6})
    for i = 1, 4 do T.tensor_eq(r[i], ref_mm(xt[i], wt), 0) end
    -- (K,N) on the left of a batch: (3,5)@(4,5,6)
    local l = dl.matmul(dl.tensor(xt[2], {dtype = dt}), dl.tensor({wt, wt, wt, wt}, {dtype = dt}))
    T.shape_eq(l, {4, 3, 6})
    for i = 1, 4 do T.tensor_eq(l[i], ref_mm(xt[2], wt), 0) end
  end
end)

T.case("matmul: transposed, strided and expanded operands", function()
  local at, bt = rtable(7, 5, -9, 9), rtable(5, 6, -9, 9)
  local want = ref_mm(at, bt)
  for _, dt in ipairs(NUMERIC) do
    if dt == dl.uint8 then goto continue end
    local a, b = dl.tensor(at, {dtype = dt}), dl.tensor(bt, {dtype = dt})
    local aT = a:t():contiguous():t() -- (7,5) with strides (1,7)
    local bT = b:t():contiguous():t()
    T.eq(aT:is_contiguous(), false)
    T.tensor_eq(dl.matmul(aT, b), want, 0, dt.name .. " A^T")
    T.tensor_eq(dl.matmul(a, bT), want, 0, dt.name .. " B^T")
    T.tensor_eq(dl.matmul(aT, bT), want, 0, dt.name .. " A^T B^T")
    -- (B^T A^T)^T
    T.tensor_eq(dl.matmul(b:t(), a:t()):t(), want, 0, dt.name .. " b:t() @ a:t()")
    -- row-strided (a narrowed view: leading dimension larger than K)
    local wide = dl.zeros(7, 9, {dtype = dt})
    wide:narrow(2, 3, 5):copy_(a)
    T.tensor_eq(dl.matmul(wide:narrow(2, 3, 5), b), want, 0, dt.name .. " narrowed")
    -- genuinely strided: neither stride is 1
    local big = dl.zeros(7, 5, 2, {dtype = dt})
    big:select(3, 2):copy_(a)
    local s = big:select(3, 2)
    T.eq(s:stride(1) ~= 1 and s:stride(2) ~= 1, true)
    T.tensor_eq(dl.matmul(s, b), want, 0, dt.name .. " strided")
    T.tensor_eq(dl.matmul(s, bT), want, 0, dt.name .. " strided @ B^T")
    ::continue::
  end
  -- expanded operands (stride 0): rows of ones, a broadcast column
  local col = dl.tensor({1, 2, 3}, {dtype = dl.float32}):view(3, 1):expand(3, 4)
  local ones = dl.ones(4, 2)
  T.tensor_eq(dl.matmul(col, ones), {{4, 4}, {8, 8}, {12, 12}}, 0)
  T.tensor_eq(dl.matmul(col:double(), ones:double()), {{4, 4}, {8, 8}, {12, 12}}, 0)
  -- expanded batch: the same matrix seen 3 times
  local m = dl.tensor(A, {dtype = dl.float32})
  local eb = m:unsqueeze(1):expand(3, 2, 3)
  local r = dl.bmm(eb, dl.tensor({B, B, B}, {dtype = dl.float32}))
  for i = 1, 3 do T.tensor_eq(r[i], AB, 0) end
  -- a transposed batch (B,K,M) viewed as (B,M,K)
  local xb = dl.tensor({rtable(4, 3, -5, 5), rtable(4, 3, -5, 5)}, {dtype = dl.float32})
  local yb = dl.tensor({rtable(4, 2, -5, 5), rtable(4, 2, -5, 5)}, {dtype = dl.float32})
  local tb = dl.matmul(xb:transpose(2, 3), yb)
  for i = 1, 2 do T.tensor_eq(tb[i], ref_mm(xb[i]:t():tolist(), yb[i]:tolist()), 0) end
  -- vectors with a stride: a column of a matrix
  local mat = dl.tensor({{1, 10}, {2, 20}, {3, 30}}, {dtype = dl.float32})
  T.tensor_eq(dl.matmul(m, mat:select(2, 2)), {140, 320}, 0)
  T.eq(dl.dot(mat:select(2, 1), mat:select(2, 2)):item(), 140)
end)

T.case("matmul: empty dims", function()
  for _, dt in ipairs(NUMERIC) do
    local z = dl.matmul(dl.ones(2, 0, {dtype = dt}), dl.ones(0, 3, {dtype = dt}))
    T.shape_eq(z, {2, 3})
    T.eq(z.dtype, dt)
    T.tensor_eq(z, {{0, 0, 0}, {0, 0, 0}}, 0, "K=0 gives zeros " .. dt.name)
    T.shape_eq(dl.matmul(dl.ones(0, 3, {dtype = dt}), dl.ones(3, 4, {dtype = dt})), {0, 4})
    T.shape_eq(dl.matmul(dl.ones(2, 3, {dtype = dt}), dl.ones(3, 0, {dtype = dt})), {2, 0})
  end
  T.eq(dl.dot(dl.ones(0), dl.ones(0)):item(), 0)
  T.tensor_eq(dl.mv(dl.ones(2, 0), dl.ones(0)), {0, 0})
  T.shape_eq(dl.matmul(dl.ones(0, 2, 3), dl.ones(3, 4)), {0, 2, 4})
  T.shape_eq(dl.bmm(dl.ones(0, 2, 3), dl.ones(0, 3, 4)), {0, 2, 4})
  T.tensor_eq(dl.matmul(dl.ones(3, 2, 0), dl.ones(3, 0, 2)), {{{0, 0}, {0, 0}}, {{0, 0}, {0, 0}},
    {{0, 0}, {0, 0}}})
  T.tensor_eq(dl.addmm(dl.full({2, 2}, 3.0), dl.ones(2, 0), dl.ones(0, 2), {beta = 2}),
    {{6, 6}, {6, 6}})
end)

T.case("integer matmul is exact", function()
  -- int64: products near 2^50, sums past 2^53 (where float64 would round)
  local big = 1 << 25
  local at, bt = {}, {}
  for i = 1, 4 do
    at[i] = {}
    for j = 1, 6 do at[i][j] = big + rint(0, 1000) end
  end
  for i = 1, 6 do
    bt[i] = {}
    for j = 1, 3 do bt[i][j] = big * 3 + rint(0, 1000) end
  end
  local r = dl.matmul(dl.tensor(at, {dtype = dl.int64}), dl.tensor(bt, {dtype = dl.int64}))
  local want = ref_mm(at, bt)
  T.truthy(want[1][1] > (1 << 53), "sums exceed 2^53")
  local got = r:tolist()
  for i = 1, 4 do
    for j = 1, 3 do T.eq(got[i][j], want[i][j], "int64 exact") end
  end
  -- larger random integer matrices crossing the kernel's blocks (K > 256, M > 96)
  local xt, yt = rtable(100, 300, -1000, 1000), rtable(300, 21, -1000, 1000)
  local ref = ref_mm(xt, yt)
  for _, dt in ipairs({dl.int64, dl.int32, dl.float64}) do
    local g = dl.matmul(dl.tensor(xt, {dtype = dt}), dl.tensor(yt, {dtype = dt})):tolist()
    local ok = true
    for i = 1, 100 do
      for j = 1, 21 do ok = ok and g[i][j] == ref[i][j] end
    end
    T.truthy(ok, dt.name .. " blocked result is exact")
  end
  -- int32 wraps around like PyTorch's: 2^30 * 4 * 2 = 2^33 = 0 mod 2^32
  local w = dl.matmul(dl.full({1, 2}, 1 << 30, {dtype = dl.int32}), dl.full({2, 1}, 4, {dtype = dl.int32}))
  T.eq(w:tolist()[1][1], 0)
  local w2 = dl.matmul(dl.full({1, 3}, 1 << 30, {dtype = dl.int32}), dl.full({3, 1}, 1, {dtype = dl.int32}))
  T.eq(w2:tolist()[1][1], -(1 << 30)) -- 3 * 2^30 wraps to -2^30
  -- uint8 wraps modulo 256
  local u = dl.matmul(dl.full({1, 3}, 16, {dtype = dl.uint8}), dl.full({3, 1}, 8, {dtype = dl.uint8}))
  T.eq(u:tolist()[1][1], (3 * 128) % 256)
end)

T.case("float kernels agree with each other", function()
  -- integer-valued data: float32 (oneDNN) and float64 (own loops) are exact
  local xt, yt = rtable(130, 270, -20, 20), rtable(270, 530, -20, 20)
  local x32, y32 = dl.tensor(xt, {dtype = dl.float32}), dl.tensor(yt, {dtype = dl.float32})
  local r32 = dl.matmul(x32, y32)
  local r64 = dl.matmul(x32:double(), y32:double())
  local r64t = dl.matmul(x32:double():t():contiguous():t(), y32:double():t():contiguous():t())
  local ri = dl.matmul(x32:long(), y32:long())
  T.tensor_eq(r64, ri, 0, "float64 vs int64")
  T.tensor_eq(r32, ri, 0, "float32 vs int64")
  T.tensor_eq(r64t, ri, 0, "float64 transposed vs int64")
end)

T.case("bmm", function()
  local at, bt = {rtable(2, 3, -9, 9), rtable(2, 3, -9, 9)}, {rtable(3, 4, -9, 9), rtable(3, 4, -9, 9)}
  for _, dt in ipairs({dl.float32, dl.float64, dl.int64}) do
    local r = dl.bmm(dl.tensor(at, {dtype = dt}), dl.tensor(bt, {dtype = dt}))
    T.shape_eq(r, {2, 2, 4})
    for i = 1, 2 do T.tensor_eq(r[i], ref_mm(at[i], bt[i]), 0) end
    T.tensor_eq(dl.tensor(at, {dtype = dt}):bmm(dl.tensor(bt, {dtype = dt})), r, 0)
  end
end)

T.case("dot, mv, outer", function()
  for _, dt in ipairs(NUMERIC) do
    local u, v = dl.tensor({1, 2, 3}, {dtype = dt}), dl.tensor({4, 5, 6}, {dtype = dt})
    local d = dl.dot(u, v)
    T.eq(d:dim(), 0)
    T.eq(d.dtype, dt)
    T.eq(d:item(), 32)
    T.eq(u:dot(v):item(), 32)
    local m = dl.tensor(A, {dtype = dt})
    T.tensor_eq(dl.mv(m, u), {14, 32}, 0)
    T.tensor_eq(m:mv(u), {14, 32}, 0)
    local o = dl.outer(u, dl.tensor({1, 2}, {dtype = dt}))
    T.eq(o.dtype, dt)
    T.tensor_eq(o, {{1, 2}, {2, 4}, {3, 6}}, 0)
    T.tensor_eq(u:outer(dl.tensor({1, 2}, {dtype = dt})), {{1, 2}, {2, 4}, {3, 6}}, 0)
  end
  -- outer promotes like a * b (PyTorch's outer is a broadcast multiply)
  local o = dl.outer(dl.tensor({1, 2}), dl.tensor({0.5, 1.5}))
  T.eq(o.dtype, dl.float32)
  T.tensor_eq(o, {{0.5, 1.5}, {1, 3}})
  T.eq(dl.outer(dl.tensor({1, 2}, {dtype = dl.int32}), dl.tensor({3}, {dtype = dl.int64})).dtype, dl.int64)
  local ob = dl.outer(dl.tensor({true, false}), dl.tensor({true, true, false}))
  T.eq(ob.dtype, dl.bool)
  T.tensor_eq(ob, {{true, true, false}, {false, false, false}})
  -- strided vectors
  local mat = dl.tensor({{1, 10}, {2, 20}}, {dtype = dl.float64})
  T.tensor_eq(dl.outer(mat:select(2, 1), mat:select(2, 2)), {{10, 20}, {20, 40}}, 0)
  -- float32 dot accumulates in float32 (PyTorch: 10.000133514404297)
  local big = dl.full({1000}, 0.1)
  T.eq(dl.dot(big, big).dtype, dl.float32)
  T.near(dl.dot(big, big):item(), 10.0, 1e-4)
end)

T.case("addmm", function()
  local m1, m2 = dl.tensor(A, {dtype = dl.float32}), dl.tensor(B, {dtype = dl.float32})
  T.tensor_eq(dl.addmm(dl.ones(2, 2), m1, m2), {{23, 29}, {50, 65}}, 0)
  T.tensor_eq(dl.addmm(dl.ones(2, 2), m1, m2, {beta = 2, alpha = 0.5}), {{13, 16}, {26.5, 34}}, 0)
  T.tensor_eq(dl.ones(2, 2):addmm(m1, m2, {alpha = 2}), {{45, 57}, {99, 129}}, 0)
  -- input broadcasts: a row (bias), a column, a 0-dim tensor
  T.tensor_eq(dl.addmm(dl.tensor({1, 2}, {dtype = dl.float32}), m1, m2), {{23, 30}, {50, 66}}, 0)
  T.tensor_eq(dl.addmm(dl.tensor({{1}, {2}}, {dtype = dl.float32}), m1, m2), {{23, 29}, {51, 66}}, 0)
  T.tensor_eq(dl.addmm(dl.tensor(10, {dtype = dl.float32}), m1, m2, {beta = -1}), {{12, 18}, {39, 54}}, 0)
  -- beta = 0 ignores the input, NaN included
  local nan = dl.full({2, 2}, 0 / 0)
  T.tensor_eq(dl.addmm(nan, m1, m2, {beta = 0}), AB, 0)
  -- every dtype; integers take integer alpha/beta (2.0 counts as an integer)
  for _, dt in ipairs(NUMERIC) do
    local r = dl.addmm(dl.full({2, 2}, 1, {dtype = dt}), dl.tensor(A, {dtype = dt}),
      dl.tensor(B, {dtype = dt}), {beta = 3, alpha = 2.0})
    T.eq(r.dtype, dt)
    if dt == dl.uint8 then
      T.tensor_eq(r, {{47, 59}, {101, 131}}, 0)
    else
      T.tensor_eq(r, {{47, 59}, {101, 131}}, dt == dl.bfloat16 and 1e-2 or 0, dt.name)
    end
  end
  -- transposed matrices
  local r = dl.addmm(dl.zeros(2, 2, {dtype = dl.float64}), m2:t():double(), m1:t():double())
  T.tensor_eq(r, {{22, 49}, {28, 64}}, 0) -- B^T A^T = (AB)^T
end)

T.case("float16/bfloat16 round once from float32", function()
  -- 1 + 2^-9 is not a bfloat16; the float32 sum rounds to 1 once
  local a = dl.tensor({{1, 1}}, {dtype = dl.float32})
  local b = dl.tensor({{1}, {0.001953125}}, {dtype = dl.float32}) -- 2^-9
  T.eq(dl.matmul(a:bfloat16(), b:bfloat16()):item(), 1)
  T.eq(dl.matmul(a:half(), b:half()):item(), 1.001953125) -- representable in half
  local x = dl.tensor({{0.1, 0.2, 0.3}}, {dtype = dl.bfloat16})
  local y = dl.tensor({{1}, {2}, {3}}, {dtype = dl.bfloat16})
  local want = dl.matmul(x:float(), y:float()):bfloat16():float():item()
  T.eq(dl.matmul(x, y):float():item(), want)
end)

T.case("threads: results do not depend on the thread count", function()
  local xt, yt = rtable(150, 140, -9, 9), rtable(140, 90, -9, 9)
  local outs = T.at_threads({1, 2}, function(n)
    T.eq(dl.get_num_threads(), n)
    return {
      dl.matmul(dl.tensor(xt, {dtype = dl.float64}), dl.tensor(yt, {dtype = dl.float64})),
      dl.matmul(dl.tensor({xt, xt, xt}, {dtype = dl.float32}), dl.tensor(yt, {dtype = dl.float32})),
    }
  end)
  T.tensor_eq(outs[1][1], outs[2][1], 0)
  T.tensor_eq(outs[1][2], outs[2][2], 0)
  T.tensor_eq(outs[1][1], ref_mm(xt, yt), 0)
end)

T.case("bad input", function()
  local a, b = dl.ones(2, 3), dl.ones(4, 5)
  T.raises(function() dl.matmul(a, b) end, "matmul: shapes [2, 3] and [4, 5] cannot be multiplied (3 != 4)")
  T.raises(function() a:matmul(a) end, "cannot be multiplied (3 != 2)")
  T.raises(function() dl.matmul(dl.ones(3), dl.ones(4)) end, "shapes [3] and [4] cannot be multiplied")
  T.raises(function() dl.matmul(a, dl.ones(4)) end, "shapes [2, 3] and [4]")
  T.raises(function() dl.matmul(a, dl.ones(3, 2, {dtype = dl.float64})) end,
    "expected m1 and m2 to have the same dtype, but got float32 and float64")
  T.raises(function() dl.matmul(dl.tensor(1.5), a) end, "at least 1-D, but they are 0-D and 2-D")
  T.raises(function() dl.matmul(dl.ones(2, 2, 3), dl.ones(3, 3, 4)) end,
    "batch dimensions of [2, 2, 3] and [3, 3, 4] cannot be broadcast")
  T.raises(function() dl.matmul(a, 3) end, "tensor expected, got number")
  T.raises(function() dl.matmul("x", a) end, "tensor expected, got string")
  T.raises(function() a:matmul() end, "tensor expected, got no value")
  T.raises(function() dl.matmul(dl.ones(2, 2, {dtype = dl.bool}), dl.ones(2, 2, {dtype = dl.bool})) end,
    "bool tensors cannot be multiplied")
  T.raises(function() dl.mm(dl.ones(3), dl.ones(3, 2)) end, "mm: expected 2-D matrices, but got 1-D and 2-D")
  T.raises(function() dl.mm(a, b) end, "mm: shapes [2, 3] and [4, 5] cannot be multiplied")
  T.raises(function() dl.bmm(a, a) end, "bmm: expected 3-D tensors")
  T.raises(function() dl.bmm(dl.ones(2, 2, 3), dl.ones(3, 3, 4)) end, "bmm: batch sizes differ")
  T.raises(function() dl.bmm(dl.ones(2, 2, 3), dl.ones(2, 4, 4)) end, "bmm: shapes [2, 2, 3] and [2, 4, 4]")
  T.raises(function() dl.dot(dl.ones(3), dl.ones(4)) end, "dot: expected 1-D tensors of the same size")
  T.raises(function() dl.dot(a, a) end, "dot: expected 1-D tensors, but got 2-D and 2-D")
  T.raises(function() dl.dot(dl.ones(3), dl.ones(3, {dtype = dl.float64})) end, "dot: expected m1 and m2 to have the same dtype")
  T.raises(function() dl.mv(a, dl.ones(4)) end, "mv: shapes [2, 3] and [4] cannot be multiplied")
  T.raises(function() dl.mv(dl.ones(3), a) end, "mv: expected a 2-D matrix and a 1-D vector")
  T.raises(function() dl.outer(a, dl.ones(2)) end, "outer: expected 1-D tensors, but got 2-D and 1-D")
  T.raises(function() dl.addmm(dl.ones(3), a, dl.ones(3, 4)) end,
    "addmm: input of shape [3] cannot be broadcast to the result's shape [2, 4]")
  T.raises(function() dl.addmm(dl.ones(2, 4), a, dl.ones(3, 4), {gamma = 1}) end, "addmm: unknown option 'gamma'")
  T.raises(function() dl.addmm(dl.ones(2, 4), a, dl.ones(3, 4), {beta = "x"}) end, "option 'beta' must be a number")
  T.raises(function() dl.addmm(dl.ones(2, 4), a, dl.ones(3, 4), 5) end, "options table expected")
  T.raises(function() dl.addmm(dl.ones(2, 4, {dtype = dl.float64}), a, dl.ones(3, 4)) end,
    "addmm: expected input and the matrices to have the same dtype")
  local ia = dl.ones(2, 3, {dtype = dl.int64})
  T.raises(function() dl.addmm(dl.ones(2, 4, {dtype = dl.int64}), ia, dl.ones(3, 4, {dtype = dl.int64}), {alpha = 0.5}) end,
    "addmm: alpha must be an integer for int64 tensors, got 0.5")
  T.raises(function() dl.addmm(dl.ones(2, 4), a, dl.ones(4, 4)) end, "addmm: shapes [2, 3] and [4, 4] cannot be multiplied")
  -- the process is healthy afterwards
  T.tensor_eq(dl.matmul(dl.ones(1, 2), dl.ones(2, 1)), {{2}})
end)

T.done()
