-- test_transformer_grad.lua - float64 finite-difference checks (T.gradcheck)
-- through a TransformerEncoderLayer (post- and pre-norm, with a key padding
-- mask and causal attention) and a TransformerDecoderLayer (self- and
-- cross-attention with masks): the inputs and a few of the parameters.
local T = require "testlib"
local nn = dl.nn

local function leaf(...)
  return T.randn({...}, {dtype = dl.float64}):requires_grad_()
end

T.case("gradcheck TransformerEncoderLayer", function()
  dl.manual_seed(1)
  for _, nf in ipairs({false, true}) do
    local l = nn.TransformerEncoderLayer(4, 2, {dim_feedforward = 6, dropout = 0, norm_first = nf,
      activation = "gelu", dtype = dl.float64})
    local x = leaf(3, 2, 4)
    local pad = dl.tensor({{false, false, true}, {false, false, false}})
    T.gradcheck(function(a) return l(a, {src_key_padding_mask = pad, is_causal = true}) end,
      {x, l.self_attn.in_proj_weight, l.linear1.weight, l.norm1.weight}, "encoder layer norm_first=" .. tostring(nf))
  end
end)

T.case("gradcheck TransformerDecoderLayer", function()
  dl.manual_seed(2)
  local l = nn.TransformerDecoderLayer(4, 2, {dim_feedforward = 6, dropout = 0, dtype = dl.float64})
  local tgt, mem = leaf(3, 2, 4), leaf(4, 2, 4)
  local mmask = dl.randn({3, 4}, {dtype = dl.float64})
  T.gradcheck(function(a, b) return l(a, b, {tgt_is_causal = true, memory_mask = mmask}) end,
    {tgt, mem, l.multihead_attn.in_proj_weight, l.linear2.bias}, "decoder layer")
end)

T.done()
