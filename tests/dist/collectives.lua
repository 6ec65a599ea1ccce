-- collectives.lua - dl.distributed's collectives against closed forms, run
-- by tests/sh/test_distributed.sh under mpirun -np 2 and -np 4 (and once
-- alone with backend "local").  Every result is also gathered from every
-- rank and compared bit for bit.
local dl = require "dl"
local T = require "testlib"
local dist = dl.distributed

local H = dofile((debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or ".") .. "/distlib.lua")
local rank, world = H.rank, H.world
T.eq(tonumber(os.getenv("RANK")), rank, "RANK exported")
T.eq(tonumber(os.getenv("WORLD_SIZE")), world, "WORLD_SIZE exported")
T.truthy(dist.get_local_rank() >= 0 and dist.get_local_rank() < world, "local rank in range")

local same_everywhere = H.same_everywhere

-- rank r holds (r+1) * base: SUM = base * W(W+1)/2, MAX = W * base, MIN = base
local tri = world * (world + 1) / 2
for _, dt in ipairs {dl.float32, dl.float64, dl.int64} do
  local name = tostring(dt)
  local float = dt ~= dl.int64
  local base = float and dl.arange(1, 8, {dtype = dt}):mul(0.1):add(1 / 3) or dl.arange(1, 8, {dtype = dt})
  local function mine() return base:mul(rank + 1) end
  T.case(name .. " SUM", function()
    local t = mine()
    dist.all_reduce(t, {op = dist.ReduceOp.SUM})
    T.tensor_eq(t, base:mul(tri), float and 1e-6 or 0)
    same_everywhere(t, name .. " SUM")
  end)
  T.case(name .. " MAX/MIN", function()
    local t, u = mine(), mine()
    dist.all_reduce(t, {op = dist.ReduceOp.MAX})
    dist.all_reduce(u, {op = dist.ReduceOp.MIN})
    T.same_bits(t, base:mul(world), name .. " MAX")
    T.same_bits(u, base:mul(1), name .. " MIN")
  end)
  if float then
    T.case(name .. " AVG", function()
      local t = mine()
      dist.all_reduce(t, {op = dist.ReduceOp.AVG})
      T.tensor_eq(t, base:mul((world + 1) / 2), 1e-6)
      same_everywhere(t, name .. " AVG")
    end)
  else
    T.case("int64 AVG is refused", function()
      T.raises(function() dist.all_reduce(mine(), {op = "avg"}) end, "AVG needs a floating-point tensor")
    end)
  end
  T.case(name .. " broadcast", function()
    local root = world - 1
    local t = mine()
    dist.broadcast(t, root)
    T.same_bits(t, base:mul(root + 1), name .. " broadcast from the last rank")
  end)
  T.case(name .. " all_gather", function()
    local list = {}
    for r = 1, world do list[r] = dl.zeros({7}, {dtype = dt}) end
    dist.all_gather(list, mine())
    for r = 1, world do T.same_bits(list[r], base:mul(r), name .. " all_gather entry " .. r) end
  end)
end

T.case("non-contiguous tensor, written back in place", function()
  local m = dl.arange(0, 12, {dtype = dl.float32}):view(3, 4):add(rank)
  local v = m:t()
  dist.all_reduce(v)
  local want = dl.arange(0, 12, {dtype = dl.float32}):view(3, 4):mul(world):add(tri - world)
  T.tensor_eq(m, want, 0)
end)

T.case("large float32 sum (ring algorithms)", function()
  local n = 1 << 20
  local t = dl.full({n}, rank + 0.5)
  dist.all_reduce(t)
  T.eq(t:min():item(), tri - world / 2)
  T.eq(t:max():item(), tri - world / 2)
  same_everywhere(t, "large sum")
end)

T.case("errors name the argument", function()
  T.raises(function() dist.broadcast(dl.zeros(2), world) end, "src rank " .. world .. " is out of range")
  T.raises(function() dist.all_reduce(dl.zeros(2), {op = "prod"}) end, "all_reduce: op must be")
  T.raises(function() dist.all_gather({}, dl.zeros(2)) end, "tensor_list has 0 entries")
  T.raises(function() dist.init_process_group{backend = "mpi"} end, "already initialized")
end)

T.case("report_failure", function()
  T.raises(function() dist.report_failure(42) end, "report_failure: message must be a string")
  if world == 1 then -- nobody to tell: the group goes on
    dist.report_failure("nothing wrong")
    local t = dl.ones(2)
    dist.all_reduce(t)
    T.tensor_eq(t, dl.ones(2), 0)
  end
end)

dist.barrier()
T.case("destroy", function()
  dist.destroy_process_group()
  T.eq(dist.is_initialized(), false)
  T.raises(function() dist.get_rank() end, "not initialized")
  dist.report_failure("after destroy: nothing to tell")
end)
T.done()
