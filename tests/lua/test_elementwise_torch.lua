-- test_elementwise_torch.lua - the elementwise family against PyTorch: many
-- ops x shapes (broadcasting, 0-dim, empty, transposed views) x dtypes, with
-- tensor and scalar operands, in-place forms, clamp, where and masked_fill.
-- Python makes the inputs and torch's results; Lua rebuilds the inputs, runs
-- the dl op and compares shape, dtype and values.  Cases torch rejects are
-- skipped.
local T = require "testlib"

local R = T.torch([[
import torch
F32, F64, F16, BF16 = torch.float32, torch.float64, torch.float16, torch.bfloat16
I64, I32, U8, B = torch.int64, torch.int32, torch.uint8, torch.bool

def rnd(shape, dt, nonzero=False, small=False):
    if dt == B:
        return torch.rand(shape) > 0.5
    if dt == U8:
        t = torch.randint(0, 12 if small else 30, shape, dtype=dt)
    elif dt in (I64, I32):
        t = torch.randint(-4 if small else -30, 6 if small else 30, shape, dtype=dt)
    else:
        t = (torch.randn(shape) * 3).to(dt)
    if nonzero:
        t = torch.where(t == 0, torch.ones((), dtype=dt), t)
    return t

# (name, fn(a, b)) -- names map to dl calls on the Lua side
BINARY = [
    ("add", torch.add), ("add_alpha", lambda a, b: torch.add(a, b, alpha=2)),
    ("sub", torch.sub), ("sub_alpha", lambda a, b: torch.sub(a, b, alpha=3)),
    ("mul", torch.mul), ("div", torch.div),
    ("div_floor", lambda a, b: torch.div(a, b, rounding_mode="floor")),
    ("div_trunc", lambda a, b: torch.div(a, b, rounding_mode="trunc")),
    ("pow", torch.pow), ("maximum", torch.maximum), ("minimum", torch.minimum),
    ("remainder", torch.remainder), ("fmod", torch.fmod), ("atan2", torch.atan2),
    ("eq", torch.eq), ("ne", torch.ne), ("lt", torch.lt), ("le", torch.le),
    ("gt", torch.gt), ("ge", torch.ge),
    ("logical_and", torch.logical_and), ("logical_or", torch.logical_or),
    ("logical_xor", torch.logical_xor),
]
DIVLIKE = {"div_floor", "div_trunc", "remainder", "fmod"}
PAIRS = [(F32, F32), (F64, F64), (I64, I64), (I32, I32), (U8, U8), (B, B), (F16, F16),
         (BF16, BF16), (I64, F32), (U8, I64), (I32, F64), (B, F32), (F16, F32), (I32, U8),
         (B, I64), (F32, F64)]
SHAPES = [((3, 4), (3, 4)), ((3, 1), (1, 4)), ((2, 3, 4), (4,)), ((5,), ()), ((), ()),
          ((0, 3), (3,)), ((2, 1, 3), (4, 1)), ((4, 3), (4, 3))]

cases = []
def add_case(c, fn, half_fn=None):
    try:
        c["out"] = fn()
    except Exception as e:
        # torch 1.13's CPU lacks many half kernels; dl computes those in float32
        # and rounds back, which half_fn spells out
        if half_fn is not None and "for 'Half'" in str(e):
            c["out"] = half_fn()
        else:
            c["skip"] = str(e)[:80]
    cases.append(c)

def broadcastable(*shapes):
    try:
        torch.broadcast_shapes(*shapes)
        return True
    except Exception:
        return False

k = 0
for name, fn in BINARY:
    for da, db in PAIRS:
        for rep in range(2):
            sa, sb = SHAPES[k % len(SHAPES)]
            k += 1
            a = rnd(sa, da, small=(name == "pow"))
            b = rnd(sb, db, nonzero=(name in DIVLIKE or name == "pow"), small=(name == "pow"))
            ta = rep == 1 and len(sa) >= 2   # run on a transposed view of a
            av = a.transpose(-1, -2) if ta else a
            bv = b.transpose(-1, -2) if ta and len(sb) >= 2 else b
            if not broadcastable(av.shape, bv.shape):
                ta, av, bv = False, a, b
            tb = bv is not b
            add_case({"kind": "binary", "op": name, "a": a, "b": b, "ta": ta, "tb": tb},
                     lambda: fn(av, bv))

# scalar operands on either side
SCALARS = [2, -3, 2.5, -0.75, True]
for name, fn in BINARY:
    for dt in (F32, F64, I64, I32, U8, B, F16):
        for s in SCALARS:
            a = rnd((2, 3), dt, nonzero=True, small=(name == "pow"))
            if name in DIVLIKE and s is True:
                continue
            # ops whose torch signature wants a tensor get the scalar as the 0-dim
            # tensor torch.tensor(s), which promotes the same way
            tensor_only = name in ("atan2", "maximum", "minimum") or name.startswith("logical")
            add_case({"kind": "scalar_right", "op": name, "a": a, "s": s},
                     lambda: fn(a, torch.tensor(s)) if tensor_only else fn(a, s))
        if name in ("sub", "div", "pow", "remainder", "lt"):
            a = rnd((4,), dt, nonzero=True, small=True)
            if dt in (I64, I32) and name == "pow":
                a = a.abs()
            for s in (3, 1.5):
                left = {"sub": lambda: s - a, "div": lambda: s / a, "pow": lambda: s ** a,
                        "remainder": lambda: s % a, "lt": lambda: s < a}[name]
                add_case({"kind": "scalar_left", "op": name, "a": a, "s": s}, left)

UNARY = ["neg", "abs", "sign", "relu", "floor", "ceil", "round", "trunc", "square", "exp",
         "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "reciprocal",
         "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "sigmoid", "erf",
         "erfc", "frac", "logical_not", "isnan", "isinf", "isfinite"]
UDT = [F32, F64, I64, I32, U8, B, F16, BF16]
USHAPES = [(7,), (3, 4), (), (2, 0), (2, 3, 4)]
k = 0
for name in UNARY:
    for dt in UDT:
        shape = USHAPES[k % len(USHAPES)]
        k += 1
        x = rnd(shape, dt)
        if name in ("asin", "acos") and dt.is_floating_point:
            x = (x / 4).to(dt)
        if dt.is_floating_point and x.numel() > 2:
            x.view(-1)[0] = float("nan")
            x.view(-1)[1] = float("-inf")
        tx = len(shape) >= 2
        xv = x.transpose(-1, -2) if tx else x
        add_case({"kind": "unary", "op": name, "a": x, "ta": tx},
                 lambda: getattr(torch, name)(xv),
                 lambda: getattr(torch, name)(xv.float()).to(dt))

# clamp with scalar and tensor bounds
for dt in (F32, F64, I64, I32, U8, B, F16):
    x = rnd((3, 4), dt)
    for lo, hi in ((-1, 2), (0.5, None), (None, 1.5), (2, 1), (-2.5, 3)):
        add_case({"kind": "clamp", "a": x, "lo": lo, "hi": hi},
                 lambda: torch.clamp(x, lo, hi), lambda: torch.clamp(x.float(), lo, hi).to(dt))
    lo_t, hi_t = rnd((4,), dt), rnd((3, 1), dt)
    add_case({"kind": "clamp_t", "a": x, "lo": lo_t, "hi": hi_t},
             lambda: torch.clamp(x, lo_t, hi_t),
             lambda: torch.clamp(x.float(), lo_t.float(), hi_t.float()).to(dt))

# where and masked_fill
for da, db in ((F32, F32), (I64, F32), (I32, I64), (B, B), (F16, F16), (U8, I32), (F64, I64)):
    c = torch.rand(3, 1) > 0.5
    a, b = rnd((3, 4), da), rnd((4,), db)
    add_case({"kind": "where", "c": c, "a": a, "b": b}, lambda: torch.where(c, a, b))
    add_case({"kind": "where_s", "c": c, "a": a, "s": 1.5}, lambda: torch.where(c, a, 1.5))
    m = torch.rand(4) > 0.5
    for v in (7, -2.5, True):
        add_case({"kind": "masked_fill", "a": a, "m": m, "s": v},
                 lambda: a.masked_fill(m, v))

# in place: broadcast other into self, same-dtype and promoting
INPLACE = [("add_", lambda s, o: s.add_(o)), ("sub_", lambda s, o: s.sub_(o, alpha=2)),
           ("mul_", lambda s, o: s.mul_(o)), ("div_", lambda s, o: s.div_(o)),
           ("pow_", lambda s, o: s.pow_(o)), ("clamp_", lambda s, o: s.clamp_(o, None)),
           ("maximum", lambda s, o: torch.maximum(s, o))]
for name, fn in INPLACE:
    for ds, do in ((F32, F32), (F64, F32), (F32, I64), (I64, I64), (I32, I64), (F16, F32)):
        s = rnd((3, 4), ds, nonzero=True, small=True).abs()
        o = rnd((4,), do, nonzero=True, small=True).abs()
        if name in ("clamp_", "maximum"):
            o = rnd((4,), ds)
        add_case({"kind": "inplace", "op": name, "a": s, "b": o},
                 lambda: fn(s.clone().transpose(0, 1).contiguous().transpose(0, 1), o))

# large enough for the parallel loop, with a transposed and a broadcast operand
big = torch.randn(300, 200)
bias = torch.randn(300, 1)
cases.append({"kind": "big", "a": big, "b": bias,
              "out": (big.t().contiguous().t() * 2 + bias).tanh()})
emit(cases)
]])

local lua_binary = {
  add = function(a, b) return dl.add(a, b) end,
  add_alpha = function(a, b) return dl.add(a, b, {alpha = 2}) end,
  sub = function(a, b) return dl.sub(a, b) end,
  sub_alpha = function(a, b) return dl.sub(a, b, {alpha = 3}) end,
  div_floor = function(a, b) return dl.div(a, b, {rounding_mode = "floor"}) end,
  div_trunc = function(a, b) return dl.div(a, b, {rounding_mode = "trunc"}) end,
}
local function binop(name)
  return lua_binary[name] or function(a, b) return dl[name](a, b) end
end

local function tol(rec)
  if rec.dtype == "float16" or rec.dtype == "bfloat16" then return 1e-2, 1e-3 end
  if rec.dtype == "float64" then return 1e-12, 1e-12 end
  return 2e-6, 1e-6
end

local function check(got, c, what)
  local rtol, atol = tol(c.out)
  T.match_torch(got, c.out, rtol, atol, what)
end

local function desc(c, extra)
  local parts = {c.kind, c.op or ""}
  if c.a then parts[#parts + 1] = c.a.dtype .. T.fmt(c.a.shape) end
  if c.b then parts[#parts + 1] = c.b.dtype .. T.fmt(c.b.shape) end
  if c.s ~= nil then parts[#parts + 1] = "s=" .. tostring(c.s) end
  if extra then parts[#parts + 1] = extra end
  return table.concat(parts, " ")
end

local run = {}
function run.binary(c)
  local a, b = T.from_torch(c.a), T.from_torch(c.b)
  if c.ta then a = a:transpose(-1, -2) end
  if c.tb then b = b:transpose(-1, -2) end
  return binop(c.op)(a, b)
end
function run.scalar_right(c) return binop(c.op)(T.from_torch(c.a), c.s) end
function run.scalar_left(c)
  if c.op == "lt" then return dl.lt(c.s, T.from_torch(c.a)) end
  return binop(c.op)(c.s, T.from_torch(c.a))
end
function run.unary(c)
  local x = T.from_torch(c.a)
  if c.ta then x = x:transpose(-1, -2) end
  return dl[c.op](x)
end
function run.clamp(c) return T.from_torch(c.a):clamp(c.lo, c.hi) end
function run.clamp_t(c) return T.from_torch(c.a):clamp(T.from_torch(c.lo), T.from_torch(c.hi)) end
function run.where(c) return dl.where(T.from_torch(c.c), T.from_torch(c.a), T.from_torch(c.b)) end
function run.where_s(c) return dl.where(T.from_torch(c.c), T.from_torch(c.a), c.s) end
function run.masked_fill(c) return T.from_torch(c.a):masked_fill(T.from_torch(c.m), c.s) end
function run.inplace(c)
  local s = T.from_torch(c.a):t():contiguous():t() -- a non-contiguous self, like torch's
  local o = T.from_torch(c.b)
  if c.op == "sub_" then return s:sub_(o, {alpha = 2}) end
  if c.op == "clamp_" then return s:clamp_(o) end
  if c.op == "maximum" then return dl.maximum(s, o) end
  local r = s[c.op](s, o)
  T.truthy(rawequal(r, s), c.op .. " returns self")
  return s
end
function run.big(c)
  local a, b = T.from_torch(c.a), T.from_torch(c.b)
  return (a:t():contiguous():t() * 2 + b):tanh()
end

-- torch's refusals dl shares: {fragment of torch's message, of dl's}
local must_refuse = {
  {"can't be cast", "can't be cast"},
  {"Subtraction", "subtraction with a bool"},
  {"Negation", "negating a bool tensor"},
  {"negative integer powers", "negative integer powers"},
  {"ZeroDivisionError", "integer division by zero"},
  {"Boolean inputs not supported", "not supported for bool tensors"},
  -- (dl is lenient with frac on integers and clamp on bools); torch's text
  -- for refused bool kernels ends in "for 'Bool'"
  {"for 'Bool'", "not supported for bool tensors", except = {frac = true, clamp_t = true}},
}

local compared, skipped = {}, 0
for i, c in ipairs(R) do
  local label = "case " .. i .. ": " .. desc(c)
  T.case(label, function()
    if c.skip then
      skipped = skipped + 1
      -- where torch refuses for these reasons, so must dl
      for _, why in ipairs(must_refuse) do
        if c.skip:find(why[1], 1, true) and not (why.except and why.except[c.op or c.kind]) then
          T.raises(function() run[c.kind](c) end, why[2], label)
        end
      end
      return
    end
    local ok, got = pcall(run[c.kind], c)
    if not ok then error(label .. ": dl raised: " .. tostring(got)) end
    check(got, c, label)
    compared[c.kind] = (compared[c.kind] or 0) + 1
  end)
end

T.case("coverage", function()
  -- guard against the oracle silently skipping most of the work
  T.truthy((compared.binary or 0) >= 500, "binary cases compared: " .. tostring(compared.binary))
  T.truthy((compared.scalar_right or 0) >= 500, "scalar cases: " .. tostring(compared.scalar_right))
  T.truthy((compared.unary or 0) >= 150, "unary cases: " .. tostring(compared.unary))
  T.truthy((compared.inplace or 0) >= 25, "in-place cases: " .. tostring(compared.inplace))
  T.truthy((compared.clamp or 0) >= 25 and (compared.where or 0) >= 6, "clamp/where cases")
  T.eq(compared.big, 1)
end)

T.done()
