-- test_batchnorm_torch.lua - the batch-norm kernels (dl._nn.batch_norm_forward
-- / backward) against PyTorch, forward and backward: training (running
-- statistics updates compared, momentum and cumulative average) and
-- evaluation, affine or not, float32 and float64, some inputs
-- non-contiguous.  Python makes the inputs and torch's results (gradients
-- through torch.autograd.grad with a random grad_output); Lua rebuilds the
-- inputs, runs dl and compares.
local T = require "testlib"
local dl = require "dl"
local nn = dl._nn

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

-- The backward's gx (and gw, gb with an affine case) against the record's
-- gx..sfx, gw..sfx, gb..sfx.
local function match_grads(c, sfx, rtol, atol, msg, gx, gw, gb)
  T.match_torch(gx, c["gx" .. sfx], rtol, atol, msg .. " gx")
  if c.w then
    T.match_torch(gw, c["gw" .. sfx], rtol, atol, msg .. " gw")
    T.match_torch(gb, c["gb" .. sfx], rtol, atol, msg .. " gb")
  end
end

T.case("batch_norm training forward, running stats and backward vs torch", function()
  for i, c in ipairs(bn) do
    local msg = string.format("bn case %d (%s, %s)", i, c.dtype, T.fmt(c.x.shape))
    local rtol, atol = T.torch_tol(c.dtype, "sum")
    local x = T.from_torch_view(c.x, c.lay)
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
    match_grads(c, "", rtol, atol, msg, gx, gw, gb)
  end
end)

T.case("batch_norm evaluation forward and backward vs torch", function()
  for i, c in ipairs(bn) do
    if c.track then
      local msg = string.format("bn eval case %d (%s)", i, c.dtype)
      local rtol, atol = T.torch_tol(c.dtype, "sum")
      local x = T.from_torch_view(c.x, c.lay)
      local w = c.w and T.from_torch(c.w) or nil
      local b = c.b and T.from_torch(c.b) or nil
      local rm, rv = T.from_torch(c.rm), T.from_torch(c.rv)
      local y = nn.batch_norm_forward(x, w, b, rm, rv, {eps = c.eps})
      T.match_torch(y, c.y_eval, rtol, atol, msg .. " y")
      T.match_torch(rm, c.rm, 0, 0, msg .. " running_mean untouched")
      local gx, gw, gb = nn.batch_norm_backward(T.from_torch(c.gy), x, w, rm, rv, nil, nil,
        {eps = c.eps})
      match_grads(c, "_eval", rtol, atol, msg, gx, gw, gb)
    end
  end
end)

T.done()
