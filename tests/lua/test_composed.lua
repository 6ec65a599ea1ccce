-- test_composed.lua - the modules over dl.nn.composed (Conv1d, Conv3d,
-- ConvTranspose1d/2d, the 1-D/3-D pools, PReLU, PixelShuffle/Unshuffle,
-- InstanceNorm1d/2d/3d, Upsample): PyTorch's parameter names, shapes, printed
-- form and outputs for the same weights; instance norm's running statistics
-- as PyTorch's; float64 finite-difference gradient checks of the
-- compositions with their own backward paths; bad arguments.
local T = require "testlib"
local nn = dl.nn
local F = nn.functional

-- torch builds each module, copies its state dict and input, and reports
-- repr, output and the state dict after one forward in training mode
local ref = T.torch([[
import torch.nn as nn
mods = [
    ("Conv1d", nn.Conv1d(4, 6, 3, stride=2, padding=1, groups=2), (2, 4, 9)),
    ("Conv3d", nn.Conv3d(2, 3, (3, 2, 2), padding=(1, 0, 1), bias=False), (1, 2, 4, 5, 4)),
    ("ConvTranspose1d", nn.ConvTranspose1d(3, 4, 3, stride=2, output_padding=1), (2, 3, 5)),
    ("ConvTranspose2d", nn.ConvTranspose2d(4, 2, 3, stride=2, padding=1, dilation=2), (1, 4, 3, 4)),
    ("MaxPool1d", nn.MaxPool1d(3, stride=2), (2, 3, 9)),
    ("MaxPool3d", nn.MaxPool3d(2, padding=1), (1, 2, 3, 4, 5)),
    ("AvgPool1d", nn.AvgPool1d(2), (2, 3, 8)),
    ("AvgPool3d", nn.AvgPool3d((2, 1, 2)), (1, 2, 4, 3, 4)),
    ("PReLU", nn.PReLU(3), (2, 3, 4)),
    ("PixelShuffle", nn.PixelShuffle(2), (1, 8, 2, 3)),
    ("PixelUnshuffle", nn.PixelUnshuffle(2), (1, 2, 4, 6)),
    ("InstanceNorm2d", nn.InstanceNorm2d(3, affine=True, track_running_stats=True), (2, 3, 4, 5)),
    ("InstanceNorm1d", nn.InstanceNorm1d(2), (3, 2, 6)),
    ("InstanceNorm3d", nn.InstanceNorm3d(2, momentum=0.3, track_running_stats=True), (2, 2, 3, 3, 3)),
    ("Upsample", nn.Upsample(scale_factor=2, mode="bilinear"), (1, 2, 3, 3)),
]
out = []
for name, m, shape in mods:
    sd = {k: v.clone() for k, v in m.state_dict().items()}
    for v in m.parameters():
        torch.nn.init.normal_(v)
    sd = {k: v.clone() for k, v in m.state_dict().items()}
    x = torch.randn(*shape)
    m.train()
    y = m(x)
    out.append(dict(name=name, repr=repr(m), sd=sd, x=x, y=y.detach(),
                    after={k: v.clone() for k, v in m.state_dict().items()}))
emit(out)
]])

local BUILD = {
  Conv1d = function() return nn.Conv1d(4, 6, 3, {stride = 2, padding = 1, groups = 2}) end,
  Conv3d = function() return nn.Conv3d(2, 3, {3, 2, 2}, {padding = {1, 0, 1}, bias = false}) end,
  ConvTranspose1d = function() return nn.ConvTranspose1d(3, 4, 3, {stride = 2, output_padding = 1}) end,
  ConvTranspose2d = function() return nn.ConvTranspose2d(4, 2, 3, {stride = 2, padding = 1, dilation = 2}) end,
  MaxPool1d = function() return nn.MaxPool1d(3, {stride = 2}) end,
  MaxPool3d = function() return nn.MaxPool3d(2, {padding = 1}) end,
  AvgPool1d = function() return nn.AvgPool1d(2) end,
  AvgPool3d = function() return nn.AvgPool3d({2, 1, 2}) end,
  PReLU = function() return nn.PReLU(3) end,
  PixelShuffle = function() return nn.PixelShuffle(2) end,
  PixelUnshuffle = function() return nn.PixelUnshuffle(2) end,
  InstanceNorm2d = function() return nn.InstanceNorm2d(3, {affine = true, track_running_stats = true}) end,
  InstanceNorm1d = function() return nn.InstanceNorm1d(2) end,
  InstanceNorm3d = function() return nn.InstanceNorm3d(2, {momentum = 0.3, track_running_stats = true}) end,
  Upsample = function() return nn.Upsample({scale_factor = 2, mode = "bilinear"}) end,
}

T.case("modules: names, shapes, outputs and running statistics as PyTorch's", function()
  for _, r in ipairs(ref) do
    local m = BUILD[r.name]()
    local sd = m:state_dict()
    local n = 0
    for k, v in pairs(r.sd) do
      n = n + 1
      T.truthy(sd[k] ~= nil, r.name .. ": no state_dict key " .. k)
      T.eq(T.fmt(sd[k].shape), T.fmt(v.shape), r.name .. " " .. k .. " shape")
    end
    local mine = 0
    for _ in pairs(sd) do mine = mine + 1 end
    T.eq(mine, n, r.name .. ": state_dict size")
    local load = {}
    for k, v in pairs(r.sd) do load[k] = T.from_torch(v) end
    m:load_state_dict(load)
    m:train()
    local y = m(T.from_torch(r.x))
    T.match_torch(y:detach(), r.y, 1e-5, 1e-5, r.name .. " output")
    for k, v in pairs(r.after) do T.match_torch(m:state_dict()[k], v, 1e-5, 1e-5, r.name .. " " .. k .. " after") end
    T.eq(tostring(m), r.repr, r.name .. " repr")
  end
end)

T.case("default initialisation as PyTorch's", function()
  local c = nn.ConvTranspose2d(4, 6, 3)
  T.eq(T.fmt(c.weight.shape), "{4, 6, 3, 3}")
  local bound = 1 / math.sqrt(6 * 9) -- fan_in of a transposed weight: dim 2 * kernel
  T.truthy(c.weight:abs():max():item() <= bound + 1e-7 and c.bias:abs():max():item() <= bound + 1e-7)
  T.tensor_eq(nn.PReLU().weight, {0.25})
  local i = nn.InstanceNorm2d(2, {affine = true})
  T.tensor_eq(i.weight, {1, 1})
  T.tensor_eq(i.bias, {0, 0})
end)

T.case("float64 gradient checks", function()
  local function leaf(...) return dl.randn(...):double():requires_grad_(true) end
  T.gradcheck(function(x, w, b) return F.conv_transpose2d(x, w, b, {stride = 2, padding = 1, output_padding = 1}) end,
    {leaf(1, 2, 3, 3), leaf(2, 3, 3, 2), leaf(3)}, "conv_transpose2d")
  T.gradcheck(function(x, w) return F.conv3d(x, w, nil, {stride = {2, 1, 1}, padding = 1}) end,
    {leaf(1, 2, 4, 3, 3), leaf(2, 2, 2, 2, 2)}, "conv3d")
  T.gradcheck(function(x, w) return F.conv1d(x, w, nil, {dilation = 2}) end, {leaf(2, 2, 7), leaf(3, 2, 2)}, "conv1d")
  T.gradcheck(function(x) return F.interpolate(x, {size = {5, 3}, mode = "bicubic", align_corners = false}) end,
    {leaf(1, 1, 3, 4)}, "interpolate bicubic")
  T.gradcheck(function(x, w, b) return F.instance_norm(x, nil, nil, w, b) end, {leaf(2, 3, 5), leaf(3), leaf(3)},
    "instance_norm")
  T.gradcheck(function(x) return F.avg_pool3d(x, 2, {padding = 1, count_include_pad = false}) end,
    {leaf(1, 1, 3, 3, 2)}, "avg_pool3d")
  T.gradcheck(function(x, w) return F.prelu(x, w) end, {leaf(2, 3, 2), leaf(3)}, "prelu")
end)

T.case("bad arguments name the function", function()
  T.raises(function() F.conv1d(dl.randn(2, 3, 5), dl.randn(4, 2, 3)) end, "conv2d")
  T.raises(function() F.conv3d(dl.randn(2, 3, 5), dl.randn(4, 3, 3, 3, 3)) end, "conv3d: expected a 4-D or 5-D input")
  T.raises(function() F.conv_transpose2d(dl.randn(1, 3, 4, 4), dl.randn(2, 3, 3, 3)) end,
    "conv_transpose2d: input has 3 channels, weight expects 2")
  T.raises(function() F.conv_transpose2d(dl.randn(1, 2, 4, 4), dl.randn(2, 3, 3, 3), nil, {stride = 2,
    output_padding = 2}) end, "output_padding (2) must be smaller than stride (2)")
  T.raises(function() F.prelu(dl.randn(2, 3), dl.ones(4)) end, "prelu: weight has 4 entries")
  T.raises(function() F.pixel_shuffle(dl.randn(1, 3, 2, 2), 2) end, "not divisible by upscale_factor^2")
  T.raises(function() F.interpolate(dl.randn(1, 1, 4), {size = 3, mode = "bilinear"}) end,
    "mode 'bilinear' expects a 4-D input")
  T.raises(function() F.interpolate(dl.randn(1, 1, 4, 4), {size = 3, scale_factor = 2}) end,
    "exactly one of size and scale_factor")
  T.raises(function() F.max_pool3d(dl.randn(1, 1, 4, 4, 4), {2, 2}) end, "max_pool3d: kernel_size")
  T.raises(function() nn.Conv3d(3, 4, 3, {padding_mode = "reflect"}) end, "only padding_mode='zeros'")
  T.raises(function() nn.InstanceNorm2d(3)(dl.randn(2, 4, 3, 3)) end, "input has 4 channels, the layer expects 3")
end)

T.done()
