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

# --- nn.MultiheadAttention with copied weights ----------------------------------------------
def mha(name, E, H, L, S, N, dt=torch.float32, ctor={}, fwd={}, kv=(None, None), self_attn=False,
        causal=False):
    m = torch.nn.MultiheadAttention(E, H, **ctor).to(dt)
    for prm in m.parameters():  # biases are zero-initialised; make them count
        with torch.no_grad():
            prm.copy_(torch.randn_like(prm) * 0.3)
    bf = ctor.get("batch_first", False)
    kd, vd = kv[0] or E, kv[1] or E
    def shp(n, d):
        if N is None:
            return (n, d)
        return (N, n, d) if bf else (n, N, d)
    q = leaf(mk(shp(L, E), dt))
    k = q if self_attn else leaf(mk(shp(S, kd), dt))
    v = q if self_attn else leaf(mk(shp(S, vd), dt))
    kw = dict(fwd)
    if causal:
        kw["attn_mask"] = torch.triu(torch.full((L, S), NEG, dtype=dt), 1)
    out, w = m(q, k, v, **kw)
    gy = mk(out.shape, dt)
    loss = (out * gy).sum()
    gw = None
    if w is not None:
        gw = mk(w.shape, dt)
        loss = loss + (w * gw).sum()
    inputs = [q] if self_attn else [q, k, v]
    names = [n for n, _ in m.named_parameters()]
    grads = torch.autograd.grad(loss, inputs + list(m.parameters()))
    add(op="mha", name=name, E=E, H=H, ctor=ctor, self_attn=self_attn, causal=causal,
        fwd={k2: v2 for k2, v2 in fwd.items()}, sd=dict(m.state_dict()),
        q=q, k=k, v=v, y=out, w=w, gy=gy, gw=gw,
        ginputs=list(grads[:len(inputs)]), gparams=dict(zip(names, grads[len(inputs):])))

for dt in (torch.float32, torch.float64):
    mha("self-attention, weights", 8, 2, 5, 5, 3, dt, self_attn=True)
    mha("cross, batch_first, no weights", 8, 4, 4, 6, 2, dt, ctor=dict(batch_first=True),
        fwd=dict(need_weights=False))
    mha("kdim vdim, no bias", 8, 2, 5, 7, 2, dt, ctor=dict(kdim=6, vdim=4, bias=False), kv=(6, 4))
    kpm = torch.zeros(2, 7, dtype=torch.bool); kpm[0, 5:] = True; kpm[1, 0] = True
    am = torch.rand(5, 7) > 0.8; am[:, 0] = False; am[:, 1] = False
    mha("bias_kv, zero_attn, masks", 8, 2, 5, 7, 2, dt,
        ctor=dict(add_bias_kv=True, add_zero_attn=True), fwd=dict(key_padding_mask=kpm, attn_mask=am))
    fm = mk((2 * 4, 5, 7), dt)
    for nw in (True, False):
        mha("bool kpm, 3D float mask, need_weights=%s" % nw, 16, 4, 5, 7, 2, dt,
            fwd=dict(key_padding_mask=kpm, attn_mask=fm, need_weights=nw, average_attn_weights=False))
    mha("causal", 8, 2, 6, 6, 3, dt, self_attn=True, causal=True, fwd=dict(need_weights=False))
    mha("causal with padding", 8, 2, 6, 6, 2, dt, causal=True,
        fwd=dict(key_padding_mask=torch.tensor([[False] * 5 + [True], [False] * 6])))
    mha("unbatched", 8, 2, 5, 7, None, dt, fwd=dict(key_padding_mask=torch.tensor([False] * 6 + [True])))
emit(cases)
]==])

-- float32 through two tile products and an online softmax: float32 rounding
-- of sums over E and S terms (relative to the largest terms)
local function tol(dt)
  if dt == "float64" then return 1e-10, 1e-11 end
  if dt == "bfloat16" then return 2e-2, 2e-2 end
  return 1e-4, 2e-5
end

-- One nn.MultiheadAttention case: the module built with the case's options,
-- PyTorch's weights loaded, output, weights and every gradient compared.
local function run_mha(c, rtol, atol, msg)
  local ctor = {}
  for k, v in pairs(c.ctor) do ctor[k] = v end
  ctor.dtype = c.y.dtype
  local m = dl.nn.MultiheadAttention(c.E, c.H, ctor)
  local sd = {}
  for k, v in pairs(c.sd) do sd[k] = T.from_torch(v) end
  m:load_state_dict(sd)
  local q = T.from_torch(c.q):requires_grad_()
  local k = c.self_attn and q or T.from_torch(c.k):requires_grad_()
  local v = c.self_attn and q or T.from_torch(c.v):requires_grad_()
  local opts = {}
  for key, val in pairs(c.fwd) do opts[key] = type(val) == "table" and T.from_torch(val) or val end
  if c.causal then opts.is_causal = true end
  local y, w = m(q, k, v, opts)
  T.match_torch(y, c.y, rtol, atol, msg .. " out")
  local loss = (y * T.from_torch(c.gy)):sum()
  if c.w then
    T.match_torch(w, c.w, rtol, atol, msg .. " weights")
    loss = loss + (w * T.from_torch(c.gw)):sum()
  else
    T.eq(w, nil, msg .. ": no weights")
  end
  local inputs = c.self_attn and {q} or {q, k, v}
  local names, wanted = {}, {}
  for _, x in ipairs(inputs) do wanted[#wanted + 1] = x end
  for name, p in m:named_parameters() do
    names[#names + 1] = name
    wanted[#wanted + 1] = p
  end
  local g = dl.autograd.grad(loss, wanted)
  for i = 1, #inputs do T.match_torch(g[i], c.ginputs[i], rtol, atol, msg .. " grad input " .. i) end
  for i, name in ipairs(names) do
    T.match_torch(g[#inputs + i], c.gparams[name], rtol, atol, msg .. " grad " .. name)
  end
end

T.oracle_cases(data, tol, {"sdpa", "mha"}, function(c, rtol, atol, msg)
  msg = msg .. " " .. c.name
  if c.op == "mha" then return run_mha(c, rtol, atol, msg) end
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
