-- ddp.lua - DistributedDataParallel under mpirun -np N (tests/sh/
-- test_distributed.sh): identical parameters after construction from ranks
-- seeded differently; N ranks at batch B/N match one process at batch B over
-- 10 SGD and 10 Adam steps for tiny, default and huge buckets (float32 within
-- 1e-5, parameters bit-identical across ranks after every step); no_sync
-- accumulation over K micro-batches equals one step at K times the batch;
-- unused parameters are named (or reduced with find_unused_parameters);
-- gradient_as_bucket_view gives the same steps with .grad in bucket memory;
-- channels-last weights keep channels-last gradients.
local dl = require "dl"
local T = require "testlib"
local dist = dl.distributed
local nn = dl.nn

local H = dofile((debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or ".") .. "/distlib.lua")
local rank, world = H.rank, H.world
local DDP = nn.parallel.DistributedDataParallel

local B, STEPS = 8, 10
dl.manual_seed(123)
local X = dl.randn(B * STEPS, 6)
local Y = dl.randint(1, 5, {B * STEPS}, {dtype = dl.int64})

local function make_net(seed)
  dl.manual_seed(seed)
  return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4))
end

local function params_of(m)
  local out = {}
  for _, p in ipairs(m:parameters()) do out[#out + 1] = p end
  return out
end

-- every rank holds bit-identical copies of ps
local function same_across_ranks(ps, what)
  for i, p in ipairs(ps) do H.same_everywhere(p, what .. ": parameter " .. i) end
end

local function close_to(ps, ref, what)
  for i = 1, #ps do T.tensor_eq(ps[i]:detach(), ref[i]:detach(), 1e-5, what .. ": parameter " .. i) end
end

local crit = nn.CrossEntropyLoss()
local function batch(step, first, count)
  local x = X:narrow(1, (step - 1) * B + first, count)
  local y = Y:narrow(1, (step - 1) * B + first, count)
  return x, y
end

T.case("construction broadcasts rank 0's parameters", function()
  local net = make_net(1000 + rank)
  local model = DDP(net)
  local ref = make_net(1000) -- what rank 0 built
  same_across_ranks(params_of(net), "after construction")
  close_to(params_of(net), params_of(ref), "rank 0's parameters")
  T.truthy(model:reducer_stats().buckets >= 1)
end)

local optims = {
  SGD = function(ps) return dl.optim.SGD(ps, {lr = 0.1, momentum = 0.9}) end,
  Adam = function(ps) return dl.optim.Adam(ps, {lr = 0.01}) end,
}
local caps = {tiny = 1e-5, default = 25, huge = 1000}
for _, oname in ipairs {"SGD", "Adam"} do
  for _, cname in ipairs {"tiny", "default", "huge"} do
    T.case(string.format("%d ranks at B/%d = 1 process at B (%s, %s buckets)", world, world, oname, cname), function()
      local ref = make_net(7)
      local net = make_net(7 + rank)
      local model = DDP(net, {bucket_cap_mb = caps[cname]})
      local ro, o = optims[oname](ref:parameters()), optims[oname](model:parameters())
      local per = B // world
      for step = 1, STEPS do
        local x, y = batch(step, 1, B)
        ro:zero_grad()
        crit(ref(x), y):backward()
        ro:step()
        local xs, ys = batch(step, rank * per + 1, per)
        o:zero_grad()
        crit(model(xs), ys):backward()
        o:step()
        same_across_ranks(params_of(net), oname .. " step " .. step)
        close_to(params_of(net), params_of(ref), oname .. " step " .. step)
      end
      local s = model:reducer_stats()
      T.eq(s.iterations, STEPS)
      T.truthy(s.rebuilt, "buckets rebuilt after the first iteration")
      if cname == "tiny" then T.eq(s.buckets, 6, "one bucket per parameter") end
      if cname == "huge" then T.eq(s.buckets, 1, "one bucket") end
    end)
  end
end

-- gradient_as_bucket_view: the same steps; each .grad is its bucket's
-- memory, so a .grad kept from one step holds the next step's gradient
-- once the buckets are rebuilt (whether zero_grad drops the .grad or zeroes
-- it in place)
for _, oname in ipairs {"SGD", "Adam"} do
  for _, none in ipairs {true, false} do
    T.case(string.format("gradient_as_bucket_view (%s, zero_grad set_to_none=%s)", oname, none), function()
      local ref = make_net(9)
      local net = make_net(9 + rank)
      local model = DDP(net, {bucket_cap_mb = 1000, gradient_as_bucket_view = true})
      local ro, o = optims[oname](ref:parameters()), optims[oname](model:parameters())
      local per, kept = B // world, {}
      for step = 1, 4 do
        local x, y = batch(step, 1, B)
        ro:zero_grad()
        crit(ref(x), y):backward()
        ro:step()
        local xs, ys = batch(step, rank * per + 1, per)
        o:zero_grad({set_to_none = none})
        crit(model(xs), ys):backward()
        local ps = params_of(net)
        -- (the buckets are rebuilt after the first step; at world size 1
        -- there are none: gradients are final as autograd leaves them)
        if step > 2 and world > 1 then
          for i = 1, #ps do T.tensor_eq(kept[i], ps[i].grad, 0, "a kept .grad is the bucket's, step " .. step) end
        end
        kept = {}
        local offsets = 0
        for i = 1, #ps do kept[i], offsets = ps[i].grad, offsets + ps[i].grad:storage_offset() end
        T.truthy(world == 1 or offsets > 0, "the gradients sit at their offsets in one bucket")
        o:step()
        same_across_ranks(ps, oname .. " step " .. step)
        close_to(ps, params_of(ref), oname .. " step " .. step)
      end
    end)
  end
end

-- a channels-last convolution: the bucket holds each gradient in its
-- parameter's layout, copied in and (or, as a view) handed back so
for _, as_view in ipairs {false, true} do
  T.case("channels-last weights, gradient_as_bucket_view=" .. tostring(as_view), function()
    local function conv_net(seed)
      dl.manual_seed(seed)
      local m = nn.Sequential(nn.Conv2d(2, 4, 3, {padding = 1}), nn.ReLU(), nn.Conv2d(4, 3, 3),
        nn.Flatten(), nn.Linear(12, 4))
      return m:to({memory_format = "channels_last"})
    end
    dl.manual_seed(77)
    local xa = dl.randn(2 * world, 2, 4, 4):contiguous({memory_format = "channels_last"})
    local ya = dl.randint(1, 5, {2 * world}, {dtype = dl.int64})
    local ref, net = conv_net(21), conv_net(21 + rank)
    local model = DDP(net, {gradient_as_bucket_view = as_view})
    local ro = dl.optim.SGD(ref:parameters(), {lr = 0.1, momentum = 0.9})
    local o = dl.optim.SGD(model:parameters(), {lr = 0.1, momentum = 0.9})
    for step = 1, 3 do
      ro:zero_grad()
      crit(ref(xa), ya):backward()
      ro:step()
      o:zero_grad()
      crit(model(xa:narrow(1, rank * 2 + 1, 2)), ya:narrow(1, rank * 2 + 1, 2)):backward()
      for i, p in ipairs(params_of(net)) do
        if p:dim() == 4 then
          T.truthy(p.grad:is_contiguous({memory_format = "channels_last"}), "grad " .. i .. " channels-last")
        end
      end
      o:step()
      same_across_ranks(params_of(net), "step " .. step)
      close_to(params_of(net), params_of(ref), "step " .. step)
    end
  end)
end

T.case("no_sync over K micro-batches = one step at K times the batch", function()
  local K, m = 3, 2
  local ref = make_net(11)
  local net = make_net(11 + rank)
  local model = DDP(net, {bucket_cap_mb = 1e-4})
  local ro = dl.optim.SGD(ref:parameters(), {lr = 0.1})
  local o = dl.optim.SGD(model:parameters(), {lr = 0.1})
  local big = K * m * world
  for step = 1, 2 do
    local x, y = X:narrow(1, (step - 1) * big + 1, big), Y:narrow(1, (step - 1) * big + 1, big)
    ro:zero_grad()
    crit(ref(x), y):backward()
    ro:step()
    o:zero_grad()
    for k = 1, K do
      -- micro-batch k of this rank: rows of the big batch no other rank uses
      local first = ((k - 1) * world + rank) * m + 1
      local xs, ys = x:narrow(1, first, m), y:narrow(1, first, m)
      if k < K then
        local _ <close> = model:no_sync()
        local loss = crit(model(xs), ys) / K
        loss:backward()
      else
        local loss = crit(model(xs), ys) / K
        loss:backward()
      end
    end
    o:step()
    same_across_ranks(params_of(net), "no_sync step " .. step)
    close_to(params_of(net), params_of(ref), "no_sync step " .. step)
  end
  T.eq(model:reducer_stats().iterations, 2, "one synchronised backward per step")
end)

T.case("buffers are rank 0's before every forward", function()
  dl.manual_seed(5 + rank)
  local net = nn.Sequential(nn.Linear(6, 4), nn.BatchNorm1d(4))
  local model = DDP(net)
  H.same_everywhere(net[2].running_mean, "running_mean after construction")
  model(X:narrow(1, rank * 4 + 1, 4)) -- each rank's statistics move its own way
  model(X:narrow(1, 1, 4))            -- starts from rank 0's, same batch everywhere
  H.same_everywhere(net[2].running_mean, "running_mean")
  H.same_everywhere(net[2].running_var, "running_var")
  H.same_everywhere(net[2].num_batches_tracked, "num_batches_tracked")
end)

local Two = nn.Module:extend("Two")
function Two:__init()
  self.used = nn.Linear(3, 2)
  self.unused = nn.Linear(3, 2)
end
function Two:forward(x) return self.used(x) end

T.case("unused parameters are named, or reduced with find_unused_parameters", function()
  local model = DDP(Two())
  local x = dl.ones(2, 3)
  local err = T.raises(function() model(x):sum():backward() end, "unused.weight, unused.bias")
  T.truthy(err:find("find_unused_parameters", 1, true), err)
  local net = Two()
  local m2 = DDP(net, {find_unused_parameters = true})
  m2(x:mul(rank + 1)):sum():backward()
  T.tensor_eq(net.unused.weight.grad, dl.zeros(2, 3), 0)
  -- d sum(W x + b)/dW = sum over rows of x: 2 * (rank+1) per element, averaged
  T.tensor_eq(net.used.weight.grad, dl.full({2, 3}, (world + 1)), 1e-6)
  same_across_ranks({net.used.weight.grad}, "gradient")
end)

T.case("different parameters on some rank are named", function()
  local net = rank == world - 1 and nn.Linear(3, 3) or nn.Linear(3, 2)
  if world > 1 then
    T.raises(function() DDP(net) end, "rank " .. (world - 1) .. " differs from rank 0 at parameter 1")
  end
end)

T.done()
