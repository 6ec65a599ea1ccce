-- dl.distributed: data-parallel training across processes (PyTorch's
-- torch.distributed, the Lua way).
--
--   local dist = dl.distributed
--   dist.init_process_group{backend = "auto", timeout = 1800}
--   dist.get_rank(), dist.get_world_size(), dist.get_local_rank()
--   dist.all_reduce(t, {op = dist.ReduceOp.SUM}); dist.broadcast(t, 0)
--   dist.all_gather(list, t); dist.barrier(); dist.destroy_process_group()
--
-- RANKS ARE 0-BASED, as every launcher (mpirun, srun) numbers them: this is
-- the one place dlua is not 1-based.  Backends: "local" (world size 1,
-- always built), "mpi" (the plugin dlua_dist_mpi.so, built when MPI is
-- found), "nccl" (a plugin, when built); "auto" picks "mpi" when a launcher
-- started several processes, else "local".  Every collective has a sequence
-- number and runs under the group's timeout: a rank that died or skipped a
-- collective makes the others fail with a message naming the rank, the
-- collective and its number.  A rank that fails on an error (dlua reports
-- an error that ends the script; see report_failure) or exits without
-- destroy_process_group tells the others, which fail at once.  DLUA_DIST_DEBUG=1 checks that every rank
-- issues the same collective (op, dtype, count) and names the first that
-- does not.  After init, RANK, WORLD_SIZE and LOCAL_RANK are exported.
local dl = require "dl"
local util = require "dl.util"
local C = dl._dist

local M = {}

M.ReduceOp = {SUM = "sum", AVG = "avg", MAX = "max", MIN = "min"}
local valid_op = {sum = true, avg = true, max = true, min = true}

function M.init_process_group(opts)
  opts = util.check_options(opts, "init_process_group", {"backend", "timeout"})
  local backend = opts.backend or "auto"
  if type(backend) ~= "string" then util.fail("init_process_group: backend must be a string") end
  local timeout = opts.timeout or 1800
  util.check_number(timeout, "init_process_group", "timeout")
  if timeout <= 0 then util.fail("init_process_group: timeout must be > 0 seconds") end
  local ok, err = pcall(C.init, backend, timeout)
  if not ok then error(tostring(err):gsub("^[^:\n]*:%d+: ", ""), 2) end -- the caller's position
end

M.is_initialized = C.is_initialized
M.get_rank = C.rank
M.get_world_size = C.world_size
M.get_local_rank = C.local_rank
M.get_backend = C.backend
M.barrier = C.barrier
M.destroy_process_group = C.destroy
-- seconds this process spent blocked waiting for collectives since init
M.wait_seconds = C.wait_seconds

-- dist.report_failure(message): this rank cannot go on.  Every other rank
-- fails its pending or next collective at once with an error naming this
-- rank and message's first line, instead of waiting for the timeout; this
-- process's exit then waits (under the timeout) until every peer has heard,
-- and ends the job.  dlua calls it for an error that ends the script; a
-- script that catches its errors and exits itself calls it before exiting.
-- Does nothing without a process group or at world size 1.
function M.report_failure(message)
  if message ~= nil and type(message) ~= "string" then
    util.fail("report_failure: message must be a string, got %s", type(message))
  end
  C.report_failure(message or "(no message)")
end

-- The launcher's view before init: {rank =, world_size =, local_rank =}
-- from Open MPI, MPICH/PMI, Slurm or torchrun-style variables, or nil when
-- no launcher started this process.
function M.launcher_env()
  local function int(...)
    for _, k in ipairs {...} do
      local v = tonumber(os.getenv(k) or "")
      if v then return math.tointeger(v) end
    end
  end
  local size = int("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_NTASKS", "WORLD_SIZE")
  if not size then return nil end
  return {
    world_size = size,
    rank = int("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID", "RANK") or 0,
    local_rank = int("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "LOCAL_RANK") or 0,
  }
end

function M.all_reduce(t, opts)
  opts = util.check_options(opts, "all_reduce", {"op"})
  if not dl.is_tensor(t) then util.fail("all_reduce: a tensor is required, got %s", type(t)) end
  local op = opts.op or "sum"
  if not valid_op[op] then util.fail("all_reduce: op must be one of dist.ReduceOp's values, got %s", tostring(op)) end
  return C.all_reduce(t, op)
end

function M.broadcast(t, src)
  if not dl.is_tensor(t) then util.fail("broadcast: a tensor is required, got %s", type(t)) end
  src = util.check_int(src, "broadcast", "src (a 0-based rank)", 0)
  return C.broadcast(t, src)
end

function M.all_gather(list, t)
  if type(list) ~= "table" then util.fail("all_gather: tensor_list (a table) is required") end
  if not dl.is_tensor(t) then util.fail("all_gather: a tensor is required, got %s", type(t)) end
  return C.all_gather(list, t)
end

return M
