-- test_amp.lua - what runs on every machine of the CUDA face: GradScaler's
-- logic on float32 CPU tensors (scaling, unscale_, skipping a step with an
-- inf gradient, growth and backoff, state_dict; its state in device tensors
-- and the optimizer skipping on the device); autocast's state handling
-- and that it changes nothing on CPU tensors; channels-last layouts on the
-- CPU; Module:to keeping parameter identity; t.data; dl.backends; and the
-- clear errors dl.cuda gives on a machine without a GPU (graphs and the
-- synchronisation counter included).
local T = require "testlib"

-- A one-parameter "model": loss = sum(w * x).
local function setup(scaler_opts)
  local w = dl.tensor({1.0, 2.0}):requires_grad_()
  local opt = dl.optim.SGD({w}, {lr = 0.5})
  return w, opt, dl.amp.GradScaler(scaler_opts)
end

T.case("GradScaler scales the loss and unscales the gradients", function()
  local w, opt, scaler = setup({init_scale = 8.0})
  T.eq(scaler:get_scale(), 8.0)
  local loss = (w * dl.tensor({3.0, 4.0})):sum()
  local scaled = scaler:scale(loss)
  T.near(scaled:item(), 8 * 11, 1e-6)
  scaled:backward()
  T.tensor_eq(w.grad, {24, 32})
  scaler:unscale_(opt)
  T.tensor_eq(w.grad, {3, 4})
  scaler:step(opt)
  T.tensor_eq(w, {1 - 0.5 * 3, 2 - 0.5 * 4}, 1e-6)
  scaler:update()
  T.eq(scaler:get_scale(), 8.0) -- one clean step of growth_interval 2000: unchanged
end)

T.case("GradScaler skips the step on inf or NaN and backs off", function()
  for _, bad in ipairs {math.huge, 0 / 0} do
    local w, opt, scaler = setup({init_scale = 16.0, backoff_factor = 0.25})
    local loss = (w * dl.tensor({bad, 1.0})):sum()
    scaler:scale(loss):backward()
    scaler:step(opt)
    T.tensor_eq(w, {1, 2}) -- untouched
    scaler:update()
    T.eq(scaler:get_scale(), 4.0)
  end
end)

T.case("GradScaler grows after growth_interval clean steps", function()
  local w, opt, scaler = setup({init_scale = 2.0, growth_factor = 3.0, growth_interval = 2})
  for i = 1, 4 do
    opt:zero_grad()
    scaler:scale((w * 0.001):sum()):backward()
    scaler:step(opt)
    scaler:update()
    T.eq(scaler:get_scale(), i < 2 and 2.0 or i < 4 and 6.0 or 18.0, "after step " .. i)
  end
  local sd = scaler:state_dict()
  T.eq(sd.scale, 18.0)
  T.eq(sd._growth_tracker, 0)
  local other = dl.amp.GradScaler()
  other:load_state_dict(sd)
  T.eq(other:get_scale(), 18.0)
  T.eq(other:get_growth_factor(), 3.0)
end)

T.case("GradScaler keeps its state in tensors on the gradients' device", function()
  -- the path a CUDA device takes (no host reads between steps), run on the CPU
  local w = dl.tensor({1.0, 2.0}):requires_grad_()
  local opt = dl.optim.SGD({w}, {lr = 0.5, momentum = 0.9})
  local scaler = dl.amp.GradScaler({init_scale = 16.0, backoff_factor = 0.5, growth_interval = 2})
  local function step(x)
    opt:zero_grad()
    scaler:scale((w * dl.tensor(x)):sum()):backward()
    scaler:step(opt)
    scaler:update()
  end
  step({1.0, 1.0})
  T.truthy(dl.is_tensor(scaler._scale_t) and scaler._scale_t:dim() == 0, "a 0-dim scale tensor")
  T.eq(scaler._scale_t.dtype, dl.float32)
  T.eq(scaler._scale_t.device, w.device)
  T.tensor_eq(w, {0.5, 1.5})
  local buf = opt.state[w].momentum_buffer:clone()
  -- an inf gradient: the fused step skips on the device (parameter and
  -- momentum buffer untouched), the scale backs off, the tracker restarts
  step({math.huge, 1.0})
  T.tensor_eq(w, {0.5, 1.5})
  T.truthy(dl.equal(opt.state[w].momentum_buffer, buf), "momentum buffer untouched")
  T.eq(scaler:get_scale(), 8.0)
  step({1.0, 1.0})
  T.eq(scaler:get_scale(), 8.0)
  T.tensor_eq(w, {0.5 - 0.5 * (0.9 * 1 + 1), 1.5 - 0.5 * (0.9 * 1 + 1)}, 1e-6)
  step({1.0, 1.0}) -- the second clean step in a row: growth
  T.eq(scaler:get_scale(), 16.0)
  local sd = scaler:state_dict()
  T.eq(sd.scale, 16.0)
  T.eq(sd._growth_tracker, 0)
  scaler:load_state_dict({scale = 4.0, _growth_tracker = 1})
  T.eq(scaler:get_scale(), 4.0)
  T.eq(scaler._tracker_t:item(), 1.0)
  T.truthy(tostring(scaler):match("scale=4.0"))
  -- an optimizer without a device skip reads the flag: Adam skips on the host
  local v = dl.tensor({1.0}):requires_grad_()
  local adam = dl.optim.Adam({v}, {lr = 0.1})
  local sc = dl.amp.GradScaler({init_scale = 2.0})
  sc:scale((v * dl.tensor({0 / 0})):sum()):backward()
  sc:step(adam)
  sc:update()
  T.tensor_eq(v, {1.0})
  T.eq(adam.state[v], nil, "no Adam state made by a skipped step")
  T.eq(sc:get_scale(), 1.0)
end)

T.case("GradScaler misuse and the disabled scaler", function()
  local w, opt, scaler = setup()
  scaler:scale(w:sum()):backward()
  scaler:unscale_(opt)
  T.raises(function() scaler:unscale_(opt) end, "already been called")
  scaler:step(opt)
  T.raises(function() scaler:step(opt) end, "already been called")
  scaler:update()
  T.raises(function() scaler:update() end, "no inf checks")
  T.raises(function() dl.amp.GradScaler({growth_factor = 0.5}) end, "growth_factor")
  T.raises(function() dl.amp.GradScaler({bogus = 1}) end, "bogus")
  local w2, opt2, off = setup({enabled = false})
  local loss = w2:sum()
  T.truthy(rawequal(off:scale(loss), loss))
  loss:backward()
  off:step(opt2)
  off:update()
  T.tensor_eq(w2, {0.5, 1.5})
  T.eq(off:get_scale(), 1.0)
end)

T.case("autocast state: nesting, errors, options", function()
  T.eq(dl.is_autocast_enabled(), false)
  local inner
  dl.autocast({dtype = "bf16"}, function()
    T.eq(dl.is_autocast_enabled(), true)
    T.eq(dl.get_autocast_dtype(), dl.bfloat16)
    dl.autocast({dtype = "float16"}, function() inner = dl.get_autocast_dtype() end)
    T.eq(dl.get_autocast_dtype(), dl.bfloat16)
    dl.autocast({enabled = false}, function() T.eq(dl.is_autocast_enabled(), false) end)
  end)
  T.eq(inner, dl.float16)
  T.eq(dl.is_autocast_enabled(), false)
  T.raises(function() dl.autocast({dtype = "bf16"}, function() error("boom") end) end, "boom")
  T.eq(dl.is_autocast_enabled(), false)
  T.raises(function() dl.autocast({dtype = "int8"}, function() end) end, "dtype must be")
  T.raises(function() dl.autocast_exit() end, "no autocast region")
  dl.autocast_enter({dtype = "fp16"})
  T.eq(dl.is_autocast_enabled(), true)
  dl.autocast_exit()
  T.eq(dl.is_autocast_enabled(), false)
  local a, b = dl.autocast(function(x, y) return x + y, x * y end, 2, 3)
  T.eq(a, 5)
  T.eq(b, 6)
end)

T.case("autocast changes nothing on CPU tensors", function()
  dl.manual_seed(3)
  local conv, fc = dl.nn.Conv2d(3, 4, 3, {padding = 1}), dl.nn.Linear(4, 5)
  local x = dl.randn(2, 3, 6, 6)
  local function run() return dl.nn.functional.log_softmax(fc(conv(x):mean({3, 4})), 2) end
  local ref = run()
  local got = dl.autocast({dtype = "bf16"}, run)
  T.eq(got.dtype, dl.float32)
  T.truthy(dl.equal(got, ref), "autocast changed a CPU result")
  local m = dl.autocast({dtype = "fp16"}, dl.matmul, x:view(6, 36), x:view(36, 6))
  T.truthy(dl.equal(m, dl.matmul(x:view(6, 36), x:view(36, 6))))
end)

T.case("channels_last on the CPU", function()
  local x = dl.arange(2 * 3 * 4 * 5):float():view(2, 3, 4, 5)
  T.truthy(not x:is_contiguous({memory_format = "channels_last"}))
  local c = x:contiguous({memory_format = dl.channels_last})
  T.eq(table.concat(c:stride(), ","), "60,1,15,3")
  T.eq(table.concat(c.shape, ","), "2,3,4,5")
  T.truthy(c:is_contiguous({memory_format = "channels_last"}))
  T.truthy(not c:is_contiguous())
  T.truthy(dl.equal(c, x))
  T.truthy(dl.equal(c:contiguous(), x))
  T.eq(table.concat(c:contiguous():stride(), ","), "60,20,5,1")
  -- already channels-last: the same strides, no reordering
  T.eq(table.concat(c:contiguous({memory_format = "channels_last"}):stride(), ","), "60,1,15,3")
  -- conversions keep the layout
  local d = c:double()
  T.eq(table.concat(d:stride(), ","), "60,1,15,3")
  T.truthy(dl.equal(d, x:double()))
  -- the gradient flows through the relayout
  local p = dl.randn(1, 2, 3, 3):requires_grad_()
  local q = p:contiguous({memory_format = "channels_last"})
  local s = (q * dl.arange(18):float():view(1, 2, 3, 3)):sum()
  s:backward()
  T.truthy(dl.equal(p.grad, dl.arange(18):float():view(1, 2, 3, 3)))
  T.raises(function() dl.ones(2, 3):contiguous({memory_format = "channels_last"}) end, "4-dimensional")
  T.raises(function() x:contiguous({memory_format = "nhwc"}) end, "memory_format")
  -- a 4-D tensor with one channel is both
  T.truthy(dl.ones(2, 1, 3, 3):is_contiguous({memory_format = "channels_last"}))
end)

T.case("Module:to keeps parameters and converts layouts", function()
  dl.manual_seed(5)
  local net = dl.nn.Sequential(dl.nn.Conv2d(3, 4, 3), dl.nn.BatchNorm2d(4), dl.nn.Flatten(), dl.nn.Linear(4 * 4 * 4, 2))
  local params = net:parameters()
  local opt = dl.optim.SGD(params, {lr = 0.1, momentum = 0.9})
  local x = dl.randn(2, 3, 6, 6)
  local ref = net(x)
  net:to({memory_format = "channels_last"})
  for i, p in ipairs(net:parameters()) do T.truthy(rawequal(p, params[i]), "parameter " .. i .. " replaced") end
  T.eq(table.concat(net[1].weight:stride(), ","), "27,1,9,3")
  T.eq(table.concat(net[4].weight:stride(), ","), "64,1")
  T.truthy(dl.allclose(net(x:contiguous({memory_format = "channels_last"})), ref, {atol = 1e-5}))
  net(x):sum():backward()
  opt:step()
  net:double()
  for i, p in ipairs(net:parameters()) do
    T.truthy(rawequal(p, params[i]))
    T.eq(p.dtype, dl.float64)
    T.eq(p.grad.dtype, dl.float64)
    T.truthy(p.requires_grad)
  end
  T.eq(table.concat(net[1].weight:stride(), ","), "27,1,9,3")
  net:to({memory_format = "contiguous_format"})
  T.truthy(net[1].weight:is_contiguous())
  opt:zero_grad()
  net(x:double()):sum():backward()
  opt:step() -- the optimizer still drives the same tensors
  T.raises(function() net:to({memory_format = "nchw"}) end, "memory_format")
end)

T.case("t.data", function()
  local p = dl.ones(2):requires_grad_()
  local d = p.data
  T.truthy(not d.requires_grad)
  d:fill_(3)
  T.tensor_eq(p, {3, 3})
  p.data = dl.zeros(3, {dtype = dl.float64})
  T.eq(p.dtype, dl.float64)
  T.eq(table.concat(p.shape, ","), "3")
  T.truthy(p.requires_grad)
  local y = p * 2
  T.raises(function() y.data = dl.ones(3) end, "leaf")
  T.raises(function() p.data = 5 end, "data must be a tensor")
end)

T.case("dl.backends flags", function()
  T.eq(dl.backends.allow_tf32, false)
  T.eq(dl.backends.cudnn.benchmark, false)
  dl.backends.cudnn.benchmark = true
  dl.backends.allow_tf32 = true
  T.eq(dl.backends.cudnn.benchmark, true)
  T.eq(dl.backends.cudnn.allow_tf32, true)
  dl.backends.cudnn.benchmark = false
  dl.backends.allow_tf32 = false
  T.eq(dl.backends.allow_tf32, false)
  T.raises(function() dl.backends.fast = true end, "no switch 'fast'")
  T.raises(function() dl.backends.allow_tf32 = 1 end, "true or false")
  -- the graph API switch (on with DLUA_CUDNN_GRAPH set and not 0) and device checks
  local env = os.getenv("DLUA_CUDNN_GRAPH")
  local graph_default = env ~= nil and env ~= "" and env ~= "0"
  T.eq(dl.backends.cudnn.graph, graph_default)
  dl.backends.cudnn.graph = not graph_default
  T.eq(dl.backends.cudnn.graph, not graph_default)
  dl.backends.cudnn.graph = graph_default
  T.eq(dl.backends.cuda.sync_checks, os.getenv("DLUA_CUDA_SYNC_CHECKS") == "1")
  dl.backends.cuda.sync_checks = true
  T.eq(dl.backends.cuda.sync_checks, true)
  dl.backends.cuda.sync_checks = false
  T.raises(function() dl.backends.cuda.benchmark = true end, "dl.backends.cuda: no switch 'benchmark' (settable: sync_checks)")
  T.raises(function() dl.backends.cudnn.sync_checks = true end, "settable: allow_tf32, benchmark, graph")
end)

T.case("devices on the CPU", function()
  local x = dl.ones(2)
  T.eq(x.device, "cpu")
  T.eq(x:is_cuda(), false)
  T.eq(x:is_pinned(), false)
  T.truthy(dl.equal(x:to({device = "cpu", non_blocking = true}), x))
  T.eq(x:to("cpu", dl.float64, true).dtype, dl.float64)
  T.eq(type(dl.cuda.compiled), "boolean")
  T.eq(dl.cuda.is_available(), dl.cuda.device_count() > 0)
  if T.cuda then return end
  local why = dl.cuda.compiled and "no GPU on this machine" or "CUDA is not in this build"
  for _, f in ipairs {"synchronize", "current_device", "memory_allocated", "memory_reserved",
    "max_memory_allocated", "reset_peak_memory_stats", "empty_cache", "Event", "get_device_name",
    "sync_count", "is_current_stream_capturing", "CUDAGraph"} do
    T.raises(function() dl.cuda[f]() end, "cuda." .. f .. ": " .. why)
  end
  -- CUDA graphs: one line naming the reason, before any argument is looked at
  for _, f in ipairs {"graph", "graphed"} do
    local ok, err = pcall(dl.cuda[f], function() end, {})
    T.eq(ok, false)
    T.eq(err, "cuda." .. f .. ": " .. why)
  end
  T.eq(dl.cuda._capturing_graph(), nil)
  T.raises(function() dl.cuda.set_device(0) end, why)
  T.raises(function() dl.cuda.manual_seed(1) end, why)
  T.raises(function() x:cuda() end, why)
  T.raises(function() x:to("cuda:1") end, "cannot use cuda:1: " .. why)
  T.raises(function() x:pin_memory() end, why)
  T.raises(function() dl.nn.Linear(2, 2):cuda() end, why)
  -- a loader asked to pin does nothing without a GPU
  local ds = dl.data.TensorDataset(dl.randn(6, 2), dl.arange(6))
  for _, bx in dl.data.DataLoader(ds, {batch_size = 3, pin_memory = true}):iter() do
    T.eq(bx:is_pinned(), false)
  end
end)

T.done()
