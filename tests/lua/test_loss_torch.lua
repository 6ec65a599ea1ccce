-- test_loss_torch.lua - the loss kernels (dl._nn) against PyTorch: forward
-- values and gradients (torch.autograd.grad with a random grad_output) of
-- nll_loss and cross_entropy on 1-D, 2-D, 3-D and 4-D inputs with weights,
-- ignore_index present in the targets, every reduction, label smoothing and
-- class-probability targets; mse/l1 with broadcasting; BCE with logits with
-- weight and pos_weight; and dl._F.cross_entropy's autograd gradient.
-- Python draws the inputs and computes torch's results; Lua rebuilds the
-- inputs and compares.  Class labels: torch's are 0-based, the Lua targets
-- are emitted 1-based (ignored entries carry the Lua ignore_index).
local T = require "testlib"
local nn = dl._nn

local data = T.torch([==[
import warnings
import torch.nn.functional as F

warnings.filterwarnings("ignore")

# --- nll_loss / cross_entropy with class indices -----------------------------------------
def lua_target(t, ig):
    lig = -100 if ig == -100 else ig + 1
    return torch.where(t == ig, torch.full_like(t, lig), t + 1), lig

for dt in (torch.float32, torch.float64, torch.bfloat16):
    for shape, v in (((6, 5), ""), ((5, 6), "T"), ((2, 4, 3, 3), ""), ((5,), ""), ((3, 4, 5), "")):
        cdim = 1 if len(shape) > 1 else 0
        xshape = tuple(view(torch.empty(shape), v).shape)
        C = xshape[cdim]
        tshape = (xshape[0],) + xshape[2:] if len(xshape) > 1 else ()
        for ig in (-100, 2):
            t = torch.randint(0, C, tshape)
            if t.dim() > 0:
                t.view(-1)[::3] = ig
            lt, lig = lua_target(t, ig)
            for use_w in (False, True):
                w = torch.rand(C, dtype=torch.float64).add(0.5).to(dt) if use_w else None
                for red in ("none", "mean", "sum"):
                    for ls in (0.0, 0.1):
                        base = mk(shape, dt, 2.0)
                        xr = leaf(view(base, v))
                        loss = F.cross_entropy(xr, t, weight=w, ignore_index=ig, reduction=red,
                                               label_smoothing=ls)
                        g = mk(loss.shape, dt)
                        gx, = torch.autograd.grad(loss, xr, g)
                        add(op="cross_entropy", x=base, view=v, t=lt, ig=lig, w=w, red=red, ls=ls,
                            y=loss, g=g, gx=gx)
                    base = torch.log_softmax(mk(shape, torch.float64), cdim).to(dt)
                    xr = leaf(view(base, v))
                    loss = F.nll_loss(xr, t, weight=w, ignore_index=ig, reduction=red)
                    g = mk(loss.shape, dt)
                    gx, = torch.autograd.grad(loss, xr, g)
                    add(op="nll_loss", x=base, view=v, t=lt, ig=lig, w=w, red=red, y=loss, g=g,
                        gx=gx)

# a wide float32 case: 1000 classes, label smoothing and weights
x = mk((64, 1000), torch.float32, 3.0)
t = torch.randint(0, 1000, (64,))
w = torch.rand(1000) + 0.5
for red in ("mean", "none"):
    xr = leaf(x)
    loss = F.cross_entropy(xr, t, weight=w, reduction=red, label_smoothing=0.1)
    g = mk(loss.shape, torch.float32)
    gx, = torch.autograd.grad(loss, xr, g)
    add(op="cross_entropy", x=x, view="", t=t + 1, ig=-100, w=w, red=red, ls=0.1, y=loss, g=g, gx=gx)

# --- cross_entropy with class probabilities ----------------------------------------------
for dt in (torch.float32, torch.float64):
    for shape in ((6, 5), (2, 4, 3, 3), (5,)):
        cdim = 1 if len(shape) > 1 else 0
        C = shape[cdim]
        for use_w in (False, True):
            w = torch.rand(C, dtype=dt) + 0.5 if use_w else None
            for red in ("none", "mean", "sum"):
                for ls in (0.0, 0.1):
                    x = mk(shape, dt, 2.0)
                    p = torch.softmax(mk(shape, dt), cdim)
                    xr, pr = leaf(x), leaf(p)
                    loss = F.cross_entropy(xr, pr, weight=w, reduction=red, label_smoothing=ls)
                    g = mk(loss.shape, dt)
                    gx, gp = torch.autograd.grad(loss, (xr, pr), g)
                    add(op="cross_entropy_prob", x=x, p=p, w=w, red=red, ls=ls, y=loss, g=g,
                        gx=gx, gp=gp)

# --- mse / l1 -------------------------------------------------------------------------------
for dt in (torch.float32, torch.float64):
    for xs, ys, v in (((4, 5), (4, 5), ""), ((4, 5), (5,), ""), ((5, 4), (4, 5), "T"),
                      ((3, 1, 4), (2, 4), ""), ((), (), ""), ((1000,), (1000,), "")):
        for red in ("none", "mean", "sum"):
            for fn in ("mse_loss", "l1_loss"):
                xb, y = mk(xs, dt), mk(ys, dt)
                xr, yr = leaf(view(xb, v)), leaf(y)
                loss = getattr(F, fn)(xr, yr, reduction=red)
                g = mk(loss.shape, dt)
                gx, gy = torch.autograd.grad(loss, (xr, yr), g)
                add(op=fn, x=xb, view=v, yt=y, red=red, y=loss, g=g, gx=gx, gy=gy)

# --- binary_cross_entropy_with_logits --------------------------------------------------------
for dt in (torch.float32, torch.float64):
    for shape in ((4, 5), (2, 3, 5)):
        for use_w in (False, True):
            for use_pw in (False, True):
                for red in ("none", "mean", "sum"):
                    x, y = mk(shape, dt, 4.0), torch.rand(shape, dtype=dt)
                    w = torch.rand(5, dtype=dt) + 0.5 if use_w else None
                    pw = torch.rand(5, dtype=dt) * 2 + 0.5 if use_pw else None
                    xr, yr = leaf(x), leaf(y)
                    loss = F.binary_cross_entropy_with_logits(xr, yr, weight=w, pos_weight=pw,
                                                              reduction=red)
                    g = mk(loss.shape, dt)
                    gx, gy = torch.autograd.grad(loss, (xr, yr), g)
                    add(op="bce_logits", x=x, yt=y, w=w, pw=pw, red=red, y=loss, g=g, gx=gx, gy=gy)

emit(cases)
]==])

local function opt_tensor(rec) return rec and T.from_torch(rec) or nil end

T.oracle_cases(data, T.torch_tol, {"cross_entropy", "nll_loss", "cross_entropy_prob", "mse_loss", "l1_loss", "bce_logits"}, function(c, rtol, atol, msg)
  if c.op == "cross_entropy" or c.op == "nll_loss" then
    local x = T.from_torch_view(c.x, c.view)
    local o = {weight = opt_tensor(c.w), ignore_index = c.ig, reduction = c.red, label_smoothing = c.ls}
    local t = T.from_torch(c.t)
    T.match_torch(nn[c.op .. "_forward"](x, t, o), c.y, rtol, atol, msg .. " forward")
    local gx = nn[c.op .. "_backward"](T.from_torch(c.g), x, t, o)
    T.match_torch(gx, c.gx, rtol, atol, msg .. " backward")
  elseif c.op == "cross_entropy_prob" then
    local x, p = T.from_torch(c.x), T.from_torch(c.p)
    local o = {weight = opt_tensor(c.w), reduction = c.red, label_smoothing = c.ls}
    T.match_torch(nn.cross_entropy_forward(x, p, o), c.y, rtol, atol, msg .. " forward")
    local gx, gp = nn.cross_entropy_backward(T.from_torch(c.g), x, p, o)
    T.match_torch(gx, c.gx, rtol, atol, msg .. " grad input")
    T.match_torch(gp, c.gp, rtol, atol, msg .. " grad target")
  elseif c.op == "mse_loss" or c.op == "l1_loss" or c.op == "bce_logits" then
    local x, y = T.from_torch_view(c.x, c.view), T.from_torch(c.yt)
    local o = {reduction = c.red, weight = opt_tensor(c.w), pos_weight = opt_tensor(c.pw)}
    local name = c.op == "bce_logits" and "binary_cross_entropy_with_logits" or c.op
    T.match_torch(nn[name .. "_forward"](x, y, o), c.y, rtol, atol, msg .. " forward")
    local gx, gy = nn[name .. "_backward"](T.from_torch(c.g), x, y, o)
    T.match_torch(gx, c.gx, rtol, atol, msg .. " grad input")
    T.match_torch(gy, c.gy, rtol, atol, msg .. " grad target")
  else
    error("unknown case " .. c.op)
  end
end)

T.case("dl._F.cross_entropy records the gradient PyTorch computes", function()
  local r = T.torch([[
x = torch.randn(8, 10, requires_grad=True)
y = torch.randint(0, 10, (8,))
w = torch.rand(10) + 0.5
loss = torch.nn.functional.cross_entropy(x, y, weight=w, label_smoothing=0.2)
g, = torch.autograd.grad(loss, x)
emit({"x": x.detach(), "y": y + 1, "w": w, "loss": loss.detach(), "g": g})
]])
  local x = T.from_torch(r.x):requires_grad_()
  local loss = dl._F.cross_entropy(x, T.from_torch(r.y), {weight = T.from_torch(r.w), label_smoothing = 0.2})
  T.match_torch(loss, r.loss, 1e-5, 1e-6, "loss")
  loss:backward()
  T.match_torch(x.grad, r.g, 1e-4, 1e-6, "grad")
end)

T.done()
