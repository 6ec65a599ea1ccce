-- dl.models.gpt: a GPT language model in nanoGPT's shape, with nanoGPT's
-- (and so Hugging Face GPT-2's) parameter names, and generation with a KV cache.
--
--   local GPT = dl.models.GPT
--   local model = GPT{vocab_size = 96, block_size = 256, n_layer = 6, n_head = 6,
--                     n_embd = 384, dropout = 0.0, bias = true}
--   local logits, loss = model(idx, targets)       -- idx, targets (B, T) int64, 1-based ids
--   local out = model:generate(idx, 200, {temperature = 0.8, top_k = 40})
--
-- The model: token + position embeddings (wte, wpe), dropout, n_layer pre-norm
-- blocks x = x + attn(ln_1(x)); x = x + mlp(ln_2(x)) with causal attention
-- through F.scaled_dot_product_attention and a GELU MLP of width 4 * n_embd,
-- a final LayerNorm (ln_f) and an output head lm_head tied to wte (one
-- parameter, used twice, one summed gradient).  state_dict keys are
-- nanoGPT's: transformer.wte.weight, transformer.wpe.weight,
-- transformer.h.<i>.{ln_1,attn.c_attn,attn.c_proj,ln_2,mlp.c_fc,mlp.c_proj}.*,
-- transformer.ln_f.*, lm_head.weight (the same tensor as transformer.wte.weight).
-- Initialisation is nanoGPT's: every Linear and Embedding weight N(0, 0.02),
-- the residual projections (c_proj) N(0, 0.02 / sqrt(2 * n_layer)), biases 0,
-- LayerNorm weight 1.
--
-- forward(idx [, targets] [, {cache =, last_only =}]): logits (B, T, vocab) and,
-- with targets (B, T) (1-based ids), the mean cross-entropy loss.  With
-- last_only = true only the last position's logits are computed (B, 1, vocab),
-- as nanoGPT does at inference.  With a cache (model:new_cache(B)) the
-- positions continue from cache.len and the keys/values of idx are appended:
-- each new token costs O(cache.len) instead of recomputing the whole prefix.
--
-- Invariants: T + cache.len never exceeds block_size (an error says so);
-- generate() with and without the cache draws the same random numbers in the
-- same order and, inside block_size, computes the same logits up to rounding,
-- so it gives the same tokens for the same seed.
local dl = require "dl"
local util = require "dl.util"
local Module = require "dl.nn.module"
local F = require "dl.nn.functional"
local init = require "dl.nn.initializers"
local layers = require "dl.nn.layers"
local containers = require "dl.nn.containers"
local embedding = require "dl.nn.embedding"

local fail = util.fail

local G = {}

local CONFIG_KEYS = {"vocab_size", "block_size", "n_layer", "n_head", "n_embd", "dropout", "bias"}

-- A checked copy of a config table, nanoGPT's GPTConfig defaults filling the gaps.
local function config_of(cfg)
  local op = "GPT"
  cfg = util.check_options(cfg, op, CONFIG_KEYS)
  local c = {
    vocab_size = util.check_int(cfg.vocab_size or 50304, op, "vocab_size", 1),
    block_size = util.check_int(cfg.block_size or 1024, op, "block_size", 1),
    n_layer = util.check_int(cfg.n_layer or 12, op, "n_layer", 1),
    n_head = util.check_int(cfg.n_head or 12, op, "n_head", 1),
    n_embd = util.check_int(cfg.n_embd or 768, op, "n_embd", 1),
    dropout = cfg.dropout == nil and 0.0 or util.check_number(cfg.dropout, op, "dropout"),
    bias = util.opt_bool(cfg.bias, true, op, "bias"),
  }
  if c.n_embd % c.n_head ~= 0 then
    fail("%s: n_embd (%d) must be divisible by n_head (%d)", op, c.n_embd, c.n_head)
  end
  if not (c.dropout >= 0 and c.dropout < 1) then fail("%s: dropout must be in [0, 1), got %s", op, c.dropout) end
  return c
end
G.config_of = config_of

-- --- attention with an optional KV cache ----------------------------------------------------

local Attention = Module:extend("CausalSelfAttention")
G.CausalSelfAttention = Attention

function Attention:__init(c)
  self.c_attn = layers.Linear(c.n_embd, 3 * c.n_embd, {bias = c.bias})
  self.c_proj = layers.Linear(c.n_embd, c.n_embd, {bias = c.bias})
  self.attn_dropout_p = c.dropout
  self.resid_dropout = layers.Dropout(c.dropout)
  self.n_head, self.n_embd = c.n_head, c.n_embd
end

-- x (B, T, C); kv (optional) = {k =, v =} buffers (B, nh, block_size, hs) of one
-- layer and pos, the number of positions already in them.
function Attention:forward(x, kv, pos)
  local B, T, C = x.shape[1], x.shape[2], x.shape[3]
  local nh = self.n_head
  local hs = C // nh
  local qkv = self.c_attn(x):split(C, 3)
  -- (B, T, C) -> (B, nh, T, hs)
  local q = qkv[1]:view(B, T, nh, hs):transpose(2, 3)
  local k = qkv[2]:view(B, T, nh, hs):transpose(2, 3)
  local v = qkv[3]:view(B, T, nh, hs):transpose(2, 3)
  local opts = {dropout_p = self.training and self.attn_dropout_p or 0.0}
  if kv then
    kv.k:narrow(3, pos + 1, T):copy_(k)
    kv.v:narrow(3, pos + 1, T):copy_(v)
    k, v = kv.k:narrow(3, 1, pos + T), kv.v:narrow(3, 1, pos + T)
    if T > 1 then
      if pos == 0 then
        opts.is_causal = true
      else -- query i (at position pos + i) sees keys 1 .. pos + i
        opts.attn_mask = dl.ones({T, pos + T}, {dtype = dl.bool}):tril(pos)
      end
    end
  else
    opts.is_causal = true
  end
  local y = F.scaled_dot_product_attention(q, k, v, opts)
  y = y:transpose(2, 3):contiguous():view(B, T, C)
  return self.resid_dropout(self.c_proj(y))
end

local MLP = Module:extend("MLP")
G.MLP = MLP

function MLP:__init(c)
  self.c_fc = layers.Linear(c.n_embd, 4 * c.n_embd, {bias = c.bias})
  self.gelu = layers.GELU()
  self.c_proj = layers.Linear(4 * c.n_embd, c.n_embd, {bias = c.bias})
  self.dropout = layers.Dropout(c.dropout)
end

function MLP:forward(x)
  return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))
end

local Block = Module:extend("Block")
G.Block = Block

function Block:__init(c)
  self.ln_1 = layers.LayerNorm(c.n_embd, {bias = c.bias})
  self.attn = Attention(c)
  self.ln_2 = layers.LayerNorm(c.n_embd, {bias = c.bias})
  self.mlp = MLP(c)
end

function Block:forward(x, kv, pos)
  x = x + self.attn(self.ln_1(x), kv, pos)
  return x + self.mlp(self.ln_2(x))
end

-- nanoGPT's ModuleDict "transformer" (wte, wpe, drop, h, ln_f)
local Trunk = Module:extend("Transformer")

function Trunk:__init(c)
  self.wte = embedding.Embedding(c.vocab_size, c.n_embd)
  self.wpe = embedding.Embedding(c.block_size, c.n_embd)
  self.drop = layers.Dropout(c.dropout)
  local h = {}
  for i = 1, c.n_layer do h[i] = Block(c) end
  self.h = containers.ModuleList(h)
  self.ln_f = layers.LayerNorm(c.n_embd, {bias = c.bias})
end

-- --- the model ------------------------------------------------------------------------------

local GPT = Module:extend("GPT")
G.GPT = GPT

function GPT:__init(cfg)
  local c = config_of(cfg)
  self.config = c
  self.transformer = Trunk(c)
  self.lm_head = layers.Linear(c.n_embd, c.vocab_size, {bias = false})
  self.lm_head.weight = self.transformer.wte.weight -- weight tying
  self:reset_parameters()
end

-- nanoGPT's _init_weights, then the scaled residual projections.
function GPT:reset_parameters()
  local std_proj = 0.02 / math.sqrt(2 * self.config.n_layer)
  for name, m in self:named_modules() do
    if m:isinstance(layers.Linear) then
      local std = name:match("c_proj$") and std_proj or 0.02
      init.normal_(m.weight, 0.0, std)
      if m.bias ~= nil then init.zeros_(m.bias) end
    elseif m:isinstance(embedding.Embedding) then
      init.normal_(m.weight, 0.0, 0.02)
    end
  end
end

-- The number of parameters, each once; without the position embeddings when
-- non_embedding (nanoGPT's count; the tied wte counts as the head).
function GPT:get_num_params(non_embedding)
  local n = 0
  for _, p in ipairs(self:parameters()) do n = n + p:numel() end
  if non_embedding ~= false then n = n - self.transformer.wpe.weight:numel() end
  return n
end

local function check_ids(t, op, what, cfg)
  if not dl.is_tensor(t) then fail("%s: %s must be a tensor of token ids, got %s", op, what, type(t)) end
  if t:dim() ~= 2 then fail("%s: %s must be (batch, time), got %d dimensions", op, what, t:dim()) end
  if t:is_floating_point() or t.dtype == dl.bool then
    fail("%s: %s must hold integer token ids, got %s", op, what, tostring(t.dtype))
  end
  if cfg and t.shape[2] < 1 then fail("%s: %s is empty (no positions)", op, what) end
end

local FWD_KEYS = {"cache", "last_only"}

-- model(idx [, targets] [, opts]) -> logits, loss
function GPT:forward(idx, targets, opts)
  local op = "GPT"
  if type(targets) == "table" and not dl.is_tensor(targets) then targets, opts = nil, targets end
  opts = util.check_options(opts, op, FWD_KEYS)
  local c = self.config
  check_ids(idx, op, "idx", c)
  local B, T = idx.shape[1], idx.shape[2]
  local cache = opts.cache
  local pos = cache and cache.len or 0
  if pos + T > c.block_size then
    if cache then
      fail("%s: %d new positions after %d cached ones exceed block_size %d", op, T, pos, c.block_size)
    end
    fail("%s: cannot forward a sequence of length %d, block size is only %d", op, T, c.block_size)
  end
  if cache and cache.batch ~= B then fail("%s: the cache holds %d sequences, idx has %d", op, cache.batch, B) end
  local tr = self.transformer
  local positions = dl.arange(pos + 1, pos + T + 1, {dtype = dl.int64, device = idx.device})
  local x = tr.drop(tr.wte(idx) + tr.wpe(positions))
  for i, block in ipairs(tr.h) do
    x = block(x, cache and cache.layers[i], pos)
  end
  if cache then cache.len = pos + T end
  x = tr.ln_f(x)
  if targets ~= nil then
    check_ids(targets, op, "targets")
    if targets.shape[1] ~= B or targets.shape[2] ~= T then
      fail("%s: targets have shape %s, idx has %s", op, util.shape_str(targets.shape), util.shape_str(idx.shape))
    end
    local logits = self.lm_head(x)
    local V = c.vocab_size
    local loss = F.cross_entropy(logits:view(B * T, V), targets:reshape(B * T))
    return logits, loss
  end
  if util.opt_bool(opts.last_only, false, op, "last_only") then x = x:narrow(2, T, 1) end
  return self.lm_head(x), nil
end

-- A KV cache for `batch` sequences: per layer k, v buffers (batch, n_head,
-- block_size, head_size) in the model's dtype and device, filled from position 1.
function GPT:new_cache(batch)
  local c = self.config
  batch = util.check_int(batch or 1, "new_cache", "batch", 1)
  local w = self.transformer.wte.weight
  local f = {dtype = w.dtype, device = w.device}
  local shape = {batch, c.n_head, c.block_size, c.n_embd // c.n_head}
  local ls = {}
  for i = 1, c.n_layer do ls[i] = {k = dl.zeros(shape, f), v = dl.zeros(shape, f)} end
  return {layers = ls, len = 0, batch = batch}
end

-- One draw from logits (B, V) with temperature and top-k: the smallest id
-- whose cumulative probability exceeds u * total, u ~ U[0, 1) per row (so a
-- token of probability 0, e.g. outside the top k, is never drawn, even at u = 0).
-- temperature 0 takes the argmax (no random numbers drawn).
function G.sample(logits, temperature, top_k)
  local B, V = logits.shape[1], logits.shape[2]
  if temperature == 0 then return logits:argmax(2):view(B, 1) end
  logits = logits / temperature
  if top_k and top_k < V then
    local kth = logits:topk(top_k, 2)
    local thr = kth:narrow(2, top_k, 1)
    logits = logits:masked_fill(logits:lt(thr), -math.huge)
  end
  local cum = F.softmax(logits, 2):cumsum(2)
  local u = dl.rand(B, 1, {dtype = cum.dtype}) * cum:narrow(2, V, 1)
  return cum:le(u):sum(2, true):to(dl.int64) + 1
end

local GEN_KEYS = {"temperature", "top_k", "use_cache"}

-- model:generate(idx, max_new_tokens [, {temperature = 1.0, top_k = nil,
-- use_cache = true}]) -> (B, T + max_new_tokens) int64: idx with the drawn
-- tokens appended.  Without the cache every step runs the last block_size
-- tokens through the model (nanoGPT's generate).  With the cache the prompt
-- is run once and each new token costs one position; when the context is
-- full, the cache is rebuilt from the last block_size // 2 tokens (so past
-- block_size the two modes see different contexts).  Runs without autograd
-- and in eval mode (the training mode is restored).
function GPT:generate(idx, max_new_tokens, opts)
  local op = "generate"
  opts = util.check_options(opts, op, GEN_KEYS)
  local c = self.config
  check_ids(idx, op, "idx", c)
  local n = util.check_int(max_new_tokens, op, "max_new_tokens", 0)
  local temperature = opts.temperature == nil and 1.0 or util.check_number(opts.temperature, op, "temperature")
  if not (temperature >= 0) then fail("%s: temperature must be >= 0, got %s", op, temperature) end
  local top_k = opts.top_k ~= nil and util.check_int(opts.top_k, op, "top_k", 1) or nil
  local use_cache = util.opt_bool(opts.use_cache, true, op, "use_cache")
  local B = idx.shape[1]
  local was_training = self.training
  self:eval()
  local ok, res = pcall(dl.no_grad, function()
    local seq = idx:to(dl.int64)
    local cache = use_cache and self:new_cache(B) or nil
    local nxt -- the token drawn last, (B, 1)
    for _ = 1, n do
      local logits
      if cache then
        if nxt == nil or cache.len >= c.block_size then
          -- (re)fill the cache from the tail of the sequence
          local keep = nxt == nil and math.min(seq.shape[2], c.block_size) or c.block_size // 2
          keep = math.max(keep, 1)
          cache.len = 0
          logits = self(seq:narrow(2, seq.shape[2] - keep + 1, keep), {cache = cache, last_only = true})
        else
          logits = self(nxt, {cache = cache, last_only = true})
        end
      else
        local T = seq.shape[2]
        local ctx = T > c.block_size and seq:narrow(2, T - c.block_size + 1, c.block_size) or seq
        logits = self(ctx, {last_only = true})
      end
      nxt = G.sample(logits:select(2, 1), temperature, top_k)
      seq = dl.cat({seq, nxt}, 2)
    end
    return seq
  end)
  self:train(was_training)
  if not ok then error(res, 0) end
  return res
end

-- nanoGPT's optimizer: AdamW with weight decay on the parameters of 2 or more
-- dimensions (matrices, embeddings) and none on biases and LayerNorm weights.
function GPT:configure_optimizers(opts)
  opts = util.check_options(opts, "configure_optimizers", {"weight_decay", "lr", "betas", "eps"})
  local decay, no_decay = {}, {}
  for _, p in ipairs(self:parameters()) do
    if p:dim() >= 2 then decay[#decay + 1] = p else no_decay[#no_decay + 1] = p end
  end
  local groups = {{params = decay, weight_decay = opts.weight_decay or 0.1}}
  if #no_decay > 0 then groups[2] = {params = no_decay, weight_decay = 0.0} end
  return dl.optim.AdamW(groups, {lr = opts.lr or 6e-4, betas = opts.betas or {0.9, 0.95}, eps = opts.eps})
end

return G
