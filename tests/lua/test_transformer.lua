-- test_transformer.lua - the Transformer layers beyond the PyTorch
-- comparison: generate_square_subsequent_mask, the state_dict keys of a
-- decoder, bias=false (equal to bias=true with zero biases, and no bias
-- keys), the encoder's layers being independent copies, an activation given
-- as a module, dropout only in training mode, is_causal equal to the
-- explicit mask, Module:deepcopy, and bad input.
local T = require "testlib"
local nn = dl.nn

T.case("generate_square_subsequent_mask", function()
  local m = nn.Transformer.generate_square_subsequent_mask(4)
  local inf = -math.huge
  T.tensor_eq(m, {{0, inf, inf, inf}, {0, 0, inf, inf}, {0, 0, 0, inf}, {0, 0, 0, 0}})
  T.eq(m.dtype, dl.float32)
  T.eq(nn.Transformer.generate_square_subsequent_mask(2, {dtype = dl.float64}).dtype, dl.float64)
  T.shape_eq(nn.Transformer.generate_square_subsequent_mask(0), {0, 0})
end)

T.case("decoder layer state_dict keys", function()
  local l = nn.TransformerDecoderLayer(8, 2, {dim_feedforward = 16})
  local keys = {}
  for k in pairs(l:state_dict()) do keys[#keys + 1] = k end
  T.eq(table.concat(keys, " "), "self_attn.in_proj_weight self_attn.in_proj_bias self_attn.out_proj.weight " ..
    "self_attn.out_proj.bias multihead_attn.in_proj_weight multihead_attn.in_proj_bias " ..
    "multihead_attn.out_proj.weight multihead_attn.out_proj.bias linear1.weight linear1.bias linear2.weight " ..
    "linear2.bias norm1.weight norm1.bias norm2.weight norm2.bias norm3.weight norm3.bias")
end)

T.case("bias=false equals zero biases", function()
  local a = nn.TransformerEncoderLayer(8, 2, {dim_feedforward = 16, dropout = 0, bias = false})
  for k in pairs(a:state_dict()) do T.truthy(not k:match("bias"), "no bias keys: " .. k) end
  local b = nn.TransformerEncoderLayer(8, 2, {dim_feedforward = 16, dropout = 0})
  local sd = a:state_dict()
  for k, v in pairs(b:state_dict()) do
    if k:match("bias") then sd[k] = dl.zeros(v.shape) end
  end
  b:load_state_dict(sd)
  local x = T.randn(5, 3, 8, {seed = 1})
  T.close(a(x), b(x), 1e-6)
end)

T.case("the encoder's layers are copies; deepcopy", function()
  local l = nn.TransformerEncoderLayer(8, 2, {dim_feedforward = 16})
  local e = nn.TransformerEncoder(l, 3)
  T.eq(#e.layers, 3)
  dl.no_grad(function() e.layers[1].linear1.weight:fill_(0) end)
  T.truthy(e.layers[2].linear1.weight:abs():sum():item() > 0, "layer 2 has its own weights")
  T.truthy(l.linear1.weight:abs():sum():item() > 0, "the template is untouched")
  T.truthy(e.layers[2].linear1.weight.requires_grad, "copies are parameters")
  local n = 0
  for _ in pairs(e:state_dict()) do n = n + 1 end
  T.eq(n, 3 * 12)
end)

T.case("activation module, dropout in training only, is_causal", function()
  local l = nn.TransformerEncoderLayer(8, 2, {dim_feedforward = 16, activation = nn.GELU(), dropout = 0.3})
  local f = nn.TransformerEncoderLayer(8, 2, {dim_feedforward = 16, activation = "gelu", dropout = 0.3})
  f:load_state_dict(l:state_dict())
  local x = T.randn(6, 2, 8, {seed = 2})
  l:eval()
  f:eval()
  T.close(l(x), f(x), 1e-6)
  T.close(l(x, {is_causal = true}), l(x, {src_mask = nn.Transformer.generate_square_subsequent_mask(6)}), 1e-5)
  local a, b = l(x), l(x)
  T.same_bits(a, b, "evaluation is deterministic")
  l:train()
  T.truthy((l(x) - a):abs():max():item() > 1e-3, "dropout acts in training")
end)

T.case("bad input", function()
  T.raises(function() nn.TransformerEncoderLayer(10, 3) end, "embed_dim (10) must be divisible by num_heads (3)")
  T.raises(function() nn.TransformerEncoderLayer(8, 2, {activation = "tanh"}) end,
    "activation should be relu/gelu, not tanh")
  T.raises(function() nn.TransformerEncoderLayer(8, 2, {activation = 3}) end, "activation must be")
  T.raises(function() nn.TransformerEncoderLayer(8, 2, {dim_feedforwrd = 3}) end, "unknown option")
  T.raises(function() nn.TransformerEncoder(nn.Linear(2, 2), 2) end,
    "the layer must be a TransformerEncoderLayer, got Linear")
  local l = nn.TransformerEncoderLayer(8, 2, {dim_feedforward = 16})
  T.raises(function() l(dl.randn(5, 3, 6)) end, "was expecting embedding dimension of 8, but got 6")
  T.raises(function() l(dl.randn(5, 3, 8), {src_key_padding_mask = dl.zeros(3, 4):bool()}) end,
    "key_padding_mask")
  T.raises(function() l(dl.randn(5, 3, 8), {src_mask = dl.zeros(4, 4)}) end, "attn_mask")
  T.raises(function() l("x") end, "src must be a tensor")
  local d = nn.TransformerDecoderLayer(8, 2, {dim_feedforward = 16})
  T.raises(function() d(dl.randn(5, 3, 8)) end, "memory must be a tensor")
  T.raises(function() d(dl.randn(5, 3, 8), dl.randn(4, 2, 8)) end, "one batch size")
  local t = nn.Transformer({d_model = 8, nhead = 2, num_encoder_layers = 1, num_decoder_layers = 1,
    dim_feedforward = 16})
  T.raises(function() t(dl.randn(5, 3, 8), dl.randn(4, 2, 8)) end, "the batch number of src and tgt must be equal")
  T.raises(function() t(dl.randn(5, 3, 8), dl.randn(4, 3, 6)) end, "must be equal to d_model")
  T.shape_eq(t(dl.randn(5, 3, 8), dl.randn(4, 3, 8)), {4, 3, 8}) -- still healthy
end)

T.done()
