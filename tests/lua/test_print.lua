-- test_print.lua - tostring(t): PyTorch's layout and number formatting, the
-- shape/dtype/device suffixes, summarisation, set_printoptions, and exact
-- agreement with torch's str() over a spread of values.
local T = require "testlib"

-- The text without dlua's suffixes: "tensor(<body>)".
local function strip(s)
  local body = s:match("^(.-),%s+shape=%{")
  assert(body, "no shape suffix in: " .. s)
  return body .. ")"
end

T.case("known strings", function()
  T.eq(tostring(dl.tensor({{1, 2, 3}, {4, 5, 6}})),
    "tensor([[1, 2, 3],\n        [4, 5, 6]], shape={2, 3})")
  T.eq(tostring(dl.tensor({{1, 2}, {3, 4}}, {dtype = dl.float32})),
    "tensor([[1., 2.],\n        [3., 4.]], shape={2, 2})")
  T.eq(tostring(dl.tensor({1, 2}, {dtype = dl.int32})), "tensor([1, 2], shape={2}, dtype=dl.int32)")
  T.eq(tostring(dl.tensor({1.5, -2.25}, {dtype = dl.float64})),
    "tensor([ 1.5000, -2.2500], shape={2}, dtype=dl.float64)")
  T.eq(tostring(dl.tensor(3.5)), "tensor(3.5000, shape={})")
  T.eq(tostring(dl.tensor(7)), "tensor(7, shape={})")
  T.eq(tostring(dl.tensor({true, false})), "tensor([ True, False], shape={2})")
  T.eq(tostring(dl.tensor({1e-5, 1})), "tensor([1.0000e-05, 1.0000e+00], shape={2})")
  T.eq(tostring(dl.tensor({1.5, 0 / 0, 1 / 0, -1 / 0})),
    "tensor([1.5000,    nan,    inf,   -inf], shape={4})")
  T.eq(tostring(dl.tensor({0.0, -0.0})), "tensor([0., -0.], shape={2})")
  T.eq(tostring(dl.tensor({123456789.0})), "tensor([1.2346e+08], shape={1})")
  T.eq(tostring(dl.tensor({1, 2}, {dtype = dl.float16})), "tensor([1., 2.], shape={2}, dtype=dl.float16)")
  T.eq(tostring(dl.tensor({0.5}, {dtype = dl.bfloat16})), "tensor([0.5000], shape={1}, dtype=dl.bfloat16)")
  T.eq(tostring(dl.tensor({200}, {dtype = dl.uint8})), "tensor([200], shape={1}, dtype=dl.uint8)")
  T.eq(tostring(dl.ones(2, {requires_grad = true})), "tensor([1., 1.], shape={2}, requires_grad=true)")
end)

T.case("empty tensors", function()
  T.eq(tostring(dl.tensor({})), "tensor([], shape={0})")
  T.eq(tostring(dl.zeros(2, 0)), "tensor([], shape={2, 0})")
  -- no elements to tell the type by: any dtype but float32 is shown
  T.eq(tostring(dl.zeros(0, {dtype = dl.int64})), "tensor([], shape={0}, dtype=dl.int64)")
  T.eq(tostring(dl.zeros(0, 3, {dtype = dl.bool})), "tensor([], shape={0, 3}, dtype=dl.bool)")
end)

T.case("views print through their strides", function()
  local a = dl.arange(6):view(2, 3)
  T.eq(tostring(a:t()), "tensor([[0, 3],\n        [1, 4],\n        [2, 5]], shape={3, 2})")
  T.eq(tostring(a:narrow(2, 2, 2)), "tensor([[1, 2],\n        [4, 5]], shape={2, 2})")
  T.eq(tostring(dl.tensor({1, 2}):expand(2, 2)), "tensor([[1, 2],\n        [1, 2]], shape={2, 2})")
  T.eq(tostring(a[2]), "tensor([3, 4, 5], shape={3})")
  T.eq(tostring(a:select(2, 3)[1]), "tensor(2, shape={})")
end)

T.case("summarised and wrapped", function()
  local s = tostring(dl.arange(2000):view(2, 1000))
  T.eq(s, "tensor([[   0,    1,    2,  ...,  997,  998,  999],\n" ..
          "        [1000, 1001, 1002,  ..., 1997, 1998, 1999]], shape={2, 1000})")
  -- a long row wraps at 80 columns, and so does the suffix
  local w = tostring(dl.arange(40, {dtype = dl.float64}))
  for line in w:gmatch("[^\n]+") do T.truthy(#line <= 80, "line too long: " .. line) end
  T.truthy(w:find("\n       shape={40}, dtype=dl.float64%)$"), w)
  -- a huge tensor prints quickly and only its corners
  local big = dl.zeros(3000, 3000)
  local t0 = dl.clock()
  local b = tostring(big)
  T.truthy(dl.clock() - t0 < 0.5, "summarised printing is slow")
  T.eq(b, "tensor([[0., 0., 0.,  ..., 0., 0., 0.],\n" ..
          "        [0., 0., 0.,  ..., 0., 0., 0.],\n" ..
          "        [0., 0., 0.,  ..., 0., 0., 0.],\n" ..
          "        ...,\n" ..
          "        [0., 0., 0.,  ..., 0., 0., 0.],\n" ..
          "        [0., 0., 0.,  ..., 0., 0., 0.],\n" ..
          "        [0., 0., 0.,  ..., 0., 0., 0.]], shape={3000, 3000})")
end)

T.case("closed tensors and print()", function()
  local x = dl.ones(2)
  do local y <close> = x end
  T.eq(tostring(x), "tensor(<closed>)")
  T.eq(T.fmt(dl.tensor({1})), "tensor([1], shape={1})")
end)

T.case("set_printoptions", function()
  local x = dl.tensor({1.23456789, 2.5})
  dl.set_printoptions{precision = 2}
  T.eq(strip(tostring(x)), "tensor([1.23, 2.50])")
  dl.set_printoptions{precision = 4, sci_mode = true}
  T.eq(strip(tostring(x)), "tensor([1.2346e+00, 2.5000e+00])")
  dl.set_printoptions{sci_mode = false}
  -- the width stays the one scientific notation needed, as in PyTorch
  T.eq(strip(tostring(dl.tensor({1e-5, 1}))), "tensor([    0.0000,     1.0000])")
  T.eq(dl.get_printoptions().sci_mode, false)
  dl.set_printoptions{threshold = 5, edgeitems = 2}
  T.eq(strip(tostring(dl.arange(10))), "tensor([0, 1,  ..., 8, 9])")
  T.eq(dl.get_printoptions().sci_mode, nil) -- reset when not given, as in PyTorch
  dl.set_printoptions{profile = "full"}
  T.eq(dl.get_printoptions().threshold, math.huge)
  T.truthy(strip(tostring(dl.arange(1001))):find(" 998,  999, 1000])", 1, true), "no summarising")
  dl.set_printoptions{profile = "default", linewidth = 20}
  T.eq(tostring(dl.arange(6)), "tensor([0, 1, 2, 3,\n        4, 5],\n       shape={6})")
  dl.set_printoptions{profile = "default"}
  local o = dl.get_printoptions()
  T.eq(o.precision, 4); T.eq(o.threshold, 1000); T.eq(o.edgeitems, 3); T.eq(o.linewidth, 80)
end)

T.case("set_printoptions bad input", function()
  T.raises(function() dl.set_printoptions{precison = 2} end, "set_printoptions: unknown option 'precison'")
  T.raises(function() dl.set_printoptions{precision = -1} end, "precision must be in 0..30")
  T.raises(function() dl.set_printoptions{edgeitems = 0} end, "edgeitems must be in")
  T.raises(function() dl.set_printoptions{linewidth = 0} end, "linewidth must be positive")
  T.raises(function() dl.set_printoptions{threshold = -1} end, "threshold must be a non-negative")
  T.raises(function() dl.set_printoptions{threshold = "x"} end, "must be a number")
  T.raises(function() dl.set_printoptions{sci_mode = 1} end, "sci_mode must be a boolean")
  T.raises(function() dl.set_printoptions{profile = "tiny"} end, "unknown profile 'tiny'")
  T.raises(function() dl.set_printoptions(3) end, "options table expected")
  T.eq(dl.get_printoptions().precision, 4, "failed calls change nothing")
end)

-- Each case: a tensor made in Python, a view applied on both sides, and
-- torch's body text for the default options and for a few option sets.
T.case("agrees with torch's str()", function()
  local r = T.torch([==[
import torch._tensor_str as ts
nan, inf = float('nan'), float('inf')
g = torch.Generator().manual_seed(1)
def rn(*s): return torch.randn(*s, generator=g)
cases = [
  (torch.tensor([1, 2, 3]), 'plain'),
  (torch.tensor([[-1, 20, 300], [4, -5000, 6]]), 'plain'),
  (torch.tensor([[1., 2.], [3., 4.]]), 'plain'),
  (torch.tensor([1.5, -2.25, 0.0]), 'plain'),
  (torch.tensor([1e-5, 1.0, 1000.0]), 'plain'),
  (torch.tensor([1e10, 1.0]), 'plain'),
  (torch.tensor([1.0, 1e4]), 'plain'),
  (torch.tensor([1.0, 999.0]), 'plain'),
  (torch.tensor([1e9]), 'plain'),
  (torch.tensor([0.0001, 0.001]), 'plain'),
  (torch.tensor([0.00009, 0.5]), 'plain'),
  (torch.tensor([-123.456, 0.5, 7.0]), 'plain'),
  (torch.tensor([nan, inf, -inf, 1.5]), 'plain'),
  (torch.tensor([nan, 0.0]), 'plain'),
  (torch.tensor([nan, 2.0, -inf]), 'plain'),
  (torch.tensor([inf, 1e-7]), 'plain'),
  (torch.tensor([0.0, -0.0, 0.0]), 'plain'),
  (torch.tensor([9.99996, 1.5]), 'plain'),
  (torch.tensor([2.5, 3.5, 0.5]), 'plain'),
  (torch.tensor([12345678.5, 1.25]), 'plain'),
  (rn(3, 4) * 100, 'plain'),
  (rn(4, 6), 't'),
  (rn(5, 7), 'narrow'),
  (rn(2, 3, 4), 'plain'),
  (rn(2, 1, 3, 2), 'plain'),
  (rn(60), 'plain'),
  (torch.arange(100.), 'plain'),
  (torch.arange(30.) * 1e6, 'plain'),
  (torch.arange(-50, 50) * 12345, 'plain'),
  (rn(100, 100), 'plain'),
  (rn(100, 100) * 1e-6, 'plain'),
  (rn(10, 20, 30), 'plain'),
  (rn(3, 500), 'plain'),
  (rn(5000), 'plain'),
  (torch.arange(6000).reshape(3, 2000), 'plain'),
  (torch.arange(1200).reshape(10, 10, 12) % 7 == 0, 'plain'),
  (rn(30, 40), 't'),
  (torch.tensor(3.5), 'plain'),
  (torch.tensor(-7), 'plain'),
  (torch.tensor(nan), 'plain'),
  (torch.tensor(True), 'plain'),
  (torch.tensor(1e-8), 'plain'),
  (torch.zeros(0), 'plain'),
  (torch.zeros(2, 0, 3), 'plain'),
  (torch.tensor([True, False, True]), 'plain'),
  (torch.tensor([[-3, 4], [100000, -2]], dtype=torch.int32), 'plain'),
  (torch.tensor([0, 255, 17], dtype=torch.uint8), 'plain'),
  (torch.tensor([1.0, 2.5, 65504.0, 0.001], dtype=torch.float16), 'plain'),
  (torch.tensor([1.0, 3.140625, 100.0], dtype=torch.bfloat16), 'plain'),
  (rn(3, 3).double() * 1e3, 'plain'),
  (torch.tensor([0.1, 0.2, 0.3], dtype=torch.float64), 'plain'),
]
opts = [dict(), dict(precision=2), dict(sci_mode=True), dict(sci_mode=False),
        dict(threshold=5, edgeitems=2), dict(linewidth=40), dict(precision=6, linewidth=120)]
out = []
for x, kind in cases:
    v = x.t() if kind == 't' else x[:, 1:] if kind == 'narrow' else x
    bodies = []
    for o in opts:
        torch.set_printoptions(**o)
        bodies.append("tensor(" + ts._tensor_str(v, 7) + ")")
        torch.set_printoptions(profile='default')
    full = str(v) if v.dtype in (torch.float32, torch.int64, torch.bool) and v.numel() > 0 else None
    out.append(dict(x=x, kind=kind, bodies=bodies, full=full))
emit(out)
]==])
  local opts = {{}, {precision = 2}, {sci_mode = true}, {sci_mode = false},
                {threshold = 5, edgeitems = 2}, {linewidth = 40}, {precision = 6, linewidth = 120}}
  local checked = 0
  for i, c in ipairs(r) do
    local x = T.from_torch(c.x)
    local v = c.kind == "t" and x:t() or c.kind == "narrow" and x:narrow(2, 2, x.shape[2] - 1) or x
    for k, o in ipairs(opts) do
      dl.set_printoptions(o)
      local ok, s = pcall(tostring, v)
      dl.set_printoptions{profile = "default"}
      T.truthy(ok, s)
      local got = strip(s)
      if got ~= c.bodies[k] then
        error(string.format("case %d options %d:\n got %s\nwant %s", i, k, got, c.bodies[k]))
      end
      checked = checked + 1
    end
    -- with the default options and dtype, torch's whole str() matches too
    if c.full then T.eq(strip(tostring(v)), c.full, "case " .. i .. " full str") end
  end
  T.truthy(checked >= 300, "checked " .. checked)
end)

T.done()
