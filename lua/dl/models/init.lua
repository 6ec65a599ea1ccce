-- dl.models: model constructors (torchvision's names and structure).
--
--   local model = dl.models.resnet50({num_classes=10})
--   local model = dl.models.get_model("resnet18", {weights="resnet18.safetensors"})
--   dl.models.list_models()  -> sorted array of names
--   dl.models.optimize_for_inference(model)  -> the ResNet with batch norms folded (fuse.lua)
--   dl.models.GPT{vocab_size=, block_size=, n_layer=, ...}  -> a nanoGPT-shaped language model (gpt.lua)
--
-- Asking for a model that does not exist (dl.models.resnet51 or
-- get_model("resnet51")) raises an error that lists the known ones.
local util = require "dl.util"
local resnet = require "dl.models.resnet"

local models = {}
local registry = {}

for name, fn in pairs(resnet.archs) do registry[name] = fn end
models.ResNet = resnet.ResNet
models.BasicBlock = resnet.BasicBlock
models.Bottleneck = resnet.Bottleneck
local fuse = require "dl.models.fuse"
models.fuse_conv_bn_eval = fuse.fuse_conv_bn_eval
models.optimize_for_inference = fuse.optimize_for_inference
local gpt = require "dl.models.gpt"
models.GPT = gpt.GPT
models.gpt = gpt

function models.list_models()
  local names = {}
  for k in pairs(registry) do names[#names + 1] = k end
  table.sort(names)
  return names
end

local function unknown(name)
  util.fail("dl.models: unknown model '%s' (available: %s)", tostring(name),
    table.concat(models.list_models(), ", "))
end

function models.get_model(name, opts)
  if type(name) ~= "string" then util.fail("get_model: a model name (string) is required, got %s", type(name)) end
  local fn = registry[name]
  if not fn then unknown(name) end
  return fn(opts)
end

for name, fn in pairs(registry) do models[name] = fn end

return setmetatable(models, {
  __index = function(_, k)
    if type(k) == "string" and not k:match("^_") then unknown(k) end
  end,
})
