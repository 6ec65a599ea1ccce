-- test_pool_torch.lua - the pooling kernels (dl._nn max/avg/adaptive pooling)
-- against PyTorch, forward (values and indices) and backward: max/avg pooling
-- with padding, dilation, ceil mode, count_include_pad and divisor_override;
-- adaptive average/max pooling; float32 and float64, some inputs
-- non-contiguous, and float16/bfloat16 (computed in float32, rounded once).
-- Python makes the inputs and torch's results (gradients through
-- torch.autograd.grad with a random grad_output); Lua rebuilds the inputs,
-- runs dl and compares.
local T = require "testlib"
local dl = require "dl"
local nn = dl._nn

-- --- pooling ------------------------------------------------------------------------

local pool = T.torch([[
import torch.nn.functional as F
maxp, avgp, adap = [], [], []
lay = lambda t, l: t.transpose(-1, -2).contiguous() if l == "t" else t
def grads(f, x):
    xx = x.clone().requires_grad_()
    y = f(xx)
    y = y[0] if isinstance(y, tuple) else y
    gy = torch.randn(y.shape).to(x.dtype)
    return gy, torch.autograd.grad(y, xx, gy)[0]
max_cfgs = [
    # shape, kernel, stride, padding, dilation, ceil_mode, ties, layout
    ((2, 3, 8, 8), 2, 2, 0, 1, False, False, "c"),
    ((1, 2, 9, 7), 3, 2, 1, 1, False, False, "c"),
    ((1, 2, 9, 7), 3, 2, 1, 1, True, False, "t"),
    ((2, 2, 10, 10), 3, 1, 1, 2, False, False, "c"),
    ((1, 3, 7, 7), (3, 2), (2, 1), (1, 1), 1, True, False, "c"),
    ((2, 4, 12, 12), 3, 2, 1, 1, False, True, "c"),     # ResNet's, on ReLU output (ties)
    ((1, 1, 5, 5), 5, 1, 2, 1, False, False, "c"),
    ((3, 6, 6), 2, 1, 0, 1, True, True, "c"),            # unbatched
    ((1, 2, 6, 6), 3, 3, 1, 1, True, False, "c"),
]
avg_cfgs = [
    # shape, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override, layout
    ((2, 3, 8, 8), 2, 2, 0, False, True, None, "c"),
    ((1, 2, 9, 7), 3, 2, 1, False, True, None, "c"),
    ((1, 2, 6, 6), 3, 2, 1, True, True, None, "c"),      # ceil overhang past the padding
    ((1, 2, 9, 7), 3, 2, 1, True, False, None, "t"),
    ((2, 2, 7, 7), 3, 1, 1, False, False, None, "c"),
    ((2, 2, 7, 7), 3, 2, 1, False, True, 5, "c"),
    ((1, 3, 8, 6), (3, 2), (2, 1), (1, 0), True, True, None, "c"),
    ((3, 5, 5), 2, 2, 1, True, False, None, "c"),          # unbatched
    ((2, 8, 7, 7), 7, 1, 0, False, True, None, "c"),       # global
]
ada_cfgs = [((2, 3, 7, 9), (3, 4)), ((1, 2, 8, 8), (4, 4)), ((1, 2, 5, 5), (7, 7)),
            ((2, 2, 10, 6), (1, 1)), ((3, 9, 10), (4, 3)), ((2, 4, 7, 7), (2, 5))]
for dt in (torch.float32, torch.float64):
    d = str(dt)[6:]
    for shape, k, s, p, dil, ceil, ties, l in max_cfgs:
        x = torch.randn(shape).to(dt)
        if ties:
            x = x.relu()
        y, ind = F.max_pool2d(x, k, s, p, dil, ceil, return_indices=True)
        gy, gx = grads(lambda t: F.max_pool2d(t, k, s, p, dil, ceil), x)
        maxp.append(dict(dtype=d, k=k, s=s, p=p, d=dil, ceil=ceil, lay=l, x=lay(x, l), y=y,
                         ind=ind, gy=gy, gx=gx))
    for shape, k, s, p, ceil, cip, div, l in avg_cfgs:
        x = torch.randn(shape).to(dt)
        f = lambda t: F.avg_pool2d(t, k, s, p, ceil, cip, div)
        gy, gx = grads(f, x)
        avgp.append(dict(dtype=d, k=k, s=s, p=p, ceil=ceil, cip=cip, div=div, lay=l,
                         x=lay(x, l), y=f(x), gy=gy, gx=gx))
    for shape, o in ada_cfgs:
        x = torch.randn(shape).to(dt)
        ya = F.adaptive_avg_pool2d(x, o)
        gya, gxa = grads(lambda t: F.adaptive_avg_pool2d(t, o), x)
        ym, im = F.adaptive_max_pool2d(x, o, return_indices=True)
        gym, gxm = grads(lambda t: F.adaptive_max_pool2d(t, o), x)
        adap.append(dict(dtype=d, o=o, x=x, ya=ya, gya=gya, gxa=gxa, ym=ym, im=im, gym=gym,
                         gxm=gxm))
# float16/bfloat16: float32 results rounded once
half = []
for dt in (torch.bfloat16, torch.float16):
    x = torch.randn(2, 3, 9, 8).to(dt)
    y, ind = F.max_pool2d(x.float(), 3, 2, 1, return_indices=True)
    ya = F.avg_pool2d(x.float(), 3, 2, 1)
    yad = F.adaptive_avg_pool2d(x.float(), (4, 3))
    half.append(dict(dtype=str(dt)[6:], x=x, y=y.to(dt), ind=ind, ya=ya.to(dt), yad=yad.to(dt)))
emit(dict(maxp=maxp, avgp=avgp, adap=adap, half=half))
]])

T.case("max_pool2d forward (values and indices) and backward vs torch", function()
  for i, c in ipairs(pool.maxp) do
    local msg = string.format("max pool case %d (%s)", i, c.dtype)
    local rtol, atol = T.torch_tol(c.dtype, "sum")
    local x = T.from_torch_view(c.x, c.lay)
    local o = {stride = c.s, padding = c.p, dilation = c.d, ceil_mode = c.ceil}
    local y, ind = nn.max_pool2d_forward(x, c.k, o)
    T.match_torch(y, c.y, 0, 0, msg .. " y")
    T.match_torch(ind, c.ind, 0, 0, msg .. " indices")
    local gx = nn.max_pool2d_backward(T.from_torch(c.gy), x, ind, c.k, o)
    T.match_torch(gx, c.gx, 0, 0, msg .. " gx")
  end
end)

T.case("avg_pool2d forward and backward vs torch", function()
  for i, c in ipairs(pool.avgp) do
    local msg = string.format("avg pool case %d (%s)", i, c.dtype)
    local rtol, atol = T.torch_tol(c.dtype, "sum")
    local x = T.from_torch_view(c.x, c.lay)
    local o = {stride = c.s, padding = c.p, ceil_mode = c.ceil,
      count_include_pad = c.cip, divisor_override = c.div}
    local y = nn.avg_pool2d_forward(x, c.k, o)
    T.match_torch(y, c.y, rtol, atol, msg .. " y")
    local gx = nn.avg_pool2d_backward(T.from_torch(c.gy), x, c.k, o)
    T.match_torch(gx, c.gx, rtol, atol, msg .. " gx")
  end
end)

T.case("adaptive_avg_pool2d and adaptive_max_pool2d vs torch", function()
  for i, c in ipairs(pool.adap) do
    local msg = string.format("adaptive case %d (%s, %s)", i, c.dtype, T.fmt(c.o))
    local rtol, atol = T.torch_tol(c.dtype, "sum")
    local x = T.from_torch(c.x)
    -- (torch takes a mean() for a 1x1 output: another summation order)
    T.match_torch(nn.adaptive_avg_pool2d_forward(x, c.o), c.ya, rtol, atol, msg .. " avg y")
    T.match_torch(nn.adaptive_avg_pool2d_backward(T.from_torch(c.gya), x), c.gxa, rtol, atol,
      msg .. " avg gx")
    local y, ind = nn.adaptive_max_pool2d_forward(x, c.o)
    T.match_torch(y, c.ym, 0, 0, msg .. " max y")
    T.match_torch(ind, c.im, 0, 0, msg .. " max indices")
    T.match_torch(nn.adaptive_max_pool2d_backward(T.from_torch(c.gym), x, ind), c.gxm, 0, 0,
      msg .. " max gx")
  end
end)

T.case("pooling in float16/bfloat16 computes in float32 and rounds once", function()
  for _, c in ipairs(pool.half) do
    local x = T.from_torch(c.x)
    local y, ind = nn.max_pool2d_forward(x, 3, {stride = 2, padding = 1})
    T.match_torch(y, c.y, 0, 0, c.dtype .. " max")
    T.match_torch(ind, c.ind, 0, 0, c.dtype .. " max indices")
    T.match_torch(nn.avg_pool2d_forward(x, 3, {stride = 2, padding = 1}), c.ya, T.torch_tol(c.dtype, "sum"))
    T.match_torch(nn.adaptive_avg_pool2d_forward(x, {4, 3}), c.yad, T.torch_tol(c.dtype, "sum"))
  end
end)

T.done()
