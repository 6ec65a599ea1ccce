-- test_elementwise_ulp.lua - the vectorised transcendental functions
-- (src/cpu/vecmath.c, SLEEF u10) against float64 references from libm:
-- float32 results within 1 ulp of the correctly rounded value over wide
-- random and edge inputs (0, -0, subnormals, +-inf, NaN, large magnitudes;
-- sigmoid and rsqrt, formulas over exp and sqrt, within 2; erfc, SLEEF's
-- u15 kernel, within 1.5),
-- NaN/inf/signed zero as C99 (and PyTorch) give them, the same bits in every
-- layout and row split, and float64 results within 1e-15 relative.  The
-- activations composed around one vector function (gelu over erf, its tanh
-- form over tanh, silu over exp) are checked against the same float64
-- formula run by libm, within a few ulp plus the cancellation in 1 + erf
-- (1 + tanh) that PyTorch's formula has too, and for their bits in every
-- layout.
-- pow (SLEEF's u10 pow) likewise within 1 ulp over the same bases with
-- edge and random exponents, C99's special cases (pow(1, NaN) = 1,
-- pow(x, +-0) = 1, pow(-1, +-inf) = 1, ...), and the same bits whether the
-- exponent is a tensor, a broadcast scalar or a strided view.
-- The reference runs in a child dlua with DLUA_CPU_VECMATH=0 (libm's scalar
-- loops), so it shares no code with the kernels under test.
local T = require "testlib"

local OPS = {"exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "sin",
             "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "sigmoid", "erf", "erfc"}

-- inputs: edge values, then spreads over each op's interesting range
local function inputs()
  local v = {0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, 1e-45, -1e-45, 1e-40, -1e-40, 1.17549435e-38,
             1 / 0, -1 / 0, 0 / 0, 3.4e38, -3.4e38, 88.7, 88.8, -87.3, -103.9, -104, 89.5, 700, -700,
             1e-7, -1e-7, 1e-20, 3.14159265, 1.5707964, 1e4, -1e4, 1e6, 0.99999994, -0.99999994,
             1.0000001, 9.0, -9.0, 10.5, -10.5}
  dl.manual_seed(3)
  local u = dl.rand(6000):tolist()
  local s = dl.rand(6000):tolist()
  for i = 1, 2000 do v[#v + 1] = (s[i] < 0.5 and -1 or 1) * 2 ^ (u[i] * 60 - 30) end  -- wide
  for i = 2001, 4000 do v[#v + 1] = (u[i] * 2 - 1) * 12 end                         -- [-12, 12]
  for i = 4001, 6000 do v[#v + 1] = u[i] * 2 - 1 end                                -- [-1, 1]
  return dl.tensor(v, {dtype = dl.float32})
end

-- pow's exponents: C99's special values, integers, halves, then random
local function exponents(n)
  local e = {0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 3.0, 0.5, -0.5, 1 / 0, -1 / 0, 0 / 0, 1e-3, 7.25,
             -2.5, 31.0, -31.0, 1e10, -1e10, 1e-30}
  dl.manual_seed(4)
  local u = dl.rand(n):tolist()
  for i = #e + 1, n do e[i] = (u[i] * 2 - 1) * (i % 3 == 0 and 40 or 4) end
  return dl.tensor(e, {dtype = dl.float32})
end

local ok_tmp = T.tmpdir()
local x32 = inputs()
local e32 = exponents(x32:numel())
local inpath, refpath = ok_tmp .. "/ulp_in.safetensors", ok_tmp .. "/ulp_ref.safetensors"
dl.save(inpath, {x = x32, e = e32})

-- the float64 references of every op, by libm in a child process
local script = ok_tmp .. "/ulp_ref.lua"
local f = assert(io.open(script, "w"))
f:write(string.format([[
local inp = dl.load(%q)
local x = inp.x:double()
local out = {}
out.pow = x:abs():pow(inp.e:double())
out.pow_neg = x:pow(inp.e:double():round())
for _, op in ipairs({%s}) do out[op] = x[op](x) end
out.gelu, out.silu = dl._F.gelu(x), dl._F.silu(x)
out.gelu_tanh = dl._F.gelu(x, {approximate = "tanh"})
dl.save(%q, out)
]], inpath, '"' .. table.concat(OPS, '", "') .. '"', refpath))
f:close()
local p = assert(io.popen("DLUA_CPU_VECMATH=0 '" .. arg[-1] .. "' '" .. script .. "' 2>&1"))
local child = p:read("a")
local ok = p:close()
assert(ok, "reference process failed: " .. child)
local ref = dl.load(refpath)

-- distance in float32 ulps of the correctly rounded reference
local function ulp_of(r)
  local a = math.abs(r)
  if a < 1.17549435e-38 then return 2 ^ -149 end -- subnormal spacing
  local _, e = math.frexp(a)                      -- a = m * 2^e, m in [0.5, 1)
  return 2 ^ (e - 24)
end

local function check_f32(op, y, r64)
  local ys, rs, xs = y:tolist(), r64:tolist(), x32:tolist()
  local r32 = r64:float():tolist() -- the correctly rounded float32 reference
  local worst, at = 0, nil
  for i = 1, #ys do
    local a, b, b32 = ys[i], rs[i], r32[i]
    if b ~= b then
      if a == a then T.fail(string.format("%s(%.9g): got %.9g, expected NaN", op, xs[i], a)) end
    elseif b32 == math.huge or b32 == -math.huge or a == math.huge or a == -math.huge then
      if a ~= b32 then
        -- within 1 ulp of the largest float is also fine for overflow edges
        T.truthy(math.abs(b) > 3.40282e38 and math.abs(a) >= 3.4028e38,
          string.format("%s(%.9g): got %.9g, expected %.9g", op, xs[i], a, b32))
      end
    else
      if b == 0 and a == 0 and b32 == 0 then
        -- signed zero: as the reference's
        T.eq(1 / a, 1 / b32, string.format("%s(%.9g) sign of zero", op, xs[i]))
      end
      -- ulps from the correctly rounded result; results below the normal
      -- range count in units of the smallest normal's ulp (sigmoid(x) for
      -- x < -88.7 is 0, as 1 / (1 + exp(-x)) gives it in PyTorch too)
      local d = math.abs(a - b32) / math.max(ulp_of(b32), 2 ^ -126)
      if d > worst then worst, at = d, i end
    end
  end
  -- sigmoid and rsqrt are formulas over exp/sqrt (one more rounding): 2 ulp;
  -- SLEEF's erfc is its u15 kernel (1.5 ulp; it has no u10 one)
  local bar = (op == "sigmoid" or op == "rsqrt") and 2 or op == "erfc" and 1.5 or 1
  T.truthy(worst <= bar, string.format("%s: %.3f ulp at x = %.9g (got %.9g, exact %.17g)", op,
    worst, at and xs[at] or 0, at and ys[at] or 0, at and rs[at] or 0))
  return worst
end

for _, op in ipairs(OPS) do
  T.case("float32 " .. op .. " within 1 ulp of libm's float64", function()
    check_f32(op, x32[op](x32), ref[op])
  end)
end

T.case("float32 pow within 1 ulp of libm's float64", function()
  check_f32("pow", x32:abs():pow(e32), ref.pow)
  check_f32("pow", x32:pow(e32:round()), ref.pow_neg) -- negative bases, integer exponents
  -- C99's special cases
  local b = dl.tensor({1, 1, 0 / 0, -1, -1, 0, -0.0, 0, 2, -8}, {dtype = dl.float32})
  local e = dl.tensor({0 / 0, 1 / 0, 0, 1 / 0, -1 / 0, -1, -3, 3, -1 / 0, 1 / 3}, {dtype = dl.float32})
  local y = b:pow(e):tolist()
  T.eq(y[1], 1)
  T.eq(y[2], 1)
  T.eq(y[3], 1)
  T.eq(y[4], 1)
  T.eq(y[5], 1)
  T.eq(y[6], 1 / 0)
  T.eq(y[7], -1 / 0)
  T.eq(1 / y[8], 1 / 0)
  T.eq(y[9], 0)
  T.truthy(y[10] ~= y[10], "pow(-8, 1/3) is NaN")
end)

T.case("pow: same bits with tensor, broadcast and strided exponents", function()
  local n = x32:numel() - x32:numel() % 60
  local base = x32:narrow(1, 1, n):abs()
  for _, ev in ipairs({0.3, -1.7, 5.5}) do
    local full = dl.full({n}, ev)
    T.same_bits(base:pow(ev), base:pow(full), "pow with a broadcast exponent " .. ev)
  end
  local ex = e32:narrow(1, 1, n)
  local want = base:pow(ex)
  local bm, em = base:view(60, n // 60), ex:view(60, n // 60)
  local bt, et = bm:t():contiguous():t(), em:t():contiguous():t()
  T.same_bits(bt:pow(et):contiguous():view(n), want, "pow on a transposed layout")
  T.same_bits(base:narrow(1, 8, 37):pow(ex:narrow(1, 8, 37)), want:narrow(1, 8, 37), "pow on an offset slice")
  local d = base:double():pow(ex:double())
  local ys, rs = d:tolist(), ref.pow:tolist()
  for i = 1, #ys do
    local a, r = ys[i], rs[i]
    if r ~= r then
      T.truthy(a ~= a, "float64 pow NaN")
    elseif math.abs(r) == math.huge or r == 0 then
      T.eq(a, r, "float64 pow edge")
    elseif math.abs(a - r) > 1e-15 * math.abs(r) then
      T.fail(string.format("float64 pow: got %.17g, libm %.17g", a, r))
    end
  end
end)

T.case("same bits in every layout and row split", function()
  local n = x32:numel() - x32:numel() % 60
  local flat = x32:narrow(1, 1, n)
  local m = flat:view(60, n // 60)
  for _, op in ipairs({"exp", "tanh", "erf", "erfc", "sigmoid", "log1p", "sin"}) do
    local want = flat[op](flat)
    -- transposed (strided rows), a narrow slice (odd offset, short rows)
    local tr = m:t():contiguous():t()
    T.same_bits(tr[op](tr):contiguous():view(n), want, op .. " on a transposed layout")
    local part = flat:narrow(1, 8, 37)
    T.same_bits(part[op](part), want:narrow(1, 8, 37), op .. " on an offset slice")
    -- thread counts split rows differently
    local old = dl.get_num_threads()
    dl.set_num_threads(1)
    local one = flat[op](flat)
    dl.set_num_threads(old)
    T.same_bits(one, want, op .. " on one thread")
  end
end)

local ACTS = {
  gelu = function(t) return dl._F.gelu(t) end,
  gelu_tanh = function(t) return dl._F.gelu(t, {approximate = "tanh"}) end,
  silu = function(t) return dl._F.silu(t) end,
}

-- |got - ref| within ulps of the result plus slack * |x| (the absolute
-- error of 1 + erf or 1 + tanh, scaled by 0.5 x); NaN and infinities equal.
local function check_act(name, y, r, x, ulps, slack, eps)
  local ys, rs, xs = y:tolist(), r:tolist(), x:tolist()
  for i = 1, #ys do
    local a, b = ys[i], rs[i]
    if b ~= b or a ~= a or math.abs(b) == math.huge or math.abs(a) == math.huge then
      T.truthy((a ~= a and b ~= b) or a == b, string.format("%s(%.9g): got %.9g, expected %.9g", name, xs[i], a, b))
    else
      local unit = eps and eps * math.abs(b) or math.max(ulp_of(b), 2 ^ -126)
      local bar = ulps * unit + slack * math.abs(xs[i])
      if math.abs(a - b) > bar then
        T.fail(string.format("%s(%.9g): got %.17g, float64 %.17g", name, xs[i], a, b))
      end
    end
  end
end

for name, fn in pairs(ACTS) do
  T.case("float32 " .. name .. " near the float64 formula", function()
    -- the float32 reference rounded once, so ulps count from it
    local ulps = name == "silu" and 4 or 3
    check_act(name, fn(x32), ref[name]:float(), x32, ulps, name == "silu" and 0 or 2.5e-7)
  end)
  T.case("float64 " .. name .. " near libm's", function()
    local x = x32:double()
    check_act(name, fn(x), ref[name], x, 4, name == "silu" and 0 or 4e-16, 2.2e-16)
  end)
end

T.case("gelu, gelu tanh, silu: same bits in every layout and row split", function()
  local n = x32:numel() - x32:numel() % 60
  local flat = x32:narrow(1, 1, n)
  local m = flat:view(60, n // 60)
  for name, fn in pairs(ACTS) do
    local want = fn(flat)
    local tr = m:t():contiguous():t()
    T.same_bits(fn(tr):contiguous():view(n), want, name .. " on a transposed layout")
    local part = flat:narrow(1, 8, 37)
    T.same_bits(fn(part), want:narrow(1, 8, 37), name .. " on an offset slice")
  end
end)

T.case("float64 within 1e-15 relative of libm", function()
  local x = x32:double()
  local xs = x32:tolist()
  for _, op in ipairs(OPS) do
    local y, r = x[op](x), ref[op]
    local ys, rs = y:tolist(), r:tolist()
    for i = 1, #ys do
      local a, b = ys[i], rs[i]
      if b ~= b then
        T.truthy(a ~= a, op .. ": NaN expected")
      elseif math.abs(b) == math.huge then
        T.eq(a, b, op .. " infinity")
      else
        local tol = 4e-16 * math.max(math.abs(b), 2.2250738585072014e-308)
        if math.abs(a - b) > 2.5 * tol then
          T.fail(string.format("%s(%.17g): got %.17g, libm %.17g", op, xs[i], a, b))
        end
      end
    end
  end
end)

if os.getenv("DLUA_CPU_VECMATH") == nil then
  T.case("the AVX2 kernels pass the same checks", function()
    local q = assert(io.popen("DLUA_CPU_VECMATH=avx2 '" .. arg[-1] .. "' '" .. arg[0] .. "' 2>&1"))
    local text = q:read("a")
    local fine = q:close()
    T.truthy(fine and text:match("(%d+) passed, 0 failed"), "with DLUA_CPU_VECMATH=avx2:\n" .. text)
  end)
end

T.done()
