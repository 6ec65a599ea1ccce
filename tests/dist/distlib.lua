-- distlib.lua - what the tests/dist scripts share, loaded with dofile from
-- their folder: one thread per rank, the process group joined (backend: the
-- global DL_TEST_BACKEND, else $DL_TEST_BACKEND, else "mpi"; 60 s timeout),
-- and a check that a tensor is bit-identical on every rank.
--   local H = dofile(dir .. "/distlib.lua")  -- H.rank, H.world, H.same_everywhere(t, what)
local dl = require "dl"
local T = require "testlib"
local dist = dl.distributed

local X = {}
dl.set_num_threads(1)
dist.init_process_group{backend = DL_TEST_BACKEND or os.getenv("DL_TEST_BACKEND") or "mpi", timeout = 60}
X.rank, X.world = dist.get_rank(), dist.get_world_size()

function X.same_everywhere(t, what)
  t = t:detach()
  local list = {}
  for r = 1, X.world do list[r] = dl.zeros(t.shape, {dtype = t.dtype}) end
  dist.all_gather(list, t)
  for r = 2, X.world do T.same_bits(list[r], list[1], what .. ": rank " .. (r - 1) .. " differs from rank 0") end
end

return X
