-- test_batchnorm_layout.lua - batch norm on channels-last CPU input ((N,C,*)
-- shape, (N,*,C) in memory): the kernels take it as it is and give y and gx
-- channels-last.  Checked against the (N,C,*) path: evaluation outputs
-- bit-equal (same per-element arithmetic); batch statistics and what follows
-- from them to rounding (the per-channel sums run in another order);
-- results independent of the thread count; gy in the other layout than x;
-- weight/bias absent; 3-D input; more channels than one tile block; half
-- input (computed through the (N,C,*) path); float64 gradcheck through
-- autograd; and PyTorch's channels_last batch norm.
local T = require "testlib"
local dl = require "dl"
local nn = dl._nn
local F = dl.nn.functional

local F32, F64 = dl.float32, dl.float64
dl.manual_seed(11)

local to_cl, is_cl = T.channels_last, T.is_channels_last

-- float32 batch statistics differ from the (N,C,*) path by a few ulps at most
local TOL = {[F32] = 4e-6, [F64] = 1e-12}

local shapes = {
  {2, 4, 5, 6},  -- fewer channels than a tile block
  {3, 300, 2, 3},
  {2, 1100, 3, 1}, -- two channel blocks of the reduction, the second partial
  {4, 5, 7},     -- 3-D (N,C,L)
  {9, 16, 1, 2},
}

local function case_inputs(shape, dt, affine)
  local C = shape[2]
  local x = dl.randn(shape, {dtype = dt}) * 2 + 3
  local w = affine and (dl.rand(C, {dtype = dt}) + 0.5) or nil
  local b = affine and dl.randn(C, {dtype = dt}) or nil
  return x, to_cl(x), w, b, dl.randn(shape, {dtype = dt})
end

T.case("training forward and backward: channels-last equals (N,C,*)", function()
  for _, dt in ipairs({F32, F64}) do
    for _, shape in ipairs(shapes) do
      for _, affine in ipairs({true, false}) do
        local msg = string.format("%s %s affine=%s", dt, T.fmt(shape), tostring(affine))
        local tol = TOL[dt]
        local x, xc, w, b, gy = case_inputs(shape, dt, affine)
        T.truthy(is_cl(xc) and not xc:is_contiguous(), msg .. " input layout")
        local C = shape[2]
        local rm, rv = dl.zeros(C, {dtype = dt}), dl.ones(C, {dtype = dt})
        local rmc, rvc = rm:clone(), rv:clone()
        local opts = {training = true, momentum = 0.3}
        local y, m, s = nn.batch_norm_forward(x, w, b, rm, rv, opts)
        local yc, mc, sc = nn.batch_norm_forward(xc, w, b, rmc, rvc, opts)
        T.truthy(is_cl(yc), msg .. " y channels-last")
        T.tensor_eq(yc, y, tol, msg .. " y")
        T.tensor_eq(mc, m, tol, msg .. " mean")
        T.tensor_eq(sc, s, tol, msg .. " invstd")
        T.tensor_eq(rmc, rm, tol, msg .. " running_mean")
        T.tensor_eq(rvc, rv, tol, msg .. " running_var")
        -- backward from the same statistics; gy in x's layout and in the other
        local o = {training = true}
        local gx, gw, gb = nn.batch_norm_backward(gy, x, w, nil, nil, m, s, o)
        for _, g in ipairs({to_cl(gy), gy}) do
          local gxc, gwc, gbc = nn.batch_norm_backward(g, xc, w, nil, nil, m, s, o)
          T.truthy(is_cl(gxc), msg .. " gx channels-last")
          T.tensor_eq(gxc, gx, tol, msg .. " gx")
          if affine then
            T.tensor_eq(gwc, gw, tol, msg .. " gw")
            T.tensor_eq(gbc, gb, tol, msg .. " gb")
          end
        end
        -- an (N,C,*) x with a channels-last gy: gx follows x
        local gxn = nn.batch_norm_backward(to_cl(gy), x, w, nil, nil, m, s, o)
        T.truthy(gxn:is_contiguous(), msg .. " gx follows x")
        T.tensor_eq(gxn, gx, 0, msg .. " gx from a channels-last gy")
      end
    end
  end
end)

T.case("evaluation forward and backward: channels-last bit-equal to (N,C,*)", function()
  for _, dt in ipairs({F32, F64}) do
    for _, shape in ipairs(shapes) do
      for _, affine in ipairs({true, false}) do
        local msg = string.format("%s %s affine=%s", dt, T.fmt(shape), tostring(affine))
        local x, xc, w, b, gy = case_inputs(shape, dt, affine)
        local C = shape[2]
        local rm, rv = dl.randn(C, {dtype = dt}), dl.rand(C, {dtype = dt}) + 0.5
        local y = nn.batch_norm_forward(x, w, b, rm, rv)
        local yc = nn.batch_norm_forward(xc, w, b, rm, rv)
        T.truthy(is_cl(yc), msg .. " y channels-last")
        T.truthy(dl.equal(yc, y), msg .. " y bit-equal")
        local gx, gw, gb = nn.batch_norm_backward(gy, x, w, rm, rv, nil, nil)
        local gxc, gwc, gbc = nn.batch_norm_backward(to_cl(gy), xc, w, rm, rv, nil, nil)
        T.truthy(is_cl(gxc), msg .. " gx channels-last")
        T.truthy(dl.equal(gxc, gx), msg .. " gx bit-equal")
        if affine then
          T.tensor_eq(gwc, gw, TOL[dt], msg .. " gw")
          T.tensor_eq(gbc, gb, TOL[dt], msg .. " gb")
        end
        -- gx alone (no sums needed)
        local only = nn.batch_norm_backward(to_cl(gy), xc, w, rm, rv, nil, nil, {need = {true, false, false}})
        T.truthy(dl.equal(only, gx), msg .. " gx alone")
      end
    end
  end
end)

T.case("channels-last results do not depend on the thread count", function()
  local x = to_cl(dl.randn(4, 96, 20, 20) * 3 + 1)
  local gy = to_cl(dl.randn(4, 96, 20, 20))
  local w, b = dl.rand(96) + 0.5, dl.randn(96)
  local function run()
    local y, m, s = nn.batch_norm_forward(x, w, b, nil, nil, {training = true})
    local gx, gw, gb = nn.batch_norm_backward(gy, x, w, nil, nil, m, s, {training = true})
    return {y, m, s, gx, gw, gb}
  end
  T.same_across_threads(run, {1, 2, 3}, "batch_norm channels-last")
end)

T.case("half channels-last input goes through the (N,C,*) path", function()
  for _, dt in ipairs({dl.float16, dl.bfloat16}) do
    local x = dl.randn(2, 3, 4, 5):to(dt)
    local w, b = dl.rand(3) + 0.5, dl.randn(3)
    local y, m = nn.batch_norm_forward(to_cl(x), w, b, nil, nil, {training = true})
    local yr, mr, sr = nn.batch_norm_forward(x, w, b, nil, nil, {training = true})
    T.eq(y.dtype, dt)
    T.truthy(dl.equal(y, yr) and dl.equal(m, mr), tostring(dt))
    local gy = dl.randn(2, 3, 4, 5):to(dt)
    local gx = nn.batch_norm_backward(to_cl(gy), to_cl(x), w, nil, nil, mr, sr, {training = true})
    T.truthy(dl.equal(gx, (nn.batch_norm_backward(gy, x, w, nil, nil, mr, sr, {training = true}))), tostring(dt))
  end
end)

T.case("float64 gradcheck through autograd on channels-last input", function()
  -- gradcheck perturbs its inputs through a flat view, so the leaf is
  -- (N,C,*) and the function relays it out: batch norm sees channels-last
  for _, shape in ipairs({{2, 3, 3, 4}, {3, 4, 5}}) do
    local C = shape[2]
    local x = dl.randn(shape, {dtype = F64}):requires_grad_()
    local w = (dl.rand(C, {dtype = F64}) + 0.5):requires_grad_()
    local b = dl.randn(C, {dtype = F64}):requires_grad_()
    local rm, rv = dl.randn(C, {dtype = F64}), dl.rand(C, {dtype = F64}) + 0.5
    T.gradcheck(function(a, ww, bb)
      return F.batch_norm(to_cl(a), nil, nil, ww, bb, true, 0.1, 1e-3)
    end, {x, w, b}, "training " .. T.fmt(shape))
    T.gradcheck(function(a, ww, bb)
      return F.batch_norm(to_cl(a), rm, rv, ww, bb, false, 0.1, 1e-3)
    end, {x, w, b}, "evaluation " .. T.fmt(shape))
    T.gradcheck(function(a)
      return F.batch_norm(to_cl(a), nil, nil, nil, nil, true, 0.1, 1e-3)
    end, {x}, "training without weight " .. T.fmt(shape))
    -- y and the gradient reaching batch norm's input keep the layout (the
    -- input is not a leaf: a leaf's .grad is stored contiguous)
    local xc = to_cl(x)
    local y = F.batch_norm(xc, nil, nil, w, b, true, 0.1, 1e-3)
    T.truthy(is_cl(y), "y channels-last")
    local g = dl.autograd.grad((y * dl.randn(shape, {dtype = F64})):sum(), {xc})[1]
    T.truthy(is_cl(g), "gradient channels-last " .. T.fmt(g:stride()))
  end
end)

local ref = T.torch([[
import torch.nn.functional as F
cases = []
for dt in (torch.float32, torch.float64):
    for shape in ((4, 32, 6, 6), (3, 300, 2, 3)):
        C = shape[1]
        x = (torch.randn(shape) * 2 + 1).to(dt)
        w = (torch.rand(C) + 0.5).to(dt)
        b = torch.randn(C).to(dt)
        gy = torch.randn(shape).to(dt)
        xc = x.contiguous(memory_format=torch.channels_last).requires_grad_()
        wl, bl = w.clone().requires_grad_(), b.clone().requires_grad_()
        rm, rv = torch.zeros(C, dtype=dt), torch.ones(C, dtype=dt)
        y = F.batch_norm(xc, rm, rv, wl, bl, training=True, momentum=0.1, eps=1e-5)
        assert y.is_contiguous(memory_format=torch.channels_last)
        g = torch.autograd.grad(y, (xc, wl, bl), gy.contiguous(memory_format=torch.channels_last))
        cases.append(dict(dtype=str(dt)[6:], x=x, w=w, b=b, gy=gy, y=y.detach().contiguous(),
                          rm=rm, rv=rv, gx=g[0].contiguous(), gw=g[1], gb=g[2]))
emit(cases)
]])

T.case("channels-last training forward and backward vs PyTorch channels_last", function()
  for i, c in ipairs(ref) do
    local msg = string.format("torch case %d (%s)", i, c.dtype)
    local tol = c.dtype == "float32" and 1e-4 or 1e-10
    local x, w, b = to_cl(T.from_torch(c.x)), T.from_torch(c.w), T.from_torch(c.b)
    local C = x.shape[2]
    local rm, rv = dl.zeros(C, {dtype = x.dtype}), dl.ones(C, {dtype = x.dtype})
    local y, m, s = nn.batch_norm_forward(x, w, b, rm, rv, {training = true, momentum = 0.1})
    T.match_torch(y, c.y, tol, tol, msg .. " y")
    T.match_torch(rm, c.rm, tol, tol, msg .. " running_mean")
    T.match_torch(rv, c.rv, tol, tol, msg .. " running_var")
    local gx, gw, gb = nn.batch_norm_backward(to_cl(T.from_torch(c.gy)), x, w, nil, nil, m, s,
      {training = true})
    T.truthy(is_cl(gx), msg .. " gx channels-last")
    T.match_torch(gx, c.gx, tol, tol, msg .. " gx")
    T.match_torch(gw, c.gw, tol, tol, msg .. " gw")
    T.match_torch(gb, c.gb, tol, tol, msg .. " gb")
  end
end)

T.done()
