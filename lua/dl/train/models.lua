-- dl.train.models: the architectures the training scripts accept by name:
-- every dl.models constructor (resnet18 ... wide_resnet101_2) plus
-- "tinycnn", a two-convolution network for tests and smoke runs (seconds on
-- a CPU).  All of them keep their classifier in `fc`, the layer fine-tuning
-- replaces when the class count changes.
local dl = require "dl"
local nn = dl.nn

local M = {}
M.classifier = "fc"

-- TinyCNN(num_classes): conv(3->8) bn relu maxpool2, conv(8->16) bn relu,
-- global average pool, fc(16 -> num_classes).  Works for any image >= 2x2.
local TinyCNN = nn.Module:extend("TinyCNN")
M.TinyCNN = TinyCNN

function TinyCNN:__init(num_classes)
  self.conv1 = nn.Conv2d(3, 8, 3, {padding = 1, bias = false})
  self.bn1 = nn.BatchNorm2d(8)
  self.conv2 = nn.Conv2d(8, 16, 3, {padding = 1, bias = false})
  self.bn2 = nn.BatchNorm2d(16)
  self.pool = nn.MaxPool2d(2)
  self.avgpool = nn.AdaptiveAvgPool2d({1, 1})
  self.fc = nn.Linear(16, num_classes)
end

function TinyCNN:forward(x)
  x = self.pool(self.bn1(self.conv1(x)):relu())
  x = self.bn2(self.conv2(x)):relu()
  return self.fc(self.avgpool(x):flatten(2))
end

local extra = {tinycnn = function(num_classes) return TinyCNN(num_classes) end}

function M.names()
  local names = dl.models.list_models()
  for k in pairs(extra) do names[#names + 1] = k end
  table.sort(names)
  return names
end

function M.exists(arch)
  for _, n in ipairs(M.names()) do
    if n == arch then return true end
  end
  return false
end

-- build(arch, num_classes) -> a fresh model (initialised from the default
-- generator); an unknown name raises one line listing the known ones.
function M.build(arch, num_classes)
  if not M.exists(arch) then
    error(string.format("unknown --arch '%s' (available: %s)", tostring(arch), table.concat(M.names(), ", ")), 0)
  end
  if extra[arch] then return extra[arch](num_classes) end
  return dl.models.get_model(arch, {num_classes = num_classes})
end

-- The class count of a state dict's classifier (fc.weight rows), or nil.
function M.num_classes_of(sd)
  local w = sd[M.classifier .. ".weight"]
  if dl.is_tensor(w) and w:dim() == 2 then return w.shape[1] end
  return nil
end

-- from_weights(path [, arch [, device]]) -> model (eval mode, moved to
-- device when that is not the CPU), info: loads a weights file or training
-- checkpoint for inference.  A checkpoint names its arch, classes and image
-- sizes; a plain state dict needs arch.  An unknown arch is refused before
-- the file is read.  info = {arch, num_classes, classes (or nil),
-- image_size, resize, meta}.
function M.from_weights(path, arch, device)
  if arch and not M.exists(arch) then M.build(arch, 1) end -- raises the one-line "unknown --arch"
  local checkpoint = require "dl.train.checkpoint"
  local sd, meta = checkpoint.read_weights(path)
  meta = meta or {}
  arch = arch or meta.arch
  if not arch then
    error(string.format("%s is a plain state dict: say which model it is with --arch", path), 0)
  end
  local n = M.num_classes_of(sd)
  if not n then error(string.format("%s has no %s.weight: not a classifier's weights", path, M.classifier), 0) end
  local model = M.build(arch, n)
  checkpoint.load_weights(model, sd, {path = path, arch = arch, allow_new_classifier = false})
  model:eval()
  if device and device ~= "cpu" then model:to(device) end
  return model, {arch = arch, num_classes = n, classes = meta.classes, image_size = meta.image_size,
    resize = meta.resize, meta = meta}
end

-- The options of the inference scripts (scripts/eval.lua, predict.lua) that
-- say which trained model to run and where, as dl.train.args spec entries
-- by key (each script lists them in its SPEC in its own order).
M.inference_options = {
  weights = {name = "weights", metavar = "FILE", help = "checkpoint or safetensors state dict (required)"},
  arch = {name = "arch", metavar = "NAME", default_text = "the checkpoint's", help = "model architecture"},
  image_size = {name = "image-size", type = "int", min = 1, default_text = "the checkpoint's, else 224",
    help = "input side"},
  resize = {name = "resize", type = "int", min = 1, default_text = "the checkpoint's, else image-size*256/224",
    help = "shorter side before the centre crop"},
  threads = {name = "threads", type = "int", min = 1, default_text = "dl's default", help = "compute threads"},
  device = {name = "device", default = "auto", metavar = "DEV",
    help = "auto, cpu, cuda or cuda:N (auto: a GPU when there is one)"},
}

-- for_inference(o) -> model, info, device, transform, from those options
-- (o.weights given): the device set up, the model loaded (from_weights) and
-- the evaluation transform at --image-size / --resize, else the
-- checkpoint's sizes, else 224.
function M.for_inference(o)
  local device = require("dl.train.device").setup(o.device, o.threads)
  local model, info = M.from_weights(o.weights, o.arch, device)
  local tf = require("dl.train.data").transform{image_size = o.image_size or info.image_size or 224,
    resize = o.resize or info.resize}
  return model, info, device, tf
end

return M
