-- test_linalg_torch.lua - matmul, mm, bmm, addmm, dot, mv, outer against
-- PyTorch over a spread of shapes (1-D/2-D/N-D, broadcast batches, sizes that
-- cross the kernels' blocks), dtypes (float32, float64, int64, int32,
-- bfloat16, float16) and layouts (contiguous, transposed, genuinely strided).
-- Python makes the inputs and torch's results; Lua rebuilds the inputs, lays
-- them out as asked, runs dl and compares.  Floats are compared relative to
-- the magnitude of the sum (|a| @ |b|), integers exactly.
local T = require "testlib"

local cases = T.torch([[
import itertools
cases = []

def rand(shape, dt):
    if dt in (torch.int64, torch.int32):
        return torch.randint(-100, 100, shape, dtype=dt)
    return torch.randn(shape).to(dt)

def lay(x, layout):
    # what Lua receives for an operand it will lay out as `layout`
    if layout == "t":
        return x.transpose(-2, -1).contiguous()
    if layout == "s":
        return torch.stack([x, torch.full_like(x, 7)], -1)
    return x

def ref(op, a, b, dt):
    # float16/bfloat16: float32, rounded once (dl's semantics).  This torch has
    # no CPU half matmul, and its bfloat16 small-GEMM/dot paths round every
    # partial sum to bfloat16 (several ulps off on K ~ 8).
    if dt in (torch.float16, torch.bfloat16):
        return ref(op, a.float(), b.float(), torch.float32).to(dt)
    return getattr(torch, op)(a, b)

def mag(op, a, b):
    a, b = a.double().abs(), b.double().abs()
    return getattr(torch, op)(a, b)

def add(op, sa, sb, dt, la="c", lb="c"):
    a, b = rand(sa, dt), rand(sb, dt)
    if (la != "c" and len(sa) < 2) or (lb != "c" and len(sb) < 2):
        return
    cases.append(dict(op=op, dtype=str(dt)[6:], la=la, lb=lb, a=lay(a, la), b=lay(b, lb),
                      out=ref(op, a, b, dt), mag=mag(op, a, b)))

shapes = [
    ("matmul", (5,), (5,)), ("matmul", (4, 5), (5,)), ("matmul", (5,), (5, 6)),
    ("matmul", (7, 8), (8, 9)), ("matmul", (2, 3, 4), (4, 5)), ("matmul", (4,), (2, 4, 3)),
    ("matmul", (2, 1, 3, 4), (5, 4, 2)), ("matmul", (3, 4, 5), (3, 5, 6)),
    ("matmul", (4, 5), (3, 5, 2)), ("matmul", (2, 3, 4), (4,)), ("matmul", (1, 6), (6, 1)),
    ("matmul", (33, 65), (65, 17)), ("matmul", (0, 3), (3, 2)), ("matmul", (3, 0), (0, 2)),
    ("mm", (9, 1), (1, 7)), ("mm", (100, 270), (270, 40)), ("bmm", (4, 3, 5), (4, 5, 2)),
    ("dot", (17,), (17,)), ("mv", (6, 9), (9,)), ("outer", (4,), (3,)),
]
for dt in (torch.float32, torch.float64, torch.int64, torch.int32, torch.bfloat16, torch.float16):
    for op, sa, sb in shapes:
        add(op, sa, sb, dt)
for dt in (torch.float32, torch.float64, torch.int64, torch.bfloat16):
    for la, lb in itertools.product("cts", "cts"):
        if la == lb == "c":
            continue
        add("matmul", (6, 7), (7, 5), dt, la, lb)
        add("matmul", (2, 6, 7), (7, 5), dt, la, lb)
        add("matmul", (3, 1, 6, 7), (2, 7, 5), dt, la, lb)
        add("mm", (20, 33), (33, 12), dt, la, lb)
# sizes past the own kernels' blocks (K > 256, M > 96, N > 512) and a big sgemm
for dt in (torch.float32, torch.float64, torch.int64):
    add("matmul", (130, 300), (300, 530), dt)
    add("matmul", (130, 300), (300, 530), dt, "t", "t")

# addmm: input shapes that broadcast, alpha and beta
adds = []
for dt in (torch.float32, torch.float64, torch.int64, torch.bfloat16):
    for ishape, alpha, beta in [((5, 4), 1, 1), ((4,), 2, 3), ((5, 1), -1, 0.5), ((), 1, 0),
                                ((5, 4), 3, 2)]:
        if dt == torch.int64 and beta == 0.5:
            beta = 2
        inp, m1, m2 = rand(ishape, dt), rand((5, 6), dt), rand((6, 4), dt)
        if dt == torch.bfloat16:
            out = torch.addmm(inp.float(), m1.float(), m2.float(), beta=beta, alpha=alpha).to(dt)
        else:
            out = torch.addmm(inp, m1, m2, beta=beta, alpha=alpha)
        m = abs(alpha) * (m1.double().abs() @ m2.double().abs()) + abs(beta) * inp.double().abs()
        adds.append(dict(dtype=str(dt)[6:], input=inp, m1=m1, m2=m2, alpha=alpha, beta=beta,
                         out=out, mag=m))
emit(dict(cases=cases, adds=adds))
]])

-- A dl operand laid out as Python prepared it (see lay()).
local function layout(rec, l)
  local t = T.from_torch(rec)
  if l == "t" then return t:transpose(-2, -1) end
  if l == "s" then return t:select(-1, 1) end
  return t
end

-- float32/float64: summation-order differences; float16/bfloat16: one ulp of
-- the rounded result (a float32 sum a hair away can round the other way).
local RTOL = {float32 = 2e-6, float64 = 1e-13, bfloat16 = 4e-3, float16 = 5e-4}

-- Shape, dtype, and values within rtol * magnitude (floats) or exactly (ints).
local function check(got, want, mag, dtype, what)
  T.match_torch(got, want, 0, math.huge, what) -- shape and dtype
  local g, w, m = T.flatten(got), want.data, mag.data
  local rtol = RTOL[dtype]
  for i = 1, #w do
    local ok
    if rtol then
      ok = math.abs(g[i] - w[i]) <= rtol * (m[i] + 1e-30) + 1e-30
    else
      ok = g[i] == w[i]
    end
    if not ok then
      error(string.format("%s: element %d is %s, torch has %s (magnitude %g)", what, i,
        tostring(g[i]), tostring(w[i]), m[i]), 2)
    end
  end
end

local function shape_str(rec) return "[" .. table.concat(rec.shape, ",") .. "]" end

T.case("ops vs torch over shapes, dtypes, layouts", function()
  local n = 0
  for _, c in ipairs(cases.cases) do
    local a, b = layout(c.a, c.la), layout(c.b, c.lb)
    if c.la == "s" then T.eq(a:is_contiguous(), false) end
    local what = string.format("%s %s %s%s x %s%s", c.op, c.dtype, shape_str(c.a), c.la,
      shape_str(c.b), c.lb)
    check(dl[c.op](a, b), c.out, c.mag, c.dtype, what)
    check(a[c.op](a, b), c.out, c.mag, c.dtype, what .. " (method)")
    n = n + 1
  end
  T.truthy(n > 150, "ran " .. n .. " cases")
end)

T.case("addmm vs torch", function()
  for _, c in ipairs(cases.adds) do
    local inp, m1, m2 = T.from_torch(c.input), T.from_torch(c.m1), T.from_torch(c.m2)
    local what = string.format("addmm %s input %s alpha %s beta %s", c.dtype, shape_str(c.input),
      tostring(c.alpha), tostring(c.beta))
    check(dl.addmm(inp, m1, m2, {alpha = c.alpha, beta = c.beta}), c.out, c.mag, c.dtype, what)
    local m1t, m2t = m1:t():contiguous():t(), m2:t():contiguous():t()
    check(dl.addmm(inp, m1t, m2t, {alpha = c.alpha, beta = c.beta}), c.out, c.mag, c.dtype,
      what .. " transposed")
  end
end)

T.done()
