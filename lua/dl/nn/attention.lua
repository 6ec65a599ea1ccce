-- dl.nn attention layers: MultiheadAttention, PyTorch's nn.MultiheadAttention
-- with its parameter names and layouts, so state_dict keys load from PyTorch
-- checkpoints:
--
--   in_proj_weight (3E, E), in_proj_bias (3E)          q, k, v projections stacked
--   q_proj_weight (E, E), k_proj_weight (E, kdim),     instead of in_proj_weight
--   v_proj_weight (E, vdim)                            when kdim or vdim != E
--   bias_k, bias_v (1, 1, E)                           with add_bias_kv
--   out_proj.weight (E, E), out_proj.bias (E)
--
--   local mha = dl.nn.MultiheadAttention(512, 8, {dropout=0.1, batch_first=true})
--   local out, weights = mha(q, k, v, {key_padding_mask=pad, need_weights=false})
--
-- forward(query, key, value, {key_padding_mask=, need_weights=true,
-- attn_mask=, average_attn_weights=true, is_causal=false}) returns the output
-- and the attention weights (nil with need_weights=false).  Shapes: query
-- (L, N, E), key (S, N, kdim), value (S, N, vdim), or batch first (N, L, E),
-- or unbatched (L, E); key_padding_mask (N, S) or (S); attn_mask (L, S) or
-- (N * num_heads, L, S).  PyTorch's mask conventions: a bool
-- key_padding_mask or attn_mask is true where a key is NOT attended; float
-- masks are added to the scores.  With need_weights=false the heads go
-- through the fused F.scaled_dot_product_attention (a query row whose keys
-- are all masked gives zeros there; the need_weights path, a softmax of the
-- full score matrix as PyTorch computes it, gives NaN, as PyTorch does).
-- is_causal=true masks key j > i: it uses SDPA's causal mode when there is no
-- key_padding_mask and weights are not wanted, else a causal float mask
-- (PyTorch takes is_causal only as a hint about attn_mask; here attn_mask may
-- be left out).  Dropout on the weights applies in training mode only.
local dl = require "dl"
local util = require "dl.util"
local Module = require "dl.nn.module"
local F = require "dl.nn.functional"
local init = require "dl.nn.initializers"
local layers = require "dl.nn.layers"

local fail, pyrepr = util.fail, util.pyrepr
local Parameter = Module.Parameter

local A = {}

-- PyTorch's out_proj class (a Linear under another name, so the module prints as PyTorch's).
A.NonDynamicallyQuantizableLinear = layers.Linear:extend("NonDynamicallyQuantizableLinear")

local MHA = Module:extend("MultiheadAttention")
A.MultiheadAttention = MHA

local OPTS = {"dropout", "bias", "add_bias_kv", "add_zero_attn", "kdim", "vdim", "batch_first", "dtype",
  "device"}

function MHA:__init(embed_dim, num_heads, opts)
  local op = "MultiheadAttention"
  opts = util.check_options(opts, op, OPTS)
  local E = util.check_int(embed_dim, op, "embed_dim", 1)
  local H = util.check_int(num_heads, op, "num_heads", 1)
  if E % H ~= 0 then fail("%s: embed_dim (%d) must be divisible by num_heads (%d)", op, E, H) end
  self.embed_dim, self.num_heads, self.head_dim = E, H, E // H
  self.kdim = opts.kdim ~= nil and util.check_int(opts.kdim, op, "kdim", 1) or E
  self.vdim = opts.vdim ~= nil and util.check_int(opts.vdim, op, "vdim", 1) or E
  self._qkv_same_embed_dim = self.kdim == E and self.vdim == E
  self.dropout = opts.dropout ~= nil and util.check_number(opts.dropout, op, "dropout") or 0.0
  if not (self.dropout >= 0 and self.dropout <= 1) then
    fail("%s: dropout must be in [0, 1], got %s", op, pyrepr(self.dropout))
  end
  self.batch_first = util.opt_bool(opts.batch_first, false, op, "batch_first")
  local bias = util.opt_bool(opts.bias, true, op, "bias")
  local add_bias_kv = util.opt_bool(opts.add_bias_kv, false, op, "add_bias_kv")
  self.add_zero_attn = util.opt_bool(opts.add_zero_attn, false, op, "add_zero_attn")
  local f = Module.factory_kwargs(opts)
  if self._qkv_same_embed_dim then
    self.in_proj_weight = Parameter(dl.empty({3 * E, E}, f))
    self:register_parameter("q_proj_weight", nil)
    self:register_parameter("k_proj_weight", nil)
    self:register_parameter("v_proj_weight", nil)
  else
    self.q_proj_weight = Parameter(dl.empty({E, E}, f))
    self.k_proj_weight = Parameter(dl.empty({E, self.kdim}, f))
    self.v_proj_weight = Parameter(dl.empty({E, self.vdim}, f))
    self:register_parameter("in_proj_weight", nil)
  end
  if bias then
    self.in_proj_bias = Parameter(dl.empty({3 * E}, f))
  else
    self:register_parameter("in_proj_bias", nil)
  end
  self.out_proj = A.NonDynamicallyQuantizableLinear(E, E, {bias = bias, dtype = f.dtype, device = f.device})
  if add_bias_kv then
    self.bias_k = Parameter(dl.empty({1, 1, E}, f))
    self.bias_v = Parameter(dl.empty({1, 1, E}, f))
  else
    self:register_parameter("bias_k", nil)
    self:register_parameter("bias_v", nil)
  end
  self:_reset_parameters()
end

-- PyTorch's initialisation: xavier_uniform_ projections, zero biases,
-- xavier_normal_ bias_k / bias_v (out_proj.weight keeps Linear's init).
function MHA:_reset_parameters()
  if self._qkv_same_embed_dim then
    init.xavier_uniform_(self.in_proj_weight)
  else
    init.xavier_uniform_(self.q_proj_weight)
    init.xavier_uniform_(self.k_proj_weight)
    init.xavier_uniform_(self.v_proj_weight)
  end
  if self.in_proj_bias ~= nil then
    init.zeros_(self.in_proj_bias)
    init.zeros_(self.out_proj.bias)
  end
  if self.bias_k ~= nil then init.xavier_normal_(self.bias_k) end
  if self.bias_v ~= nil then init.xavier_normal_(self.bias_v) end
end

-- --- masks ------------------------------------------------------------------------------

-- A mask as an additive float mask of dtype dt: a bool mask is -inf where
-- true (not attended), a float one is converted.
local function additive(mask, dt, what)
  if mask == nil then return nil end
  if not dl.is_tensor(mask) then fail("MultiheadAttention: %s must be a tensor, got %s", what, type(mask)) end
  if mask.dtype == dl.bool then
    return dl.zeros(mask.shape, {dtype = dt, device = mask.device}):masked_fill(mask, -math.huge)
  end
  if not mask:is_floating_point() then
    fail("MultiheadAttention: only bool and floating types of %s are supported, got %s", what,
      tostring(mask.dtype))
  end
  return mask:to(dt)
end

-- (L, S) float mask: -inf where key j > query i.
local function causal_mask(L, S, dt, device)
  return dl.zeros({L, S}, {dtype = dt, device = device}):masked_fill(
    dl.ones({L, S}, {dtype = dl.bool, device = device}):triu(1), -math.huge)
end

local function shape_is(t, shape)
  local s = t.shape
  if #s ~= #shape then return false end
  for i = 1, #s do if s[i] ~= shape[i] then return false end end
  return true
end

-- --- forward ------------------------------------------------------------------------------

local FWD_OPTS = {"key_padding_mask", "need_weights", "attn_mask", "average_attn_weights", "is_causal"}

function MHA:forward(query, key, value, opts)
  local op = "MultiheadAttention"
  opts = util.check_options(opts, op, FWD_OPTS)
  local need_weights = util.opt_bool(opts.need_weights, true, op, "need_weights")
  local average = util.opt_bool(opts.average_attn_weights, true, op, "average_attn_weights")
  local is_causal = util.opt_bool(opts.is_causal, false, op, "is_causal")
  for _, p in ipairs({{query, "query"}, {key, "key"}, {value, "value"}}) do
    if not dl.is_tensor(p[1]) then fail("%s: %s must be a tensor, got %s", op, p[2], type(p[1])) end
  end
  local batched = query:dim() == 3
  if query:dim() ~= 2 and not batched then
    fail("%s: query should be unbatched 2D or batched 3D tensor but received %dD", op, query:dim())
  end
  if key:dim() ~= query:dim() or value:dim() ~= query:dim() then
    fail("%s: for %s query, expected key and value to be %dD, got %dD and %dD", op,
      batched and "batched (3D)" or "unbatched (2D)", query:dim(), key:dim(), value:dim())
  end
  local kpm, attn_mask = opts.key_padding_mask, opts.attn_mask
  if batched then
    if self.batch_first then -- (N, L, E) -> (L, N, E)
      query, key, value = query:transpose(1, 2), key:transpose(1, 2), value:transpose(1, 2)
    end
  else
    query, key, value = query:unsqueeze(2), key:unsqueeze(2), value:unsqueeze(2)
    if dl.is_tensor(kpm) then kpm = kpm:unsqueeze(1) end
  end
  local L, N, Eq = query.shape[1], query.shape[2], query.shape[3]
  local S = key.shape[1]
  local E, H, hd = self.embed_dim, self.num_heads, self.head_dim
  if Eq ~= E then fail("%s: was expecting embedding dimension of %d, but got %d", op, E, Eq) end
  if key.shape[3] ~= self.kdim then
    fail("%s: key has %d features, expected kdim = %d", op, key.shape[3], self.kdim)
  end
  if value.shape[3] ~= self.vdim then
    fail("%s: value has %d features, expected vdim = %d", op, value.shape[3], self.vdim)
  end
  if key.shape[2] ~= N or value.shape[2] ~= N then
    fail("%s: query, key and value must have one batch size, got %d, %d and %d", op, N, key.shape[2],
      value.shape[2])
  end
  if value.shape[1] ~= S then fail("%s: key has %d positions, value has %d", op, S, value.shape[1]) end
  if S == 0 then fail("%s: key and value have no positions (an empty key sequence)", op) end
  local dt = query.dtype

  -- projections
  local wq, wk, wv
  if self._qkv_same_embed_dim then
    local w = self.in_proj_weight
    wq, wk, wv = w:narrow(1, 1, E), w:narrow(1, E + 1, E), w:narrow(1, 2 * E + 1, E)
  else
    wq, wk, wv = self.q_proj_weight, self.k_proj_weight, self.v_proj_weight
  end
  local bq, bk, bv
  if self.in_proj_bias ~= nil then
    local b = self.in_proj_bias
    bq, bk, bv = b:narrow(1, 1, E), b:narrow(1, E + 1, E), b:narrow(1, 2 * E + 1, E)
  end
  local q, k, v = F.linear(query, wq, bq), F.linear(key, wk, bk), F.linear(value, wv, bv)

  -- masks, as additive float masks: attn_mask (L, S) or (N*H, L, S), kpm (N, S)
  attn_mask, kpm = additive(attn_mask, dt, "attn_mask"), additive(kpm, dt, "key_padding_mask")
  if attn_mask ~= nil then
    if attn_mask:dim() == 2 then
      if not shape_is(attn_mask, {L, S}) then
        fail("%s: the shape of the 2D attn_mask is %s, but should be %s", op, util.shape_str(attn_mask.shape),
          util.shape_str({L, S}))
      end
    elseif attn_mask:dim() == 3 then
      if not shape_is(attn_mask, {N * H, L, S}) then
        fail("%s: the shape of the 3D attn_mask is %s, but should be %s", op, util.shape_str(attn_mask.shape),
          util.shape_str({N * H, L, S}))
      end
    else
      fail("%s: attn_mask's dimension %d is not supported", op, attn_mask:dim())
    end
  end
  if kpm ~= nil and not shape_is(kpm, {N, S}) then
    fail("%s: expected key_padding_mask of shape %s, got %s", op, util.shape_str(batched and {N, S} or {S}),
      util.shape_str(batched and kpm.shape or {kpm.shape[2]}))
  end
  -- is_causal: SDPA's causal mode when nothing else masks, no weights are
  -- wanted and no key positions are added; else a causal float mask
  local extra = (self.bias_k ~= nil and 1 or 0) + (self.add_zero_attn and 1 or 0)
  local sdpa_causal = false
  if is_causal then
    if kpm == nil and not need_weights and extra == 0 then
      sdpa_causal, attn_mask = true, nil
    elseif attn_mask == nil then
      attn_mask = causal_mask(L, S, dt, query.device)
    end
  end

  -- bias_k / bias_v and zero attention add key positions (masks padded with 0)
  if self.bias_k ~= nil then
    k = dl.cat({k, self.bias_k:expand(1, N, E)}, 1)
    v = dl.cat({v, self.bias_v:expand(1, N, E)}, 1)
    if attn_mask ~= nil then attn_mask = F.pad(attn_mask, {0, 1}) end
    if kpm ~= nil then kpm = F.pad(kpm, {0, 1}) end
    S = S + 1
  end
  -- heads: (L, N, E) -> (N, H, L, hd)
  q = q:reshape(L, N, H, hd):permute(2, 3, 1, 4)
  k = k:reshape(S, N, H, hd):permute(2, 3, 1, 4)
  v = v:reshape(S, N, H, hd):permute(2, 3, 1, 4)
  if self.add_zero_attn then
    local z = dl.zeros({N, H, 1, hd}, {dtype = dt, device = q.device})
    k, v = dl.cat({k, z}, 3), dl.cat({v, z}, 3)
    if attn_mask ~= nil then attn_mask = F.pad(attn_mask, {0, 1}) end
    if kpm ~= nil then kpm = F.pad(kpm, {0, 1}) end
    S = S + 1
  end
  local mask
  if attn_mask ~= nil then
    mask = attn_mask:dim() == 2 and attn_mask or attn_mask:reshape(N, H, L, S)
  end
  if kpm ~= nil then
    local kp = kpm:reshape(N, 1, 1, S)
    mask = mask ~= nil and mask + kp or kp
  end
  local p = self.training and self.dropout or 0.0

  local out, weights
  if need_weights then
    local s = dl.matmul(q * (1 / math.sqrt(hd)), k:transpose(-1, -2)) -- (N, H, L, S)
    if mask ~= nil then s = s + mask end
    weights = F.softmax(s, -1)
    if p > 0 then weights = F.dropout(weights, p, true) end
    out = dl.matmul(weights, v)
    if average then weights = weights:mean(2) end
    if not batched then weights = weights:squeeze(1) end
  else
    out = F.scaled_dot_product_attention(q, k, v, {attn_mask = mask, dropout_p = p, is_causal = sdpa_causal})
  end
  -- (N, H, L, hd) -> (L, N, E), the output projection
  out = F.linear(out:permute(3, 1, 2, 4):reshape(L, N, E), self.out_proj.weight, self.out_proj.bias)
  if not batched then
    out = out:squeeze(2)
  elseif self.batch_first then
    out = out:transpose(1, 2)
  end
  return out, weights
end

return A
