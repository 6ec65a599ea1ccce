-- dl.onnx.graph: an ONNX graph (the tables dl._onnx.load_model returns) as a
-- runnable dl.nn.Module, OnnxModel.
--
-- At load (compile): initializers become parameters (floating ones that feed
-- weights; state_dict keys are the initializer names, dotted names nested as
-- PyTorch's) or buffers (batch-norm statistics, integer tensors); nodes are
-- put in topological order (a cycle is an error naming a node on it); every
-- node's op type, domain and attributes are checked by its builder in
-- lua/dl/onnx/ops.lua, which returns the function that runs it; nodes whose
-- inputs are all constants are run once (constant folding), so shape
-- arithmetic costs nothing per call.  At run time the plan is a flat list of
-- steps over an environment of named values; a value is dropped after its
-- last use.
--
-- Invariants: a builder's run function captures Lua values only, never
-- tensors, so m:to(device/dtype) (which replaces parameters and buffers) is
-- all a move needs; an error while running names the node.
local dl = require "dl"
local Module = require "dl.nn.module"

local G = {}

local FLOAT = {[dl.float32] = true, [dl.float64] = true, [dl.float16] = true, [dl.bfloat16] = true}
G.FLOAT = FLOAT
-- ONNX TensorProto.DataType -> dl dtype (those dlua has) and the names
G.DTYPES = {
  [1] = dl.float32, [2] = dl.uint8, [6] = dl.int32, [7] = dl.int64, [9] = dl.bool, [10] = dl.float16,
  [11] = dl.float64, [16] = dl.bfloat16,
}
G.TYPE_NAMES = {
  [0] = "UNDEFINED", "FLOAT", "UINT8", "INT8", "UINT16", "INT16", "INT32", "INT64", "STRING", "BOOL",
  "FLOAT16", "DOUBLE", "UINT32", "UINT64", "COMPLEX64", "COMPLEX128", "BFLOAT16",
}

local function ferror(fmt, ...) error(string.format(fmt, ...), 0) end

-- A sequence value (ONNX's sequence type) inside a graph: a list of tensors.
local Seq = {}
Seq.__index = Seq
G.Seq = Seq
function G.seq(items) return setmetatable({items = items}, Seq) end
function G.is_seq(v) return getmetatable(v) == Seq end

-- --- the node context builders see --------------------------------------------------

local Node = {}
Node.__index = Node

local function node_label(node, idx)
  if node.name and node.name ~= "" then return "'" .. node.name .. "'" end
  local out = node.output and node.output[1]
  if out and out ~= "" then return string.format("#%d (output '%s')", idx, out) end
  return "#" .. idx
end

function Node:fail(fmt, ...)
  ferror("onnx: node %s (%s): %s", self.label, self.op_type, string.format(fmt, ...))
end

-- The attribute's value (nil -> default); kind, when given, is checked
-- ("INT", "INTS", "FLOAT", "FLOATS", "STRING", "STRINGS", "TENSOR", "GRAPH").
function Node:attr(name, kind, default)
  local a = self.attrs[name]
  if a == nil then return default end
  self.used[name] = true
  if a.ref_attr_name then self:fail("attribute '%s' refers to a function attribute", name) end
  if kind and a.type ~= kind then
    -- INT where FLOAT is expected (and back) are common in hand-written models
    if kind == "FLOAT" and a.type == "INT" then return a.value + 0.0 end
    self:fail("attribute '%s' must be of type %s, got %s", name, kind, a.type)
  end
  local v = a.value
  if a.type == "TENSOR" and type(v) == "table" and not dl.is_tensor(v) then
    self:fail("attribute '%s': %s", name, v.unsupported or "tensor missing")
  end
  return v
end

function Node:has_attr(name) return self.attrs[name] ~= nil end

-- Marks attributes as understood without reading them.
function Node:ignore(...)
  for _, k in ipairs {...} do if self.attrs[k] then self.used[k] = true end end
end

-- Fails unless the attribute is absent or equal to one of the allowed values.
function Node:only(name, kind, ...)
  local v = self:attr(name, kind)
  if v == nil then return nil end
  for _, ok in ipairs {...} do if v == ok then return v end end
  self:fail("attribute %s=%s is not supported", name, tostring(v))
end

-- The i-th input's name (1-based), nil when absent or empty.
function Node:input(i)
  local nm = self.inputs[i]
  if nm == nil or nm == "" then return nil end
  return nm
end

function Node:ninputs() return #self.inputs end
function Node:noutputs() return #self.outputs end
function Node:has_output(i) local o = self.outputs[i]; return o ~= nil and o ~= "" end

-- The value of input i when it is known at load (a Constant, an integer
-- initializer, a folded result), else nil.
function Node:const(i)
  local nm = self:input(i)
  return nm and self.consts[nm] or nil
end

-- The declared type of input i ({elem_type=, shape=}) when the graph says.
function Node:input_type(i)
  local nm = self:input(i)
  return nm and self.types[nm] or nil
end

-- --- helpers for builders -------------------------------------------------------------

-- A tensor's values as a flat Lua list (a 0-dim tensor gives one value).
function G.list(t)
  if t:dim() == 0 then return {t:item()} end
  if t:dim() ~= 1 then t = t:reshape(-1) end
  local v = t:tolist()
  if t.dtype == dl.bool then
    for i = 1, #v do v[i] = v[i] and 1 or 0 end
  end
  return v
end

-- --- initializers -> parameters and buffers --------------------------------------------

-- Sets t as parameter/buffer `name` of root, nested at dots (PyTorch's
-- state_dict names); a component that cannot be a field (a method's name)
-- makes the whole name a flat, mangled one.  Returns (module, key).
local Holder = Module:extend("OnnxParameters")
function Holder:forward() error("onnx: parameter holders are not callable", 2) end

local function place(root, name, t, kind)
  local parts = {}
  for p in (name .. "."):gmatch("([^.]*)%.") do parts[#parts + 1] = p end
  local ok, mod, key = pcall(function()
    local m = root
    for i = 1, #parts - 1 do
      local p = parts[i]
      if p == "" then error("empty") end
      local child = rawget(m, "_modules").map[p]
      if child == nil then
        child = Holder()
        m:add_module(p, child)
      end
      m = child
    end
    local k = parts[#parts]
    if kind == "param" then m:register_parameter(k, t) else m:register_buffer(k, t) end
    return m, k
  end)
  if ok then return mod, key end
  -- fall back to one flat, mangled name in the holder "_flat"
  local flat = rawget(root, "_modules").map["_flat"]
  if flat == nil then
    flat = Holder()
    root:add_module("_flat", flat)
  end
  local k = name:gsub("%.", "_")
  if rawget(flat, "_parameters").has[k] or rawget(flat, "_buffers").has[k] then k = k .. "_" .. tostring(t) end
  if kind == "param" then flat:register_parameter(k, t) else flat:register_buffer(k, t) end
  return flat, k
end

-- --- compiling a graph -------------------------------------------------------------------

-- Names a subgraph uses from its enclosing scopes: inputs of its nodes that
-- nothing inside it defines (recursively through nested subgraphs).
local function free_names(graph)
  local defined, free, seen = {}, {}, {}
  for _, v in ipairs(graph.input or {}) do defined[v.name] = true end
  for _, t in ipairs(graph.initializer or {}) do defined[t.name] = true end
  for _, node in ipairs(graph.node or {}) do
    for _, o in ipairs(node.output) do defined[o] = true end
  end
  local function use(nm)
    if nm ~= "" and not defined[nm] and not seen[nm] then
      seen[nm] = true
      free[#free + 1] = nm
    end
  end
  for _, node in ipairs(graph.node or {}) do
    for _, nm in ipairs(node.input) do use(nm) end
    for _, a in ipairs(node.attribute or {}) do
      if a.type == "GRAPH" and type(a.value) == "table" then
        for _, nm in ipairs(free_names(a.value)) do use(nm) end
      elseif a.type == "GRAPHS" then
        for _, g in ipairs(a.value) do for _, nm in ipairs(free_names(g)) do use(nm) end end
      end
    end
  end
  return free
end
G.free_names = free_names

-- Topological order of graph.node (stable: ready nodes in file order); a
-- cycle or a value nobody produces is an error.  extra[i]: more inputs of
-- node i (a subgraph's free names).  available[name]: values that exist
-- before any node runs.
local function toposort(nodes, extra, available, src)
  local producer = {}
  for i, node in ipairs(nodes) do
    for _, o in ipairs(node.output) do
      if o ~= "" then
        if producer[o] or available[o] then
          ferror("onnx: %s: node %s (%s): output '%s' is already defined", src, node_label(node, i),
            node.op_type, o)
        end
        producer[o] = i
      end
    end
  end
  local indeg, users = {}, {}
  for i in ipairs(nodes) do indeg[i], users[i] = 0, {} end
  for i, node in ipairs(nodes) do
    local ins = {}
    for _, nm in ipairs(node.input) do ins[#ins + 1] = nm end
    for _, nm in ipairs(extra[i] or {}) do ins[#ins + 1] = nm end
    local counted = {}
    for _, nm in ipairs(ins) do
      if nm ~= "" then
        local p = producer[nm]
        if p then
          if not counted[p] then
            counted[p] = true
            indeg[i] = indeg[i] + 1
            users[p][#users[p] + 1] = i
          end
        elseif not available[nm] then
          ferror("onnx: %s: node %s (%s): input '%s' is neither a graph input, an initializer nor " ..
            "the output of any node (a missing initializer?)", src, node_label(node, i), node.op_type, nm)
        end
      end
    end
  end
  local order, queue, head = {}, {}, 1
  for i in ipairs(nodes) do if indeg[i] == 0 then queue[#queue + 1] = i end end
  while head <= #queue do
    local i = queue[head]
    head = head + 1
    order[#order + 1] = i
    for _, u in ipairs(users[i]) do
      indeg[u] = indeg[u] - 1
      if indeg[u] == 0 then queue[#queue + 1] = u end
    end
  end
  if #order < #nodes then
    for i, node in ipairs(nodes) do
      if indeg[i] > 0 then
        ferror("onnx: %s: the graph has a cycle: node %s (%s) depends on its own output", src,
          node_label(node, i), node.op_type)
      end
    end
  end
  return order
end

-- Compiles graph into a plan.  scope: {opset=, src=, outer = set of names
-- from enclosing graphs, root = the module (top level only)}.
-- plan = {steps, inputs = {{name, type}}, outputs = {names}, consts =
-- {name = tensor}, holders = {name = {mod, key}}, free = {names}}
local function compile(graph, scope)
  local ops = require "dl.onnx.ops"
  local src = scope.src
  local plan = {steps = {}, inputs = {}, outputs = {}, consts = {}, holders = {}, types = {}}
  local available, unavailable = {}, {}
  for nm in pairs(scope.outer or {}) do available[nm] = true end
  local types = plan.types
  for _, v in ipairs(graph.value_info or {}) do types[v.name] = v end
  for _, v in ipairs(graph.output or {}) do types[v.name] = v end
  if (graph.sparse_initializers or 0) > 0 then
    ferror("onnx: %s: sparse initializers are not supported", src)
  end

  -- how each initializer is used: a batch-norm statistic, or a weight
  local bn_stat, init_names = {}, {}
  for _, node in ipairs(graph.node) do
    if node.op_type == "BatchNormalization" then
      for j = 4, 5 do if node.input[j] then bn_stat[node.input[j]] = true end end
    end
  end
  for _, it in ipairs(graph.initializer or {}) do
    init_names[it.name] = true
    available[it.name] = true
    if it.tensor == nil then
      unavailable[it.name] = it.unsupported or "no data"
    else
      local t = it.tensor
      if scope.root and FLOAT[t.dtype] and not bn_stat[it.name] then
        local mod, key = place(scope.root, it.name, Module.Parameter(t), "param")
        plan.holders[it.name] = {mod, key}
      elseif scope.root and FLOAT[t.dtype] then
        local mod, key = place(scope.root, it.name, t, "buffer")
        plan.holders[it.name] = {mod, key}
      else
        plan.consts[it.name] = t
      end
      types[it.name] = types[it.name] or {kind = "tensor", shape = t.shape}
    end
  end
  for _, v in ipairs(graph.input or {}) do
    if not init_names[v.name] then
      if v.kind ~= nil and v.kind ~= "tensor" and not (v.kind == "sequence" and v.elem and v.elem.kind == "tensor") then
        ferror("onnx: %s: graph input '%s' is a %s, which dlua does not support", src, v.name, v.kind)
      end
      plan.inputs[#plan.inputs + 1] = v
      available[v.name] = true
      types[v.name] = v
    end
  end
  for _, v in ipairs(graph.output or {}) do
    if v.kind ~= nil and v.kind ~= "tensor" and not (v.kind == "sequence" and v.elem and v.elem.kind == "tensor") then
      ferror("onnx: %s: graph output '%s' is a %s, which dlua does not support", src, v.name, v.kind)
    end
    plan.outputs[#plan.outputs + 1] = v.name
  end

  -- subgraph free names are extra inputs of their node
  local extra = {}
  for i, node in ipairs(graph.node) do
    local fr = {}
    for _, a in ipairs(node.attribute or {}) do
      if a.type == "GRAPH" and type(a.value) == "table" then
        for _, nm in ipairs(free_names(a.value)) do fr[#fr + 1] = nm end
      end
    end
    if #fr > 0 then extra[i] = fr end
  end
  local order = toposort(graph.node, extra, available, src)

  -- build every node; fold those whose inputs are all constants
  local consts = plan.consts
  for _, i in ipairs(order) do
    local node = graph.node[i]
    local n = setmetatable({
      name = node.name, op_type = node.op_type, label = node_label(node, i),
      inputs = node.input, outputs = node.output, attrs = {}, used = {}, consts = consts, types = types,
      opset = scope.opset, src = src, extra = extra[i] or {}, compile = compile, fold = scope.fold,
    }, Node)
    for _, a in ipairs(node.attribute or {}) do n.attrs[a.name] = a end
    local domain = node.domain or ""
    if domain ~= "" and domain ~= "ai.onnx" then
      ferror("onnx: %s: node %s: op type %s of domain '%s' is not supported (dlua runs the default " ..
        "ONNX domain)", src, n.label, node.op_type, domain)
    end
    for j, nm in ipairs(node.input) do
      if nm ~= "" and unavailable[nm] then
        ferror("onnx: %s: node %s (%s): input %d '%s' cannot be loaded: %s", src, n.label, node.op_type, j,
          nm, unavailable[nm])
      end
    end
    local builder = type(node.op_type) == "string" and node.op_type:match("^%u") and rawget(ops, node.op_type)
    if not builder then
      ferror("onnx: %s: node %s: op type %s is not supported (opset %d)", src, n.label, node.op_type,
        scope.opset)
    end
    local ok, run = pcall(builder, n)
    if not ok then
      local msg = tostring(run)
      if not msg:find("^onnx: ") then msg = string.format("onnx: node %s (%s): %s", n.label, n.op_type, msg) end
      ferror("%s", msg:gsub("^onnx: ", "onnx: " .. src .. ": ", 1))
    end
    for k in pairs(n.attrs) do
      if not n.used[k] then
        ferror("onnx: %s: node %s (%s): attribute '%s' is not supported (opset %d)", src, n.label,
          node.op_type, k, scope.opset)
      end
    end
    if type(run) ~= "function" then ferror("onnx: internal: builder of %s returned no function", node.op_type) end
    local ins = {}
    for j, nm in ipairs(node.input) do ins[j] = nm ~= "" and nm or false end
    for _, nm in ipairs(n.extra) do ins[#ins + 1] = nm end
    local outs = {}
    for j, nm in ipairs(node.output) do outs[j] = nm ~= "" and nm or false end
    local step = {fn = run, ins = ins, nin = #ins, outs = outs, nout = #outs, node = n}
    -- constant folding
    local foldable = scope.fold and not n.nofold and #n.extra == 0
    for j = 1, #ins do
      if ins[j] and consts[ins[j]] == nil then foldable = false end
    end
    if foldable then
      local args = {}
      for j = 1, #ins do args[j] = ins[j] and consts[ins[j]] or nil end
      local res = table.pack(pcall(function() return dl.no_grad(run, table.unpack(args, 1, #ins)) end))
      if not res[1] then
        local msg = tostring(res[2])
        ferror("onnx: %s: node %s (%s): %s", src, n.label, n.op_type, msg)
      end
      for j, nm in ipairs(outs) do
        if nm then
          local v = res[j + 1]
          if not dl.is_tensor(v) then ferror("onnx: %s: node %s (%s): output %d was not computed", src, n.label, n.op_type, j) end
          consts[nm] = v
        end
      end
    else
      plan.steps[#plan.steps + 1] = step
    end
  end

  -- last uses: a value not among the outputs is dropped after its last step
  local keep = {}
  for _, nm in ipairs(plan.outputs) do keep[nm] = true end
  local last = {}
  for si, s in ipairs(plan.steps) do
    for j = 1, s.nin do
      local nm = s.ins[j]
      if nm then last[nm] = si end
    end
  end
  for si, s in ipairs(plan.steps) do s.free = {} end
  for nm, si in pairs(last) do
    if not keep[nm] and not consts[nm] and not plan.holders[nm] then
      local f = plan.steps[si].free
      f[#f + 1] = nm
    end
  end
  for _, s in ipairs(plan.steps) do table.sort(s.free) end
  for _, nm in ipairs(plan.outputs) do
    if not available[nm] and not consts[nm] then
      local made = false
      for _, s in ipairs(plan.steps) do for _, o in ipairs(s.outs) do if o == nm then made = true end end end
      if not made then ferror("onnx: %s: graph output '%s' is produced by no node", src, nm) end
    end
  end
  return plan
end
G.compile = compile

-- Op types whose first output is always a new tensor, never an input
-- returned (BatchNormalization's other outputs may be its running buffers).
local FRESH_OUTPUT = {
  Conv = true, Relu = true, Add = true, Sub = true, Mul = true, Div = true, MaxPool = true,
  AveragePool = true, GlobalAveragePool = true, GlobalMaxPool = true, BatchNormalization = true,
  Gemm = true, MatMul = true, Sigmoid = true, Tanh = true,
}

-- The inference form of a plan's steps: Conv -> [Add] -> [Relu] chains whose
-- intermediate values have no other reader become one fused step (the
-- Conv builder's n.fuse: oneDNN's convolution with post-ops).  Used when no
-- gradient can be needed.
local function fuse_steps(plan)
  -- readers of each value; shared: values some reader may hand back as
  -- one of its own outputs (an op outside FRESH_OUTPUT reads them), so
  -- another name may hold the same tensor
  local readers, shared = {}, {}
  for _, s in ipairs(plan.steps) do
    for j = 1, s.nin do
      local nm = s.ins[j]
      if nm then
        readers[nm] = (readers[nm] or 0) + 1
        if not FRESH_OUTPUT[s.node.op_type] then shared[nm] = true end
      end
    end
  end
  for _, nm in ipairs(plan.outputs) do readers[nm] = (readers[nm] or 0) + 100 end
  local producer_step = {}
  for si, s in ipairs(plan.steps) do
    for _, o in ipairs(s.outs) do if o then producer_step[o] = si end end
  end
  -- the single step reading value nm, when there is exactly one
  local function sole_reader(nm, from)
    if readers[nm] ~= 1 then return nil end
    for si = from + 1, #plan.steps do
      local s = plan.steps[si]
      for j = 1, s.nin do if s.ins[j] == nm then return si, s end end
    end
  end
  local out, skip = {}, {}
  for si, s in ipairs(plan.steps) do
    if not skip[si] then
      local n = s.node
      if n.op_type == "Conv" and n.fuse and s.nout == 1 and s.outs[1] then
        local last, add_name, relu = s.outs[1], nil, false
        local ai, a = sole_reader(last, si)
        local frees = {}
        for _, f in ipairs(s.free) do frees[#frees + 1] = f end
        if a and a.node.op_type == "Add" and a.nin == 2 and (a.ins[1] == last) ~= (a.ins[2] == last) then
          add_name = a.ins[1] == last and a.ins[2] or a.ins[1]
          -- the addend must exist before the Conv runs
          if producer_step[add_name] and producer_step[add_name] > si then add_name = nil end
        end
        if add_name then
          skip[ai] = true
          last = a.outs[1]
          for _, f in ipairs(a.free) do frees[#frees + 1] = f end
        end
        local ri, r = sole_reader(last, add_name and ai or si)
        if r and r.node.op_type == "Relu" and last then
          skip[ri] = true
          relu = true
          last = r.outs[1]
          for _, f in ipairs(r.free) do frees[#frees + 1] = f end
        end
        if add_name or relu then
          local fuse = n.fuse
          local ins = {}
          for j = 1, 3 do ins[j] = s.ins[j] or false end
          ins[4] = add_name or false
          -- an addend computed by this plan, not the Conv's own operand,
          -- dead after this step, and whose other readers all make new
          -- tensors (Identity, Dropout, ... hand back their input itself:
          -- a later name would see the overwrite) may take the result; the
          -- C op checks that no other tensor shares its memory
          local reuse = false
          if add_name and producer_step[add_name] and add_name ~= s.ins[1] and not shared[add_name] then
            for _, f in ipairs(frees) do if f == add_name then reuse = true end end
          end
          out[#out + 1] = {fn = function(x, w, b, addend) return fuse(x, w, b, addend, relu, reuse) end, ins = ins,
            nin = 4, outs = {last}, nout = 1, node = n, free = frees}
        else
          out[#out + 1] = s
        end
      else
        out[#out + 1] = s
      end
    end
  end
  -- Values to close (release their tensor at once, not at the next garbage
  -- collection) where they die: made by an op whose outputs are new tensors
  -- and read only by such ops, so no other name holds the same tensor.  The
  -- freed buffers then serve the next layers while still in cache; left to
  -- the collector, every activation of a forward took a new, cold block
  -- (ResNet-50 at batch 1: about 7% faster closed).  A fused step whose
  -- result took its addend's memory returns the addend's value: run_steps
  -- leaves a value that is also the step's output open.
  local closable = {}
  for _, st in ipairs(plan.steps) do
    local o = st.outs[1]
    if FRESH_OUTPUT[st.node.op_type] and o and not shared[o] then closable[o] = true end
  end
  for _, st in ipairs(out) do
    for _, nm in ipairs(st.free) do
      if closable[nm] then
        st.close = st.close or {}
        st.close[nm] = true
      end
    end
  end
  return out
end
G.fuse_steps = fuse_steps

-- Runs plan's steps (or the given ones) in env (a table of name -> tensor,
-- filled with inputs, parameters and constants); leaves results in env.
local function run_steps(plan, env, steps)
  steps = steps or plan.steps
  local cur = 0
  local ok, err = pcall(function()
    for si = 1, #steps do
      cur = si
      local s = steps[si]
      local ins, a = s.ins, {}
      for j = 1, s.nin do
        local nm = ins[j]
        if nm then a[j] = env[nm] end
      end
      if s.nout == 1 then
        local o = s.outs[1]
        local v = s.fn(table.unpack(a, 1, s.nin))
        if o then env[o] = v end
      else
        local r = table.pack(s.fn(table.unpack(a, 1, s.nin)))
        for j, o in ipairs(s.outs) do if o then env[o] = r[j] end end
      end
      local close = s.close
      for _, nm in ipairs(s.free) do
        local v = env[nm]
        env[nm] = nil
        if close and close[nm] and v ~= nil and not rawequal(v, env[s.outs[1]]) then
          getmetatable(v).__close(v)
        end
      end
    end
  end)
  if not ok then
    local s = steps[cur]
    local msg = tostring(err)
    if s and not msg:find("^onnx: ") then
      msg = string.format("onnx: node %s (%s): %s", s.node.label, s.node.op_type, msg)
    end
    error(msg, 0)
  end
end
G.run_steps = run_steps

-- --- the module --------------------------------------------------------------------------

local OnnxModel = Module:extend("OnnxModel")
G.OnnxModel = OnnxModel

local function opset_of(model, src)
  local v
  for _, o in ipairs(model.opset_import or {}) do
    if o.domain == "" or o.domain == "ai.onnx" then v = o.version end
  end
  if not v then
    if #(model.opset_import or {}) == 0 then v = 1 else v = 1 end
  end
  if v > 17 then
    io.stderr:write(string.format("dl.onnx: %s: opset %d is newer than 17; ops are read as opset 17's\n", src, v))
  end
  return v
end

function OnnxModel:__init(model, src, opts)
  if type(model) ~= "table" or type(model.graph) ~= "table" then
    ferror("onnx: %s: the model has no graph", src)
  end
  local opset = opset_of(model, src)
  rawget(self, "_attrs").opset = opset
  rawget(self, "_attrs").src = src
  rawget(self, "_attrs").producer = model.producer_name
  local plan = compile(model.graph, {opset = opset, src = src, root = self, fold = not opts or opts.fold ~= false})
  -- constants (folded values, integer initializers) used at run time become
  -- non-persistent buffers of a holder, so m:to() moves them too
  local used = {}
  for _, s in ipairs(plan.steps) do
    for j = 1, s.nin do if s.ins[j] then used[s.ins[j]] = true end end
  end
  for _, nm in ipairs(plan.outputs) do used[nm] = true end
  local names = {}
  for nm in pairs(plan.consts) do if used[nm] then names[#names + 1] = nm end end
  table.sort(names)
  if #names > 0 then
    local holder = Holder()
    self:add_module("_constants", holder)
    for i, nm in ipairs(names) do
      local key = "c" .. i
      holder:register_buffer(key, plan.consts[nm], {persistent = false})
      plan.holders[nm] = {holder, key}
    end
  end
  plan.consts = nil -- from here on the holders own them
  rawget(self, "_attrs")._plan = plan
  local input_names, output_names = {}, {}
  for i, v in ipairs(plan.inputs) do input_names[i] = v.name end
  for i, nm in ipairs(plan.outputs) do output_names[i] = nm end
  -- inference without autograd runs fused convolutions (false: never)
  rawget(self, "_attrs").fuse_inference = true
  rawget(self, "_attrs").input_names = input_names
  rawget(self, "_attrs").output_names = output_names
end

local function shape_str(shape)
  local p = {}
  for i, d in ipairs(shape) do p[i] = d == false and "?" or tostring(d) end
  return "(" .. table.concat(p, ",") .. ")"
end

-- The first node that reads value name (for messages).
local function first_user(plan, name)
  for _, s in ipairs(plan.steps) do
    for j = 1, s.nin do
      if s.ins[j] == name then return string.format(" (read by node %s (%s))", s.node.label, s.node.op_type) end
    end
  end
  return ""
end

local function check_input(plan, v, x)
  if v.kind == "sequence" then
    -- a Lua list of tensors
    if type(x) ~= "table" or dl.is_tensor(x) or G.is_seq(x) then
      ferror("onnx: input '%s' is a sequence: pass a Lua list of tensors, got %s", v.name, type(x))
    end
    for i, t in ipairs(x) do
      if not dl.is_tensor(t) then ferror("onnx: input '%s': element %d is not a tensor", v.name, i) end
    end
    return G.seq({table.unpack(x)})
  end
  if not dl.is_tensor(x) then
    ferror("onnx: input '%s' must be a tensor, got %s", v.name, type(x))
  end
  if v.shape and #v.shape ~= x:dim() then
    ferror("onnx: input '%s'%s must have %d dims %s, got %d dims %s", v.name, first_user(plan, v.name), #v.shape,
      shape_str(v.shape), x:dim(), shape_str(x.shape))
  end
  if v.elem_type then
    local want = G.DTYPES[v.elem_type]
    if want and want ~= x.dtype and not (FLOAT[want] and FLOAT[x.dtype]) then
      ferror("onnx: input '%s'%s must be %s, got %s", v.name, first_user(plan, v.name), tostring(want),
        tostring(x.dtype))
    end
  end
  return x
end

-- Binds the call's arguments: m(x1, x2, ...) or m{name = x, ...}.
local function bind_inputs(self, plan, env, ...)
  local inputs = plan.inputs
  local a = ...
  -- a table with named entries (not a list, which is a sequence input)
  if select("#", ...) == 1 and type(a) == "table" and not dl.is_tensor(a) and a[1] == nil then
    local known = {}
    for _, v in ipairs(inputs) do
      known[v.name] = true
      local x = a[v.name]
      if x == nil then ferror("onnx: input '%s' is missing", v.name) end
      env[v.name] = check_input(plan, v, x)
    end
    for k in pairs(a) do
      if not known[k] then ferror("onnx: the model has no input named '%s'", tostring(k)) end
    end
    return
  end
  local n = select("#", ...)
  if n ~= #inputs then
    ferror("onnx: the model takes %d input%s (%s), got %d", #inputs, #inputs == 1 and "" or "s",
      table.concat(self.input_names, ", "), n)
  end
  for i, v in ipairs(inputs) do
    local x = select(i, ...)
    env[v.name] = check_input(plan, v, x)
  end
end

-- Whether no gradient can be needed: grad mode off, or no parameter and no
-- input requires grad.
local function inference(self, env, plan)
  if not dl.is_grad_enabled() then return true end
  for _, v in ipairs(plan.inputs) do
    if env[v.name].requires_grad then return false end
  end
  for _, p in ipairs(self:parameters()) do
    if p.requires_grad then return false end
  end
  return true
end

-- The values of the run as a table name -> tensor (every graph output).
function OnnxModel:run(...)
  local plan = self._plan
  local env = {}
  for nm, h in pairs(plan.holders) do env[nm] = h[1][h[2]] end
  bind_inputs(self, plan, env, ...)
  local steps = plan.steps
  if self.fuse_inference and inference(self, env, plan) then
    plan.fused = plan.fused or fuse_steps(plan)
    steps = plan.fused
  end
  run_steps(plan, env, steps)
  local out = {}
  for _, nm in ipairs(plan.outputs) do
    local v = env[nm]
    if G.is_seq(v) then v = {table.unpack(v.items)} end -- sequences come out as Lua lists
    out[nm] = v
  end
  return out
end

-- m(x) / m(x1, x2) / m{name = x}: the outputs in the graph's order.
function OnnxModel:forward(...)
  local out = self:run(...)
  local r = {}
  for i, nm in ipairs(self._plan.outputs) do r[i] = out[nm] end
  return table.unpack(r, 1, #self._plan.outputs)
end

-- Folds every inference-mode BatchNormalization that follows a Conv (whose
-- output nothing else reads) into the convolution's weight and bias, as
-- dl.models.optimize_for_inference does for dlua's models: w' = w * s,
-- b' = (b - mean) * s + beta with s = scale / sqrt(var + eps), in float64.
-- The model is then for inference (its weights changed); eval mode is set.
-- Returns the model and the number of batch norms folded.
function OnnxModel:optimize_for_inference()
  self:eval()
  local plan = self._plan
  local readers = {}
  for _, s in ipairs(plan.steps) do
    for j = 1, s.nin do local nm = s.ins[j]; if nm then readers[nm] = (readers[nm] or 0) + 1 end end
  end
  for _, nm in ipairs(plan.outputs) do readers[nm] = (readers[nm] or 0) + 100 end
  local producer = {}
  for si, s in ipairs(plan.steps) do for _, o in ipairs(s.outs) do if o then producer[o] = si end end end
  local drop, folded = {}, 0
  dl.no_grad(function()
    for _, s in ipairs(plan.steps) do
      local n = s.node
      local ci = s.ins[1] and producer[s.ins[1]]
      local conv = ci and plan.steps[ci]
      local h = plan.holders
      if n.op_type == "BatchNormalization" and not n.training and s.nout >= 1 and conv and
        conv.node.op_type == "Conv" and readers[s.ins[1]] == 1 and h[s.ins[2]] and h[s.ins[3]] and h[s.ins[4]] and
        h[s.ins[5]] and h[conv.ins[2]] and (not conv.ins[3] or h[conv.ins[3]]) then
        local function get(nm) local e = h[nm]; return e[1][e[2]] end
        local w = get(conv.ins[2])
        local O = w.shape[1]
        local sc = get(s.ins[2]):detach():double() / (get(s.ins[5]):detach():double() + n.eps):sqrt()
        local b = conv.ins[3] and get(conv.ins[3]):detach():double() or dl.zeros({O}, {dtype = dl.float64,
          device = w.device})
        b = (b - get(s.ins[4]):detach():double()) * sc + get(s.ins[3]):detach():double()
        local shape = {O}
        for _ = 2, w:dim() do shape[#shape + 1] = 1 end
        local e = h[conv.ins[2]]
        e[1][e[2]] = Module.Parameter((w:detach():double() * sc:reshape(shape)):to(w.dtype))
        if conv.ins[3] then
          local eb = h[conv.ins[3]]
          eb[1][eb[2]] = Module.Parameter(b:to(w.dtype))
        else
          -- a new bias, named after the weight
          local nm = conv.ins[2] .. ".folded_bias"
          local mod, key = place(self, nm, Module.Parameter(b:to(w.dtype)), "param")
          h[nm] = {mod, key}
          conv.ins[3] = nm
          conv.nin = math.max(conv.nin, 3)
        end
        -- the convolution now writes the batch norm's output
        conv.outs[1] = s.outs[1]
        for _, f in ipairs(s.free) do conv.free[#conv.free + 1] = f end
        drop[s] = true
        folded = folded + 1
      end
    end
  end)
  local steps = {}
  for _, s in ipairs(plan.steps) do if not drop[s] then steps[#steps + 1] = s end end
  plan.steps = steps
  plan.fused = nil
  return self, folded
end

function OnnxModel:extra_repr()
  return string.format("%s, opset=%d, inputs=(%s), outputs=(%s), nodes=%d", self.src, self.opset,
    table.concat(self.input_names, ", "), table.concat(self.output_names, ", "), #self._plan.steps)
end

function G.build(model, src, opts) return OnnxModel(model, src, opts) end

return G
