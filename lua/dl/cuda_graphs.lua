-- dl.cuda_graphs: the Lua half of CUDA graphs (dl.cuda.graph, dl.cuda.graphed);
-- dl.cuda.CUDAGraph itself is C (src/lua/l_cuda.c, cuda/graph.cu).
--
--   local g = dl.cuda.CUDAGraph()
--   local out = dl.cuda.graph(g, fn, x)   -- captures fn(x): nothing runs yet
--   g:replay()                            -- runs the captured work; out holds the result
--
--   local step = dl.cuda.graphed(fn, {x, y}, {warmup = 3})
--   local loss = step(x2, y2)             -- copies x2, y2 into the static inputs, replays
--
-- graphed(fn, example_inputs) runs fn eagerly `warmup` times on copies of the
-- example inputs (the static inputs; a training step really steps then, as in
-- PyTorch), captures one call, and returns a callable that copies its
-- arguments into the static inputs and replays.  It returns the tensors the
-- captured call returned: the same tensors every time, overwritten by each
-- replay (read them before the next call, clone what must be kept).  Shapes,
-- dtypes and devices of the arguments must be those of the example inputs.
-- What fn does on the host (Lua branches, numbers it computes) is frozen at
-- capture; state on the device (parameters, optimizer buffers, BN statistics,
-- a GradScaler's scale) carries on from replay to replay.  Host
-- synchronisations inside fn are refused with an error naming them.
--
-- Invariants: a failed capture leaves no capture running (the graph is reset
-- and the error raised); the static inputs and outputs stay referenced by the
-- callable, so the addresses the graph replays stay valid while it lives.
local dl = require "dl"
local util = require "dl.util"

local fail = util.fail

local M = {}

-- Raises "<op>: <why there is no GPU>" on a machine without one.
local function need_gpu(op)
  if not dl.cuda.is_available() then
    fail("%s: %s", op, dl.cuda.compiled and "no GPU on this machine" or "CUDA is not in this build")
  end
end


-- Captures fn(...) into g; returns what fn returned (tensors whose values
-- appear at the first replay).
function M.graph(g, fn, ...)
  need_gpu("cuda.graph")
  if type(fn) ~= "function" then fail("cuda.graph: a function to capture expected, got %s", type(fn)) end
  g:capture_begin()
  local r = table.pack(pcall(fn, ...))
  local ended, err = pcall(g.capture_end, g)
  if not r[1] then
    pcall(g.reset, g)
    error(r[2], 0)
  end
  if not ended then error(err, 0) end
  return table.unpack(r, 2, r.n)
end

local function shape_str(t) return util.shape_str(t.shape) end

local Graphed = {}
Graphed.__index = Graphed

-- step(...): the arguments into the static inputs, one replay, the static outputs.
function Graphed:__call(...)
  if self.graph == nil then fail("graphed: this callable was reset") end
  local n = select("#", ...)
  local static = self.static_inputs
  if n ~= #static then
    fail("graphed: %d argument%s given, the graph was captured with %d", n, n == 1 and "" or "s", #static)
  end
  dl.no_grad(function(...)
    for i = 1, n do
      local x, s = select(i, ...), static[i]
      if not dl.is_tensor(x) then fail("graphed: argument %d is a %s, expected a tensor", i, type(x)) end
      if x ~= s then
        if x.dtype ~= s.dtype or x.device ~= s.device or shape_str(x) ~= shape_str(s) then
          fail("graphed: argument %d is a %s %s tensor on %s; the graph was captured with %s %s on %s",
            i, shape_str(x), x.dtype.name, x.device, shape_str(s), s.dtype.name, s.device)
        end
        s:copy_(x)
      end
    end
  end, ...)
  self.graph:replay()
  return table.unpack(self.static_outputs, 1, self.static_outputs.n)
end

-- Drops the capture and its memory; the callable refuses from then on.
function Graphed:reset()
  self.graph:reset()
  self.graph = nil
  self.static_outputs = {n = 0}
end

function M.graphed(fn, example_inputs, opts)
  need_gpu("cuda.graphed")
  if type(fn) ~= "function" then fail("cuda.graphed: a function expected, got %s", type(fn)) end
  if type(example_inputs) ~= "table" or dl.is_tensor(example_inputs) then
    fail("cuda.graphed: example_inputs must be an array of tensors, got %s", type(example_inputs))
  end
  opts = util.check_options(opts, "cuda.graphed", {"warmup"})
  local warmup = opts.warmup or 3
  if math.type(warmup) ~= "integer" or warmup < 0 then
    fail("cuda.graphed: warmup must be a non-negative integer, got %s", tostring(warmup))
  end
  local static = {}
  for i, x in ipairs(example_inputs) do
    if not dl.is_tensor(x) then fail("cuda.graphed: example_inputs[%d] is a %s, expected a tensor", i, type(x)) end
    if not x:is_cuda() then fail("cuda.graphed: example_inputs[%d] is on %s; graphs run on CUDA", i, x.device) end
    -- the example's layout (channels-last stays channels-last)
    static[i] = dl.no_grad(function() return dl.empty_like(x):copy_(x) end)
    if x.requires_grad then static[i]:requires_grad_(true) end
  end
  -- warm-up: lazy set-up (handles, cuDNN plans, optimizer state) happens here
  for _ = 1, warmup do fn(table.unpack(static)) end
  local g = dl.cuda.CUDAGraph()
  local outs = table.pack(M.graph(g, fn, table.unpack(static)))
  return setmetatable({graph = g, static_inputs = static, static_outputs = outs}, Graphed)
end

return M
