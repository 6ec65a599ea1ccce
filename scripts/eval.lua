-- eval.lua - evaluates a trained classifier on an ImageFolder and prints
-- top-1 / top-5 accuracy and the mean cross-entropy:
--
--   dlua scripts/eval.lua --weights checkpoints/best.safetensors --data data/fashion-mnist/val
--
-- The folder's classes must match the model's (same names, in the order a
-- checkpoint recorded them).  Exit status: 0, or 2 with one line on stderr
-- for bad input.
local dl = require "dl"
local train = require "dl.train"
local args = train.args

local PROG = "eval"
local SPEC = {
  {name = "weights", metavar = "FILE", help = "checkpoint or safetensors state dict (required)"},
  {name = "data", metavar = "DIR", help = "ImageFolder to evaluate (required)"},
  {name = "arch", metavar = "NAME", default_text = "the checkpoint's", help = "model architecture"},
  {name = "image-size", type = "int", min = 1, default_text = "the checkpoint's, else 224", help = "input side"},
  {name = "resize", type = "int", min = 1, default_text = "the checkpoint's, else image-size*256/224",
   help = "shorter side before the centre crop"},
  {name = "batch-size", type = "int", min = 1, default = 64, help = "images per batch"},
  {name = "workers", type = "int", min = 0, default = 2, help = "data-loader threads"},
  {name = "threads", type = "int", min = 1, default_text = "dl's default", help = "compute threads"},
  {name = "device", default = "auto", metavar = "DEV", help = "auto, cpu, cuda or cuda:N (auto: a GPU when there is one)"},
}

local function main(o, rest)
  if #rest > 0 then error("unexpected argument '" .. rest[1] .. "' (see --help)", 0) end
  if not o.weights then error("--weights FILE is required (see --help)", 0) end
  if not o.data then error("--data DIR is required (see --help)", 0) end
  local device = train.device.setup(o.device, o.threads)
  local model, info = train.models.from_weights(o.weights, o.arch, device)
  local size = o.image_size or info.image_size or 224
  local tf = train.data.transform{image_size = size, resize = o.resize or info.resize}
  local ds = train.data.folder("--data", o.data, tf)
  if #ds.classes > info.num_classes then
    error(string.format("--data %s has %d classes, the model only %d", o.data, #ds.classes, info.num_classes), 0)
  end
  if info.classes then
    for i, c in ipairs(ds.classes) do
      if info.classes[i] ~= c then
        error(string.format("--data %s: class %d is '%s', the model's is '%s'", o.data, i, c,
          tostring(info.classes[i])), 0)
      end
    end
  end
  local loader = dl.data.DataLoader(ds, {batch_size = o.batch_size, num_workers = o.workers,
    pin_memory = device ~= "cpu"})
  local t0 = dl.clock()
  local r = train.evaluate.run(model, loader, {device = device ~= "cpu" and device or nil})
  loader:close()
  print(string.format("%s on %s (%s): %d images", info.arch, o.data, device, r.n))
  print(string.format("top-1: %.2f%%", 100 * r.top1))
  print(string.format("top-%d: %.2f%%", r.k, 100 * r.top5))
  print(string.format("loss: %.4f", r.loss))
  print(string.format("time: %.1f s", dl.clock() - t0))
  return 0
end

args.run(PROG, SPEC, {usage = "dlua scripts/eval.lua --weights FILE --data DIR [options]",
  description = "Prints top-1 / top-5 accuracy of a classifier on an ImageFolder."}, main)
