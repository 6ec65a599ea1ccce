-- test_onnx.lua - dl.onnx.load: graphs written by dlua's own encoder
-- (dl._onnx.encode_model) load and run with the values the ops give;
-- initializers are parameters with PyTorch's dotted state_dict names and
-- take gradients; named and positional calls; a dynamic batch dimension;
-- constant folding; m:double(); and every kind of bad input -- a truncated
-- or corrupt file, a cycle, a missing initializer, an input of the wrong
-- rank, an unknown op or attribute, external data -- gives an error naming
-- the node and the process stays healthy.  (ONNX's own test data runs in
-- test_onnx_conformance.lua.)
local T = require "testlib"

T.skip_if(dl._onnx.missing())

local F32 = 1

local function vi(name, shape, et) return {name = name, elem_type = et or F32, shape = shape} end
local function attr(name, ty, value) return {name = name, type = ty, value = value} end
local function node(op, ins, outs, attrs, name)
  return {op_type = op, input = ins, output = outs, attribute = attrs or {}, name = name or (op .. "_" .. outs[1])}
end

-- A model table from nodes, initializers {name = tensor} (sorted), inputs, outputs.
local function model(nodes, inits, inputs, outputs, opset)
  local il = {}
  for k, t in pairs(inits or {}) do il[#il + 1] = {name = k, tensor = t} end
  table.sort(il, function(a, b) return a.name < b.name end)
  return {ir_version = 8, producer_name = "test_onnx", opset_import = {{domain = "", version = opset or 17}},
    graph = {name = "g", node = nodes, initializer = il, input = inputs, output = outputs}}
end

local function load(m) return dl.onnx.load(dl._onnx.encode_model(m), {bytes = true}) end

local W = dl.tensor({{1.0, -2.0, 3.0}, {0.5, 1.0, -1.0}})
local B = dl.tensor({0.25, -0.5})
local function gemm_model()
  return model({node("Gemm", {"x", "fc.weight", "fc.bias"}, {"h"}, {attr("transB", "INT", 1)}, "fc"),
    node("Relu", {"h"}, {"y"}, nil, "act")}, {["fc.weight"] = W, ["fc.bias"] = B},
    {vi("x", {"N", 3})}, {vi("y", {"N", 2})})
end

T.case("a Gemm + Relu graph: values, names, positional and named calls", function()
  local m = load(gemm_model())
  local x = dl.tensor({{1.0, 2.0, 3.0}, {-1.0, 0.0, 1.0}})
  local want = (dl.matmul(x, W:t()) + B):relu()
  T.tensor_eq(m(x), want, 1e-6)
  T.tensor_eq(m{x = x}, want, 1e-6)
  T.eq(m.input_names[1], "x")
  T.eq(m.output_names[1], "y")
  local sd = m:state_dict()
  T.tensor_eq(sd["fc.weight"], W)
  T.tensor_eq(sd["fc.bias"], B)
  T.eq(#m:parameters(), 2)
  T.truthy(tostring(m):find("OnnxModel", 1, true))
end)

T.case("a dynamic batch dimension", function()
  local m = load(gemm_model())
  for _, n in ipairs {1, 5} do
    local x = dl.randn(n, 3)
    T.tensor_eq(m(x), (dl.matmul(x, W:t()) + B):relu(), 1e-6)
  end
end)

T.case("fine-tuning: gradients reach the initializers", function()
  local m = load(gemm_model())
  local x = dl.tensor({{1.0, 2.0, 3.0}, {-1.0, 0.0, 1.0}})
  local y = m(x)
  y:sum():backward()
  local w = W:clone():requires_grad_(true)
  local b = B:clone():requires_grad_(true);
  ((dl.matmul(x, w:t()) + b):relu()):sum():backward()
  local p = m:state_dict()
  T.tensor_eq(m.fc.weight.grad, w.grad, 1e-6)
  T.tensor_eq(m.fc.bias.grad, b.grad, 1e-6)
  -- an optimizer step changes what the model computes
  local opt = dl.optim.SGD(m:parameters(), {lr = 0.1})
  opt:step()
  T.truthy((m(x) - y:detach()):abs():sum():item() > 0)
  T.truthy(p ~= nil)
end)

T.case("m:double() and float64 inputs", function()
  local m = load(gemm_model()):double()
  local x = dl.randn(2, 3, {dtype = dl.float64})
  local y = m(x)
  T.eq(y.dtype, dl.float64)
  T.tensor_eq(y, (dl.matmul(x, W:double():t()) + B:double()):relu(), 1e-12)
end)

T.case("constant folding: shape arithmetic runs once at load", function()
  -- y = Reshape(x, Concat(Constant{-1}, Constant{6})) and an int64 initializer
  local c1 = node("Constant", {}, {"c1"}, {attr("value", "TENSOR", dl.tensor({-1}, {dtype = dl.int64}))})
  local cat = node("Concat", {"c1", "six"}, {"shape"}, {attr("axis", "INT", 0)})
  local r = node("Reshape", {"x", "shape"}, {"y"})
  local m = load(model({c1, cat, r}, {six = dl.tensor({6}, {dtype = dl.int64})}, {vi("x", {2, 3, 2})},
    {vi("y", {2, 6})}))
  T.eq(#m._plan.steps, 1) -- only the Reshape runs per call
  T.shape_eq(m(dl.randn(2, 3, 2)), {2, 6})
  T.eq(#m:parameters(), 0)
end)

T.case("opset-dependent forms: Squeeze axes as attribute (11) and input (13)", function()
  local x = dl.randn(2, 1, 3)
  local m11 = load(model({node("Squeeze", {"x"}, {"y"}, {attr("axes", "INTS", {1})})}, nil, {vi("x", {2, 1, 3})},
    {vi("y", {2, 3})}, 11))
  T.shape_eq(m11(x), {2, 3})
  local m13 = load(model({node("Squeeze", {"x", "axes"}, {"y"})}, {axes = dl.tensor({-2}, {dtype = dl.int64})},
    {vi("x", {2, 1, 3})}, {vi("y", {2, 3})}, 13))
  T.shape_eq(m13(x), {2, 3})
  -- the attribute form is refused where the opset moved it to an input
  T.raises(function()
    load(model({node("Squeeze", {"x"}, {"y"}, {attr("axes", "INTS", {1})}, "sq")}, nil, {vi("x", {2, 1, 3})},
      {vi("y", {2, 3})}, 13))
  end, "node 'sq' (Squeeze): attribute 'axes' is not supported (opset 13)")
end)

T.case("inference fuses Conv -> Add -> Relu; with gradients the plain ops run", function()
  dl.manual_seed(3)
  local w, b = dl.randn(4, 3, 3, 3), dl.randn(4)
  local m = load(model({
    node("Conv", {"x", "w", "b"}, {"c"}, {attr("pads", "INTS", {1, 1, 1, 1})}, "conv"),
    node("Add", {"c", "skip"}, {"s"}, nil, "add"), node("Relu", {"s"}, {"y"}, nil, "relu")},
    {w = w, b = b}, {vi("x", {"N", 3, 5, 5}), vi("skip", {"N", 4, 5, 5})}, {vi("y", {"N", 4, 5, 5})}))
  local x, skip = dl.randn(2, 3, 5, 5), dl.randn(2, 4, 5, 5)
  local want = (dl.nn.functional.conv2d(x, w, b, {padding = 1}) + skip):relu()
  local fast = dl.no_grad(function() return m(x, skip) end)
  T.eq(#m._plan.fused, 1)
  T.close(fast, want, 1e-5, 1e-5)
  local y = m(x, skip) -- parameters require grad: the plain steps, recorded
  T.close(y:detach(), want, 1e-5, 1e-5)
  y:sum():backward()
  T.truthy(m.w.grad ~= nil and m.b.grad ~= nil)
  T.close(m.b.grad, (want:gt(0):to(dl.float32)):sum({1, 3, 4}), 1e-5, 1e-5)
end)

-- The fused step may write its result into the addend when nothing reads the
-- addend afterwards; a value computed in the plan and dead after the Add
-- (r) takes it, one that lives on under another name (r passed through
-- Identity to `alias`, read by a later Mul: Identity hands back the same
-- tensor) must not, and a graph input (skip) never does.
T.case("the fused Add reuses a dying addend, never one that lives on", function()
  dl.manual_seed(4)
  local w, b = dl.randn(4, 4, 3, 3) * 0.2, dl.randn(4)
  local pads = {attr("pads", "INTS", {1, 1, 1, 1})}
  local function build(with_alias)
    local nodes = {
      node("Conv", {"x", "w", "b"}, {"c0"}, pads, "conv0"), node("Relu", {"c0"}, {"r"}, nil, "relu0"),
      node("Conv", {"r", "w", "b"}, {"c1"}, pads, "conv1"), node("Relu", {"c1"}, {"r1"}, nil, "relu1"),
      node("Conv", {"r1", "w", "b"}, {"c2"}, pads, "conv2"), node("Add", {"c2", "r"}, {"s"}, nil, "add"),
      node("Relu", {"s"}, {"y0"}, nil, "relu2")}
    if with_alias then
      table.insert(nodes, 3, node("Identity", {"r"}, {"alias"}, nil, "id"))
      nodes[#nodes + 1] = node("Mul", {"y0", "alias"}, {"y"}, nil, "mul")
    else
      nodes[#nodes + 1] = node("Add", {"y0", "skip"}, {"y"}, nil, "add_skip")
    end
    return load(model(nodes, {w = w, b = b}, {vi("x", {"N", 4, 6, 6}), vi("skip", {"N", 4, 6, 6})},
      {vi("y", {"N", 4, 6, 6})}))
  end
  local x, skip = dl.randn(2, 4, 6, 6), dl.randn(2, 4, 6, 6)
  local F = dl.nn.functional
  local r = F.conv2d(x, w, b, {padding = 1}):relu()
  local r1 = F.conv2d(r, w, b, {padding = 1}):relu()
  local y0 = (F.conv2d(r1, w, b, {padding = 1}) + r):relu()
  for _, alias in ipairs({false, true}) do
    local m = build(alias)
    local skip_before = skip:clone()
    local want = alias and y0 * r or y0 + skip
    for _ = 1, 2 do
      T.close(dl.no_grad(function() return m(x, skip) end), want, 1e-5, 1e-5, alias and "alias" or "plain")
    end
    T.tensor_eq(skip, skip_before, 0, "the graph input is untouched")
  end
end)

-- Inference plans release an intermediate where it dies instead of leaving
-- it to the collector: through a chain of 12 Conv+Relu layers at most a few
-- activations are held at once (all 12 were before), and an intermediate
-- that lives on under another name (Identity) is not released.
T.case("inference plans release dead intermediates at once", function()
  dl.manual_seed(5)
  local L, C, S = 12, 16, 32
  local w = dl.randn(C, C, 3, 3) * 0.1
  local pads = {attr("pads", "INTS", {1, 1, 1, 1})}
  local nodes, prev = {}, "x"
  for i = 1, L do
    nodes[#nodes + 1] = node("Conv", {prev, "w"}, {"c" .. i}, pads, "conv" .. i)
    nodes[#nodes + 1] = node("Relu", {"c" .. i}, {"r" .. i}, nil, "relu" .. i)
    prev = "r" .. i
  end
  nodes[#nodes + 1] = node("Identity", {"r3"}, {"kept"}, nil, "id")
  nodes[#nodes + 1] = node("Add", {prev, "kept"}, {"y"}, nil, "add")
  local m = load(model(nodes, {w = w}, {vi("x", {1, C, S, S})}, {vi("y", {1, C, S, S})}))
  local x = dl.randn(1, C, S, S)
  local want, x3 = x, nil
  for i = 1, L do
    want = dl.nn.functional.conv2d(want, w, nil, {padding = 1}):relu()
    if i == 3 then x3 = want end
  end
  want = want + x3
  dl.no_grad(function() m(x) end) -- primitives, packed weights
  collectgarbage()
  collectgarbage("stop")
  dl.reset_peak_memory_stats()
  local base = dl.max_memory_allocated()
  local y = dl.no_grad(function() return m(x) end)
  local peak = dl.max_memory_allocated() - base
  collectgarbage("restart")
  T.close(y, want, 1e-5, 1e-5, "values")
  local act = C * S * S * 4
  T.truthy(peak <= 6 * act, string.format("peak %d bytes, %.1f activations", peak, peak / act))
end)

-- --- bad input ------------------------------------------------------------------------------

T.case("a truncated or corrupt file", function()
  local bytes = dl._onnx.encode_model(gemm_model())
  T.raises(function() dl.onnx.load(bytes:sub(1, #bytes // 2), {bytes = true}) end, "truncated")
  -- field 2 (producer_name) claiming 2 MB
  T.raises(function() dl.onnx.load("\18\255\255\127" .. bytes, {bytes = true}) end, "runs past the end")
  T.raises(function() dl.onnx.load(bytes .. "\255", {bytes = true}) end, "bad field key")
  T.raises(function() dl.onnx.load("") end, "cannot open")
  T.raises(function() dl.onnx.load("\0\0\0", {bytes = true}) end, "corrupt")
  -- deep nesting is refused before protobuf-c recurses: a graph whose node
  -- has a graph attribute whose node has ... (GraphProto.node = 1,
  -- NodeProto.attribute = 5, AttributeProto.g = 6, ModelProto.graph = 7)
  local function varint(v)
    local s = ""
    while v >= 128 do s = s .. string.char(v % 128 + 128); v = v // 128 end
    return s .. string.char(v)
  end
  local function field(tag, body) return string.char(tag * 8 + 2) .. varint(#body) .. body end
  local g = ""
  for _ = 1, 40 do g = field(1, field(5, field(6, g))) end
  T.raises(function() dl._onnx.decode_model(field(7, g)) end, "nested deeper than 64")
  local ok = pcall(dl._onnx.decode_model, field(7, g:sub(1, 0)))
  T.truthy(ok)
end)

T.case("a cycle names a node on it", function()
  local m = model({node("Relu", {"b"}, {"a"}, nil, "first"), node("Relu", {"a"}, {"b"}, nil, "second"),
    node("Add", {"x", "a"}, {"y"}, nil, "out")}, nil, {vi("x", {2})}, {vi("y", {2})})
  T.raises(function() load(m) end, "the graph has a cycle: node 'first' (Relu)")
end)

T.case("a missing initializer names the node", function()
  local m = model({node("MatMul", {"x", "w"}, {"y"}, nil, "mm")}, nil, {vi("x", {2, 2})}, {vi("y", {2, 2})})
  T.raises(function() load(m) end, "node 'mm' (MatMul): input 'w' is neither a graph input, an initializer")
end)

T.case("an input of the wrong rank, dtype or count", function()
  local m = load(gemm_model())
  T.raises(function() m(dl.randn(3)) end, "input 'x' (read by node 'fc' (Gemm)) must have 2 dims (N,3), got 1")
  T.raises(function() m(dl.ones(2, 3, {dtype = dl.int64})) end, "must be dl.float32, got dl.int64")
  T.raises(function() m() end, "takes 1 input (x), got 0")
  T.raises(function() m{z = dl.randn(2, 3)} end, "input 'x' is missing")
  -- a shape error inside a node names the node
  T.raises(function() m(dl.randn(2, 4)) end, "node 'fc' (Gemm)")
  T.tensor_eq(m(dl.ones(1, 3)), {{2.25, 0}}, 1e-6) -- still healthy
end)

T.case("an unknown op, domain or attribute fails at load naming the node", function()
  local function one(n) return model({n}, nil, {vi("x", {2})}, {vi("y", {2})}) end
  T.raises(function() load(one(node("Frobnicate", {"x"}, {"y"}, nil, "f"))) end,
    "node 'f': op type Frobnicate is not supported (opset 17)")
  local n = node("Relu", {"x"}, {"y"}, nil, "r")
  n.domain = "com.example"
  T.raises(function() load(one(n)) end, "op type Relu of domain 'com.example' is not supported")
  T.raises(function() load(one(node("Relu", {"x"}, {"y"}, {attr("alpha", "FLOAT", 1)}, "r"))) end,
    "node 'r' (Relu): attribute 'alpha' is not supported")
  T.raises(function() load(one(node("LeakyRelu", {"x"}, {"y"}, {attr("alpha", "INTS", {1})}, "lr"))) end,
    "node 'lr' (LeakyRelu): attribute 'alpha' must be of type FLOAT, got INTS")
  T.raises(function() load(one(node("Cast", {"x"}, {"y"}, {attr("to", "INT", 3)}, "c"))) end,
    "node 'c' (Cast): Cast to INT8: dlua has no such dtype")
end)

T.case("external data is refused, naming the file", function()
  local py = T.python()
  local path = T.tmpdir() .. "/onnx_external.onnx"
  local code = [[
import onnx, sys
from onnx import helper, TensorProto
t = helper.make_tensor("w", TensorProto.FLOAT, [2], [1.0, 2.0])
t.ClearField("float_data")
t.data_location = TensorProto.EXTERNAL
e = t.external_data.add(); e.key = "location"; e.value = "weights.bin"
g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])], [t])
open(sys.argv[1], "wb").write(helper.make_model(g).SerializeToString())
]]
  local f = assert(io.open(path .. ".py", "w"))
  f:write(code)
  f:close()
  if not os.execute(py .. " " .. path .. ".py " .. path .. " 2>/dev/null") then
    print("(skipped: no python3-onnx to write a model with external data)")
    return
  end
  T.raises(function() dl.onnx.load(path) end, "external file 'weights.bin'")
end)

T.case("ONNX's PyTorch-converted Conv2d test model", function()
  local dir = "/usr/share/libonnx-testdata/data/pytorch-converted/test_Conv2d"
  if not io.open(dir .. "/model.onnx") then
    print("(skipped: no libonnx-testdata)")
    return
  end
  local m = dl.onnx.load(dir .. "/model.onnx")
  local x = dl.onnx.load_tensor(dir .. "/test_data_set_0/input_0.pb")
  local y = dl.onnx.load_tensor(dir .. "/test_data_set_0/output_0.pb")
  T.tensor_eq(m(x), y, 1e-5)
end)

T.done()
