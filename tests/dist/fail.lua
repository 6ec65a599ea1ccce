-- fail.lua - failures under mpirun -np 2 (tests/sh/test_distributed_fail.sh),
-- chosen by DL_TEST_MODE; every mode must end the job within seconds:
--   hang   rank 1 stops issuing collectives (sleeps) mid-training
--   exit   rank 1 exits (status 3) mid-training
--   kill   rank 1 dies of SIGKILL mid-training
--   error  rank 1 feeds a batch of the wrong shape mid-training: the Lua
--          error ends its script (dlua reports it to the others)
--   guard  rank 1 catches that error itself, as train_resnet's guard does:
--          prints it, dist.report_failure(message), os.exit(1)
--   late   rank 1 fails after rank 0 went on to a long computation: rank 0
--          learns it at its next collective
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
  local x = dl.randn(4, 4)
  if rank == 1 and step == 4 then
    io.stdout:flush()
    if mode == "error" or mode == "late" then x = dl.randn(4, 5) end
    if mode == "late" then os.execute("sleep 1") end
    if mode == "guard" then
      local ok, err = pcall(model, x:narrow(2, 1, 3))
      assert(not ok)
      io.stderr:write("fail.lua: rank 1 gave up: " .. tostring(err) .. "\n") -- one write: no interleaving with rank 0
      dist.report_failure("rank 1 gave up: " .. tostring(err))
      os.exit(1)
    end
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
  if rank == 0 and step == 4 and mode == "late" then os.execute("sleep 3") end
  opt:zero_grad()
  model(x):sum():backward()
  opt:step()
  print(string.format("rank %d step %d", rank, step))
end
print("finished rank " .. rank)
