-- test_attention_torch.lua - scaled_dot_product_attention against a float64
-- reference built from PyTorch ops (PyTorch 1.13 has no public SDPA): the
-- softmax of scale * q k^T with the mask, then @ v, with the 2.x conventions
-- (bool mask true = takes part, float mask added, is_causal the top-left
-- lower triangle, fully masked rows give 0).  Outputs and the gradients of
-- q, k and v (torch.autograd.grad with a random grad_output) for: plain and
-- causal attention with L < S, L = S, L > S; bool and float masks of several
-- broadcast shapes (with fully masked rows); batch dims that broadcast;
-- unbatched 2-D inputs; an explicit scale; head-transposed (non-contiguous)
-- inputs as multi-head attention passes them; long sequences spanning
-- several 64-row tiles with a ragged last tile; float32 and float64, and
-- bfloat16 (computed in float32 on the CPU).
local T = require "testlib"
local F = dl.nn.functional

local data = T.torch([==[
NEG = float("-inf")

def ref(q, k, v, mask, causal, scale):
    q, k, v = q.double(), k.double(), v.double()
    L, S = q.shape[-2], k.shape[-2]
    sc = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = (q @ k.transpose(-2, -1)) * sc
    allowed = torch.ones(L, S, dtype=torch.bool)
    if causal:
        allowed = allowed.tril()
    if mask is not None and mask.dtype == torch.bool:
        allowed = allowed & mask
    s = s.masked_fill(~allowed, NEG)
    if mask is not None and mask.dtype != torch.bool:
        s = s + mask.double()
    dead = torch.isneginf(s).all(-1, keepdim=True)
    w = torch.softmax(s.masked_fill(dead, 0.0), -1).masked_fill(dead, 0.0)
    return w @ v

def case(name, qs, ks, vs, dt=torch.float32, mask=None, causal=False, scale=None, tr=False):
    # tr: q, k, v are drawn as (N, L, H, E) and seen as (N, H, L, E)
    def draw(shape):
        if tr:
            n, h, l, e = shape
            base = mk((n, l, h, e), dt)
            return base, base.transpose(1, 2)
        base = mk(shape, dt)
        return base, base
    (qb, q), (kb, k), (vb, v) = draw(qs), draw(ks), draw(vs)
    lq, lk, lv = leaf(q), leaf(k), leaf(v)
    y = ref(lq, lk, lv, mask, causal, scale)
    gy = mk(y.shape, torch.float64)
    gq, gk, gv = torch.autograd.grad(y, (lq, lk, lv), gy)
    add(op="sdpa", name=name, q=qb, k=kb, v=vb, tr=tr, mask=mask, causal=causal, scale=scale,
        y=y.to(dt), gy=gy.to(dt), gq=gq.to(dt), gk=gk.to(dt), gv=gv.to(dt))

def bool_mask(shape, p=0.3):
    return torch.rand(shape) > p

for dt in (torch.float32, torch.float64):
    case("plain L<S", (2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 6), dt)
    case("plain L>S", (2, 2, 9, 4), (2, 2, 3, 4), (2, 2, 3, 5), dt)
    case("causal L=S", (2, 3, 6, 8), (2, 3, 6, 8), (2, 3, 6, 8), dt, causal=True)
    case("causal L<S", (1, 2, 4, 8), (1, 2, 7, 8), (1, 2, 7, 3), dt, causal=True)
    case("causal L>S", (1, 2, 7, 8), (1, 2, 4, 8), (1, 2, 4, 3), dt, causal=True)
    m = bool_mask((5, 7)); m[1] = False  # query row 2 sees no key
    case("bool mask (L,S)", (2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 6), dt, mask=m)
    case("bool mask (N,1,1,S)", (2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 6), dt,
         mask=bool_mask((2, 1, 1, 7), 0.2))
    case("bool mask (S)", (2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 6), dt, mask=bool_mask((7,), 0.2))
    case("float mask (N,1,L,S)", (2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 6), dt,
         mask=mk((2, 1, 5, 7), dt))
    fm = mk((3, 5, 7), dt); fm[0, 2] = NEG; fm[1, :, 3] = NEG
    case("float mask (H,L,S) with -inf", (2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 6), dt, mask=fm)
    case("batch broadcast", (2, 3, 5, 8), (1, 3, 7, 8), (3, 7, 6), dt)
    case("unbatched", (5, 8), (7, 8), (7, 4), dt)
    case("scale", (2, 2, 5, 8), (2, 2, 7, 8), (2, 2, 7, 6), dt, scale=0.7)
    case("head-transposed", (2, 4, 6, 8), (2, 4, 9, 8), (2, 4, 9, 8), dt, tr=True)

case("long", (1, 2, 200, 16), (1, 2, 200, 16), (1, 2, 200, 16))
case("long causal", (1, 2, 200, 16), (1, 2, 200, 16), (1, 2, 200, 16), causal=True)
case("long causal L<S", (1, 1, 70, 16), (1, 1, 150, 16), (1, 1, 150, 16), causal=True)
case("long bool mask", (2, 1, 130, 8), (2, 1, 140, 8), (2, 1, 140, 8), mask=bool_mask((130, 140)))
case("long float mask", (1, 2, 150, 8), (1, 2, 66, 8), (1, 2, 66, 8), mask=mk((150, 66), torch.float32))
case("bfloat16", (2, 2, 5, 8), (2, 2, 7, 8), (2, 2, 7, 6), torch.bfloat16, causal=True)
emit(cases)
]==])

-- float32 through two tile products and an online softmax: float32 rounding
-- of sums over E and S terms (relative to the largest terms)
local function tol(dt)
  if dt == "float64" then return 1e-10, 1e-11 end
  if dt == "bfloat16" then return 2e-2, 2e-2 end
  return 1e-4, 2e-5
end

T.oracle_cases(data, tol, {"sdpa"}, function(c, rtol, atol, msg)
  msg = msg .. " " .. c.name
  local function get(rec)
    local t = T.from_torch(rec)
    if c.tr then t = t:transpose(2, 3) end
    return t:requires_grad_()
  end
  local q, k, v = get(c.q), get(c.k), get(c.v)
  local opts = {is_causal = c.causal or nil, scale = c.scale}
  if c.mask then opts.attn_mask = T.from_torch(c.mask) end
  local y = F.scaled_dot_product_attention(q, k, v, opts)
  T.match_torch(y, c.y, rtol, atol, msg .. " out")
  local gq, gk, gv = table.unpack(dl.autograd.grad(y, {q, k, v}, {grad_outputs = T.from_torch(c.gy)}))
  T.match_torch(gq, c.gq, rtol, atol, msg .. " grad q")
  T.match_torch(gk, c.gk, rtol, atol, msg .. " grad k")
  T.match_torch(gv, c.gv, rtol, atol, msg .. " grad v")
end)

T.done()
