-- test_composed_torch.lua - dl.nn.functional's compositions
-- (lua/dl/nn/composed.lua) against PyTorch: conv1d, conv3d,
-- conv_transpose1d/2d, max/avg_pool1d/3d, prelu, pixel_shuffle/unshuffle,
-- instance_norm, interpolate in all its modes; outputs and the gradients of
-- every input (torch.autograd.grad with a random grad_output), in float64
-- (to 1e-9) and some in float32 (to 1e-4).
local T = require "testlib"
local F = dl.nn.functional

local cases = T.torch([[
import torch.nn.functional as F
cases = []
def add(name, fn, ins, opts, dt=torch.float64, **kw):
    xs = [t.to(dt).requires_grad_() if t.is_floating_point() else t for t in ins]
    y = fn(*xs)
    gy = torch.randn(y.shape, dtype=dt)
    diff = [t for t in xs if t.requires_grad]
    gs = torch.autograd.grad(y, diff, gy)
    cases.append(dict(name=name, ins=[t.detach() for t in xs], opts=opts, y=y.detach(), gy=gy, g=list(gs),
                      dtype=str(dt)[6:], **kw))
r = torch.randn
for dt in (torch.float64, torch.float32):
    add("conv1d", lambda x, w, b: F.conv1d(x, w, b, 2, 1, 1, 2), [r(2, 4, 9), r(6, 2, 3), r(6)],
        dict(stride=2, padding=1, dilation=1, groups=2), dt)
    add("conv3d", lambda x, w, b: F.conv3d(x, w, b, (2, 1, 1), (1, 0, 1), (1, 2, 1)),
        [r(2, 3, 5, 6, 5), r(4, 3, 3, 2, 3), r(4)], dict(stride=[2, 1, 1], padding=[1, 0, 1], dilation=[1, 2, 1]), dt)
    add("conv_transpose2d", lambda x, w, b: F.conv_transpose2d(x, w, b, 2, 1, 1), [r(2, 4, 5, 6), r(4, 3, 3, 3), r(3)],
        dict(stride=2, padding=1, output_padding=1), dt)
add("conv1d", lambda x, w: F.conv1d(x, w, None, 1, 2, 2), [r(2, 3, 8), r(5, 3, 3)], dict(padding=2, dilation=2))
add("conv3d", lambda x, w, b: F.conv3d(x, w, b, 1, 1, 1, 3), [r(1, 6, 4, 4, 4), r(3, 2, 2, 2, 2), r(3)],
    dict(padding=1, groups=3))
add("conv_transpose2d", lambda x, w: F.conv_transpose2d(x, w, None, (1, 2), (1, 0), 0, 2, (2, 1)),
    [r(1, 4, 3, 3), r(4, 2, 3, 2)], dict(stride=[1, 2], padding=[1, 0], groups=2, dilation=[2, 1]))
add("conv_transpose1d", lambda x, w, b: F.conv_transpose1d(x, w, b, 3, 1, 2), [r(2, 3, 7), r(3, 2, 4), r(2)],
    dict(stride=3, padding=1, output_padding=2))
add("max_pool1d", lambda x: F.max_pool1d(x, 3, 2, 1, 2, True), [r(2, 3, 11)],
    dict(k=3, stride=2, padding=1, dilation=2, ceil_mode=True))
add("avg_pool1d", lambda x: F.avg_pool1d(x, 4, 3, 2, True, False), [r(2, 3, 10)],
    dict(k=4, stride=3, padding=2, ceil_mode=True, count_include_pad=False))
add("max_pool3d", lambda x: F.max_pool3d(x, (3, 2, 3), (2, 2, 1), (1, 1, 1), (1, 1, 2), True), [r(2, 2, 7, 6, 8)],
    dict(k=[3, 2, 3], stride=[2, 2, 1], padding=[1, 1, 1], dilation=[1, 1, 2], ceil_mode=True))
add("avg_pool3d", lambda x: F.avg_pool3d(x, (3, 3, 2), 2, 1, True, False), [r(1, 2, 6, 7, 5)],
    dict(k=[3, 3, 2], stride=2, padding=1, ceil_mode=True, count_include_pad=False))
add("avg_pool3d", lambda x: F.avg_pool3d(x, 2, 1, 1), [r(2, 1, 3, 4, 3)], dict(k=2, stride=1, padding=1))
add("prelu", F.prelu, [r(2, 3, 4, 5), torch.rand(3)], {})
add("prelu", F.prelu, [r(5), torch.rand(1)], {})
add("pixel_shuffle", lambda x: F.pixel_shuffle(x, 2), [r(2, 8, 3, 4)], dict(r=2))
add("pixel_unshuffle", lambda x: F.pixel_unshuffle(x, 3), [r(2, 2, 6, 3)], dict(r=3))
add("instance_norm", lambda x, w, b: F.instance_norm(x, weight=w, bias=b, eps=1e-3), [r(2, 3, 5, 6), r(3), r(3)],
    dict(eps=1e-3))
add("instance_norm", lambda x: F.instance_norm(x), [r(3, 4, 7)], {})
for mode, shape, kw in (
        ("nearest", (2, 2, 3, 4), dict(scale_factor=2)),
        ("nearest", (1, 2, 3, 4), dict(size=(5, 7))),
        ("nearest", (1, 2, 7, 9), dict(size=(3, 4))),
        ("nearest-exact", (1, 2, 5, 4), dict(size=(3, 7))),
        ("nearest", (2, 3, 5), dict(scale_factor=1.5)),
        ("bilinear", (2, 2, 4, 6), dict(size=(7, 5), align_corners=False)),
        ("bilinear", (1, 2, 4, 5), dict(scale_factor=1.5, align_corners=True)),
        ("bilinear", (1, 1, 6, 6), dict(scale_factor=0.5, align_corners=False)),
        ("linear", (2, 3, 5), dict(size=8, align_corners=False)),
        ("trilinear", (1, 2, 3, 4, 3), dict(scale_factor=2, align_corners=False)),
        ("bicubic", (1, 2, 4, 5), dict(size=(6, 9), align_corners=False)),
        ("bicubic", (1, 1, 5, 4), dict(scale_factor=2, align_corners=True))):
    add("interpolate", lambda x, kw=kw, mode=mode: F.interpolate(x, mode=mode, **kw), [r(*shape)],
        dict(mode=mode, **{k: (list(v) if isinstance(v, tuple) else v) for k, v in kw.items()}))
emit(cases)
]])

-- The dl call of each case: inputs (dl tensors), options from Python.
local RUN = {
  conv1d = function(i, o) return F.conv1d(i[1], i[2], i[3], o) end,
  conv3d = function(i, o) return F.conv3d(i[1], i[2], i[3], o) end,
  conv_transpose2d = function(i, o) return F.conv_transpose2d(i[1], i[2], i[3], o) end,
  conv_transpose1d = function(i, o) return F.conv_transpose1d(i[1], i[2], i[3], o) end,
  max_pool1d = function(i, o) return F.max_pool1d(i[1], o.k, {stride = o.stride, padding = o.padding,
    dilation = o.dilation, ceil_mode = o.ceil_mode}) end,
  avg_pool1d = function(i, o) return F.avg_pool1d(i[1], o.k, {stride = o.stride, padding = o.padding,
    ceil_mode = o.ceil_mode, count_include_pad = o.count_include_pad}) end,
  max_pool3d = function(i, o) return F.max_pool3d(i[1], o.k, {stride = o.stride, padding = o.padding,
    dilation = o.dilation, ceil_mode = o.ceil_mode}) end,
  avg_pool3d = function(i, o) return F.avg_pool3d(i[1], o.k, {stride = o.stride, padding = o.padding,
    ceil_mode = o.ceil_mode, count_include_pad = o.count_include_pad}) end,
  prelu = function(i) return F.prelu(i[1], i[2]) end,
  pixel_shuffle = function(i, o) return F.pixel_shuffle(i[1], o.r) end,
  pixel_unshuffle = function(i, o) return F.pixel_unshuffle(i[1], o.r) end,
  instance_norm = function(i, o) return F.instance_norm(i[1], nil, nil, i[2], i[3], true, 0.1, o.eps) end,
  interpolate = function(i, o) return F.interpolate(i[1], o) end,
}

T.case("outputs and gradients vs torch", function()
  local counts = {}
  for k, c in ipairs(cases) do
    local msg = string.format("case %d: %s (%s)", k, c.name, c.dtype)
    local tol = c.dtype == "float64" and 1e-9 or 1e-4
    local ins = {}
    for j, rec in ipairs(c.ins) do ins[j] = T.from_torch(rec):requires_grad_(true) end
    local y = RUN[c.name](ins, c.opts)
    T.match_torch(y, c.y, tol, tol, msg .. " y")
    local g = dl.autograd.grad(y, ins, {grad_outputs = T.from_torch(c.gy)})
    for j = 1, #ins do T.match_torch(g[j], c.g[j], tol, tol, msg .. " grad " .. j) end
    counts[c.name] = (counts[c.name] or 0) + 1
  end
  for name in pairs(RUN) do T.truthy(counts[name], "no cases for " .. name) end
end)

T.done()
