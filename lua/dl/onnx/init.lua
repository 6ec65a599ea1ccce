-- dl.onnx: ONNX models in and out.
--
--   local m = dl.onnx.load("model.onnx")        -- a dl.nn.Module
--   local y = m(x)                               -- or m{input_name = x}
--   m:to("cuda"); m:parameters()                 -- initializers are parameters
--   dl.onnx.export(model, {x}, "out.onnx", {opset = 17, dynamic_batch = true})
--   dl.onnx.supported_ops()                      -- the op types load accepts
--
-- The file is decoded in C (src/io/onnx.c, protobuf-c with a bound on every
-- size, src/lua/l_onnx.c turns it into tables); lua/dl/onnx/graph.lua builds
-- the module, lua/dl/onnx/ops.lua holds one builder per op type and
-- lua/dl/onnx/export.lua traces a forward into a graph.
--
-- Invariants: everything that can be checked without data is checked at
-- load (op types, attributes, opset forms, that every input has a producer,
-- cycles); a load error names the node, its op type and what is missing.
local dl = require "dl"

local onnx = {}

local function check_available()
  local missing = dl._onnx.missing()
  if missing then error(missing, 0) end
end

-- dl.onnx.load(path, {bytes=false, fold=true}) -> OnnxModel (a dl.nn.Module).
-- bytes = true reads `src` as the file's bytes instead of a path; fold =
-- false runs nothing at load (no constant folding: every node runs per call).
function onnx.load(src, opts)
  check_available()
  opts = opts or {}
  if type(opts) ~= "table" then error("onnx.load: options must be a table", 2) end
  for k in pairs(opts) do
    if k ~= "bytes" and k ~= "fold" then error("onnx.load: unknown option '" .. tostring(k) .. "'", 2) end
  end
  if type(src) ~= "string" then error("onnx.load: a path (string) is required, got " .. type(src), 2) end
  local model
  if opts.bytes then model = dl._onnx.decode_model(src) else model = dl._onnx.load_model(src) end
  return require("dl.onnx.graph").build(model, opts.bytes and "(bytes)" or src, {fold = opts.fold ~= false})
end

-- dl.onnx.load_tensor(path) -> tensor, name (a serialized TensorProto, as
-- ONNX's test data sets hold); nil, reason when dlua cannot hold it.
function onnx.load_tensor(path)
  check_available()
  return dl._onnx.load_tensor(path)
end

-- dl.onnx.load_sequence(path) -> a Lua list of tensors: a serialized
-- SequenceProto of tensors (onnx-data.proto, as ONNX's test data holds
-- sequence values).  Its few fields are read here: elem_type (2) and
-- tensor_values (3), each a TensorProto decoded in C.
function onnx.load_sequence(path)
  check_available()
  local f = io.open(path, "rb")
  if not f then error("onnx.load_sequence: cannot open '" .. tostring(path) .. "'", 2) end
  local b = f:read("a")
  f:close()
  local pos, items = 1, {}
  local function varint()
    local v, shift = 0, 0
    while true do
      local c = b:byte(pos)
      if not c or shift > 63 then error("onnx.load_sequence: " .. path .. ": truncated or corrupt", 0) end
      pos = pos + 1
      v = v | ((c & 0x7f) << shift)
      if c < 0x80 then return v end
      shift = shift + 7
    end
  end
  while pos <= #b do
    local key = varint()
    local field, wt = key >> 3, key & 7
    if wt == 0 then varint()
    elseif wt == 1 then pos = pos + 8
    elseif wt == 5 then pos = pos + 4
    elseif wt == 2 then
      local len = varint()
      if len < 0 or pos + len - 1 > #b then error("onnx.load_sequence: " .. path .. ": truncated", 0) end
      if field == 3 then
        local t, why = dl._onnx.decode_tensor(b:sub(pos, pos + len - 1), path)
        if not t then return nil, why end
        items[#items + 1] = t
      elseif field ~= 1 then
        return nil, "onnx.load_sequence: " .. path .. ": only sequences of tensors are supported"
      end
      pos = pos + len
    else
      error("onnx.load_sequence: " .. path .. ": corrupt (wire type " .. wt .. ")", 0)
    end
  end
  return items
end

-- dl.onnx.save_tensor(path, t [, name]): t as a serialized TensorProto.
function onnx.save_tensor(path, t, name)
  check_available()
  if type(path) ~= "string" then error("onnx.save_tensor: path must be a string", 2) end
  if not dl.is_tensor(t) then error("onnx.save_tensor: a tensor is required", 2) end
  dl._onnx.save_tensor(path, t, name)
end

-- The op types (default domain) that load accepts, sorted.
function onnx.supported_ops()
  local ops = require "dl.onnx.ops"
  local out = {}
  for k in pairs(ops) do out[#out + 1] = k end
  table.sort(out)
  return out
end

-- dl.onnx.export(model, example_inputs, path, {opset=17, dynamic_batch=true,
-- input_names=, output_names=}) -> the model table written
function onnx.export(model, example_inputs, path, opts)
  check_available()
  return require("dl.onnx.export").export(model, example_inputs, path, opts)
end

return onnx
