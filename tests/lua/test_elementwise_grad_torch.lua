-- test_elementwise_grad_torch.lua - the elementwise family's gradients against
-- PyTorch, in float32 (plus mixed float32/float64 and integer operands): every
-- differentiable op over broadcast, transposed, 0-dim and empty operands,
-- scalar operands, ties (maximum/minimum) and boundaries (clamp), in-place
-- forms.  Python makes the inputs, a random grad_output and torch's
-- torch.autograd.grad results; Lua rebuilds the inputs as leaves, runs the dl
-- op and compares the forward, the gradients (shape, dtype, values) and the
-- grad_fn name.
local T = require "testlib"

local R = T.torch([[
import torch
F32, F64, I64 = torch.float32, torch.float64, torch.int64

def U(shape, lo, hi, dt=F32):
    return (torch.rand(shape, dtype=F64) * (hi - lo) + lo).to(dt)

def away(shape, lo=0.3, hi=2.0, dt=F32):
    sign = torch.randint(0, 2, shape).to(F64) * 2 - 1
    return (U(shape, lo, hi, F64) * sign).to(dt)

def grid(shape, lo, hi):
    # values on a 0.5 grid: ties and exact boundaries happen
    return (torch.randint(int(2 * lo), int(2 * hi) + 1, shape).to(F32) / 2)

cases = []
def case(op, fn, ins, req=None, tr=None):
    req = req if req is not None else [x.dtype.is_floating_point for x in ins]
    tr = tr or [False] * len(ins)
    leaves = [x.clone().requires_grad_(r) for x, r in zip(ins, req)]
    views = [l.transpose(-1, -2) if t else l for l, t in zip(leaves, tr)]
    out = fn(*views)
    go = torch.randn(out.shape, dtype=F64).to(out.dtype)
    wanted = [l for l, r in zip(leaves, req) if r]
    gs = list(torch.autograd.grad(out, wanted, go, allow_unused=True))
    grads = [(gs.pop(0) if r else "none") for r in req]
    grads = ["none" if g is None else g for g in grads]
    cases.append({"op": op, "ins": ins, "req": req, "tr": tr, "go": go, "out": out.detach(),
                  "grads": grads, "name": out.grad_fn.name()})

UNARY = [("neg", -2, 2), ("abs", None, None), ("relu", None, None), ("square", -2, 2),
         ("exp", -2, 2), ("exp2", -2, 2), ("expm1", -2, 2), ("log", 0.2, 3), ("log2", 0.2, 3),
         ("log10", 0.2, 3), ("log1p", -0.5, 3), ("sqrt", 0.2, 3), ("rsqrt", 0.2, 3),
         ("reciprocal", None, None), ("sin", -3, 3), ("cos", -3, 3), ("tan", -1.2, 1.2),
         ("asin", -0.9, 0.9), ("acos", -0.9, 0.9), ("atan", -3, 3), ("sinh", -2, 2),
         ("cosh", -2, 2), ("tanh", -2, 2), ("sigmoid", -4, 4), ("erf", -2, 2), ("erfc", -2, 2), ("frac", -3, 3),
         ("sign", None, None), ("floor", -3, 3), ("ceil", -3, 3), ("round", -3, 3),
         ("trunc", -3, 3)]
for name, lo, hi in UNARY:
    gen = (lambda s: away(s)) if lo is None else (lambda s: U(s, lo, hi))
    f = getattr(torch, name)
    case(name, f, [gen((7,))])
    case(name, f, [gen((3, 4))], tr=[True])
    case(name, f, [gen(())])
    case(name, f, [gen((2, 0))])
    case(name + "_", lambda x: getattr(x.clone(), name + "_")(), [gen((2, 3, 4))])
    case(name + "_", lambda x: getattr(x.clone(), name + "_")(), [gen((4, 3))], tr=[True])

BINARY = {
    "add": torch.add, "add_alpha": lambda a, b: torch.add(a, b, alpha=2.5),
    "sub": torch.sub, "sub_alpha": lambda a, b: torch.sub(a, b, alpha=-3),
    "mul": torch.mul, "div": torch.div,
    "div_floor": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "div_trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    "pow": torch.pow, "maximum": torch.maximum, "minimum": torch.minimum,
    "remainder": torch.remainder, "fmod": torch.fmod, "atan2": torch.atan2,
}
DIVLIKE = ("div", "div_floor", "div_trunc", "remainder", "fmod", "atan2")
SHAPES = [((3, 4), (3, 4), False), ((3, 1), (1, 4), False), ((2, 3, 4), (4,), False),
          ((), (5,), False), ((2, 3), (), False), ((4, 3), (4, 3), True), ((0, 3), (3,), False),
          ((5, 2), (1, 2), True)]
for name, fn in BINARY.items():
    for sa, sb, t in SHAPES:
        a = U(sa, 0.3, 2.5) if name == "pow" else U(sa, -3, 3)
        b = away(sb, 0.4, 2) if name in DIVLIKE else U(sb, -2, 2)
        case(name, fn, [a, b], tr=[t, t and len(sb) >= 2])
    # one side only, and mixed dtypes: the gradient comes back in each input's dtype
    a = U((3, 4), 0.3, 2.5)
    b = away((4,), 0.4, 2, F64) if name in DIVLIKE else U((4,), 0.5, 2, F64)
    case(name, fn, [a, b])
    case(name, fn, [a, b], req=[True, False])
    case(name, fn, [a, b], req=[False, True])
    # an integer operand
    if name != "pow":
        case(name, fn, [a, torch.randint(1, 4, (4,))])
# ties split half and half
for name in ("maximum", "minimum"):
    case(name, BINARY[name], [grid((4, 5), -1, 1), grid((5,), -1, 1)])
# integer base or exponent
case("pow", torch.pow, [torch.randint(0, 4, (4,)), U((3, 4), -1.5, 1.5)])
case("pow", torch.pow, [U((3, 4), -2, 2), torch.randint(0, 4, (4,))])
# a^b at base 0
case("pow", torch.pow, [torch.tensor([0.0, 0.0, 0.0, 2.0]), torch.tensor([2.0, 0.0, 1.5, 0.0])])

# in place into a non-leaf (torch: a clone of the leaf)
INPLACE = {
    "add_": lambda a, b: a.clone().add_(b, alpha=2), "sub_": lambda a, b: a.clone().sub_(b),
    "mul_": lambda a, b: a.clone().mul_(b), "div_": lambda a, b: a.clone().div_(b),
    "div_floor_": lambda a, b: a.clone().div_(b, rounding_mode="floor"),
    "pow_": lambda a, b: a.clone().pow_(b), "remainder_": lambda a, b: a.clone().remainder_(b),
    "fmod_": lambda a, b: a.clone().fmod_(b), "atan2_": lambda a, b: a.clone().atan2_(b),
}
for name, fn in INPLACE.items():
    a = U((3, 4), 0.3, 2.5)
    b = away((4,), 0.4, 2) if name[:-1] in DIVLIKE else U((4,), -2, 2)
    case(name, fn, [a, b])
    case(name, fn, [U((4, 3), 0.3, 2.5), U((4, 3), 0.5, 2)], tr=[True, True])
    case(name, fn, [a, b.double()], req=[False, True])

# scalar operands
x = U((3, 4), 0.3, 2.5)
xs = U((3, 4), -2, 2)
SCALAR = [("pow_2", lambda a: a ** 2, xs), ("pow_3", lambda a: a.pow(3), xs),
          ("pow_half", lambda a: a ** 0.5, x), ("pow_m1_5", lambda a: a ** -1.5, x),
          ("pow_0", lambda a: a ** 0, x), ("rpow", lambda a: 2 ** a, xs),
          ("rpow_half", lambda a: torch.pow(0.5, a), xs), ("rsub", lambda a: 3 - a, x),
          ("rdiv", lambda a: 3 / a, x), ("div_s", lambda a: a / 3, x),
          ("mul_s", lambda a: a * -2.5, x), ("add_s", lambda a: a + 1, x),
          ("rem_s", lambda a: a % 0.7, x), ("fmod_s", lambda a: torch.fmod(a, 0.7), xs),
          ("floordiv_s", lambda a: torch.div(a, 0.7, rounding_mode="floor"), x),
          ("pow_s_", lambda a: a.clone().pow_(2.5), x), ("mul_s_", lambda a: a.clone().mul_(3), x)]
for name, fn, a in SCALAR:
    case(name, fn, [a])
    case(name, fn, [a.t().contiguous()], tr=[True])

# clamp: scalar and tensor bounds, values at the boundaries, crossed bounds
g = grid((4, 5), -2, 2)
CLAMP = [("clamp", lambda a: torch.clamp(a, -1, 1)), ("clamp_min", lambda a: torch.clamp(a, min=0.5)),
         ("clamp_max", lambda a: torch.clamp(a, max=0.5)),
         ("clamp_crossed", lambda a: torch.clamp(a, 1, -1)),
         ("clamp_", lambda a: a.clone().clamp_(-0.5, 1))]
for name, fn in CLAMP:
    case(name, fn, [g])
    case(name, fn, [g.t().contiguous()], tr=[True])
    case(name, fn, [U((), -2, 2)])
lo, hi = grid((5,), -2, 0), grid((4, 1), 0, 2)
case("clamp_t", torch.clamp, [g, lo, hi])
case("clamp_t", torch.clamp, [g, lo, hi], req=[False, True, True])
case("clamp_t", torch.clamp, [g, hi, lo])  # crossed bounds
case("clamp_min_t", torch.clamp_min, [g, lo])
case("clamp_max_t", torch.clamp_max, [g, hi])
case("clamp_t_", lambda a, l, h: a.clone().clamp_(l, h), [g, lo, hi])

# where and masked_fill
c = torch.rand(3, 1) > 0.5
m = torch.rand(4) > 0.5
a, b = U((3, 4), -2, 2), U((4,), -2, 2)
v = torch.tensor(0.75)
WHERE = [("where", lambda p, q: torch.where(c, p, q), [a, b]),
         ("where", lambda p, q: torch.where(c, p, q), [a, b.double()]),
         ("where_s", lambda p: torch.where(c, p, 1.5), [a]),
         ("masked_fill", lambda p, val: p.masked_fill(m, val), [a, v]),
         ("masked_fill_b", lambda p, val: p.masked_fill(c, val), [b, v]),
         ("masked_fill_s", lambda p: p.masked_fill(m, -1.0), [a]),
         ("masked_fill_", lambda p, val: p.clone().masked_fill_(m, val), [a, v]),
         ("masked_fill_s_", lambda p: p.clone().masked_fill_(c, 2.0), [a])]
for name, fn, ins in WHERE:
    case(name, fn, ins)
case("where", lambda p, q: torch.where(c, p, q), [a, b], req=[False, True])
case("masked_fill", lambda p, val: p.masked_fill(m, val), [a, v], req=[False, True])

# large enough for the parallel loops, with a transposed and a broadcast operand
big, bias = torch.randn(200, 300), torch.randn(300, 1)
case("big", lambda p, q: (p * 2 + q).tanh() * p.sigmoid(), [big, bias], tr=[True, False])
emit({"cases": cases, "c": c, "m": m})
]])

local c, m = T.from_torch(R.c), T.from_torch(R.m)

local OPS = {
  add_alpha = function(a, b) return dl.add(a, b, {alpha = 2.5}) end,
  sub_alpha = function(a, b) return dl.sub(a, b, {alpha = -3}) end,
  div_floor = function(a, b) return dl.div(a, b, {rounding_mode = "floor"}) end,
  div_trunc = function(a, b) return dl.div(a, b, {rounding_mode = "trunc"}) end,
  ["add_"] = function(a, b) return a:clone():add_(b, {alpha = 2}) end,
  ["div_floor_"] = function(a, b) return a:clone():div_(b, {rounding_mode = "floor"}) end,
  pow_2 = function(a) return a ^ 2 end,
  pow_3 = function(a) return a:pow(3) end,
  pow_half = function(a) return a ^ 0.5 end,
  pow_m1_5 = function(a) return a ^ -1.5 end,
  pow_0 = function(a) return a ^ 0 end,
  rpow = function(a) return 2 ^ a end,
  rpow_half = function(a) return dl.pow(0.5, a) end,
  rsub = function(a) return 3 - a end,
  rdiv = function(a) return 3 / a end,
  div_s = function(a) return a / 3 end,
  mul_s = function(a) return a * -2.5 end,
  add_s = function(a) return a + 1 end,
  rem_s = function(a) return a % 0.7 end,
  fmod_s = function(a) return a:fmod(0.7) end,
  floordiv_s = function(a) return a:div(0.7, {rounding_mode = "floor"}) end,
  pow_s_ = function(a) return a:clone():pow_(2.5) end,
  mul_s_ = function(a) return a:clone():mul_(3) end,
  clamp = function(a) return a:clamp(-1, 1) end,
  clamp_min = function(a) return a:clamp({min = 0.5}) end,
  clamp_max = function(a) return a:clamp_max(0.5) end,
  clamp_crossed = function(a) return dl.clamp(a, 1, -1) end,
  clamp_ = function(a) return a:clone():clamp_(-0.5, 1) end,
  clamp_t = function(a, l, h) return dl.clamp(a, l, h) end,
  clamp_min_t = function(a, l) return a:clamp_min(l) end,
  clamp_max_t = function(a, h) return dl.clamp_max(a, h) end,
  clamp_t_ = function(a, l, h) return a:clone():clamp_(l, h) end,
  where = function(p, q) return dl.where(c, p, q) end,
  where_s = function(p) return p:where(c, 1.5) end,
  masked_fill = function(p, v) return p:masked_fill(m, v) end,
  masked_fill_b = function(p, v) return dl.masked_fill(p, c, v) end,
  masked_fill_s = function(p) return p:masked_fill(m, -1.0) end,
  masked_fill_ = function(p, v) return p:clone():masked_fill_(m, v) end,
  masked_fill_s_ = function(p) return p:clone():masked_fill_(c, 2.0) end,
  big = function(p, q) return (p * 2 + q):tanh() * p:sigmoid() end,
}
local function op_fn(name)
  if OPS[name] then return OPS[name] end
  if name:sub(-1) == "_" then
    local ip = name
    return function(a, ...) local t = a:clone(); t[ip](t, ...); return t end
  end
  return function(...) return dl[name](...) end
end

-- torch's names with the generated number dropped; where dl's differ on purpose
local NAME_ALIASES = {RsubBackward = "SubBackward", ClampMinBackward = "ClampBackward",
  ClampMaxBackward = "ClampBackward"}

-- Python computes 3 / x as x.reciprocal() * 3
local OP_NAMES = {rdiv = "DivBackward"}

local function desc(cs, i)
  local parts = {"case " .. i, cs.op}
  for k, rec in ipairs(cs.ins) do
    parts[#parts + 1] = rec.dtype .. T.fmt(rec.shape) .. (cs.tr[k] and "ᵀ" or "") ..
      (cs.req[k] and "*" or "")
  end
  return table.concat(parts, " ")
end

T.case("gradients match torch", function()
  local n = 0
  for i, cs in ipairs(R.cases) do
    local what = desc(cs, i)
    local leaves, views = {}, {}
    for k, rec in ipairs(cs.ins) do
      local x = T.from_torch(rec)
      if cs.req[k] then x:requires_grad_() end
      leaves[k] = x
      views[k] = cs.tr[k] and x:transpose(-1, -2) or x
    end
    local out = op_fn(cs.op)(table.unpack(views, 1, #cs.ins))
    T.match_torch(out:detach(), cs.out, 2e-6, 1e-6, what .. " forward")
    local want = cs.name:gsub("%d+$", "")
    T.eq(out.grad_fn, OP_NAMES[cs.op] or NAME_ALIASES[want] or want, what .. " grad_fn")
    local wanted, slots = {}, {}
    for k, x in ipairs(leaves) do
      if cs.req[k] then wanted[#wanted + 1] = x; slots[#slots + 1] = k end
    end
    local gs = dl.autograd.grad(out, wanted, {grad_outputs = T.from_torch(cs.go),
                                              allow_unused = true})
    local got = {}
    for j, k in ipairs(slots) do got[k] = gs[j] end
    T.match_grads(got, cs.grads, 2e-5, 2e-6, what)
    n = n + 1
  end
  T.truthy(n > 400, "ran " .. n .. " cases")
end)

T.done()
