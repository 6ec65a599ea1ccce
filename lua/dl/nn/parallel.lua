-- dl.nn.parallel: DistributedDataParallel (PyTorch's torch.nn.parallel) and
-- SyncBatchNorm (torch.nn.SyncBatchNorm; also dl.nn.SyncBatchNorm).
--
--   local model = dl.nn.parallel.DistributedDataParallel(net, {bucket_cap_mb = 25})
--   local loss = crit(model(x), y); loss:backward()   -- gradients averaged over ranks
--   do local _ <close> = model:no_sync() ... end       -- accumulate locally
--
-- At construction every rank checks that all ranks hold the same parameter
-- names, shapes and dtypes (the error names the first differing rank and
-- parameter) and takes rank 0's parameters and buffers.  Gradients are
-- averaged during backward by the C reducer (src/dist/reducer.c): flat
-- buckets in reverse parameter order (first ~1 MB, then bucket_cap_mb),
-- each all-reduced as soon as its last gradient is ready, the last one
-- waited for before backward returns.  gradient_as_bucket_view = true (as
-- in PyTorch; default false) leaves each .grad as a view of its bucket
-- instead of a copy: one pass over the gradients less a step, but the next
-- synchronised backward overwrites a .grad kept from the step before.
-- forward arms the reducer when grad mode is on and no no_sync() is open.  broadcast_buffers (default true)
-- sends rank 0's buffers (batch-norm statistics) before every forward.
-- The wrapped net is self.module, so names and state_dict keys start with
-- "module." as in PyTorch; save model.module:state_dict() to get the net's.
local dl = require "dl"
local util = require "dl.util"
local Module = require "dl.nn.module"
local dist = require "dl.distributed"

local P = {}

local DDP = Module:extend("DistributedDataParallel")

-- FNV-1a over a string, in Lua's wrapping 64-bit integers
local function hash(s)
  local h = -3750763034362895579
  for i = 1, #s do h = (h ~ s:byte(i)) * 1099511628211 end
  return h
end

local function describe(name, t)
  return string.format("'%s' (%s %s)", name, tostring(t.dtype), table.concat(t.shape, "x"))
end

-- Every rank holds the same parameters (names, shapes, dtypes), or an error
-- naming the first rank and parameter that differ from rank 0.
local function check_same(names, tensors)
  local world = dist.get_world_size()
  local count = dl.tensor({#names}, {dtype = dl.int64})
  local counts = {}
  for r = 1, world do counts[r] = dl.zeros({1}, {dtype = dl.int64}) end
  dist.all_gather(counts, count)
  for r = 2, world do
    if counts[r]:item() ~= counts[1]:item() then
      util.fail("DistributedDataParallel: rank %d has %d parameters, rank 0 has %d", r - 1,
        counts[r]:item(), counts[1]:item())
    end
  end
  if #names == 0 then return end
  local h = {}
  for i, n in ipairs(names) do
    local t = tensors[i]
    h[i] = hash(n .. "|" .. tostring(t.dtype) .. "|" .. table.concat(t.shape, ","))
  end
  local mine = dl.tensor(h, {dtype = dl.int64})
  local all = {}
  for r = 1, world do all[r] = dl.zeros({#names}, {dtype = dl.int64}) end
  dist.all_gather(all, mine)
  local ref = all[1]:tolist()
  for r = 2, world do
    local other = all[r]:tolist()
    for i = 1, #names do
      if other[i] ~= ref[i] then
        util.fail("DistributedDataParallel: rank %d differs from rank 0 at parameter %d (%s on rank %d)",
          r - 1, i, describe(names[i], tensors[i]), dist.get_rank())
      end
    end
  end
end

-- Rank 0's values of tensors (in place), one broadcast per dtype and device:
-- the tensors are packed into one flat buffer and unpacked after.
local function broadcast_coalesced(tensors)
  local groups, order = {}, {}
  for _, t in ipairs(tensors) do
    local key = tostring(t.dtype) .. "@" .. tostring(t.device)
    if not groups[key] then
      groups[key] = {}
      order[#order + 1] = key
    end
    table.insert(groups[key], t)
  end
  dl.no_grad(function()
    for _, key in ipairs(order) do
      local g = groups[key]
      local flat = {}
      for i, t in ipairs(g) do flat[i] = t:reshape(-1) end
      local buf = dl.cat(flat)
      dist.broadcast(buf, 0)
      local off = 1
      for _, t in ipairs(g) do
        local n = t:numel()
        t:copy_(buf:narrow(1, off, n):view(t.shape))
        off = off + n
      end
    end
  end)
end

function DDP:__init(net, opts)
  opts = util.check_options(opts, "DistributedDataParallel",
    {"bucket_cap_mb", "find_unused_parameters", "broadcast_buffers", "first_bucket_mb",
     "gradient_as_bucket_view"})
  if not Module.is_module(net) then util.fail("DistributedDataParallel: a Module is required, got %s", type(net)) end
  if not dist.is_initialized() then
    util.fail("DistributedDataParallel: the process group is not initialized (call dist.init_process_group first)")
  end
  local cap = opts.bucket_cap_mb or 25
  util.check_number(cap, "DistributedDataParallel", "bucket_cap_mb")
  if cap <= 0 then util.fail("DistributedDataParallel: bucket_cap_mb must be > 0") end
  local first = opts.first_bucket_mb or 1
  util.check_number(first, "DistributedDataParallel", "first_bucket_mb")
  self.module = net
  local names, params = {}, {}
  for n, p in net:named_parameters() do
    if p.requires_grad then
      names[#names + 1] = n
      params[#params + 1] = p
    end
  end
  check_same(names, params)
  local state = {}
  for _, p in net:named_parameters() do state[#state + 1] = p end
  for _, b in net:named_buffers() do state[#state + 1] = b end
  if #state > 0 then broadcast_coalesced(state) end
  self._attrs.bucket_cap_mb = cap
  self._attrs.find_unused_parameters = opts.find_unused_parameters == true
  self._attrs.broadcast_buffers = opts.broadcast_buffers ~= false
  self._attrs.gradient_as_bucket_view = opts.gradient_as_bucket_view == true
  self._attrs._sync = true
  self._attrs._reducer = dl._dist.reducer(params, names, math.max(1, math.floor(cap * 2^20)),
    math.max(1, math.floor(first * 2^20)), opts.find_unused_parameters == true,
    opts.gradient_as_bucket_view == true)
end

function DDP:forward(...)
  local a = self._attrs
  if a.broadcast_buffers and dist.get_world_size() > 1 then
    local bufs = {}
    for _, b in self.module:named_buffers() do bufs[#bufs + 1] = b end
    if #bufs > 0 then broadcast_coalesced(bufs) end
  end
  if a._sync and dl.is_grad_enabled() then a._reducer:prepare() end
  return self.module(...)
end

-- local _ <close> = model:no_sync(): backwards inside accumulate gradients
-- locally; the first backward after it synchronises the accumulated sum.
function DDP:no_sync()
  local a = self._attrs
  local prev = a._sync
  a._sync = false
  return setmetatable({}, {__close = function() a._sync = prev end})
end

-- {buckets =, rebuilt =, iterations =, wait_s =, copy_s =} and bucket
-- membership (1-based parameter indices): for tests and benchmarks
function DDP:reducer_stats() return self._attrs._reducer:stats() end
function DDP:bucket(b) return self._attrs._reducer:bucket(b) end

function DDP:extra_repr()
  return string.format("bucket_cap_mb=%s, find_unused_parameters=%s, gradient_as_bucket_view=%s",
    util.pyrepr(self._attrs.bucket_cap_mb), tostring(self._attrs.find_unused_parameters),
    tostring(self._attrs.gradient_as_bucket_view))
end

P.DistributedDataParallel = DDP

-- --- SyncBatchNorm ------------------------------------------------------------------
-- Batch normalisation whose training statistics are the global batch's
-- (PyTorch's torch.nn.SyncBatchNorm): in training, with the process group
-- initialised, every rank's per-channel count, mean and variance are
-- gathered in one collective and combined in float64, so every rank
-- normalises with the same mean and variance and updates the same running
-- statistics; backward all-reduces the sums of gy and gy * xhat that the
-- input gradient needs.  The weight and bias gradients stay the rank's own
-- (DistributedDataParallel averages them, as it does every gradient).
-- Otherwise (evaluation with running statistics, no process group) it is
-- plain batch normalisation.  Any input of 2 or more dims, channels second.
--   local net = dl.nn.SyncBatchNorm.convert_sync_batchnorm(net)   -- also .convert

local SUM = dist.ReduceOp.SUM

-- every dim of x but the channels (the second)
local function reduce_dims(x)
  local d = {1}
  for i = 3, x:dim() do d[#d + 1] = i end
  return d
end

-- (1, C, 1, ...) for x's dims: a per-channel vector broadcast against x
local function channel_shape(x)
  local s = {1, x.shape[2]}
  for i = 3, x:dim() do s[i] = 1 end
  return s
end

local sync_bn = dl.autograd.Function{
  name = "SyncBatchNormBackward",
  -- stats (a table) receives the global mean, biased variance (float64) and
  -- element count per channel, for the running statistics
  forward = function(ctx, x, w, b, eps, stats)
    local dims, shape, C = reduce_dims(x), channel_shape(x), x.shape[2]
    -- this rank's element count, mean and biased variance per channel (half
    -- types in float32), every rank's gathered in one collective and
    -- combined in float64: mean = sum n_r mean_r / n, var = sum n_r (var_r +
    -- (mean_r - mean)^2) / n (the parallel variance of Chan et al.)
    local f64 = {dtype = dl.float64, device = x.device}
    local xs = (x.dtype == dl.float16 or x.dtype == dl.bfloat16) and x:float() or x
    local nr = x:numel() // C
    local mine = nr > 0 and
      dl.cat({dl.tensor({nr}, f64), xs:mean(dims):double(), xs:var(dims, {correction = 0}):double()}) or
      dl.zeros({2 * C + 1}, f64)
    local all = {}
    for r = 1, dist.get_world_size() do all[r] = dl.zeros({2 * C + 1}, f64) end
    dist.all_gather(all, mine)
    local g = dl.stack(all)
    local counts = g:narrow(2, 1, 1)
    local n = counts:sum():item()
    local means, vars = g:narrow(2, 2, C), g:narrow(2, C + 2, C)
    local mean = (counts * means):sum(1) / n
    local dev = means - mean
    local var = (counts * (vars + dev * dev)):sum(1) / n
    local xc = x - mean:to(x.dtype):view(shape)
    local invstd = (var + eps):rsqrt():to(x.dtype)
    local xhat = xc * invstd:view(shape)
    local y = xhat
    if w then y = y * w:view(shape) end
    if b then y = y + b:view(shape) end
    stats.mean, stats.var, stats.n = mean, var, n
    ctx:save_for_backward(xhat, invstd, w)
    ctx.n, ctx.dims, ctx.shape = n, dims, shape
    return y
  end,
  backward = function(ctx, gy)
    local xhat, invstd, w = table.unpack(ctx.saved_tensors)
    local dims, shape, n, C = ctx.dims, ctx.shape, ctx.n, gy.shape[2]
    local sdy, sdyx = gy:sum(dims), (gy * xhat):sum(dims)
    local need = ctx.needs_input_grad
    local gx
    if need[1] then
      local both = dl.cat({sdy, sdyx}):double()
      dist.all_reduce(both, {op = SUM})
      local mdy = (both:narrow(1, 1, C) / n):to(gy.dtype):view(shape)
      local mdyx = (both:narrow(1, C + 1, C) / n):to(gy.dtype):view(shape)
      local scale = invstd:view(shape)
      if w then scale = scale * w:view(shape) end
      gx = (gy - mdy - xhat * mdyx) * scale
    end
    return gx, need[2] and sdyx or nil, need[3] and sdy or nil
  end,
}

local layers = require "dl.nn.layers"
local F = require "dl.nn.functional"
local SyncBN = layers._BatchNorm:extend("SyncBatchNorm")

function SyncBN:_check_input_dim(x)
  if not dl.is_tensor(x) then util.fail("SyncBatchNorm: expected a tensor, got %s", type(x)) end
  if x:dim() < 2 then util.fail("SyncBatchNorm: expected at least 2D input (got %dD input)", x:dim()) end
end

function SyncBN:forward(x)
  local rm, rv, w, b, training, factor, eps = self:_bn_args(x)
  if not (training and dist.is_initialized()) then
    return F.batch_norm(x, rm, rv, w, b, training, factor, eps)
  end
  local stats = {}
  local y = sync_bn(x, w, b, eps, stats)
  if self.training and rm ~= nil then
    dl.no_grad(function()
      local unbiased = stats.n > 1 and stats.var * (stats.n / (stats.n - 1)) or stats.var
      rm:mul_(1 - factor):add_(stats.mean:to(rm.dtype) * factor)
      rv:mul_(1 - factor):add_(unbiased:to(rv.dtype) * factor)
    end)
  end
  return y
end

-- what the ResNet blocks call (BatchNorm's fused form, unfused here)
function SyncBN:forward_relu(x, residual)
  local y = self:forward(x)
  if residual ~= nil then y = y + residual end
  return F.relu(y)
end

-- module with every BatchNorm1d/2d in it (module itself too) replaced by a
-- SyncBatchNorm holding the same parameters, buffers and mode; returns the
-- (possibly new) root.
function SyncBN.convert_sync_batchnorm(module)
  if not Module.is_module(module) then
    util.fail("SyncBatchNorm.convert_sync_batchnorm: a Module is required, got %s", type(module))
  end
  local out = module
  if module:isinstance(layers._BatchNorm) and not module:isinstance(SyncBN) then
    out = SyncBN(module.num_features, {eps = module.eps, momentum = module.momentum,
      affine = module.affine, track_running_stats = module.track_running_stats})
    if module.affine then
      out.weight, out.bias = module.weight, module.bias
    end
    if module.track_running_stats then
      out.running_mean, out.running_var = module.running_mean, module.running_var
      out.num_batches_tracked = module.num_batches_tracked
    end
    out.training = module.training
  end
  for name, child in module:named_children() do
    local c = SyncBN.convert_sync_batchnorm(child)
    if c ~= child then out[name] = c end
  end
  return out
end
SyncBN.convert = SyncBN.convert_sync_batchnorm

P.SyncBatchNorm = SyncBN

return P
