-- test_attention_grad.lua - float64 finite-difference checks (T.gradcheck) of
-- scaled_dot_product_attention's gradients for q, k and v: plain, causal
-- (L = S, L < S, L > S), bool masks with a fully masked row, broadcast float
-- masks, batch dims that broadcast (k, v shared across a dim), an explicit
-- scale, dropout (the seed reset inside the function, so every evaluation
-- draws the same mask), and a sequence longer than one 64-row tile with a
-- ragged last tile; nn.MultiheadAttention's inputs and projection weights
-- through both of its paths (the weights path and the fused one).
local T = require "testlib"
local F = dl.nn.functional

local function leaf(...)
  return T.randn({...}, {dtype = dl.float64}):requires_grad_()
end

local function check(what, qs, ks, vs, opts)
  local q, k, v = leaf(table.unpack(qs)), leaf(table.unpack(ks)), leaf(table.unpack(vs))
  T.gradcheck(function(a, b, c) return F.scaled_dot_product_attention(a, b, c, opts) end,
    {q, k, v}, what)
end

T.case("gradcheck plain", function()
  dl.manual_seed(1)
  check("plain", {2, 2, 3, 4}, {2, 2, 5, 4}, {2, 2, 5, 3})
  check("unbatched", {3, 4}, {5, 4}, {5, 2})
  check("scale", {1, 3, 4}, {1, 5, 4}, {1, 5, 3}, {scale = 0.3})
end)

T.case("gradcheck causal", function()
  dl.manual_seed(2)
  check("causal L=S", {1, 2, 4, 3}, {1, 2, 4, 3}, {1, 2, 4, 3}, {is_causal = true})
  check("causal L<S", {1, 3, 3}, {1, 5, 3}, {1, 5, 2}, {is_causal = true})
  check("causal L>S", {1, 5, 3}, {1, 3, 3}, {1, 3, 2}, {is_causal = true})
end)

T.case("gradcheck masks", function()
  dl.manual_seed(3)
  local m = dl.tensor({{true, false, true, true, false}, {false, false, false, false, false},
    {true, true, false, true, true}})
  check("bool mask with a dead row", {2, 3, 4}, {2, 5, 4}, {2, 5, 3}, {attn_mask = m})
  local fm = dl.randn({2, 1, 3, 5}, {dtype = dl.float64})
  check("float mask (N,1,L,S)", {2, 2, 3, 4}, {2, 2, 5, 4}, {2, 2, 5, 3}, {attn_mask = fm})
  check("float mask (S)", {2, 3, 4}, {2, 5, 4}, {2, 5, 3},
    {attn_mask = dl.tensor({0.5, -1, 0, 2, -math.huge}, {dtype = dl.float64})})
end)

T.case("gradcheck broadcast batch", function()
  dl.manual_seed(4)
  check("k, v shared over heads", {2, 3, 3, 4}, {2, 1, 5, 4}, {1, 5, 3})
  check("q shared over batch", {1, 3, 4}, {2, 5, 4}, {2, 5, 3})
end)

T.case("gradcheck dropout", function()
  dl.manual_seed(5)
  local q, k, v = leaf(2, 4, 3), leaf(2, 6, 3), leaf(2, 6, 2)
  T.gradcheck(function(a, b, c)
    dl.manual_seed(42)
    return F.scaled_dot_product_attention(a, b, c, {dropout_p = 0.4})
  end, {q, k, v}, "dropout")
end)

T.case("gradcheck across tiles", function()
  dl.manual_seed(6)
  check("long causal", {1, 70, 2}, {1, 70, 2}, {1, 70, 1}, {is_causal = true})
end)

T.case("gradcheck MultiheadAttention", function()
  dl.manual_seed(7)
  for _, nw in ipairs({true, false}) do
    local m = dl.nn.MultiheadAttention(4, 2, {dtype = dl.float64, add_bias_kv = true})
    local q, k, v = leaf(3, 2, 4), leaf(5, 2, 4), leaf(5, 2, 4)
    local pad = dl.tensor({{false, false, true, false, false}, {false, false, false, false, true}})
    T.gradcheck(function(a, b, c)
      local out, w = m(a, b, c, {key_padding_mask = pad, need_weights = nw})
      return w and out + w:sum() or out
    end, {q, k, v, m.in_proj_weight, m.in_proj_bias, m.out_proj.weight, m.bias_k},
      "MultiheadAttention need_weights=" .. tostring(nw))
  end
end)

T.done()
