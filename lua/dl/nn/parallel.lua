-- dl.nn.parallel: DistributedDataParallel (PyTorch's torch.nn.parallel).
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

return P
