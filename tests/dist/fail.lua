-- fail.lua - failures under mpirun -np 2 (tests/sh/test_distributed_fail.sh),
-- chosen by DL_TEST_MODE; every mode must end the job within seconds:
--   hang   rank 1 stops issuing collectives (sleeps) mid-training
--   exit   rank 1 exits (status 3) mid-training
--   kill   rank 1 dies of SIGKILL mid-training
--   debug  rank 1 issues a broadcast where rank 0 issues an all-reduce
--          (run with DLUA_DIST_DEBUG=1)
local dl = require "dl"
local dist = dl.distributed
local nn = dl.nn

dl.set_num_threads(1)
dist.init_process_group{backend = "mpi", timeout = tonumber(os.getenv("DL_TEST_TIMEOUT") or "2")}
local rank = dist.get_rank()
local mode = os.getenv("DL_TEST_MODE")

if mode == "debug" then
  local t = dl.ones(4)
  if rank == 1 then dist.broadcast(t, 0) else dist.all_reduce(t) end
  print("not reached")
  os.exit(0)
end

dl.manual_seed(1)
local net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
local model = nn.parallel.DistributedDataParallel(net)
local opt = dl.optim.SGD(model:parameters(), {lr = 0.1})
for step = 1, 20 do
  if rank == 1 and step == 4 then
    io.stdout:flush()
    if mode == "hang" then
      os.execute("sleep 30")
    elseif mode == "exit" then
      os.exit(3)
    elseif mode == "kill" then
      local f = io.open("/proc/self/stat")
      local pid = f:read("n")
      f:close()
      os.execute("kill -9 " .. math.tointeger(pid))
    end
  end
  opt:zero_grad()
  model(dl.randn(4, 4)):sum():backward()
  opt:step()
  print(string.format("rank %d step %d", rank, step))
end
print("finished rank " .. rank)
