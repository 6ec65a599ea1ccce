-- test_models_resnet.lua - dl.models ResNets against torchvision 0.14: the
-- printed tree (identical text), every state_dict name and shape, parameter
-- counts, default initialisation, options, weights loading and bad input.
local T = require "testlib"
local models = dl.models

local R = T.torch([==[
import torchvision
M = torchvision.models
out = {}
for name in ["resnet18", "resnet50"]:
    m = getattr(M, name)()
    out[name] = {"str": str(m),
                 "keys": [[k, list(v.shape), str(v.dtype).replace("torch.", "")] for k, v in m.state_dict().items()],
                 "count": sum(p.numel() for p in m.parameters())}
# small nets through the same ResNet class: groups, width, dilation
from torchvision.models.resnet import ResNet, BasicBlock, Bottleneck
small = {
  "basic": ResNet(BasicBlock, [1, 2, 1, 1], num_classes=10),
  "resnext": ResNet(Bottleneck, [1, 2, 1, 1], groups=32, width_per_group=4, num_classes=10),
  "wide": ResNet(Bottleneck, [1, 1, 1, 1], width_per_group=128, num_classes=3),
  "dilated": ResNet(Bottleneck, [1, 1, 2, 1], replace_stride_with_dilation=[False, True, True]),
}
for name, m in small.items():
    out[name] = {"str": str(m),
                 "keys": [[k, list(v.shape), str(v.dtype).replace("torch.", "")] for k, v in m.state_dict().items()],
                 "count": sum(p.numel() for p in m.parameters())}
emit(out)
]==])

local function check_keys(model, want, name)
  local got = {}
  for k, v in pairs(model:state_dict()) do got[#got + 1] = {k, v.shape, v.dtype.name} end
  T.eq(#got, #want, name .. " number of state_dict entries")
  for i, w in ipairs(want) do
    local g = got[i]
    T.eq(g[1], w[1], name .. " key " .. i)
    T.eq(table.concat(g[2], ","), table.concat(w[2], ","), name .. " shape of " .. w[1])
    T.eq(g[3], w[3], name .. " dtype of " .. w[1])
  end
end

T.case("resnet18: tree text, names, shapes, count", function()
  local m = models.resnet18()
  T.eq(tostring(m), R.resnet18.str)
  check_keys(m, R.resnet18.keys, "resnet18")
  T.eq(m:num_parameters(), 11689512)
  T.eq(R.resnet18.count, 11689512)
end)

T.case("resnet50: tree text, names, shapes, count", function()
  local m = models.resnet50()
  T.eq(tostring(m), R.resnet50.str)
  check_keys(m, R.resnet50.keys, "resnet50")
  T.eq(m:num_parameters(), 25557032)
  T.eq(dl.nn.utils.count_parameters(m), 25557032)
end)

T.case("groups, width_per_group, dilation: small ResNets match torchvision", function()
  local ResNet, Basic, Bottle = models.ResNet, models.BasicBlock, models.Bottleneck
  local small = {
    basic = ResNet(Basic, {1, 2, 1, 1}, {num_classes = 10}),
    resnext = ResNet(Bottle, {1, 2, 1, 1}, {groups = 32, width_per_group = 4, num_classes = 10}),
    wide = ResNet(Bottle, {1, 1, 1, 1}, {width_per_group = 128, num_classes = 3}),
    dilated = ResNet(Bottle, {1, 1, 2, 1}, {replace_stride_with_dilation = {false, true, true}}),
  }
  for name, m in pairs(small) do
    T.eq(tostring(m), R[name].str, name .. " text")
    check_keys(m, R[name].keys, name)
    T.eq(m:num_parameters(), R[name].count, name .. " count")
  end
end)

T.case("default initialisation and zero_init_residual", function()
  dl.manual_seed(0)
  local m = models.resnet18()
  -- convs: kaiming_normal_(fan_out, relu): std = sqrt(2 / (out * k * k))
  local w = m.layer4[1].conv2.weight
  local fan_out = 512 * 9
  T.near(w:std():item(), math.sqrt(2 / fan_out), 0.02)
  T.truthy(math.abs(w:mean():item()) < 1e-3)
  w = m.conv1.weight
  T.near(w:std():item(), math.sqrt(2 / (64 * 49)), 0.03)
  -- batch norms: weight 1, bias 0
  for name, mod in m:named_modules() do
    if mod:isinstance(dl.nn.BatchNorm2d) then
      T.eq(mod.weight:amin():item(), 1, name)
      T.eq(mod.weight:amax():item(), 1, name)
      T.eq(mod.bias:abs():amax():item(), 0, name)
    end
  end
  -- fc keeps Linear's default: U(-1/sqrt(512), 1/sqrt(512))
  local b = 1 / math.sqrt(512)
  T.truthy(m.fc.weight:abs():amax():item() <= b)
  T.near(m.fc.weight:std():item(), b / math.sqrt(3), 0.05)
  local z = models.resnet18({zero_init_residual = true})
  T.eq(z.layer1[1].bn2.weight:abs():amax():item(), 0)
  T.eq(z.layer1[1].bn1.weight:amin():item(), 1)
  local zb = models.ResNet(models.Bottleneck, {1, 1, 2, 1}, {zero_init_residual = true, num_classes = 7})
  T.eq(zb.layer3[2].bn3.weight:abs():amax():item(), 0)
  T.eq(zb.layer3[2].bn2.weight:amin():item(), 1)
  T.shape_eq(zb.fc.weight, {7, 2048})
end)

T.case("weights: load a saved state dict; a wrong file lists the keys", function()
  local m = models.resnet18({num_classes = 5})
  if rawget(dl, "save") and rawget(dl, "load") then
    local dir = T.tmpdir()
    local path = dir .. "/resnet18_test.safetensors"
    dl.save(path, m:state_dict())
    local m2 = models.resnet18({num_classes = 5, weights = path})
    for k, v in pairs(m:state_dict()) do T.tensor_eq(m2:state_dict()[k], v, 0, k) end
    local err = T.raises(function() models.resnet18({weights = path}) end, "Error(s) in loading state_dict for ResNet")
    T.truthy(err:find("size mismatch for fc.weight", 1, true), err)
    local lin = dl.nn.Sequential(dl.nn.Linear(2, 2))
    local small = dir .. "/small_test.safetensors"
    dl.save(small, lin:state_dict())
    err = T.raises(function() models.resnet18({weights = small}) end, 'Unexpected key(s) in state_dict: "0.bias", "0.weight"')
    T.truthy(err:find('Missing key(s) in state_dict: "conv1.weight", "bn1.weight"', 1, true), err)
    os.remove(path)
    os.remove(small)
  else
    T.raises(function() models.resnet18({weights = "/nonexistent.safetensors"}) end, "dl.load is not available")
  end
  -- the same error path through load_state_dict directly
  local sd = m:state_dict()
  local bad = {}
  for k, v in pairs(sd) do bad[k] = v end
  bad["fc.bias"] = nil
  bad["layer1.0.conv1.weight"] = dl.zeros(64, 64, 1, 1)
  bad["layer5.0.conv1.weight"] = dl.zeros(1)
  local err = T.raises(function() m:load_state_dict(bad) end, 'Missing key(s) in state_dict: "fc.bias"')
  T.truthy(err:find('Unexpected key(s) in state_dict: "layer5.0.conv1.weight"', 1, true), err)
  T.truthy(err:find("size mismatch for layer1.0.conv1.weight: copying a param with shape [64, 64, 1, 1] from " ..
    "checkpoint, the shape in current model is [64, 64, 3, 3].", 1, true), err)
end)

T.case("torchvision weights converted by scripts/convert_torchvision.py load by name", function()
  local path = T.tmpdir() .. "/tv_resnet18_test.safetensors"
  local ok = os.execute(T.python() .. " ../../scripts/convert_torchvision.py --arch resnet18 --seed 3 " ..
    "--num-classes 10 --out '" .. path .. "' >/dev/null 2>&1")
  T.truthy(ok, "convert_torchvision.py ran")
  local want = T.torch([[
torch.manual_seed(3)
m = __import__("torchvision").models.resnet18(num_classes=10)
emit({k: [float(v.double().sum()), float(v.double().abs().sum())] for k, v in m.state_dict().items()})
]])
  local m = models.resnet18({num_classes = 10, weights = path})
  local n = 0
  for k, v in pairs(m:state_dict()) do
    n = n + 1
    local w = want[k]
    T.truthy(w ~= nil, k)
    T.near(v:double():sum():item(), w[1], 1e-6, k .. " sum")
    T.near(v:double():abs():sum():item(), w[2], 1e-6, k .. " abs sum")
  end
  T.eq(n, 122)
  os.remove(path)
end)

T.case("registry and bad input", function()
  local names = table.concat(models.list_models(), " ")
  T.truthy(names:find("resnet152", 1, true) and names:find("wide_resnet50_2", 1, true), names)
  T.eq(models.get_model("resnet18"):_get_name(), "ResNet")
  T.raises(function() return models.resnet51 end, "dl.models: unknown model 'resnet51' (available: ")
  T.raises(function() models.get_model("vgg16") end, "unknown model 'vgg16'")
  T.raises(function() models.get_model(18) end, "a model name (string) is required")
  T.raises(function() models.resnet18({num_clases = 10}) end, "resnet18: unknown option 'num_clases'")
  T.raises(function() models.resnet18({num_classes = 0}) end, "num_classes must be at least 1")
  T.raises(function() models.resnet18({weights = 5}) end, "weights must be a file path")
  T.raises(function() models.resnext50_32x4d({groups = 8}) end, "option groups is fixed to 32")
  T.raises(function() models.resnet18({groups = 2}) end, "BasicBlock only supports groups=1 and base_width=64")
end)

T.done()
