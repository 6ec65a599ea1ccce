-- export_onnx.lua - writes a trained classifier as an ONNX file for ONNX
-- Runtime or TensorRT (`trtexec --onnx=OUT.onnx`):
--
--   dlua scripts/export_onnx.lua checkpoints/best.safetensors resnet50.onnx --arch resnet50
--
-- The checkpoint is a training checkpoint (it names its arch and image size)
-- or a plain safetensors state dict (then --arch is required).  The model is
-- traced once on a random batch; the batch dimension stays dynamic unless
-- --static-batch.  Prints the file's inputs, outputs and size, and checks
-- that dl.onnx.load of the file gives the model's outputs.  Exit status: 0,
-- or 2 with one line on stderr for bad input.
local dl = require "dl"
local train = require "dl.train"
local args = train.args

local PROG = "export_onnx"
local SPEC = {
  {name = "arch", metavar = "NAME", default_text = "the checkpoint's", help = "model architecture"},
  {name = "image-size", type = "int", min = 1, default_text = "the checkpoint's, else 224", help = "input side"},
  {name = "batch", type = "int", min = 1, default = 1, help = "batch size of the example input"},
  {name = "opset", type = "int", min = 13, default = 17, help = "ONNX opset (13 to 17)"},
  {name = "static-batch", type = "flag", help = "fix the batch dimension to --batch"},
}

local function main(o, rest)
  if #rest ~= 2 then error("CHECKPOINT and OUT.onnx are required (see --help)", 0) end
  local weights, out = rest[1], rest[2]
  local model, info = train.models.from_weights(weights, o.arch)
  local size = o.image_size or info.image_size or 224
  dl.manual_seed(0)
  local x = dl.randn(o.batch, 3, size, size)
  local t0 = dl.clock()
  local m = dl.onnx.export(model, {x}, out, {opset = o.opset, dynamic_batch = not o.static_batch,
    input_names = {"input"}, output_names = {"logits"}})
  local f = assert(io.open(out, "rb"))
  local bytes = f:seek("end")
  f:close()
  local function shape(v)
    local p = {}
    for i, d in ipairs(v.shape) do p[i] = tostring(d) end
    return v.name .. " (" .. table.concat(p, ", ") .. ")"
  end
  print(string.format("%s: %s, opset %d, %d nodes, %d initializers, %.1f MB (%.1f s)", out, info.arch, o.opset,
    #m.graph.node, #m.graph.initializer, bytes / 1e6, dl.clock() - t0))
  print("input:  " .. shape(m.graph.input[1]))
  print("output: " .. shape(m.graph.output[1]))
  local back = dl.onnx.load(out)
  local diff = dl.no_grad(function() return (back(x) - model(x)):abs():max():item() end)
  print(string.format("dl.onnx.load(%s) agrees with the model: max |difference| %.3g", out, diff))
  if not (diff <= 1e-3) then error(string.format("the exported model differs by %.3g", diff), 0) end
  return 0
end

args.run(PROG, SPEC, {usage = "dlua scripts/export_onnx.lua CHECKPOINT OUT.onnx [options]",
  description = "Writes a classifier as ONNX (for ONNX Runtime, TensorRT's trtexec --onnx=OUT.onnx)."}, main)
