-- dl.nn Transformer layers, PyTorch's (2.x) in names, parameter layouts and
-- state_dict keys, so weights load from PyTorch checkpoints:
--
--   TransformerEncoderLayer(d_model, nhead, {dim_feedforward=2048, dropout=0.1,
--       activation="relu"|"gelu"|function|module, layer_norm_eps=1e-5,
--       batch_first=false, norm_first=false, bias=true, dtype=, device=})
--     keys: self_attn.*, linear1.*, linear2.*, norm1.*, norm2.*
--     layer(src, {src_mask=, src_key_padding_mask=, is_causal=false})
--   TransformerDecoderLayer(d_model, nhead, {same options})
--     keys: self_attn.*, multihead_attn.*, linear1.*, linear2.*, norm1..3.*
--     layer(tgt, memory, {tgt_mask=, memory_mask=, tgt_key_padding_mask=,
--       memory_key_padding_mask=, tgt_is_causal=false, memory_is_causal=false})
--   TransformerEncoder(encoder_layer, num_layers, {norm=})   keys layers.<i>.*, norm.*
--     encoder(src, {mask=, src_key_padding_mask=, is_causal=})
--   TransformerDecoder(decoder_layer, num_layers, {norm=})   the same for decoders
--     decoder(tgt, memory, {tgt_mask=, memory_mask=, tgt_key_padding_mask=,
--       memory_key_padding_mask=, tgt_is_causal=, memory_is_causal=})
--   Transformer({d_model=512, nhead=8, num_encoder_layers=6, num_decoder_layers=6,
--       dim_feedforward=2048, dropout=0.1, activation=, custom_encoder=,
--       custom_decoder=, layer_norm_eps=1e-5, batch_first=false, norm_first=false,
--       bias=true, dtype=, device=})
--     model(src, tgt, {src_mask=, tgt_mask=, memory_mask=, src_key_padding_mask=,
--       tgt_key_padding_mask=, memory_key_padding_mask=, src_is_causal=,
--       tgt_is_causal=, memory_is_causal=})
--   Transformer.generate_square_subsequent_mask(n, {dtype=, device=})
--     the (n, n) float mask: -inf above the diagonal, 0 elsewhere
--
-- Masks follow nn.MultiheadAttention (lua/dl/nn/attention.lua): bool masks
-- are true where attention is NOT allowed, float masks are added.  Self
-- attention runs without weights, i.e. through the fused
-- F.scaled_dot_product_attention.  The encoder (decoder) deep-copies its
-- layer num_layers times, as PyTorch's does.
local dl = require "dl"
local util = require "dl.util"
local Module = require "dl.nn.module"
local F = require "dl.nn.functional"
local init = require "dl.nn.initializers"
local layers = require "dl.nn.layers"
local containers = require "dl.nn.containers"
local attention = require "dl.nn.attention"

local fail = util.fail

local TR = {}

local LAYER_OPTS = {"dim_feedforward", "dropout", "activation", "layer_norm_eps", "batch_first",
  "norm_first", "bias", "dtype", "device"}

-- "relu" / "gelu" -> the function; a function or a module is kept.
local function activation_of(a, op)
  if a == nil or a == "relu" then return F.relu end
  if a == "gelu" then return F.gelu end
  if type(a) == "function" or Module.is_module(a) then return a end
  if type(a) == "string" then fail("%s: activation should be relu/gelu, not %s", op, a) end
  fail("%s: activation must be \"relu\", \"gelu\", a function or a module, got %s", op, type(a))
end

-- The parts both layer kinds share: the feed-forward block, the norms, the
-- dropouts.  n_norms is 2 (encoder) or 3 (decoder).
local function build_layer(self, op, d_model, nhead, opts, n_norms)
  opts = util.check_options(opts, op, LAYER_OPTS)
  local d = util.check_int(d_model, op, "d_model", 1)
  local ff = opts.dim_feedforward == nil and 2048 or util.check_int(opts.dim_feedforward, op, "dim_feedforward", 1)
  local p = opts.dropout == nil and 0.1 or util.check_number(opts.dropout, op, "dropout")
  local eps = opts.layer_norm_eps == nil and 1e-5 or util.check_number(opts.layer_norm_eps, op, "layer_norm_eps")
  local bias = util.opt_bool(opts.bias, true, op, "bias")
  local f = Module.factory_kwargs(opts)
  local attn = {dropout = p, bias = bias, batch_first = util.opt_bool(opts.batch_first, false, op, "batch_first"),
    dtype = f.dtype, device = f.device}
  self.self_attn = attention.MultiheadAttention(d, nhead, attn)
  if n_norms == 3 then self.multihead_attn = attention.MultiheadAttention(d, nhead, attn) end
  self.linear1 = layers.Linear(d, ff, {bias = bias, dtype = f.dtype, device = f.device})
  self.dropout = layers.Dropout(p)
  self.linear2 = layers.Linear(ff, d, {bias = bias, dtype = f.dtype, device = f.device})
  self.norm_first = util.opt_bool(opts.norm_first, false, op, "norm_first")
  for i = 1, n_norms do
    self["norm" .. i] = layers.LayerNorm(d, {eps = eps, bias = bias, dtype = f.dtype, device = f.device})
  end
  for i = 1, n_norms do self["dropout" .. i] = layers.Dropout(p) end
  self.activation = activation_of(opts.activation, op)
  self.batch_first = attn.batch_first
end

-- linear2(dropout(activation(linear1(x)))), then dropout_n
local function ff_block(self, x, n)
  local h = self.activation(self.linear1(x))
  return self["dropout" .. n](self.linear2(self.dropout(h)))
end

-- An attention block: dropout_n(attn(x, mem, mem)), without weights (the
-- fused path); mem is x for self-attention.
local function attn_block(attn, drop, x, mem, mask, kpm, is_causal)
  return drop(attn(x, mem, mem, {attn_mask = mask, key_padding_mask = kpm, need_weights = false,
    is_causal = is_causal}))
end

local function sa_block(self, x, mask, kpm, is_causal)
  return attn_block(self.self_attn, self.dropout1, x, x, mask, kpm, is_causal)
end

local function check_layer_input(x, op, what)
  if not dl.is_tensor(x) then fail("%s: %s must be a tensor, got %s", op, what, type(x)) end
  return x
end

-- TR[name], a class whose constructor (a, b, opts) is build(self, name, a, b,
-- opts, extra): build_layer (d_model, nhead; extra the norm count) or
-- build_stack (layer, num_layers; extra the layer class).
local function class_of(name, build, extra)
  local cls = Module:extend(name)
  TR[name] = cls
  function cls:__init(a, b, opts) build(self, name, a, b, opts, extra) end
  return cls
end

-- --- TransformerEncoderLayer -------------------------------------------------------------

local EncoderLayer = class_of("TransformerEncoderLayer", build_layer, 2)

function EncoderLayer:forward(src, opts)
  local op = "TransformerEncoderLayer"
  opts = util.check_options(opts, op, {"src_mask", "src_key_padding_mask", "is_causal"})
  local x = check_layer_input(src, op, "src")
  local mask, kpm = opts.src_mask, opts.src_key_padding_mask
  local causal = util.opt_bool(opts.is_causal, false, op, "is_causal")
  if self.norm_first then
    x = x + sa_block(self, self.norm1(x), mask, kpm, causal)
    x = x + ff_block(self, self.norm2(x), 2)
  else
    x = self.norm1(x + sa_block(self, x, mask, kpm, causal))
    x = self.norm2(x + ff_block(self, x, 2))
  end
  return x
end

-- --- TransformerDecoderLayer -------------------------------------------------------------

local DecoderLayer = class_of("TransformerDecoderLayer", build_layer, 3)

local DECODER_FWD = {"tgt_mask", "memory_mask", "tgt_key_padding_mask", "memory_key_padding_mask",
  "tgt_is_causal", "memory_is_causal"}

local function mha_block(self, x, mem, mask, kpm, is_causal)
  return attn_block(self.multihead_attn, self.dropout2, x, mem, mask, kpm, is_causal)
end

function DecoderLayer:forward(tgt, memory, opts)
  local op = "TransformerDecoderLayer"
  opts = util.check_options(opts, op, DECODER_FWD)
  local x = check_layer_input(tgt, op, "tgt")
  check_layer_input(memory, op, "memory")
  local tc = util.opt_bool(opts.tgt_is_causal, false, op, "tgt_is_causal")
  local mc = util.opt_bool(opts.memory_is_causal, false, op, "memory_is_causal")
  if self.norm_first then
    x = x + sa_block(self, self.norm1(x), opts.tgt_mask, opts.tgt_key_padding_mask, tc)
    x = x + mha_block(self, self.norm2(x), memory, opts.memory_mask, opts.memory_key_padding_mask, mc)
    x = x + ff_block(self, self.norm3(x), 3)
  else
    x = self.norm1(x + sa_block(self, x, opts.tgt_mask, opts.tgt_key_padding_mask, tc))
    x = self.norm2(x + mha_block(self, x, memory, opts.memory_mask, opts.memory_key_padding_mask, mc))
    x = self.norm3(x + ff_block(self, x, 3))
  end
  return x
end

-- --- TransformerEncoder, TransformerDecoder ------------------------------------------------

-- layers = num_layers deep copies of layer; norm optional.
local function build_stack(self, op, layer, num_layers, opts, cls)
  opts = util.check_options(opts, op, {"norm", "enable_nested_tensor", "mask_check"})
  if not (Module.is_module(layer) and layer:isinstance(cls)) then
    fail("%s: the layer must be a %s, got %s", op, cls.__name,
      Module.is_module(layer) and layer:_get_name() or type(layer))
  end
  self.num_layers = util.check_int(num_layers, op, "num_layers", 0)
  local list = {}
  for i = 1, self.num_layers do list[i] = layer:deepcopy() end
  self.layers = containers.ModuleList(list)
  if opts.norm ~= nil then
    if not Module.is_module(opts.norm) then fail("%s: norm must be a module, got %s", op, type(opts.norm)) end
    self.norm = opts.norm
  end
end

local Encoder = class_of("TransformerEncoder", build_stack, EncoderLayer)

function Encoder:forward(src, opts)
  local op = "TransformerEncoder"
  opts = util.check_options(opts, op, {"mask", "src_key_padding_mask", "is_causal"})
  local x = check_layer_input(src, op, "src")
  for _, layer in ipairs(self.layers) do
    x = layer(x, {src_mask = opts.mask, src_key_padding_mask = opts.src_key_padding_mask,
      is_causal = opts.is_causal})
  end
  if self.norm ~= nil then x = self.norm(x) end
  return x
end

local Decoder = class_of("TransformerDecoder", build_stack, DecoderLayer)

function Decoder:forward(tgt, memory, opts)
  local op = "TransformerDecoder"
  opts = util.check_options(opts, op, DECODER_FWD)
  local x = check_layer_input(tgt, op, "tgt")
  for _, layer in ipairs(self.layers) do x = layer(x, memory, opts) end
  if self.norm ~= nil then x = self.norm(x) end
  return x
end

-- --- Transformer ---------------------------------------------------------------------------

local Transformer = Module:extend("Transformer")
TR.Transformer = Transformer

local MODEL_OPTS = {"d_model", "nhead", "num_encoder_layers", "num_decoder_layers", "dim_feedforward",
  "dropout", "activation", "custom_encoder", "custom_decoder", "layer_norm_eps", "batch_first",
  "norm_first", "bias", "dtype", "device"}

function Transformer:__init(opts)
  local op = "Transformer"
  opts = util.check_options(opts, op, MODEL_OPTS)
  local d = opts.d_model or 512
  local nhead = opts.nhead or 8
  local layer_opts = {dim_feedforward = opts.dim_feedforward, dropout = opts.dropout,
    activation = opts.activation, layer_norm_eps = opts.layer_norm_eps, batch_first = opts.batch_first,
    norm_first = opts.norm_first, bias = opts.bias, dtype = opts.dtype, device = opts.device}
  local function final_norm()
    return layers.LayerNorm(d, {eps = opts.layer_norm_eps or 1e-5, bias = opts.bias ~= false,
      dtype = opts.dtype, device = opts.device})
  end
  if opts.custom_encoder ~= nil then
    self.encoder = opts.custom_encoder
  else
    self.encoder = Encoder(EncoderLayer(d, nhead, layer_opts), opts.num_encoder_layers or 6, {norm = final_norm()})
  end
  if opts.custom_decoder ~= nil then
    self.decoder = opts.custom_decoder
  else
    self.decoder = Decoder(DecoderLayer(d, nhead, layer_opts), opts.num_decoder_layers or 6, {norm = final_norm()})
  end
  self.d_model, self.nhead = d, nhead
  self.batch_first = util.opt_bool(opts.batch_first, false, op, "batch_first")
  -- PyTorch's _reset_parameters: xavier_uniform_ on every matrix
  for _, p in ipairs(self:parameters()) do
    if p:dim() > 1 then init.xavier_uniform_(p) end
  end
end

local MODEL_FWD = {"src_mask", "tgt_mask", "memory_mask", "src_key_padding_mask", "tgt_key_padding_mask",
  "memory_key_padding_mask", "src_is_causal", "tgt_is_causal", "memory_is_causal"}

function Transformer:forward(src, tgt, opts)
  local op = "Transformer"
  opts = util.check_options(opts, op, MODEL_FWD)
  check_layer_input(src, op, "src")
  check_layer_input(tgt, op, "tgt")
  local bdim = self.batch_first and 1 or 2
  if src:dim() == 3 and tgt:dim() == 3 and src.shape[bdim] ~= tgt.shape[bdim] then
    fail("%s: the batch number of src and tgt must be equal", op)
  end
  if src.shape[src:dim()] ~= self.d_model or tgt.shape[tgt:dim()] ~= self.d_model then
    fail("%s: the feature number of src and tgt must be equal to d_model", op)
  end
  local memory = self.encoder(src, {mask = opts.src_mask, src_key_padding_mask = opts.src_key_padding_mask,
    is_causal = opts.src_is_causal})
  return self.decoder(tgt, memory, {tgt_mask = opts.tgt_mask, memory_mask = opts.memory_mask,
    tgt_key_padding_mask = opts.tgt_key_padding_mask, memory_key_padding_mask = opts.memory_key_padding_mask,
    tgt_is_causal = opts.tgt_is_causal, memory_is_causal = opts.memory_is_causal})
end

-- The (n, n) causal float mask: -inf where column j > row i, 0 elsewhere.
function Transformer.generate_square_subsequent_mask(n, opts)
  opts = util.check_options(opts, "generate_square_subsequent_mask", {"dtype", "device"})
  n = util.check_int(n, "generate_square_subsequent_mask", "sz", 0)
  local f = {dtype = opts.dtype or dl.float32, device = opts.device}
  return dl.full({n, n}, -math.huge, f):triu(1)
end

return TR
