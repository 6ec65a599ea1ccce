-- dl.sampler: index samplers for dl.data.DataLoader's `sampler` option
-- (exposed as dl.data.DistributedSampler).
--
--   local s = dl.data.DistributedSampler(ds, {shuffle = true, seed = 0, drop_last = false})
--   local loader = dl.data.DataLoader(ds, {batch_size = 32, sampler = s})
--   for epoch = 1, E do s:set_epoch(epoch); for i, x, y in loader:iter() do ... end end
--
-- A sampler is a table with __len and indices() returning the 1-based
-- dataset indices of one epoch.  DistributedSampler gives each rank
-- (num_replicas ranks; rank and num_replicas default to the process
-- group's) a disjoint, equal-length share: the epoch's order (a Philox
-- permutation of (seed, epoch), the same on every rank, or 1..n) padded by
-- repeating its start to a multiple of num_replicas (or, with drop_last,
-- cut to one), and rank r takes every num_replicas-th index from r + 1.
-- Ranks are 0-based, as everywhere in dl.distributed.
local dl = require "dl"
local util = require "dl.util"

local S = {}

local DistributedSampler = {}
DistributedSampler.__index = DistributedSampler
DistributedSampler.__name = "dl.data.DistributedSampler"
DistributedSampler.__len = function(self) return self.num_samples end

function S.DistributedSampler(dataset, opts)
  local name = "DistributedSampler"
  opts = util.check_options(opts, name, {"num_replicas", "rank", "shuffle", "seed", "drop_last"})
  local ok, n = pcall(function() return #dataset end)
  if not ok or math.type(n) ~= "integer" then util.fail("%s: the dataset has no length (__len)", name) end
  local dist = dl.distributed
  local function from_group(v, what, f)
    if v ~= nil then return util.check_int(v, name, what, 0) end
    if not dist.is_initialized() then
      util.fail("%s: %s not given and the process group is not initialized", name, what)
    end
    return f()
  end
  local replicas = from_group(opts.num_replicas, "num_replicas", dist.get_world_size)
  local rank = from_group(opts.rank, "rank", dist.get_rank)
  if replicas < 1 then util.fail("%s: num_replicas must be at least 1", name) end
  if rank >= replicas then
    util.fail("%s: rank %d is out of range (0-based, num_replicas %d)", name, rank, replicas)
  end
  local drop_last = util.opt_bool(opts.drop_last, false, name, "drop_last")
  local num_samples
  if drop_last and n % replicas ~= 0 then
    num_samples = (n - replicas + replicas - 1) // replicas -- ceil((n - R) / R)
    if num_samples < 0 then num_samples = 0 end
  else
    num_samples = (n + replicas - 1) // replicas
  end
  return setmetatable({
    n = n,
    num_replicas = replicas,
    rank = rank,
    shuffle = util.opt_bool(opts.shuffle, true, name, "shuffle"),
    seed = util.check_int(opts.seed or 0, name, "seed"),
    drop_last = drop_last,
    epoch = 0,
    num_samples = num_samples,
    total_size = num_samples * replicas,
  }, DistributedSampler)
end

function DistributedSampler:set_epoch(epoch)
  self.epoch = util.check_int(epoch, "DistributedSampler:set_epoch", "epoch", 0)
end

-- This rank's 1-based dataset indices for the current epoch.
function DistributedSampler:indices()
  local order
  if self.shuffle and self.n > 0 then
    order = dl._data.randperm(self.n, self.seed, self.epoch):tolist()
  else
    order = {}
    for i = 1, self.n do order[i] = i end
  end
  local total = self.total_size
  local k = #order
  local i = 1
  while #order < total and k > 0 do -- pad by repeating the start
    order[#order + 1] = order[i]
    i = i % k + 1
  end
  local out = {}
  for j = self.rank + 1, total, self.num_replicas do out[#out + 1] = order[j] end
  return out
end

function DistributedSampler:__tostring()
  return string.format("DistributedSampler(%d samples of %d, rank %d of %d, shuffle=%s)", self.num_samples, self.n,
    self.rank, self.num_replicas, tostring(self.shuffle))
end

return S
