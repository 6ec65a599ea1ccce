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
local O = train.models.inference_options
local SPEC = {
  O.weights,
  {name = "data", metavar = "DIR", help = "ImageFolder to evaluate (required)"},
  O.arch, O.image_size, O.resize,
  {name = "batch-size", type = "int", min = 1, default = 64, help = "images per batch"},
  {name = "workers", type = "int", min = 0, default = 2, help = "data-loader threads"},
  O.threads, O.device,
}

local function main(o, rest)
  if #rest > 0 then error("unexpected argument '" .. rest[1] .. "' (see --help)", 0) end
  if not o.weights then error("--weights FILE is required (see --help)", 0) end
  if not o.data then error("--data DIR is required (see --help)", 0) end
  local model, info, device, tf = train.models.for_inference(o)
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
