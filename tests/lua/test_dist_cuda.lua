-- test_dist_cuda.lua - dl.distributed on one GPU, at world size 1 (what a
-- single GPU can check; scripts/gpu_check.sh runs every test_*_cuda.lua):
-- the NCCL backend starts (its id exchanged through MPI's singleton start),
-- all_reduce (SUM, AVG, MAX, MIN), broadcast and all_gather of CUDA tensors
-- give the closed forms, and DistributedDataParallel around a net with
-- SyncBatchNorm on CUDA takes the same SGD steps as BatchNorm on the CPU.
-- Skipped (exit 77) without a GPU or without the NCCL backend.
local T = require "testlib"
T.require_cuda()
local dist, nn = dl.distributed, dl.nn
local ok, err = pcall(dist.init_process_group, {backend = "nccl", timeout = 60})
T.skip_if(not ok and ("no NCCL backend: " .. tostring(err)))

T.case("the NCCL backend: collectives of CUDA tensors", function()
  T.eq(dist.get_backend(), "nccl")
  local w = dist.get_world_size()
  local v = dl.tensor({1, -2, 3.5, 4, 0, 6})
  local want = {SUM = v * w, AVG = v, MAX = v, MIN = v}
  for _, op in ipairs {"SUM", "AVG", "MAX", "MIN"} do
    local t = v:to({device = "cuda"})
    dist.all_reduce(t, {op = dist.ReduceOp[op]})
    T.truthy(tostring(t.device):find("^cuda"), "stays on the GPU")
    T.tensor_eq(t:cpu(), want[op], 0, "all_reduce " .. op)
  end
  local t = v:to({device = "cuda"})
  dist.broadcast(t, 0)
  T.tensor_eq(t:cpu(), v, 0, "broadcast")
  local list = {}
  for r = 1, w do list[r] = dl.zeros({6}, {device = "cuda"}) end
  dist.all_gather(list, t)
  for r = 1, w do T.tensor_eq(list[r]:cpu(), v, 0, "all_gather " .. r) end
end)

T.case("DDP with SyncBatchNorm on CUDA = BatchNorm on the CPU", function()
  local function build()
    dl.manual_seed(5)
    return nn.Sequential(nn.Conv2d(2, 4, 3, {padding = 1}), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
      nn.Linear(4 * 4 * 4, 3))
  end
  dl.manual_seed(6)
  local x, y = dl.randn(6, 2, 4, 4), dl.randint(1, 4, {6}, {dtype = dl.int64})
  local ref = build()
  local net = nn.SyncBatchNorm.convert(build():to({device = "cuda"}))
  local model = nn.parallel.DistributedDataParallel(net, {gradient_as_bucket_view = true})
  local ro = dl.optim.SGD(ref:parameters(), {lr = 0.1, momentum = 0.9})
  local o = dl.optim.SGD(model:parameters(), {lr = 0.1, momentum = 0.9})
  local crit = nn.CrossEntropyLoss()
  local xc, yc = x:to({device = "cuda"}), y:to({device = "cuda"})
  for step = 1, 3 do
    ro:zero_grad()
    crit(ref(x), y):backward()
    ro:step()
    o:zero_grad()
    crit(model(xc), yc):backward()
    o:step()
    local pr = ref:parameters()
    for i, p in ipairs(net:parameters()) do
      T.tensor_eq(p:detach():cpu(), pr[i]:detach(), 1e-4, "parameter " .. i .. ", step " .. step)
    end
    T.tensor_eq(net[2].running_var:cpu(), ref[2].running_var, 1e-4, "running_var, step " .. step)
  end
end)

dist.destroy_process_group()
T.done()
