-- dl.models ResNets: torchvision 0.14's resnet18/34/50/101/152,
-- resnext50_32x4d and wide_resnet50_2 -- the same modules, parameter names,
-- printed tree and default initialisation (kaiming_normal_ fan_out/relu for
-- convolutions, batch norm weight 1 / bias 0, Linear's own default for fc,
-- optional zero_init_residual), so torchvision state dicts load unchanged.
--
-- Options: {num_classes=1000, zero_init_residual=false, groups=1,
-- width_per_group=64, replace_stride_with_dilation={false,false,false},
-- weights=path} -- weights loads a safetensors file with dl.load and
-- load_state_dict (strict).
--
-- Each batch norm followed by the ReLU (and the residual add before it) runs
-- as one fused op, BatchNorm:forward_relu (F.batch_norm_relu,
-- F.batch_norm_add_relu), on every device; the modules, their names and the
-- state dict are torchvision's all the same.  R.fused_bn = false (or
-- DLUA_FUSED_BN=0 in the environment) runs the unfused sequence instead.
local dl = require "dl"
local util = require "dl.util"
local nn = require "dl.nn"

local fuse = require "dl.models.fuse"

local fail = util.fail
local R = {}

R.fused_bn = os.getenv("DLUA_FUSED_BN") ~= "0"

-- relu(bn(x) + residual) (residual may be nil): fused when R.fused_bn and bn
-- is a batch norm (not the Identity a folded model has), else module by
-- module -- the add in place, as torchvision's `out += identity` (batch
-- norm's backward does not read its output, so autograd allows it).
local function bn_relu(bn, relu, x, residual)
  if R.fused_bn and bn.forward_relu then return bn:forward_relu(x, residual) end
  local out = bn(x)
  if residual ~= nil then out:add_(residual) end
  return relu(out)
end

local function conv3x3(in_planes, out_planes, stride, groups, dilation)
  stride, groups, dilation = stride or 1, groups or 1, dilation or 1
  return nn.Conv2d(in_planes, out_planes, 3,
    {stride = stride, padding = dilation, groups = groups, bias = false, dilation = dilation})
end

local function conv1x1(in_planes, out_planes, stride)
  return nn.Conv2d(in_planes, out_planes, 1, {stride = stride or 1, bias = false})
end

-- R[name], a residual block class constructed as (inplanes, planes, stride,
-- downsample, groups, base_width, dilation): build(self, inplanes, planes,
-- stride, groups, base_width, dilation) makes its layers, torchvision's
-- defaults filled in; downsample and stride are kept after them.
local function block_class(name, expansion, build)
  local cls = nn.Module:extend(name)
  cls.expansion = expansion
  R[name] = cls
  function cls:__init(inplanes, planes, stride, downsample, groups, base_width, dilation)
    stride = stride or 1
    build(self, inplanes, planes, stride, groups or 1, base_width or 64, dilation or 1)
    self.downsample = downsample -- nil stays a plain (absent) attribute, as in torchvision
    self.stride = stride
  end
  return cls
end

-- BasicBlock: two 3x3 convolutions
local BasicBlock = block_class("BasicBlock", 1, function(self, inplanes, planes, stride, groups, base_width, dilation)
  if groups ~= 1 or base_width ~= 64 then fail("BasicBlock only supports groups=1 and base_width=64") end
  if dilation > 1 then fail("BasicBlock: dilation > 1 not supported") end
  self.conv1 = conv3x3(inplanes, planes, stride)
  self.bn1 = nn.BatchNorm2d(planes)
  self.relu = nn.ReLU({inplace = true})
  self.conv2 = conv3x3(planes, planes)
  self.bn2 = nn.BatchNorm2d(planes)
end)

-- A model folded for inference (dl.models.fuse) runs its part through fwd
-- (fuse.block_forward, fuse.stem_forward) when no gradient is needed; nil
-- when that does not apply.
local function folded_forward(self, x, fwd, owned)
  if self._folded and fuse.no_grad_needed(self, x) then return fwd(self, x, owned) end
end

-- owned (ResNet:forward's own call): x is an intermediate nothing reads after
-- this block, whose memory may take the residual sum
function BasicBlock:forward(x, owned)
  local y = folded_forward(self, x, fuse.block_forward, owned)
  if y then return y end
  local out = bn_relu(self.bn1, self.relu, self.conv1(x))
  out = self.conv2(out)
  local identity = self.downsample and self.downsample(x) or x
  return bn_relu(self.bn2, self.relu, out, identity)
end

-- Bottleneck: 1x1 reduce, 3x3 (stride, groups), 1x1 expand (x4)
local Bottleneck = block_class("Bottleneck", 4, function(self, inplanes, planes, stride, groups, base_width, dilation)
  local width = math.floor(planes * (base_width / 64.0)) * groups
  self.conv1 = conv1x1(inplanes, width)
  self.bn1 = nn.BatchNorm2d(width)
  self.conv2 = conv3x3(width, width, stride, groups, dilation)
  self.bn2 = nn.BatchNorm2d(width)
  self.conv3 = conv1x1(width, planes * self.expansion)
  self.bn3 = nn.BatchNorm2d(planes * self.expansion)
  self.relu = nn.ReLU({inplace = true})
end)

function Bottleneck:forward(x, owned)
  local y = folded_forward(self, x, fuse.block_forward, owned)
  if y then return y end
  local out = bn_relu(self.bn1, self.relu, self.conv1(x))
  out = bn_relu(self.bn2, self.relu, self.conv2(out))
  out = self.conv3(out)
  local identity = self.downsample and self.downsample(x) or x
  return bn_relu(self.bn3, self.relu, out, identity)
end

local ResNet = nn.Module:extend("ResNet")
R.ResNet = ResNet

local OPTIONS = {"num_classes", "zero_init_residual", "groups", "width_per_group",
  "replace_stride_with_dilation", "weights"}

-- ResNet(block, layers, opts): layers is the number of blocks per stage.
function ResNet:__init(block, layers, opts)
  opts = util.check_options(opts, "ResNet", OPTIONS)
  local num_classes = util.check_int(opts.num_classes or 1000, "ResNet", "num_classes", 1)
  local zero_init_residual = util.opt_bool(opts.zero_init_residual, false, "ResNet", "zero_init_residual")
  self.inplanes = 64
  self.dilation = 1
  local rswd = opts.replace_stride_with_dilation or {false, false, false}
  if type(rswd) ~= "table" or #rswd ~= 3 then
    fail("ResNet: replace_stride_with_dilation should be nil or a table of 3 booleans")
  end
  self.groups = util.check_int(opts.groups or 1, "ResNet", "groups", 1)
  self.base_width = util.check_int(opts.width_per_group or 64, "ResNet", "width_per_group", 1)
  self.conv1 = nn.Conv2d(3, self.inplanes, 7, {stride = 2, padding = 3, bias = false})
  self.bn1 = nn.BatchNorm2d(self.inplanes)
  self.relu = nn.ReLU({inplace = true})
  self.maxpool = nn.MaxPool2d(3, {stride = 2, padding = 1})
  self.layer1 = self:_make_layer(block, 64, layers[1])
  self.layer2 = self:_make_layer(block, 128, layers[2], 2, rswd[1])
  self.layer3 = self:_make_layer(block, 256, layers[3], 2, rswd[2])
  self.layer4 = self:_make_layer(block, 512, layers[4], 2, rswd[3])
  self.avgpool = nn.AdaptiveAvgPool2d({1, 1})
  self.fc = nn.Linear(512 * block.expansion, num_classes)

  for _, m in ipairs(self:modules()) do
    if m:isinstance(nn.Conv2d) then
      nn.init.kaiming_normal_(m.weight, {mode = "fan_out", nonlinearity = "relu"})
    elseif m:isinstance(nn.BatchNorm2d) then
      nn.init.constant_(m.weight, 1)
      nn.init.constant_(m.bias, 0)
    end
  end
  if zero_init_residual then
    for _, m in ipairs(self:modules()) do
      if m:isinstance(Bottleneck) and m.bn3.weight ~= nil then
        nn.init.constant_(m.bn3.weight, 0)
      elseif m:isinstance(BasicBlock) and m.bn2.weight ~= nil then
        nn.init.constant_(m.bn2.weight, 0)
      end
    end
  end
end

-- A model folded by dl.models.optimize_for_inference has no batch norms left.
function ResNet:train(mode)
  if mode ~= false and self._folded then
    fail("ResNet: this model was folded for inference (dl.models.optimize_for_inference); " ..
      "its batch norms are gone, so it cannot be put in training mode")
  end
  return nn.Module.train(self, mode)
end

function ResNet:_make_layer(block, planes, blocks, stride, dilate)
  stride = stride or 1
  local downsample
  local previous_dilation = self.dilation
  if dilate then
    self.dilation = self.dilation * stride
    stride = 1
  end
  if stride ~= 1 or self.inplanes ~= planes * block.expansion then
    downsample = nn.Sequential(conv1x1(self.inplanes, planes * block.expansion, stride),
      nn.BatchNorm2d(planes * block.expansion))
  end
  local layers = {block(self.inplanes, planes, stride, downsample, self.groups, self.base_width, previous_dilation)}
  self.inplanes = planes * block.expansion
  for _ = 2, blocks do
    layers[#layers + 1] = block(self.inplanes, planes, 1, nil, self.groups, self.base_width, self.dilation)
  end
  return nn.Sequential(table.unpack(layers))
end

-- The stages of a folded model run their blocks here, each block's input
-- given up to it (made in this forward, read by nothing after the block):
-- the residual sum is written into it, not into a copy (ResNet-50 at batch
-- 1: 16 MB copied a forward otherwise).  A stage whose forward is not
-- Sequential's own runs as it is.
local function run_stage(layer, x, owned)
  if not owned or layer.forward ~= nn.Sequential.forward then return layer(x) end
  for _, m in rawget(layer, "_modules"):items() do
    if m then x = m(x, true) end
  end
  return x
end

function ResNet:forward(x)
  local stem = folded_forward(self, x, fuse.stem_forward)
  if stem then
    x = self.maxpool(stem)
  else
    x = self.maxpool(bn_relu(self.bn1, self.relu, self.conv1(x)))
  end
  -- with the stem fused no gradient is taken, and x is the pooling's result
  local owned = stem ~= nil
  for _, layer in ipairs({self.layer1, self.layer2, self.layer3, self.layer4}) do
    x = run_stage(layer, x, owned)
  end
  x = self.avgpool(x):flatten(2)
  return self.fc(x)
end

-- Builds a ResNet and, with opts.weights, loads a safetensors state dict.
local function build(name, block, layers, fixed, opts)
  opts = util.check_options(opts, name, OPTIONS)
  local o = {}
  for k, v in pairs(opts) do o[k] = v end
  for k, v in pairs(fixed or {}) do
    if o[k] ~= nil and o[k] ~= v then fail("%s: option %s is fixed to %s for this model", name, k, tostring(v)) end
    o[k] = v
  end
  local weights = o.weights
  o.weights = nil
  local model = ResNet(block, layers, o)
  if weights ~= nil then
    if type(weights) ~= "string" then fail("%s: weights must be a file path, got %s", name, type(weights)) end
    local load = rawget(dl, "load")
    if not load then fail("%s: dl.load is not available in this build, cannot read weights", name) end
    local sd = load(weights)
    model:load_state_dict(sd)
  end
  return model
end

local ARCHS = {
  resnet18 = {BasicBlock, {2, 2, 2, 2}},
  resnet34 = {BasicBlock, {3, 4, 6, 3}},
  resnet50 = {Bottleneck, {3, 4, 6, 3}},
  resnet101 = {Bottleneck, {3, 4, 23, 3}},
  resnet152 = {Bottleneck, {3, 8, 36, 3}},
  resnext50_32x4d = {Bottleneck, {3, 4, 6, 3}, {groups = 32, width_per_group = 4}},
  resnext101_32x8d = {Bottleneck, {3, 4, 23, 3}, {groups = 32, width_per_group = 8}},
  wide_resnet50_2 = {Bottleneck, {3, 4, 6, 3}, {width_per_group = 64 * 2}},
  wide_resnet101_2 = {Bottleneck, {3, 4, 23, 3}, {width_per_group = 64 * 2}},
}

R.archs = {}
for name, a in pairs(ARCHS) do
  R.archs[name] = function(opts) return build(name, a[1], a[2], a[3], opts) end
end

return R
