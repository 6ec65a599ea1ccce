-- bench_ddp.lua - DistributedDataParallel's scaling efficiency: one SGD
-- training step (forward, cross-entropy, backward, SGD-momentum step) of
-- --arch at --size x --size, --batch images per rank, --threads threads per
-- rank.  Run it under the launcher:
--
--   mpirun --oversubscribe -np 2 dlua scripts/bench_ddp.lua   # the README's figures
--   dlua scripts/bench_ddp.lua --device cuda                  # world size 1 (local): DDP's own cost
--
-- Rows (the step time is the mean over --steps after --warmup, the slowest
-- rank's, and the best of --rounds rounds that alternate the rows, so that
-- other load on a shared machine hits them alike):
--   single   rank 0 alone, no DDP (the other ranks wait in a sleeping barrier)
--   parallel every rank at once, no DDP, no communication (shared cores,
--            memory bandwidth: what the hardware alone costs)
--   ddp      every rank at once with DistributedDataParallel
--   ddp view the same with gradient_as_bucket_view (no copy out of the
--            buckets)
-- scaling efficiency = single / ddp (1.0: N ranks do N times the work in
-- the same time).  all-reduce: the time to all-reduce every gradient once,
-- alone; waited: the time backward blocked for buckets after its last
-- gradient (includes waiting for a slower rank); hidden = 1 - waited /
-- all-reduce, the share of the all-reduce done while backward ran.  added =
-- ddp - parallel, all DDP costs the step: on the CPU the reduction and the
-- bucket copies run on the rank's own core, so overlap hides the waiting,
-- not the work.
local parse = dofile((arg[0]:match("^(.*)/[^/]*$") or ".") .. "/benchopts.lua")
local opts = parse("bench_ddp", arg, {arch = "resnet18", batch = 32, size = 64, threads = 1, steps = 4,
  warmup = 1, rounds = 3, device = "cpu", backend = "auto", bucket = 25})
local dl = require "dl"
local dist = dl.distributed
local train = require "dl.train"

dl.set_num_threads(opts.threads)
dist.init_process_group{backend = opts.backend, timeout = 600}
local rank, world = dist.get_rank(), dist.get_world_size()
local device = opts.device
if device == "cuda" then device = "cuda:" .. dist.get_local_rank() end
local on_gpu = device ~= "cpu"

local function sync() if on_gpu then dl.cuda.synchronize() end end

local function new_model()
  dl.manual_seed(0)
  local m = train.models.build(opts.arch, 10)
  m:to({device = device})
  return m
end

dl.manual_seed(100 + rank)
local x = dl.randn(opts.batch, 3, opts.size, opts.size):to({device = device})
local y = dl.randint(1, 11, {opts.batch}, {dtype = dl.int64}):to({device = device})
local crit = dl.nn.CrossEntropyLoss()

-- mean seconds per step of net (which may be a DDP wrapper of model)
local function time_steps(net, model)
  local opt = dl.optim.SGD(model:parameters(), {lr = 0.01, momentum = 0.9})
  local t0
  for s = 1, opts.warmup + opts.steps do
    if s == opts.warmup + 1 then
      sync()
      t0 = dl.clock()
    end
    opt:zero_grad()
    crit(net(x), y):backward()
    opt:step()
  end
  sync()
  return (dl.clock() - t0) / opts.steps
end

-- the slowest rank's value
local function slowest(v)
  local t = dl.tensor({v}, {dtype = dl.float64})
  dist.all_reduce(t, {op = dist.ReduceOp.MAX})
  return t:item()
end

local plain = new_model()
local model = new_model()
local ddp = dl.nn.parallel.DistributedDataParallel(model, {bucket_cap_mb = opts.bucket})
local model_v = new_model()
local ddp_v = dl.nn.parallel.DistributedDataParallel(model_v, {bucket_cap_mb = opts.bucket,
  gradient_as_bucket_view = true})
local single, parallel, step_ddp, waited = math.huge, math.huge, math.huge, math.huge
local step_view = math.huge
for _ = 1, opts.rounds do
  dist.barrier()
  local t = dl.tensor({rank == 0 and time_steps(plain, plain) or 0}, {dtype = dl.float64})
  dist.barrier() -- the other ranks sleep in here meanwhile
  dist.broadcast(t, 0)
  single = math.min(single, t:item())
  if world > 1 then
    dist.barrier()
    parallel = math.min(parallel, slowest(time_steps(plain, plain)))
  end
  dist.barrier()
  local wait0 = ddp:reducer_stats().wait_s
  step_ddp = math.min(step_ddp, slowest(time_steps(ddp, model)))
  waited = math.min(waited, slowest((ddp:reducer_stats().wait_s - wait0) / (opts.warmup + opts.steps)))
  dist.barrier()
  step_view = math.min(step_view, slowest(time_steps(ddp_v, model_v)))
end
if world == 1 then parallel = single end
local st = ddp:reducer_stats()

-- every gradient all-reduced once, alone (one flat buffer per bucket)
local n = 0
for _, p in ipairs(model:parameters()) do n = n + p:numel() end
local flat = {}
for b = 1, st.buckets do
  local k = 0
  for _, i in ipairs(ddp:bucket(b)) do k = k + model:parameters()[i]:numel() end
  flat[b] = dl.zeros({k}, {device = device})
end
dist.barrier()
local reps = 5
local t0 = dl.clock()
for _ = 1, reps do
  for b = 1, #flat do dist.all_reduce(flat[b], {op = dist.ReduceOp.SUM}) end
end
sync()
local allreduce = slowest((dl.clock() - t0) / reps)

if rank == 0 then
  local ips = function(s) return world * opts.batch / s end
  print(string.format("bench_ddp: %s %dx%d, batch %d per rank, %d thread(s) per rank, %d rank(s) (%s), %s, %d buckets (cap %g MB), %.1f M parameters",
    opts.arch, opts.size, opts.size, opts.batch, opts.threads, world, dist.get_backend(), device, st.buckets,
    opts.bucket, n / 1e6))
  print(string.format("single    %8.1f ms/step  %7.1f img/s  (rank 0 alone, no DDP)", 1e3 * single, opts.batch / single))
  if world > 1 then
    print(string.format("parallel  %8.1f ms/step  %7.1f img/s  (%d ranks, no DDP, no communication)", 1e3 * parallel,
      ips(parallel), world))
  end
  print(string.format("ddp       %8.1f ms/step  %7.1f img/s  (%d ranks)", 1e3 * step_ddp, ips(step_ddp), world))
  print(string.format("ddp view  %8.1f ms/step  %7.1f img/s  (%d ranks, gradient_as_bucket_view)", 1e3 * step_view,
    ips(step_view), world))
  print(string.format("scaling efficiency %.3f (single / ddp), %.3f with gradient_as_bucket_view%s",
    single / step_ddp, single / step_view,
    world > 1 and string.format("; hardware alone %.3f (single / parallel)", single / parallel) or
    string.format("; DDP overhead at world size 1: %+.1f%%", 100 * (step_ddp / single - 1))))
  print(string.format("all-reduce of all gradients alone %.1f ms; waited after backward %.1f ms/step; hidden %.0f%%; "
    .. "added by DDP (ddp - parallel) %.1f ms/step", 1e3 * allreduce, 1e3 * waited,
    allreduce > 0 and 100 * math.max(0, 1 - waited / allreduce) or 100, 1e3 * math.max(0, step_ddp - parallel)))
  local sv = ddp_v:reducer_stats()
  print(string.format("gradient copies into and out of the buckets %.1f ms/step, %.1f with gradient_as_bucket_view "
    .. "(rank 0, mean over every DDP step)", 1e3 * st.copy_s / math.max(1, st.iterations),
    1e3 * sv.copy_s / math.max(1, sv.iterations)))
end
dist.destroy_process_group()
