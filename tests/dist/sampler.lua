-- sampler.lua - DistributedSampler and DataLoader{sampler=} under mpirun
-- (tests/sh/test_distributed.sh): the ranks' shares cover the data set, have
-- equal lengths, follow one permutation per epoch on every rank, and
-- set_epoch reshuffles.
local dl = require "dl"
local T = require "testlib"
local dist = dl.distributed
local D = dl.data

local H = dofile((debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or ".") .. "/distlib.lua")
local rank, world = H.rank, H.world

local N = 10
local ds = D.TensorDataset(dl.arange(1, N + 1, {dtype = dl.int64}))

-- every rank's index list (equal lengths checked first)
local function gather(list)
  local len = dl.tensor({#list}, {dtype = dl.int64})
  local lens = {}
  for r = 1, world do lens[r] = dl.zeros({1}, {dtype = dl.int64}) end
  dist.all_gather(lens, len)
  for r = 1, world do T.eq(lens[r]:item(), #list, "rank " .. (r - 1) .. "'s share length") end
  if #list == 0 then return {} end
  local all = {}
  for r = 1, world do all[r] = dl.zeros({#list}, {dtype = dl.int64}) end
  dist.all_gather(all, dl.tensor(list, {dtype = dl.int64}))
  for r = 1, world do all[r] = all[r]:tolist() end
  return all
end

for _, drop_last in ipairs {false, true} do
  T.case("shares cover the data set (drop_last=" .. tostring(drop_last) .. ")", function()
    local s = D.DistributedSampler(ds, {shuffle = true, seed = 0, drop_last = drop_last})
    local want = drop_last and (N // world) or ((N + world - 1) // world)
    T.eq(#s, want)
    for epoch = 0, 2 do
      s:set_epoch(epoch)
      local mine = s:indices()
      local all = gather(mine)
      local perm = dl._data.randperm(N, 0, epoch):tolist()
      local seen = {}
      for r = 1, world do
        for j, i in ipairs(all[r]) do
          T.eq(i, perm[((j - 1) * world + r - 1) % N + 1], "epoch " .. epoch .. ": one permutation on every rank")
          seen[i] = true
        end
      end
      local count = 0
      for i = 1, N do count = count + (seen[i] and 1 or 0) end
      T.eq(count, drop_last and want * world or N, "indices covered")
    end
  end)
end

T.case("set_epoch reshuffles", function()
  local s = D.DistributedSampler(ds, {seed = 3})
  local a = table.concat(s:indices(), ",")
  s:set_epoch(1)
  local b = table.concat(s:indices(), ",")
  local all = gather(s:indices())
  T.truthy(a ~= b or N <= 2, "epoch 1 differs from epoch 0 on rank " .. rank)
  T.eq(#all, world)
end)

T.case("no shuffle: strided shares in order", function()
  local s = D.DistributedSampler(ds, {shuffle = false})
  local mine = s:indices()
  T.eq(mine[1], rank + 1)
  if #mine > 1 then T.eq(mine[2], rank + 1 + world) end
end)

T.case("DataLoader{sampler=} yields this rank's share", function()
  local s = D.DistributedSampler(ds, {seed = 5})
  s:set_epoch(4)
  local loader = D.DataLoader(ds, {batch_size = 2, sampler = s})
  T.eq(#loader, (#s + 1) // 2)
  local got = {}
  for _, x in loader:iter() do
    for _, v in ipairs(x:tolist()) do got[#got + 1] = v end
  end
  T.eq(table.concat(got, ","), table.concat(s:indices(), ","))
  T.raises(function() D.DataLoader(ds, {sampler = s, shuffle = true}) end, "mutually exclusive")
  T.raises(function() D.DistributedSampler(ds, {rank = world, num_replicas = world}) end, "out of range")
end)

T.done()
