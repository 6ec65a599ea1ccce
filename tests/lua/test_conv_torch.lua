-- test_conv_torch.lua - the conv2d kernels (dl._nn.conv2d_forward /
-- backward) against PyTorch, forward and backward, over a spread of shapes
-- and options: stride, padding, dilation, groups (incl. depthwise), 1x1,
-- ResNet's 7x7/2 stem, bias or not; float32 (oneDNN, rtol 1e-4, plain and
-- blocked layouts) and float64 (tight), some operands non-contiguous, and
-- float16/bfloat16 (computed in float32, rounded once).
-- Python makes the inputs and torch's results (gradients through
-- torch.autograd.grad with a random grad_output); Lua rebuilds the inputs,
-- runs dl and compares.
local T = require "testlib"
local dl = require "dl"
local nn = dl._nn

-- --- conv2d ------------------------------------------------------------------

local conv = T.torch([[
import torch.nn.functional as F
cases = []
cfgs = [
    # N, C, H, W, O, kh, kw, stride, padding, dilation, groups, bias
    (2, 3, 8, 7, 4, 3, 3, (1, 1), (1, 1), (1, 1), 1, True),
    (2, 4, 9, 8, 6, 3, 3, (2, 2), (1, 1), (1, 1), 2, True),
    (1, 6, 10, 9, 6, 3, 3, (1, 1), (2, 2), (2, 2), 6, False),   # depthwise, dilated
    (2, 5, 6, 6, 7, 1, 1, (1, 1), (0, 0), (1, 1), 1, True),     # 1x1
    (2, 4, 9, 9, 8, 1, 1, (2, 2), (0, 0), (1, 1), 1, False),    # 1x1 stride 2
    (1, 3, 23, 23, 8, 7, 7, (2, 2), (3, 3), (1, 1), 1, False),  # ResNet stem
    (2, 4, 7, 9, 6, 3, 5, (2, 1), (1, 2), (1, 2), 1, True),     # asymmetric
    (3, 8, 5, 5, 8, 3, 3, (1, 1), (1, 1), (1, 1), 4, True),     # grouped
    (1, 2, 4, 4, 3, 4, 4, (1, 1), (0, 0), (1, 1), 1, True),     # kernel == input
    (2, 3, 6, 5, 2, 2, 2, (3, 3), (0, 0), (1, 1), 1, True),     # stride > kernel
    (2, 16, 6, 6, 32, 3, 3, (1, 1), (1, 1), (1, 1), 1, True),   # blocked channels
    (1, 3, 5, 5, 2, 3, 3, (1, 1), (4, 4), (1, 1), 1, True),     # padding > kernel
]
def add(cfg, dt, lx, lw):
    N, C, H, W, O, kh, kw, s, p, d, g, bias = cfg
    cdt = torch.float32 if dt in (torch.float16, torch.bfloat16) else dt
    x = torch.randn(N, C, H, W).to(dt)
    w = (torch.randn(O, C // g, kh, kw) * 0.5).to(dt)
    b = torch.randn(O).to(dt) if bias else None
    xc, wc = x.to(cdt).requires_grad_(), w.to(cdt).requires_grad_()
    bc = b.to(cdt).requires_grad_() if bias else None
    y = F.conv2d(xc, wc, bc, s, p, d, g)
    gy = torch.randn(y.shape).to(dt)
    grads = torch.autograd.grad(y, [t for t in (xc, wc, bc) if t is not None], gy.to(cdt))
    lay = lambda t, l: t.transpose(-1, -2).contiguous() if l == "t" else t
    cases.append(dict(dtype=str(dt)[6:], s=s, p=p, d=d, g=g, lx=lx, lw=lw,
                      x=lay(x, lx), w=lay(w, lw), b=b, gy=gy, y=y.to(dt), gx=grads[0].to(dt),
                      gw=grads[1].to(dt), gb=grads[2].to(dt) if bias else None))
for dt in (torch.float32, torch.float64):
    for i, cfg in enumerate(cfgs):
        add(cfg, dt, "c", "c")
        if i % 3 == 0:
            add(cfg, dt, "t", "t" if i % 2 == 0 else "c")
for dt in (torch.bfloat16, torch.float16):
    for cfg in (cfgs[0], cfgs[2], cfgs[3]):
        add(cfg, dt, "c", "c")
emit(cases)
]])

T.case("conv2d forward and backward vs torch", function()
  for i, c in ipairs(conv) do
    local msg = string.format("conv case %d (%s, stride %s, groups %d)", i, c.dtype,
      T.fmt(c.s), c.g)
    local rtol, atol = T.torch_tol(c.dtype, "sum")
    local x, w = T.from_torch_view(c.x, c.lx), T.from_torch_view(c.w, c.lw)
    local b = c.b and T.from_torch(c.b) or nil
    local o = {stride = c.s, padding = c.p, dilation = c.d, groups = c.g}
    local y = nn.conv2d_forward(x, w, b, o)
    T.match_torch(y, c.y, rtol, atol, msg .. " y")
    o.need = {true, true, c.b ~= nil}
    local gx, gw, gb = nn.conv2d_backward(T.from_torch(c.gy), x, w, o)
    T.match_torch(gx, c.gx, rtol, atol, msg .. " gx")
    T.match_torch(gw, c.gw, rtol, atol, msg .. " gw")
    if c.b then T.match_torch(gb, c.gb, rtol, atol, msg .. " gb") else T.eq(gb, nil) end
  end
end)

-- The same float32 convolutions through both oneDNN layouts.
T.case("conv2d float32: plain and blocked layouts agree with torch", function()
  local saved = nn.conv2d_layout()
  for _, layout in ipairs({"plain", "any"}) do
    nn.conv2d_layout(layout)
    for i, c in ipairs(conv) do
      if c.dtype == "float32" and c.lx == "c" then
        local x, w = T.from_torch(c.x), T.from_torch(c.w)
        local b = c.b and T.from_torch(c.b) or nil
        local o = {stride = c.s, padding = c.p, dilation = c.d, groups = c.g}
        local msg = layout .. " case " .. i
        T.match_torch(nn.conv2d_forward(x, w, b, o), c.y, 1e-4, 1e-4, msg .. " y")
        local gx, gw, gb = nn.conv2d_backward(T.from_torch(c.gy), x, w, o)
        T.match_torch(gx, c.gx, 1e-4, 1e-4, msg .. " gx")
        T.match_torch(gw, c.gw, 1e-4, 1e-4, msg .. " gw")
        if c.b then T.match_torch(gb, c.gb, 1e-4, 1e-4, msg .. " gb") end
      end
    end
  end
  nn.conv2d_layout(saved)
end)

T.done()
