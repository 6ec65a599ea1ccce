-- test_nn_conv_torch.lua - the conv2d, batch-norm and pooling kernels
-- (dl._nn.*_forward / *_backward) against PyTorch, forward and backward, over
-- a spread of shapes and options: stride, padding, dilation, groups (incl.
-- depthwise), 1x1, ResNet's 7x7/2 stem, bias or not; batch norm in training
-- (running statistics updates compared, momentum and cumulative average) and
-- evaluation; max/avg pooling with padding, dilation, ceil mode,
-- count_include_pad and divisor_override; adaptive average/max pooling.
-- float32 (oneDNN, rtol 1e-4) and float64 (tight), some operands
-- non-contiguous, and float16/bfloat16 (computed in float32, rounded once).
-- Python makes the inputs and torch's results (gradients through
-- torch.autograd.grad with a random grad_output); Lua rebuilds the inputs,
-- runs dl and compares.
local T = require "testlib"
local dl = require "dl"
local nn = dl._nn

local TOL = {float32 = {1e-4, 1e-4}, float64 = {1e-10, 1e-10}, bfloat16 = {2e-2, 2e-2},
  float16 = {2e-3, 2e-3}}

local function tol(dt) return TOL[dt][1], TOL[dt][2] end

-- A dl tensor from an oracle record, laid out as Python said: "t" means the
-- record holds the tensor with its last two dims swapped, so transposing
-- back gives a non-contiguous view with the right values.
local function input(rec, layout)
  local t = T.from_torch(rec)
  if layout == "t" then t = t:transpose(-1, -2) end
  return t
end

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
    local rtol, atol = tol(c.dtype)
    local x, w = input(c.x, c.lx), input(c.w, c.lw)
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

-- --- batch norm ----------------------------------------------------------------

local bn = T.torch([[
import torch.nn.functional as F
cases = []
cfgs = [
    # shape, affine, running stats, momentum (None: cumulative over n batches), eps, layout
    ((4, 3), True, True, 0.1, 1e-5, "c"),
    ((3, 5, 7), True, True, 0.3, 1e-3, "c"),
    ((2, 4, 5, 6), True, True, 0.1, 1e-5, "c"),
    ((2, 4, 5, 6), True, True, 0.1, 1e-5, "t"),
    ((2, 4, 5, 6), False, True, None, 1e-5, "c"),
    ((5, 2, 3, 3), True, False, 0.1, 1e-5, "c"),
    ((8, 16, 4, 4), True, True, 0.5, 1e-5, "c"),
    ((2, 3), True, True, 0.1, 1e-5, "c"),
]
for dt in (torch.float32, torch.float64):
    for shape, affine, track, momentum, eps, lay in cfgs:
        C = shape[1]
        x = (torch.randn(shape) * 2 + 0.5).to(dt)
        w = (torch.rand(C) + 0.5).to(dt) if affine else None
        b = torch.randn(C).to(dt) if affine else None
        rm = torch.randn(C).to(dt) if track else None
        rv = (torch.rand(C) + 0.5).to(dt) if track else None
        n = 3
        m = momentum if momentum is not None else 1.0 / n
        case = dict(dtype=str(dt)[6:], affine=affine, track=track, momentum=momentum, n=n,
                    eps=eps, lay=lay, x=x.transpose(-1, -2).contiguous() if lay == "t" else x,
                    w=w, b=b, rm=rm, rv=rv)
        # training
        rm2 = rm.clone() if track else None
        rv2 = rv.clone() if track else None
        y, smean, sinvstd = torch.ops.aten.native_batch_norm(x, w, b, rm2, rv2, True, m, eps)[:3]
        case.update(y=y, save_mean=smean, save_invstd=sinvstd, rm_after=rm2, rv_after=rv2)
        leaves = [t.clone().requires_grad_() for t in (x, w, b) if t is not None]
        yy = F.batch_norm(leaves[0], None, None, *(leaves[1:] if affine else (None, None)),
                          training=True, momentum=m, eps=eps)
        gy = torch.randn(shape).to(dt)
        g = torch.autograd.grad(yy, leaves, gy)
        case.update(gy=gy, gx=g[0], gw=g[1] if affine else None, gb=g[2] if affine else None)
        # evaluation
        if track:
            leaves = [t.clone().requires_grad_() for t in (x, w, b) if t is not None]
            ye = F.batch_norm(leaves[0], rm, rv, *(leaves[1:] if affine else (None, None)),
                              training=False, eps=eps)
            ge = torch.autograd.grad(ye, leaves, gy)
            case.update(y_eval=ye, gx_eval=ge[0], gw_eval=ge[1] if affine else None,
                        gb_eval=ge[2] if affine else None)
        cases.append(case)
emit(cases)
]])

T.case("batch_norm training forward, running stats and backward vs torch", function()
  for i, c in ipairs(bn) do
    local msg = string.format("bn case %d (%s, %s)", i, c.dtype, T.fmt(c.x.shape))
    local rtol, atol = tol(c.dtype)
    local x = input(c.x, c.lay)
    local w = c.w and T.from_torch(c.w) or nil
    local b = c.b and T.from_torch(c.b) or nil
    local rm = c.rm and T.from_torch(c.rm) or nil
    local rv = c.rv and T.from_torch(c.rv) or nil
    local opts = {training = true, eps = c.eps}
    if c.momentum then opts.momentum = c.momentum
    else opts.cumulative = true; opts.num_batches_tracked = c.n end
    local y, sm, si = nn.batch_norm_forward(x, w, b, rm, rv, opts)
    T.match_torch(y, c.y, rtol, atol, msg .. " y")
    T.match_torch(sm, c.save_mean, rtol, atol, msg .. " save_mean")
    T.match_torch(si, c.save_invstd, rtol, atol, msg .. " save_invstd")
    if rm then
      T.match_torch(rm, c.rm_after, rtol, atol, msg .. " running_mean")
      T.match_torch(rv, c.rv_after, rtol, atol, msg .. " running_var")
    end
    local gx, gw, gb = nn.batch_norm_backward(T.from_torch(c.gy), x, w, nil, nil, sm, si,
      {training = true, eps = c.eps})
    T.match_torch(gx, c.gx, rtol, atol, msg .. " gx")
    if c.w then
      T.match_torch(gw, c.gw, rtol, atol, msg .. " gw")
      T.match_torch(gb, c.gb, rtol, atol, msg .. " gb")
    end
  end
end)

T.case("batch_norm evaluation forward and backward vs torch", function()
  for i, c in ipairs(bn) do
    if c.track then
      local msg = string.format("bn eval case %d (%s)", i, c.dtype)
      local rtol, atol = tol(c.dtype)
      local x = input(c.x, c.lay)
      local w = c.w and T.from_torch(c.w) or nil
      local b = c.b and T.from_torch(c.b) or nil
      local rm, rv = T.from_torch(c.rm), T.from_torch(c.rv)
      local y = nn.batch_norm_forward(x, w, b, rm, rv, {eps = c.eps})
      T.match_torch(y, c.y_eval, rtol, atol, msg .. " y")
      T.match_torch(rm, c.rm, 0, 0, msg .. " running_mean untouched")
      local gx, gw, gb = nn.batch_norm_backward(T.from_torch(c.gy), x, w, rm, rv, nil, nil,
        {eps = c.eps})
      T.match_torch(gx, c.gx_eval, rtol, atol, msg .. " gx")
      if c.w then
        T.match_torch(gw, c.gw_eval, rtol, atol, msg .. " gw")
        T.match_torch(gb, c.gb_eval, rtol, atol, msg .. " gb")
      end
    end
  end
end)

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
    local rtol, atol = tol(c.dtype)
    local x = input(c.x, c.lay)
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
    local rtol, atol = tol(c.dtype)
    local x = input(c.x, c.lay)
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
    local rtol, atol = tol(c.dtype)
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
    T.match_torch(nn.avg_pool2d_forward(x, 3, {stride = 2, padding = 1}), c.ya, tol(c.dtype))
    T.match_torch(nn.adaptive_avg_pool2d_forward(x, {4, 3}), c.yad, tol(c.dtype))
  end
end)

T.done()
