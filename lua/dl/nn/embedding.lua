-- dl.nn embedding layers: Embedding and EmbeddingBag (PyTorch's
-- torch/nn/modules/sparse.py), with their from_pretrained constructors.
--
--   local emb = dl.nn.Embedding(10000, 256, {padding_idx = 1})
--   local bag = dl.nn.EmbeddingBag(10000, 256, {mode = "sum"})
--   emb(ids)                       -- ids: int64, any shape -> (*, 256)
--   bag(ids, offsets, weights)     -- 1-D ids with offsets, or 2-D ids
--
-- Ids, offsets and padding_idx are 1-based, like every index in dlua (a
-- model converted from PyTorch shifts its token ids, offsets and
-- padding_idx by one); a negative padding_idx counts from the end and is
-- kept as the positive 1-based row.  Weights are drawn from N(0, 1), the
-- padding row zeroed, as PyTorch; state_dict holds "weight".  sparse=true is
-- refused (no sparse gradients).  Unknown options are errors.
local dl = require "dl"
local util = require "dl.util"
local Module = require "dl.nn.module"
local F = require "dl.nn.functional"
local init = require "dl.nn.initializers"

local fail, pyrepr = util.fail, util.pyrepr
local Parameter = Module.Parameter

local E = {}

local COMMON = {"padding_idx", "max_norm", "norm_type", "scale_grad_by_freq", "sparse"}

local function with(list, ...)
  local t = {table.unpack(list)}
  for _, v in ipairs({...}) do t[#t + 1] = v end
  return t
end

-- The shared options into self (padding_idx checked against num rows and
-- made positive).
local function set_common(self, opts, op)
  local num = self.num_embeddings
  if opts.padding_idx ~= nil then
    local p = util.check_int(opts.padding_idx, op, "padding_idx")
    if p == 0 or p < -num or p > num then
      fail("%s: padding_idx must be within 1..%d (or -%d..-1 from the end), got %d", op, num, num, p)
    end
    self.padding_idx = p > 0 and p or num + p + 1
  end
  if opts.max_norm ~= nil then
    self.max_norm = util.check_number(opts.max_norm, op, "max_norm")
    if not (self.max_norm > 0) then fail("%s: max_norm must be positive, got %s", op, pyrepr(self.max_norm)) end
  end
  self.norm_type = opts.norm_type == nil and 2.0 or util.check_number(opts.norm_type, op, "norm_type")
  self.scale_grad_by_freq = util.opt_bool(opts.scale_grad_by_freq, false, op, "scale_grad_by_freq")
  self.sparse = util.opt_bool(opts.sparse, false, op, "sparse")
  if self.sparse then fail("%s: sparse=true is not supported (dlua has no sparse gradients)", op) end
end

-- The weight: _weight (num, dim) as given, or N(0, 1) with the padding row
-- zeroed; _freeze leaves it without gradient.
local function set_weight(self, opts, op)
  local w = opts._weight
  if w ~= nil then
    if not dl.is_tensor(w) or w:dim() ~= 2 or w.shape[1] ~= self.num_embeddings
        or w.shape[2] ~= self.embedding_dim then
      fail("%s: _weight must be a tensor of shape (%d, %d)", op, self.num_embeddings, self.embedding_dim)
    end
  else
    w = dl.empty({self.num_embeddings, self.embedding_dim}, Module.factory_kwargs(opts))
  end
  self:register_parameter("weight", Parameter(w, not util.opt_bool(opts._freeze, false, op, "_freeze")))
  if opts._weight == nil then self:reset_parameters() end
end

local function reset_parameters(self)
  init.normal_(self.weight)
  if self.padding_idx ~= nil then
    dl.no_grad(function() self.weight[self.padding_idx]:fill_(0) end)
  end
end

local function options(self)
  return {padding_idx = self.padding_idx, max_norm = self.max_norm, norm_type = self.norm_type,
    scale_grad_by_freq = self.scale_grad_by_freq}
end

-- PyTorch's extra_repr: padding_idx first for Embedding, after the mode for
-- EmbeddingBag (mode is nil for Embedding)
local function common_repr(self, mode)
  local s = string.format("%d, %d", self.num_embeddings, self.embedding_dim)
  local pad = self.padding_idx ~= nil and ", padding_idx=" .. self.padding_idx or ""
  if not mode then s = s .. pad end
  if self.max_norm ~= nil then s = s .. ", max_norm=" .. pyrepr(self.max_norm) end
  if self.norm_type ~= 2 then s = s .. ", norm_type=" .. pyrepr(self.norm_type) end
  if self.scale_grad_by_freq then s = s .. ", scale_grad_by_freq=True" end
  if mode then s = s .. ", mode=" .. mode .. pad end
  return s
end

-- from_pretrained(embeddings, opts) for class cls: the rows and columns of
-- a 2-D tensor, which becomes the weight (shared, not copied).
local function from_pretrained(cls, op, embeddings, opts, allowed)
  opts = util.check_options(opts, op, allowed)
  if not dl.is_tensor(embeddings) or embeddings:dim() ~= 2 then
    fail("%s: embeddings must be a 2-D tensor", op)
  end
  local o = {}
  for k, v in pairs(opts) do if k ~= "freeze" then o[k] = v end end
  o._weight = embeddings
  o._freeze = util.opt_bool(opts.freeze, true, op, "freeze")
  return cls(embeddings.shape[1], embeddings.shape[2], o)
end

-- --- Embedding ---------------------------------------------------------------

-- Embedding(num_embeddings, embedding_dim, {padding_idx=, max_norm=,
-- norm_type=2, scale_grad_by_freq=false, sparse=false, dtype=, device=})
E.Embedding = Module:extend("Embedding")
function E.Embedding:__init(num_embeddings, embedding_dim, opts)
  local op = "Embedding"
  opts = util.check_options(opts, op, with(COMMON, "_weight", "_freeze", "dtype", "device"))
  self.num_embeddings = util.check_int(num_embeddings, op, "num_embeddings", 0)
  self.embedding_dim = util.check_int(embedding_dim, op, "embedding_dim", 0)
  set_common(self, opts, op)
  set_weight(self, opts, op)
end
E.Embedding.reset_parameters = reset_parameters

function E.Embedding:forward(input)
  if not dl.is_tensor(input) then fail("Embedding: input must be a tensor of ids, got %s", type(input)) end
  return F.embedding(input, self.weight, options(self))
end

function E.Embedding:extra_repr()
  return common_repr(self)
end

-- Embedding.from_pretrained(embeddings, {freeze=true, padding_idx=, max_norm=,
-- norm_type=, scale_grad_by_freq=, sparse=})
function E.Embedding.from_pretrained(embeddings, opts)
  return from_pretrained(E.Embedding, "Embedding.from_pretrained", embeddings, opts, with(COMMON, "freeze"))
end

-- --- EmbeddingBag ------------------------------------------------------------

local MODES = {"sum", "mean", "max"}

-- EmbeddingBag(num_embeddings, embedding_dim, {mode="mean", padding_idx=,
-- include_last_offset=false, max_norm=, norm_type=2, scale_grad_by_freq=false,
-- sparse=false, dtype=, device=})
E.EmbeddingBag = Module:extend("EmbeddingBag")
function E.EmbeddingBag:__init(num_embeddings, embedding_dim, opts)
  local op = "EmbeddingBag"
  opts = util.check_options(opts, op,
    with(COMMON, "mode", "include_last_offset", "_weight", "_freeze", "dtype", "device"))
  self.num_embeddings = util.check_int(num_embeddings, op, "num_embeddings", 0)
  self.embedding_dim = util.check_int(embedding_dim, op, "embedding_dim", 0)
  set_common(self, opts, op)
  self.mode = util.check_string(opts.mode or "mean", op, "mode", MODES)
  self.include_last_offset = util.opt_bool(opts.include_last_offset, false, op, "include_last_offset")
  set_weight(self, opts, op)
end
E.EmbeddingBag.reset_parameters = reset_parameters

-- bag(input, offsets, per_sample_weights): PyTorch's forward arguments
function E.EmbeddingBag:forward(input, offsets, per_sample_weights)
  if not dl.is_tensor(input) then fail("EmbeddingBag: input must be a tensor of ids, got %s", type(input)) end
  local o = options(self)
  o.mode = self.mode
  o.include_last_offset = self.include_last_offset
  o.per_sample_weights = per_sample_weights
  return F.embedding_bag(input, self.weight, offsets, o)
end

function E.EmbeddingBag:extra_repr()
  return common_repr(self, self.mode)
end

-- EmbeddingBag.from_pretrained(embeddings, {freeze=true, mode=, padding_idx=,
-- include_last_offset=, max_norm=, norm_type=, scale_grad_by_freq=, sparse=})
function E.EmbeddingBag.from_pretrained(embeddings, opts)
  return from_pretrained(E.EmbeddingBag, "EmbeddingBag.from_pretrained", embeddings, opts,
    with(COMMON, "freeze", "mode", "include_last_offset"))
end

return E
