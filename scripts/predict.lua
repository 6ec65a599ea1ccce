-- predict.lua - classifies images with a trained model and prints the top
-- classes with their probabilities, one block per image:
--
--   dlua scripts/predict.lua --weights checkpoints/best.safetensors img1.png img2.jpg
--   dlua scripts/predict.lua --weights resnet50.safetensors --arch resnet50 --classes names.txt cat.jpg
--
-- A checkpoint written by train_resnet.lua carries its architecture, class
-- names and image size; a plain state dict needs --arch (and --classes for
-- names: one per line, in label order).  Images go through the evaluation
-- pipeline of training (Resize, CenterCrop, ToTensor, Normalize).
-- Exit status: 0, or 2 with one line on stderr for bad input.
local dl = require "dl"
local train = require "dl.train"
local args = train.args

local PROG = "predict"
local O = train.models.inference_options
local SPEC = {
  O.weights, O.arch,
  {name = "classes", metavar = "FILE", default_text = "the checkpoint's", help = "class names, one per line"},
  O.image_size, O.resize,
  {name = "top", type = "int", min = 1, default = 5, help = "classes to print per image"},
  O.threads, O.device,
}

local function main(o, images)
  if not o.weights then error("--weights FILE is required (see --help)", 0) end
  if #images == 0 then error("no images given (see --help)", 0) end
  local model, info, device, tf = train.models.for_inference(o)
  local classes = info.classes
  if o.classes then
    local f, err = io.open(o.classes, "r")
    if not f then error("--classes " .. tostring(err), 0) end
    classes = {}
    for line in f:lines() do
      line = line:gsub("%s+$", "")
      if line ~= "" then classes[#classes + 1] = line end
    end
    f:close()
    if #classes ~= info.num_classes then
      error(string.format("--classes %s lists %d names, the model has %d classes", o.classes, #classes,
        info.num_classes), 0)
    end
  end
  local k = math.min(o.top, info.num_classes)
  local width = 0
  for i = 1, info.num_classes do width = math.max(width, #(classes and classes[i] or ("class " .. i))) end
  for _, path in ipairs(images) do
    local ok, img = pcall(dl.image.load, path, {mode = "RGB"})
    if not ok then error(tostring(img):gsub("\n.*", ""), 0) end
    local x = tf(img):unsqueeze(1):to(device)
    local probs = dl.no_grad(function() return dl.nn.functional.softmax(model(x), 2)[1] end):cpu()
    local p, idx = probs:topk(k)
    p, idx = p:tolist(), idx:tolist()
    print(path)
    for r = 1, k do
      local name = classes and classes[idx[r]] or ("class " .. idx[r])
      print(string.format("  %d. %-" .. width .. "s %6.2f%%", r, name, 100 * p[r]))
    end
  end
  return 0
end

args.run(PROG, SPEC, {usage = "dlua scripts/predict.lua --weights FILE [options] IMAGE...",
  description = "Prints the most likely classes of each image."}, main)
