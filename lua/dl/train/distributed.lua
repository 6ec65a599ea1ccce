-- dl.train.distributed: what a training program does differently when it
-- is one of several processes (mpirun -np N dlua scripts/train_resnet.lua,
-- srun, or --distributed), following PyTorch's ImageNet example:
--
--   local ctx = tdist.setup(o)        -- nil when not distributed
--   device = tdist.device(ctx, device) -- "cuda" -> "cuda:<LOCAL_RANK>"
--   local per = tdist.per_rank(ctx, o.batch_size)
--   local mean, stop = tdist.step_sync(ctx, loss, stop_here)
--   tdist.print(ctx, ...)  tdist.out(ctx)  tdist.prefix(ctx)
--   tdist.report_failure(ctx, message) -- before exiting on an error
--
-- Invariants: every rank makes the same decisions (stop, die on a
-- non-finite loss) because they are taken on values all-reduced in one
-- float64 collective per step; only rank 0 prints, plots and writes
-- checkpoints, after a barrier; ranks are 0-based.
local dl = require "dl"

local M = {}

-- Initialises the process group when a launcher started several processes
-- or o.distributed is set; returns {rank, world, local_rank, main} or nil.
function M.setup(o)
  local dist = dl.distributed
  local env = dist.launcher_env()
  if not o.distributed and not (env and env.world_size > 1) then return nil end
  local backend = o.dist_backend
  if backend == "auto" then backend = "mpi" end -- CUDA tensors go through host buffers
  local ok, err = pcall(dist.init_process_group, {backend = backend, timeout = o.dist_timeout})
  if not ok then error(tostring(err):gsub("^[^:\n]*:%d+: ", ""), 0) end -- one line, no position
  local ctx = {rank = dist.get_rank(), world = dist.get_world_size(), local_rank = dist.get_local_rank()}
  ctx.main = ctx.rank == 0
  return ctx
end

-- One GPU per process: LOCAL_RANK picks it.
function M.device(ctx, device)
  if ctx and device == "cuda" then return "cuda:" .. ctx.local_rank end
  return device
end

-- The per-process share of a global count (batch size, loader threads).
function M.per_rank(ctx, n)
  if not ctx then return n end
  return math.max(1, (n + ctx.world - 1) // ctx.world)
end

-- The mean loss over ranks and whether any rank wants to stop: one
-- all-reduce of {loss, stop} per step.
local buf
function M.step_sync(ctx, loss, stop)
  if not ctx then return loss, stop end
  buf = buf or dl.zeros(2, {dtype = dl.float64})
  buf[1] = loss
  buf[2] = stop and 1 or 0
  dl.distributed.all_reduce(buf)
  local v = buf:tolist()
  return v[1] / ctx.world, v[2] > 0
end

local null = {write = function() end, flush = function() end}
-- Where progress goes: stdout on rank 0, nowhere elsewhere.
function M.out(ctx) return (ctx and not ctx.main) and null or io.stdout end
function M.is_main(ctx) return ctx == nil or ctx.main end
function M.print(ctx, ...) if M.is_main(ctx) then print(...) end end
-- "[rank r/N] " before a message, when distributed
function M.prefix(ctx) return ctx and string.format("[rank %d/%d] ", ctx.rank, ctx.world) or "" end
function M.barrier(ctx) if ctx then dl.distributed.barrier() end end
-- This rank gives up with message (the guard of a program that catches its
-- errors): the other ranks fail at once naming it, instead of at the timeout.
function M.report_failure(ctx, message)
  if ctx and dl.distributed.is_initialized() then dl.distributed.report_failure(message) end
end
function M.finish(ctx) if ctx and dl.distributed.is_initialized() then dl.distributed.destroy_process_group() end end

return M
