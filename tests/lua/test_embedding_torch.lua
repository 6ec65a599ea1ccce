-- test_embedding_torch.lua - embedding and embedding_bag against PyTorch
-- with the same weights: outputs and weight gradients (torch.autograd.grad
-- with a random grad_output), per_sample_weights' gradients, max_norm's
-- renormalised weight; 1-D, 2-D and 3-D ids (also transposed, and int32),
-- repeated ids, padding_idx (also negative), scale_grad_by_freq, a
-- transposed weight; every EmbeddingBag mode with offsets (empty bags
-- included), include_last_offset, 2-D input and per_sample_weights;
-- float32, float64 and bfloat16 weights; the modules with torch's
-- state_dict, and weight tying (one parameter as embedding and output head,
-- one summed gradient).  PyTorch's ids, offsets and padding_idx are 0-based:
-- the Lua side adds one.
local T = require "testlib"
local F = dl.nn.functional

local data = T.torch([==[
import torch.nn.functional as F
F64 = torch.float64

def ids_of(shape, V, lo=0):
    return torch.randint(lo, V, shape)

V, D = 9, 5
# --- embedding: ids shape, view of ids, padding_idx, scale_grad_by_freq, max_norm, weight view
EMB = [((7,), "", None, False, None, ""),
       ((3, 4), "", 2, False, None, ""),
       ((2, 3, 4), "", None, True, None, ""),
       ((4, 3), "T", -1, True, None, ""),
       ((6,), "", None, False, 1.0, ""),
       ((2, 5), "", 0, False, 1.5, "T"),
       ((0,), "", None, False, None, "")]
for dt in (torch.float32, torch.float64, torch.bfloat16):
    for shape, v, pad, freq, mx, wv in EMB:
        ids = ids_of(shape, V)
        base = torch.randn(V, D, dtype=F64).to(dt) if wv != "T" else torch.randn(D, V, dtype=F64).to(dt)
        w = leaf(base.t() if wv == "T" else base)
        x = view(ids, v)
        y = F.embedding(x, w, padding_idx=pad, max_norm=mx, scale_grad_by_freq=freq)
        gy = torch.randn(y.shape, dtype=F64).to(dt)
        g = torch.autograd.grad(y, w, gy)[0] if y.numel() > 0 else None
        add(op="embedding", ids=ids, view=v, w=base, wview=wv, pad=pad, freq=freq, max_norm=mx,
            y=y, gy=gy, gw=g, w_after=w.detach())

# --- embedding_bag: input shape, offsets, mode, per_sample_weights, padding_idx, include_last_offset
BAG = [((8,), [0, 3, 3, 6], "sum", False, None, False),
       ((8,), [0, 3, 3, 6], "mean", False, None, False),
       ((8,), [0, 3, 3, 6], "max", False, None, False),
       ((8,), [0, 2, 5], "sum", True, None, False),
       ((8,), [0, 2, 5, 8], "mean", False, 1, True),
       ((8,), [0, 4], "max", False, 4, False),
       ((3, 4), None, "sum", True, 2, False),
       ((3, 4), None, "mean", False, None, False),
       ((3, 4), None, "max", False, None, False)]
for dt in (torch.float32, torch.float64):
    for shape, offs, mode, with_psw, pad, last in BAG:
        ids = ids_of(shape, V)
        if pad is not None:
            ids.view(-1)[1] = pad
        w = leaf(torch.randn(V, D, dtype=F64).to(dt))
        offsets = torch.tensor(offs) if offs is not None else None
        psw = leaf(torch.randn(shape, dtype=F64).to(dt)) if with_psw else None
        y = F.embedding_bag(ids, w, offsets, mode=mode, per_sample_weights=psw, padding_idx=pad,
                            include_last_offset=last)
        gy = torch.randn(y.shape, dtype=F64).to(dt)
        wanted = [w] + ([psw] if with_psw else [])
        g = torch.autograd.grad(y, wanted, gy)
        add(op="embedding_bag", ids=ids, offsets=offsets, mode=mode, psw=psw, pad=pad, last=last,
            w=w, y=y, gy=gy, gw=g[0], gpsw=g[1] if with_psw else None)
# scale_grad_by_freq and max_norm in bags.  torch's CPU embedding_bag divides
# by the wrong count (pytorch/pytorch#190063, fixed after 1.13): the reference
# is F.embedding (which counts right) summed or averaged per bag.
for mode in ("sum", "mean"):
    ids = torch.tensor([1, 1, 2, 1, 3, 2])
    w = leaf(torch.randn(V, D, dtype=F64).to(torch.float32))
    offsets = torch.tensor([0, 2, 4])
    e = F.embedding(ids, w, scale_grad_by_freq=True, max_norm=1.0)
    y = torch.stack([getattr(e[i:i + 2], mode)(0) for i in (0, 2, 4)])
    gy = torch.randn(y.shape)
    g = torch.autograd.grad(y, w, gy)[0]
    add(op="embedding_bag", ids=ids, offsets=offsets, mode=mode, psw=None, pad=None, last=False,
        freq=True, max_norm=1.0, w=w, y=y, gy=gy, gw=g, gpsw=None, w_after=w.detach())
emit(cases)
]==])

local function one_based(rec)
  return T.from_torch(rec) + 1
end

-- torch's padding_idx as dlua's: 1-based, a negative one as it is
local function pad_of(p)
  if p == nil then return nil end
  return p >= 0 and p + 1 or p
end

T.oracle_cases(data, T.torch_tol, {"embedding", "embedding_bag"}, function(c, rtol, atol, msg)
  local srtol, satol = T.torch_tol(c.y.dtype, "sum")
  if c.op == "embedding" then
    local w = T.from_torch_view(c.w, c.wview == "T" and "t" or ""):requires_grad_()
    local ids = T.torch_view(one_based(c.ids), c.view)
    if c.view == "" and #c.ids.shape == 2 then ids = ids:int() end -- int32 ids work too
    local y = F.embedding(ids, w, {padding_idx = pad_of(c.pad), max_norm = c.max_norm,
      scale_grad_by_freq = c.freq})
    T.match_torch(y, c.y, rtol, atol, msg .. " forward")
    if c.max_norm then T.match_torch(w:detach(), c.w_after, rtol, atol, msg .. " renormalised weight") end
    if c.gw then
      local g = dl.autograd.grad(y, {w}, {grad_outputs = T.from_torch(c.gy)})
      T.match_torch(g[1], c.gw, srtol, satol, msg .. " grad weight")
    end
  else
    local w = T.from_torch(c.w):requires_grad_()
    local psw = c.psw and T.from_torch(c.psw):requires_grad_() or nil
    local y = F.embedding_bag(one_based(c.ids), w, c.offsets and one_based(c.offsets) or nil,
      {mode = c.mode, per_sample_weights = psw, padding_idx = pad_of(c.pad),
       include_last_offset = c.last, scale_grad_by_freq = c.freq, max_norm = c.max_norm})
    T.match_torch(y, c.y, srtol, satol, msg .. " forward")
    if c.w_after then T.match_torch(w:detach(), c.w_after, rtol, atol, msg .. " renormalised weight") end
    local g = dl.autograd.grad(y, psw and {w, psw} or {w}, {grad_outputs = T.from_torch(c.gy)})
    T.match_torch(g[1], c.gw, srtol, satol, msg .. " grad weight")
    if psw then T.match_torch(g[2], c.gpsw, srtol, satol, msg .. " grad per_sample_weights") end
  end
end)

-- --- modules with torch's weights, and weight tying ---------------------------------------

local mod = T.torch([==[
emb = torch.nn.Embedding(12, 6, padding_idx=3)
bag = torch.nn.EmbeddingBag(12, 6, mode="sum", padding_idx=0)
ids = torch.randint(0, 12, (2, 5))
ids[0, 1] = 3
h = emb(ids)
logits = h @ emb.weight.t()          # the embedding as the output head (tied)
target = torch.randint(0, 12, (10,))
loss = torch.nn.functional.cross_entropy(logits.reshape(10, 12), target)
loss.backward()
bids = torch.tensor([0, 4, 5, 0, 7])
boff = torch.tensor([0, 2])
by = bag(bids, boff)
by.sum().backward()
emit(dict(emb_sd={k: v for k, v in emb.state_dict().items()}, bag_sd={k: v for k, v in bag.state_dict().items()},
          emb_repr=repr(emb), bag_repr=repr(bag), ids=ids, target=target, loss=loss.detach(),
          emb_grad=emb.weight.grad, bids=bids, boff=boff, by=by.detach(), bag_grad=bag.weight.grad))
]==])

local function load(m, sd)
  local t = {}
  for k, v in pairs(sd) do t[k] = T.from_torch(v) end
  m:load_state_dict(t)
end

T.case("nn.Embedding as input and tied output head: loss and one summed gradient vs torch", function()
  local emb = dl.nn.Embedding(12, 6, {padding_idx = 4})
  load(emb, mod.emb_sd)
  T.eq(tostring(emb), mod.emb_repr:gsub("padding_idx=3", "padding_idx=4"), "repr (1-based padding_idx)")
  local h = emb(one_based(mod.ids))
  local logits = dl.matmul(h, emb.weight:t())
  local loss = F.cross_entropy(logits:reshape(10, 12), one_based(mod.target))
  loss:backward()
  local rtol, atol = T.torch_tol("float32", "sum")
  T.match_torch(loss, mod.loss, rtol, atol, "loss")
  T.match_torch(emb.weight.grad, mod.emb_grad, rtol, atol, "tied weight gradient")
end)

T.case("nn.EmbeddingBag with torch's state_dict", function()
  local bag = dl.nn.EmbeddingBag(12, 6, {mode = "sum", padding_idx = 1})
  load(bag, mod.bag_sd)
  T.eq(tostring(bag), mod.bag_repr:gsub("padding_idx=0", "padding_idx=1"), "repr")
  local y = bag(one_based(mod.bids), one_based(mod.boff))
  y:sum():backward()
  T.match_torch(y, mod.by, 1e-5, 1e-6, "forward")
  T.match_torch(bag.weight.grad, mod.bag_grad, 1e-5, 1e-6, "grad weight")
end)

T.done()
