-- syncbn.lua - SyncBatchNorm under mpirun -np N (tests/sh/test_distributed.sh)
-- and alone on the "local" backend (tests/lua/test_dist_syncbn_local.lua):
-- N ranks at batch B/N, wrapped in DistributedDataParallel, give one
-- process's BatchNorm at batch B (outputs, running statistics, parameters
-- after SGD steps; 2-D, 3-D and 4-D inputs, affine or not); evaluation uses
-- the running statistics; convert_sync_batchnorm replaces nested batch norms
-- keeping their tensors; uneven batches with far-apart rank means give the
-- whole batch's statistics; at world size 1 the synchronised path's gradients
-- pass a float64 finite-difference check.
local dl = require "dl"
local T = require "testlib"
local nn = dl.nn

local H = dofile((debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or ".") .. "/distlib.lua")
local rank, world = H.rank, H.world
local DDP = nn.parallel.DistributedDataParallel
local SyncBN = nn.SyncBatchNorm

local function params_of(m)
  local out = {}
  for _, p in ipairs(m:parameters()) do out[#out + 1] = p end
  return out
end

local crit = nn.CrossEntropyLoss()

-- nets: {name, builder(seed) -> net with batch norms, input shape per sample}
local NETS = {
  {"BatchNorm2d", function()
    return nn.Sequential(nn.Conv2d(2, 4, 3, {padding = 1}), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
      nn.Linear(4 * 4 * 4, 5))
  end, {2, 4, 4}},
  {"BatchNorm1d (N, C)", function()
    return nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8, {momentum = false}), nn.ReLU(), nn.Linear(8, 5))
  end, {6}},
  {"BatchNorm1d (N, C, L) without affine", function()
    return nn.Sequential(nn.Conv1d(3, 4, 3), nn.BatchNorm1d(4, {affine = false}), nn.Flatten(), nn.Linear(4 * 5, 5))
  end, {3, 7}},
}

for _, case in ipairs(NETS) do
  local name, build, sample = case[1], case[2], case[3]
  T.case(string.format("%d ranks at B/%d with SyncBatchNorm = 1 process at B (%s)", world, world, name), function()
    local per = 3
    local B = per * world
    dl.manual_seed(40)
    local shape = {B}
    for i, s in ipairs(sample) do shape[i + 1] = s end
    local X = dl.randn(shape) * 2 + 1
    local Y = dl.randint(1, 6, {B}, {dtype = dl.int64})
    dl.manual_seed(7)
    local ref = build()
    dl.manual_seed(7)
    local net = SyncBN.convert(build())
    local model = DDP(net)
    local ro = dl.optim.SGD(ref:parameters(), {lr = 0.1, momentum = 0.9})
    local o = dl.optim.SGD(model:parameters(), {lr = 0.1, momentum = 0.9})
    local bn_ref, bn = ref[2], net[2]
    T.eq(bn:_get_name(), "SyncBatchNorm")
    for step = 1, 3 do
      ro:zero_grad()
      local yr = ref(X)
      crit(yr, Y):backward()
      ro:step()
      o:zero_grad()
      local mine = X:narrow(1, rank * per + 1, per)
      local y = model(mine)
      T.tensor_eq(y:detach(), yr:detach():narrow(1, rank * per + 1, per), 1e-5, "outputs, step " .. step)
      crit(y, Y:narrow(1, rank * per + 1, per)):backward()
      o:step()
      for i, p in ipairs(params_of(net)) do
        T.tensor_eq(p:detach(), params_of(ref)[i]:detach(), 1e-5, "parameter " .. i .. ", step " .. step)
        H.same_everywhere(p, "parameter " .. i .. ", step " .. step)
      end
      T.tensor_eq(bn.running_mean, bn_ref.running_mean, 1e-5, "running_mean, step " .. step)
      T.tensor_eq(bn.running_var, bn_ref.running_var, 1e-5, "running_var, step " .. step)
      T.eq(bn.num_batches_tracked:item(), step)
    end
    -- evaluation: the running statistics, no communication
    ref:eval()
    net:eval()
    local mine = X:narrow(1, rank * per + 1, per)
    T.tensor_eq(net(mine), ref(X):narrow(1, rank * per + 1, per), 1e-5, "evaluation")
  end)
end

T.case("convert_sync_batchnorm replaces nested batch norms and keeps their tensors", function()
  local inner = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4, {eps = 1e-3, momentum = 0.2}))
  local net = nn.Sequential(nn.BatchNorm1d(3), inner, nn.ReLU())
  net[1]:eval()
  local w, rm = inner[2].weight, inner[2].running_mean
  local out = SyncBN.convert_sync_batchnorm(net)
  T.truthy(out == net, "the root is kept when it is not a batch norm")
  T.eq(net[1]:_get_name(), "SyncBatchNorm")
  T.eq(inner[2]:_get_name(), "SyncBatchNorm")
  T.truthy(inner[2].weight == w and inner[2].running_mean == rm, "the same parameter and buffer tensors")
  T.eq(inner[2].eps, 1e-3)
  T.eq(inner[2].momentum, 0.2)
  T.eq(net[1].training, false)
  T.eq(net[3]:_get_name(), "ReLU")
  local root = SyncBN.convert(nn.BatchNorm2d(5))
  T.eq(root:_get_name(), "SyncBatchNorm")
  T.raises(function() SyncBN.convert(42) end, "a Module is required")
  T.raises(function() SyncBN(3)(dl.ones(3)) end, "at least 2D input")
end)

-- Ranks with different batch sizes and far-apart means: the gathered
-- (count, mean, variance) combine into the whole batch's statistics.
T.case("uneven batches and far-apart rank means: the whole batch's statistics", function()
  dl.manual_seed(41)
  local sizes, first, total = {}, {}, 0
  for r = 1, world do
    sizes[r], first[r] = r, total + 1
    total = total + r
  end
  local X = dl.randn(total, 3, 4, 4)
  for r = 1, world do -- rank r's samples centred at 100 * r
    dl.no_grad(function() X:narrow(1, first[r], sizes[r]):add_(100 * r) end)
  end
  local ref, bn = nn.BatchNorm2d(3), SyncBN(3)
  local mine = X:narrow(1, first[rank + 1], sizes[rank + 1])
  local y, yr = bn(mine), ref(X)
  T.tensor_eq(y:detach(), yr:detach():narrow(1, first[rank + 1], sizes[rank + 1]), 1e-4, "outputs")
  T.tensor_eq(bn.running_mean, ref.running_mean, 1e-4, "running mean")
  T.tensor_eq(bn.running_var, ref.running_var, 1e-3, "running variance")
end)

if world == 1 then
  T.case("the synchronised path's gradients: float64 finite differences", function()
    dl.manual_seed(3)
    local bn = SyncBN(3, {dtype = dl.float64})
    dl.no_grad(function()
      bn.weight:copy_(dl.rand(3, {dtype = dl.float64}) + 0.5)
      bn.bias:copy_(dl.randn(3, {dtype = dl.float64}))
    end)
    local x = dl.randn(4, 3, 2, {dtype = dl.float64}):requires_grad_()
    T.truthy(dl.autograd.gradcheck(function(a, w, b)
      bn.weight, bn.bias = w, b
      return bn(a)
    end, {x, bn.weight, bn.bias}))
  end)
end

T.done()
