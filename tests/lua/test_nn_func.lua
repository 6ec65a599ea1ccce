-- test_nn_func.lua - the functional nn family (dl._nn): known values, finite-
-- difference gradient checks in float64 for every backward (central
-- differences, eps 1e-6), dropout statistics and reproducibility, and bad
-- input.  PyTorch comparisons live in test_nn_func_torch.lua.
local T = require "testlib"
local nn = dl._nn

local f64 = {dtype = dl.float64}
local function rnd(...) return dl.randn({...}, f64) end

-- sum(out * g) as a Lua number
local function dot(out, g) return (out * g):sum():item() end

-- Central differences of x -> dot(f(x), g) at x (float64), one element at a
-- time; compares with the analytic gradient `ana`.
local EPS = 1e-6
local function gradcheck(name, f, x, g, ana, tol)
  tol = tol or 1e-6
  T.shape_eq(ana, x.shape, name .. ": gradient shape")
  local shape, flat = x.shape, T.flatten(x)
  local got = T.flatten(ana)
  for i = 1, #flat do
    local function at(v)
      local c = {table.unpack(flat)}
      c[i] = v
      return dot(f(dl.tensor(c, f64):reshape(shape)), g)
    end
    local num = (at(flat[i] + EPS) - at(flat[i] - EPS)) / (2 * EPS)
    if math.abs(num - got[i]) > tol * math.max(1, math.abs(num)) then
      error(string.format("%s: element %d analytic %.10g, numeric %.10g", name, i, got[i], num), 2)
    end
  end
end

-- A random gradient shaped like a forward output (a number for 0-dim).
local function grad_like(out) return dl.randn(out.shape, f64) end

-- --------------------------------------------------------------------------------------------
-- known values

T.case("softmax / log_softmax known values", function()
  local x = dl.tensor({{1, 2, 3}, {0, 0, 0}}, f64)
  local e = {math.exp(1), math.exp(2), math.exp(3)}
  local s = e[1] + e[2] + e[3]
  T.tensor_eq(nn.softmax_forward(x, 2), {{e[1] / s, e[2] / s, e[3] / s}, {1 / 3, 1 / 3, 1 / 3}}, 1e-12)
  T.tensor_eq(nn.log_softmax_forward(x, -1),
    {{1 - math.log(s), 2 - math.log(s), 3 - math.log(s)}, {-math.log(3), -math.log(3), -math.log(3)}}, 1e-12)
  -- along dim 1: columns
  T.tensor_eq(nn.softmax_forward(dl.tensor({{0.0, 5}, {0, 5}}), 1), {{0.5, 0.5}, {0.5, 0.5}})
  -- stable for large inputs
  T.tensor_eq(nn.softmax_forward(dl.tensor({1000.0, 1000.0}), 1), {0.5, 0.5})
  T.tensor_eq(nn.log_softmax_forward(dl.tensor({-1000.0, 0.0}), 1), {-1000, 0})
  -- 0-dim and empty
  T.eq(nn.softmax_forward(dl.tensor(3.5), 1):item(), 1.0)
  T.eq(nn.log_softmax_forward(dl.tensor(3.5), -1):item(), 0.0)
  T.shape_eq(nn.softmax_forward(dl.zeros(0, 3), 2), {0, 3})
  -- dtypes follow the input
  T.eq(nn.softmax_forward(dl.tensor({1.0, 2.0}):half(), 1).dtype, dl.float16)
  T.tensor_eq(nn.softmax_forward(dl.tensor({0.0, 0.0}):bfloat16(), 1):float(), {0.5, 0.5})
  -- non-contiguous input: transposed equals the contiguous copy
  local a = dl.randn(4, 5)
  T.tensor_eq(nn.softmax_forward(a:t(), 1), nn.softmax_forward(a:t():contiguous(), 1), 1e-6)
end)

T.case("nll_loss / cross_entropy known values", function()
  local lp = dl.tensor({{-1.0, -2.0, -3.0}, {-0.5, -1.5, -2.5}})
  local t = dl.tensor({1, 3})
  T.tensor_eq(nn.nll_loss_forward(lp, t, {reduction = "none"}), {1.0, 2.5})
  T.near(nn.nll_loss_forward(lp, t):item(), 1.75)
  T.near(nn.nll_loss_forward(lp, t, {reduction = "sum"}):item(), 3.5)
  -- weighted mean divides by the weights of the targets
  local w = dl.tensor({2.0, 1.0, 0.5})
  T.near(nn.nll_loss_forward(lp, t, {weight = w}):item(), (2 * 1 + 0.5 * 2.5) / 2.5)
  -- ignore_index is compared with the 1-based labels
  T.near(nn.nll_loss_forward(lp, dl.tensor({1, -100})):item(), 1.0)
  T.near(nn.nll_loss_forward(lp, dl.tensor({2, 3}), {ignore_index = 3}):item(), 2.0)
  T.tensor_eq(nn.nll_loss_forward(lp, dl.tensor({2, 3}), {ignore_index = 3, reduction = "none"}), {2.0, 0})
  -- everything ignored: the mean is NaN, the sum 0
  local all_ignored = nn.nll_loss_forward(lp, dl.tensor({-100, -100})):item()
  T.truthy(all_ignored ~= all_ignored, "mean over nothing is NaN")
  T.eq(nn.nll_loss_forward(lp, dl.tensor({-100, -100}), {reduction = "sum"}):item(), 0.0)
  -- cross entropy of equal scores is log(C)
  T.near(nn.cross_entropy_forward(dl.zeros(4, 3), dl.tensor({1, 2, 3, 1})):item(), math.log(3))
  T.near(nn.cross_entropy_forward(dl.zeros(3), dl.tensor(2)):item(), math.log(3))
  -- label smoothing on uniform scores changes nothing
  T.near(nn.cross_entropy_forward(dl.zeros(2, 4), dl.tensor({1, 4}), {label_smoothing = 0.3}):item(), math.log(4))
  -- probability targets: one-hot gives the class-index loss
  local x = dl.tensor({{1.0, 2.0, 0.5}, {0.0, -1.0, 3.0}})
  local oh = dl.tensor({{0.0, 1.0, 0.0}, {1.0, 0.0, 0.0}})
  T.near(nn.cross_entropy_forward(x, oh):item(), nn.cross_entropy_forward(x, dl.tensor({2, 1})):item(), 1e-6)
  -- 4-D input (N, C, H, W) with (N, H, W) targets, reduction none
  local x4 = dl.zeros(2, 3, 2, 2)
  local t4 = dl.ones(2, 2, 2, {dtype = dl.int64})
  local r = nn.cross_entropy_forward(x4, t4, {reduction = "none"})
  T.shape_eq(r, {2, 2, 2})
  T.near(r:sum():item(), 8 * math.log(3), 1e-6)
  -- the gradient of the mean cross entropy is (softmax - onehot) / N
  local gx = nn.cross_entropy_backward(dl.tensor(1.0), dl.zeros(2, 2), dl.tensor({1, 2}))
  T.tensor_eq(gx, {{-0.25, 0.25}, {0.25, -0.25}})
  T.eq(nn.cross_entropy_forward(dl.zeros(2, 2):bfloat16(), dl.tensor({1, 2})).dtype, dl.bfloat16)
end)

T.case("pointwise losses known values", function()
  local x, y = dl.tensor({1.0, 2.0, 4.0}), dl.tensor({1.0, 0.0, 1.0})
  T.near(nn.mse_loss_forward(x, y):item(), 13 / 3)
  T.tensor_eq(nn.mse_loss_forward(x, y, {reduction = "none"}), {0, 4, 9})
  T.near(nn.l1_loss_forward(x, y, {reduction = "sum"}):item(), 5)
  -- broadcasting target
  T.near(nn.mse_loss_forward(dl.tensor({{1.0, 2.0}, {3.0, 4.0}}), dl.tensor({1.0, 2.0})):item(), 2)
  local gx, gy = nn.mse_loss_backward(dl.tensor(1.0), x, y)
  T.tensor_eq(gx, {0, 4 / 3, 2})
  T.tensor_eq(gy, {0, -4 / 3, -2})
  gx, gy = nn.l1_loss_backward(dl.tensor(2.0), x, y, {reduction = "sum"})
  T.tensor_eq(gx, {0, 2, 2})
  -- BCE with logits: log 2 at 0; stable for big logits
  T.near(nn.binary_cross_entropy_with_logits_forward(dl.zeros(3), dl.ones(3)):item(), math.log(2))
  local big = nn.binary_cross_entropy_with_logits_forward(dl.tensor({100.0, -100.0}), dl.tensor({0.0, 1.0}), {reduction = "none"})
  T.tensor_eq(big, {100, 100}, 1e-6)
  -- pos_weight scales the positive term
  T.near(nn.binary_cross_entropy_with_logits_forward(dl.zeros(1), dl.ones(1), {pos_weight = dl.tensor({3.0})}):item(),
    3 * math.log(2))
  T.near(nn.binary_cross_entropy_with_logits_forward(dl.zeros(2), dl.ones(2), {weight = dl.tensor({1.0, 3.0}), reduction = "sum"}):item(),
    4 * math.log(2))
  gx = nn.binary_cross_entropy_with_logits_backward(dl.tensor(1.0), dl.zeros(2), dl.tensor({1.0, 0.0}), {reduction = "sum"})
  T.tensor_eq(gx, {-0.5, 0.5})
end)

T.case("relu backward, dropout, pad known values", function()
  local y = dl.tensor({0.0, 2.0, 0.0, 1.0})
  T.tensor_eq(nn.relu_backward(dl.tensor({5.0, 6.0, 7.0, 8.0}), y), {0, 6, 0, 8})
  T.tensor_eq(nn.relu_forward(dl.tensor({-1.0, 2.0})), {0, 2})
  -- dropout: p = 0 is the identity, p = 1 gives zeros, eval gives x itself
  local x = dl.randn(50)
  local o, m = nn.dropout_forward(x, 0)
  T.tensor_eq(o, x)
  T.eq(m:all():item(), true)
  o, m = nn.dropout_forward(x, 1)
  T.tensor_eq(o, dl.zeros(50))
  T.eq(m:any():item(), false)
  o, m = nn.dropout_forward(x, 0.5, false)
  T.tensor_eq(o, x)
  T.eq(m, nil)
  T.tensor_eq(nn.dropout_backward(x, nil, 0.5), x)
  -- pad, all modes (PyTorch's results)
  local a = dl.arange(6.0):view(1, 2, 3)
  T.tensor_eq(nn.pad_forward(a, {2, -1}, "reflect"), {{{2, 1, 0, 1}, {5, 4, 3, 4}}})
  T.tensor_eq(nn.pad_forward(a, {-1, 2}, "replicate"), {{{1, 2, 2, 2}, {4, 5, 5, 5}}})
  T.tensor_eq(nn.pad_forward(a, {1, 1}, "circular"), {{{2, 0, 1, 2, 0}, {5, 3, 4, 5, 3}}})
  T.tensor_eq(nn.pad_forward(a, {1, 0, 0, 1}, {value = 7}), {{{7, 0, 1, 2}, {7, 3, 4, 5}, {7, 7, 7, 7}}})
  T.tensor_eq(nn.pad_forward(a, {-1, -1}), {{{1}, {4}}})
  T.tensor_eq(nn.pad_forward(a, {1, 1, 1, 1}, "reflect"),
    {{{4, 3, 4, 5, 4}, {1, 0, 1, 2, 1}, {4, 3, 4, 5, 4}, {1, 0, 1, 2, 1}}})
  -- integer tensors pad too; constant pads of any rank
  T.tensor_eq(nn.pad_forward(dl.tensor({1, 2}), {1, 1}, "replicate"), {1, 1, 2, 2})
  T.shape_eq(nn.pad_forward(dl.zeros(2, 3), {1, 1, 1, 1}), {4, 5})
  T.shape_eq(nn.pad_forward(dl.zeros(2, 3, 4, 5), {1, 1, 0, 0, 2, 2, 1, 0}), {3, 7, 4, 7})
  T.shape_eq(nn.pad_forward(dl.zeros(2, 3), {-2, -1}), {2, 0})
  -- backward of replicate piles the border onto the edge
  T.tensor_eq(nn.pad_backward(dl.ones(1, 5), {1, 3}, {1, 1}, "replicate"), {{2, 1, 2}})
  T.tensor_eq(nn.pad_backward(dl.ones(1, 5), {1, 3}, {1, 1}, {mode = "reflect"}), {{1, 3, 1}})
  T.tensor_eq(nn.pad_backward(dl.arange(5.0):view(1, 5), {1, 3}, {1, 1}), {{1, 2, 3}})
  T.tensor_eq(nn.pad_backward(dl.arange(1.0, 2.0):view(1, 1), {1, 3}, {-1, -1}), {{0, 1, 0}})
end)

T.case("empty inputs and half types", function()
  local isnan = function(v) return v ~= v end
  local x0, t0 = dl.zeros(0, 4), dl.zeros(0, {dtype = dl.int64})
  T.truthy(isnan(nn.cross_entropy_forward(x0, t0):item()), "mean over no samples is NaN")
  T.eq(nn.cross_entropy_forward(x0, t0, {reduction = "sum"}):item(), 0.0)
  T.shape_eq(nn.cross_entropy_forward(x0, t0, {reduction = "none"}), {0})
  T.shape_eq(nn.cross_entropy_backward(dl.tensor(1.0), x0, t0), {0, 4})
  T.truthy(isnan(nn.cross_entropy_forward(x0, dl.zeros(0, 4)):item()), "probability mean over nothing")
  T.eq(nn.nll_loss_forward(x0, t0, {reduction = "sum"}):item(), 0.0)
  T.truthy(isnan(nn.mse_loss_forward(dl.zeros(0), dl.zeros(0)):item()), "mse of nothing")
  T.shape_eq(nn.mse_loss_backward(dl.tensor(1.0), dl.zeros(0, 2), dl.zeros(0, 2)), {0, 2})
  T.shape_eq(nn.pad_forward(dl.zeros(0, 3), {1, 1}, "replicate"), {0, 5})
  T.shape_eq(nn.pad_backward(dl.zeros(2, 0), {2, 0}, {0, 0}, "reflect"), {2, 0})
  local o, m = nn.dropout_forward(dl.zeros(0, 3), 0.5)
  T.shape_eq(o, {0, 3})
  T.shape_eq(m, {0, 3})
  T.shape_eq(nn.relu_backward(dl.zeros(0), dl.zeros(0)), {0})
  -- float16 computes through float32 and rounds back
  local xh = dl.tensor({{1.0, 2.0, 3.0}, {0.5, 0.5, -1.0}})
  local th = dl.tensor({3, 1})
  local ref = nn.cross_entropy_forward(xh, th):item()
  local h = nn.cross_entropy_forward(xh:half(), th)
  T.eq(h.dtype, dl.float16)
  T.near(h:item(), ref, 1e-3)
  local gh = nn.cross_entropy_backward(dl.tensor(1.0):half(), xh:half(), th)
  T.eq(gh.dtype, dl.float16)
  T.tensor_eq(gh:float(), nn.cross_entropy_backward(dl.tensor(1.0), xh, th), 2e-3)
  T.tensor_eq(nn.log_softmax_forward(xh:half(), 2):float(), nn.log_softmax_forward(xh, 2), 2e-3)
  T.tensor_eq(nn.pad_backward(dl.ones(1, 5):half(), {1, 3}, {1, 1}, "replicate"):float(), {{2, 1, 2}})
  T.eq(nn.relu_backward(dl.ones(2):half(), dl.tensor({1.0, -1.0}):half()).dtype, dl.float16)
  T.eq(nn.dropout_forward(dl.ones(4):bfloat16(), 0.5).dtype, dl.bfloat16)
  T.eq(nn.mse_loss_forward(dl.ones(3):half(), dl.zeros(3):half()).dtype, dl.float16)
  -- masked (-inf) logits get exactly zero probability
  local p = nn.softmax_forward(dl.tensor({0.0, -math.huge, 0.0}), 1)
  T.tensor_eq(p, {0.5, 0, 0.5})
  local all_masked = nn.softmax_forward(dl.tensor({-math.huge, -math.huge}), 1):tolist()
  T.truthy(isnan(all_masked[1]), "softmax of all -inf is NaN as in PyTorch")
  T.truthy(isnan(nn.softmax_forward(dl.tensor({0.0, 0 / 0, 1.0}), 1):tolist()[1]), "NaN spreads over the row")
end)

-- --------------------------------------------------------------------------------------------
-- finite-difference gradient checks (float64)

T.case("gradcheck softmax / log_softmax", function()
  for _, dim in ipairs({1, 2, 3, -1}) do
    local x = rnd(2, 3, 4)
    local g = rnd(2, 3, 4)
    local y = nn.softmax_forward(x, dim)
    gradcheck("softmax dim " .. dim, function(v) return nn.softmax_forward(v, dim) end, x, g,
      nn.softmax_backward(g, y, dim))
    local ly = nn.log_softmax_forward(x, dim)
    gradcheck("log_softmax dim " .. dim, function(v) return nn.log_softmax_forward(v, dim) end, x, g,
      nn.log_softmax_backward(g, ly, dim))
  end
  -- a transposed input
  local x = rnd(4, 3):t()
  local g = rnd(3, 4)
  gradcheck("softmax transposed", function(v) return nn.softmax_forward(v, 2) end, x, g,
    nn.softmax_backward(g, nn.softmax_forward(x, 2), 2))
end)

local function class_cases()
  local w = dl.rand(4, f64) + 0.5
  return {
    {x = rnd(5, 4), t = dl.tensor({1, 4, -100, 2, 3}), o = {}},
    {x = rnd(5, 4), t = dl.tensor({1, 4, 2, 2, 3}), o = {weight = w, reduction = "sum"}},
    {x = rnd(5, 4), t = dl.tensor({1, 4, 2, -100, 3}), o = {weight = w}},
    {x = rnd(5, 4), t = dl.tensor({1, 4, 2, 2, 3}), o = {ignore_index = 2, reduction = "none"}},
    {x = rnd(2, 4, 3, 2), t = dl.tensor({{{1, 2}, {3, 4}, {4, -100}}, {{2, 2}, {1, 3}, {-100, 4}}}), o = {weight = w}},
    {x = rnd(2, 4, 3), t = dl.tensor({{1, 2, 3}, {4, 4, 1}}), o = {reduction = "none"}},
    {x = rnd(4), t = dl.tensor(3), o = {}},
  }
end

T.case("gradcheck nll_loss", function()
  for i, c in ipairs(class_cases()) do
    local out = nn.nll_loss_forward(c.x, c.t, c.o)
    local g = grad_like(out)
    gradcheck("nll case " .. i, function(v) return nn.nll_loss_forward(v, c.t, c.o) end, c.x, g,
      nn.nll_loss_backward(g, c.x, c.t, c.o))
  end
end)

T.case("gradcheck cross_entropy (class indices, label smoothing)", function()
  for i, c in ipairs(class_cases()) do
    for _, ls in ipairs({0, 0.1}) do
      local o = {}
      for k, v in pairs(c.o) do o[k] = v end
      o.label_smoothing = ls
      local out = nn.cross_entropy_forward(c.x, c.t, o)
      local g = grad_like(out)
      gradcheck("cross_entropy case " .. i .. " ls " .. ls,
        function(v) return nn.cross_entropy_forward(v, c.t, o) end, c.x, g,
        nn.cross_entropy_backward(g, c.x, c.t, o))
    end
  end
end)

T.case("gradcheck cross_entropy (probability targets)", function()
  local w = dl.rand(3, f64) + 0.5
  local cases = {
    {x = rnd(4, 3), o = {}},
    {x = rnd(4, 3), o = {weight = w, label_smoothing = 0.2, reduction = "sum"}},
    {x = rnd(2, 3, 2, 2), o = {weight = w, reduction = "none"}},
    {x = rnd(3), o = {label_smoothing = 0.1}},
  }
  for i, c in ipairs(cases) do
    local p = nn.softmax_forward(rnd(table.unpack(c.x.shape)), c.x:dim() == 1 and 1 or 2)
    local out = nn.cross_entropy_forward(c.x, p, c.o)
    local g = grad_like(out)
    local gx, gp = nn.cross_entropy_backward(g, c.x, p, c.o)
    gradcheck("ce prob case " .. i .. " (input)", function(v) return nn.cross_entropy_forward(v, p, c.o) end,
      c.x, g, gx)
    gradcheck("ce prob case " .. i .. " (target)", function(v) return nn.cross_entropy_forward(c.x, v, c.o) end,
      p, g, gp)
  end
end)

T.case("gradcheck mse / l1 / bce with logits", function()
  for _, red in ipairs({"mean", "sum", "none"}) do
    -- broadcast: y (4) against x (3, 4); l1 away from its kink
    local x, y = rnd(3, 4), rnd(4)
    local out = nn.mse_loss_forward(x, y, {reduction = red})
    local g = grad_like(out)
    local gx, gy = nn.mse_loss_backward(g, x, y, {reduction = red})
    gradcheck("mse x " .. red, function(v) return nn.mse_loss_forward(v, y, {reduction = red}) end, x, g, gx)
    gradcheck("mse y " .. red, function(v) return nn.mse_loss_forward(x, v, {reduction = red}) end, y, g, gy)
    local x1 = rnd(3, 4)
    local y1 = x1 + (dl.rand(3, 4, f64) + 0.1) * (dl.rand(3, 4, f64) - 0.5):sign()
    out = nn.l1_loss_forward(x1, y1, {reduction = red})
    g = grad_like(out)
    gx, gy = nn.l1_loss_backward(g, x1, y1, {reduction = red})
    gradcheck("l1 x " .. red, function(v) return nn.l1_loss_forward(v, y1, {reduction = red}) end, x1, g, gx)
    gradcheck("l1 y " .. red, function(v) return nn.l1_loss_forward(x1, v, {reduction = red}) end, y1, g, gy)
    for _, opts in ipairs({{}, {weight = dl.rand(4, f64)}, {pos_weight = dl.rand(4, f64) * 3},
                           {weight = dl.rand(3, 1, f64), pos_weight = dl.rand(4, f64) + 0.5}}) do
      opts.reduction = red
      local xb, yb = rnd(3, 4) * 3, dl.rand(3, 4, f64)
      out = nn.binary_cross_entropy_with_logits_forward(xb, yb, opts)
      g = grad_like(out)
      gx, gy = nn.binary_cross_entropy_with_logits_backward(g, xb, yb, opts)
      gradcheck("bce x " .. red, function(v) return nn.binary_cross_entropy_with_logits_forward(v, yb, opts) end, xb, g, gx)
      gradcheck("bce y " .. red, function(v) return nn.binary_cross_entropy_with_logits_forward(xb, v, opts) end, yb, g, gy)
    end
  end
end)

T.case("gradcheck relu, dropout", function()
  local x = rnd(3, 5)
  x = x + x:sign() * 0.01 -- keep away from the kink
  local g = rnd(3, 5)
  gradcheck("relu", function(v) return nn.relu_forward(v) end, x, g, nn.relu_backward(g, nn.relu_forward(x)))
  for _, p in ipairs({0.2, 0.5, 0.9}) do
    local xd = rnd(4, 6)
    local gd = rnd(4, 6)
    dl.manual_seed(11)
    local _, mask = nn.dropout_forward(xd, p)
    gradcheck("dropout p " .. p, function(v)
      dl.manual_seed(11)
      return (nn.dropout_forward(v, p))
    end, xd, gd, nn.dropout_backward(gd, mask, p))
  end
end)

T.case("gradcheck pad", function()
  local cases = {
    {shape = {2, 5}, pads = {2, 3}, mode = "reflect"},
    {shape = {2, 5}, pads = {-1, 3}, mode = "reflect"},
    {shape = {1, 2, 4, 3}, pads = {2, 1, 3, 2}, mode = "reflect"},
    {shape = {1, 2, 4, 3}, pads = {2, -1, 4, 2}, mode = "replicate"},
    {shape = {1, 3, 3, 2, 3}, pads = {1, 2, 1, 0, 2, 2}, mode = "replicate"},
    {shape = {2, 3, 4}, pads = {2, 3}, mode = "circular"},
    {shape = {2, 3, 2, 4}, pads = {4, 1, 1, 2}, mode = "circular"},
    {shape = {2, 3, 4}, pads = {1, -2, -1, 2, 1, 1}, mode = "constant"},
  }
  for i, c in ipairs(cases) do
    local x = dl.randn(c.shape, f64)
    local out = nn.pad_forward(x, c.pads, c.mode, 0.5)
    local g = grad_like(out)
    gradcheck("pad case " .. i .. " " .. c.mode, function(v) return nn.pad_forward(v, c.pads, c.mode, 0.5) end,
      x, g, nn.pad_backward(g, c.shape, c.pads, c.mode))
  end
end)

-- --------------------------------------------------------------------------------------------
-- dropout statistics

T.case("dropout statistics and reproducibility", function()
  local n = 100000
  local x = dl.ones(n)
  for _, p in ipairs({0.1, 0.3, 0.5, 0.8}) do
    dl.manual_seed(1234)
    local out, mask = nn.dropout_forward(x, p)
    T.eq(mask.dtype, dl.bool)
    local kept = mask:sum():item()
    T.near(1 - kept / n, p, 0.01 / p, "dropped fraction for p=" .. p) -- ~7 sigma
    -- survivors are scaled by 1/(1-p), the rest are 0: the sum is kept/(1-p)
    T.near(out:sum():item(), kept / (1 - p), 1e-5)
    T.near(out:amax():item(), 1 / (1 - p), 1e-6)
    -- the same seed gives the same mask and output
    dl.manual_seed(1234)
    local out2, mask2 = nn.dropout_forward(x, p)
    T.eq(dl.equal(mask, mask2), true)
    T.eq(dl.equal(out, out2), true)
    -- the backward uses the same mask and scale
    local gx = nn.dropout_backward(dl.ones(n), mask, p)
    T.eq(dl.equal(gx, out), true)
  end
  -- another seed gives another mask; consecutive calls differ
  dl.manual_seed(1)
  local _, m1 = nn.dropout_forward(x, 0.5)
  local _, m2 = nn.dropout_forward(x, 0.5)
  T.eq(dl.equal(m1, m2), false)
  -- non-contiguous input and half types
  local xt = dl.randn(30, 40):t()
  dl.manual_seed(5)
  local ot, mt = nn.dropout_forward(xt, 0.25)
  T.tensor_eq(ot, xt * mt:float() / 0.75, 1e-6)
  local oh = nn.dropout_forward(dl.ones(100):half(), 0.5)
  T.eq(oh.dtype, dl.float16)
end)

-- --------------------------------------------------------------------------------------------
-- bad input

T.case("bad input", function()
  local x, t = dl.randn(3, 4), dl.tensor({1, 2, 4})
  T.raises(function() nn.cross_entropy_forward(x, dl.tensor({0, 1, 2})) end, "target label 0 is out of range for 4 classes")
  T.raises(function() nn.cross_entropy_forward(x, dl.tensor({5, 1, 2})) end, "target label 5 is out of range")
  T.raises(function() nn.nll_loss_forward(x, dl.tensor({1, 2, 5})) end, "nll_loss: target label 5")
  T.raises(function() nn.nll_loss_backward(dl.tensor(1.0), x, dl.tensor({0, 1, 1})) end, "target label 0")
  T.raises(function() nn.cross_entropy_forward(x, t:int()) end, "int32")
  T.raises(function() nn.nll_loss_forward(x, t:int()) end, "must be int64")
  T.raises(function() nn.cross_entropy_forward(x, dl.tensor({1, 2})) end, "expected target of shape [3]")
  T.raises(function() nn.cross_entropy_forward(dl.randn(2, 3, 4), dl.tensor({1, 2})) end, "expected target of shape [2, 4]")
  T.raises(function() nn.cross_entropy_forward(x, dl.rand(3, 5)) end, "does not match")
  T.raises(function() nn.cross_entropy_forward(x, t, {reduction = "avg"}) end, "unknown reduction 'avg'")
  T.raises(function() nn.mse_loss_forward(x, x, {reduction = 3}) end, "reduction")
  T.raises(function() nn.cross_entropy_forward(x, t, {label_smoothing = 1.5}) end, "label_smoothing must be in [0, 1]")
  T.raises(function() nn.cross_entropy_forward(x, t, {weight = dl.ones(3)}) end, "weight must be 1-D")
  T.raises(function() nn.cross_entropy_forward(x, t, {weights = dl.ones(4)}) end, "unknown option 'weights'")
  T.raises(function() nn.cross_entropy_forward(x, t, {weight = 1}) end, "must be a tensor")
  T.raises(function() nn.cross_entropy_forward(dl.tensor(1.0), dl.tensor(1)) end, "0-dim")
  T.raises(function() nn.cross_entropy_forward(dl.tensor({{1, 2}}), dl.tensor({1})) end, "floating-point")
  T.raises(function() nn.cross_entropy_backward(dl.ones(2), x, t, {reduction = "none"}) end, "expected grad of shape [3]")
  T.raises(function() nn.nll_loss_backward(dl.ones(3), x, t) end, "one element")
  T.raises(function() nn.dropout_forward(x, 1.5) end, "between 0 and 1")
  T.raises(function() nn.dropout_forward(x, -0.1) end, "between 0 and 1")
  T.raises(function() nn.dropout_forward(x, 0.5, "yes") end, "training must be a boolean")
  T.raises(function() nn.dropout_backward(x, dl.ones(3, 4), 0.5) end, "mask must be bool")
  T.raises(function() nn.dropout_backward(x, dl.ones(2, 4):bool(), 0.5) end, "does not match")
  T.raises(function() nn.pad_forward(x, {1, 2, 3}) end, "even length")
  T.raises(function() nn.pad_forward(x, {1, 1, 1, 1, 1, 1}) end, "has only 2")
  T.raises(function() nn.pad_forward(x, {4, 0}, "reflect") end, "reflect padding (4, 0) must be less than the size 4")
  T.raises(function() nn.pad_forward(dl.randn(1, 3, 3), {0, 3}, "reflect") end, "reflect padding")
  T.raises(function() nn.pad_forward(x, {-3, -2}) end, "negative size")
  T.raises(function() nn.pad_forward(x, {1, 1}, "mirror") end, "unknown padding mode 'mirror'")
  T.raises(function() nn.pad_forward(x, {1, 5}, "circular") end, "circular padding")
  T.raises(function() nn.pad_forward(dl.randn(2, 2, 2, 2, 2), {1, 1, 1, 1, 1, 1, 1, 1}, "replicate") end, "last 1 to 3 dims")
  T.raises(function() nn.pad_forward(x, {1.5, 1}) end, "must be an integer")
  T.raises(function() nn.pad_forward(x, "1,1") end, "pads must be a table")
  T.raises(function() nn.pad_backward(dl.ones(3, 5), {3, 4}, {1, 1}) end, "expected grad of the padded shape [3, 6]")
  T.raises(function() nn.softmax_forward(x, 3) end, "out of range")
  T.raises(function() nn.softmax_forward(x, 0) end, "1-based")
  T.raises(function() nn.softmax_forward(dl.tensor({1, 2}), 1) end, "floating-point")
  T.raises(function() nn.softmax_backward(dl.ones(3, 4), dl.ones(4, 3), 1) end, "does not match")
  T.raises(function() nn.mse_loss_forward(dl.ones(3, 4), dl.ones(5)) end, "mse_loss")
  T.raises(function() nn.binary_cross_entropy_with_logits_forward(dl.ones(3, 4), dl.ones(4)) end, "does not match")
  T.raises(function() nn.binary_cross_entropy_with_logits_forward(dl.ones(3, 4), dl.ones(3, 4), {pos_weight = dl.ones(3)}) end, "cannot be broadcast")
  T.raises(function() nn.relu_backward(dl.ones(2), dl.ones(3)) end, "does not match")
  T.raises(function() nn.softmax_forward(x, 1, 2) end, "unexpected argument")
  -- the process is still healthy
  T.near(nn.cross_entropy_forward(dl.zeros(2, 2), dl.tensor({1, 2})):item(), math.log(2))
end)

T.done()
