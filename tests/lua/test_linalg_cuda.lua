-- test_linalg_cuda.lua - the CUDA matrix products (cuBLAS for the floating
-- dtypes, our own wrap-around kernel for the integers) against the CPU:
-- matmul of every rank combination (1-D, 2-D, 3-D, broadcast batches, which
-- take both cuBLAS's strided-batched call and its per-matrix loop), mm, bmm,
-- mv, dot, outer, addmm with alpha and beta; transposed, sliced and expanded
-- operands; float32 (TF32 off), float64, float16/bfloat16 (against the CPU's
-- float32 product of the same rounded inputs, rounded once), int64, int32 and
-- uint8 (exact, with wrap-around), sizes up to 1024x1024x1024, an empty K,
-- device errors, and gradients.  Skipped (exit 77) without a GPU.
local T = require "testlib"
local dl = require "dl"

T.require_cuda()

-- float32 must not use TF32 here (the default; set it when the switch exists)
pcall(function() dl.backends.cuda.matmul.allow_tf32 = false end)

-- Element tolerance of a float32 product summing K terms of normal values.
local function f32_atol(K) return 1e-5 + 1e-6 * K end

-- --- every shape combination ------------------------------------------------------

-- {shape of a, shape of b}: 1-D/2-D/3-D/4-D with broadcast batch dims
local SHAPES = {
  {{5}, {5}},             -- dot
  {{4, 5}, {5}},          -- mv
  {{5}, {5, 3}},          -- vector @ matrix
  {{4, 5}, {5, 3}},       -- mm
  {{6, 4, 5}, {6, 5, 3}}, -- bmm (uniform batch strides)
  {{6, 4, 5}, {5, 3}},    -- batch @ matrix (b's batch stride 0)
  {{4, 5}, {6, 5, 3}},    -- matrix @ batch (a's batch stride 0)
  {{6, 4, 5}, {5}},       -- batch @ vector
  {{5}, {6, 5, 3}},       -- vector @ batch
  {{2, 1, 4, 5}, {7, 5, 3}},    -- broadcast batches (per-matrix loop)
  {{2, 7, 4, 5}, {1, 7, 5, 3}}, -- broadcast leading dim
  {{3, 1, 1, 5}, {1, 2, 5, 1}}, -- size-1 matrix dims
}

for _, dt in ipairs({dl.float32, dl.float64}) do
  for i, sh in ipairs(SHAPES) do
    T.cuda_case(string.format("matmul %s: shapes %d", dt.name, i), function(dev)
      local a = T.randn(sh[1], {seed = i}):to(dt)
      local b = T.randn(sh[2], {seed = 100 + i}):to(dt)
      a, b = T.to(dev, a, b)
      return dl.matmul(a, b)
    end, 1e-5, dt == dl.float32 and f32_atol(5) or 1e-12)
  end
end

T.cuda_case("mm, bmm, mv, dot, outer (float32)", function(dev)
  local a, b = T.to(dev, T.randn(7, 9, {seed = 1}), T.randn(9, 4, {seed = 2}))
  local p, q = T.to(dev, T.randn(3, 7, 9, {seed = 3}), T.randn(3, 9, 4, {seed = 4}))
  local v, u = T.to(dev, T.randn(9, {seed = 5}), T.randn(7, {seed = 6}))
  return {dl.mm(a, b), dl.bmm(p, q), dl.mv(a, v), dl.dot(v, v), dl.outer(u, v), a:matmul(b)}
end, 1e-5, f32_atol(9))

-- --- operand layouts ------------------------------------------------------------------

for _, dt in ipairs({dl.float32, dl.float64, dl.float16, dl.int64}) do
  T.cuda_case("transposed, sliced and expanded operands: " .. dt.name, function(dev)
    local a = (T.randn(6, 8, {seed = 7}) * 4):to(dt):to(dev)
    local b = (T.randn(8, 5, {seed = 8}) * 4):to(dt):to(dev)
    local wide = (T.randn(6, 13, {seed = 9}) * 4):to(dt):to(dev)
    local big = (T.randn(6, 8, 3, {seed = 10}) * 4):to(dt):to(dev)
    local col = (T.randn(6, 1, {seed = 11}) * 4):to(dt):to(dev):expand(6, 8)
    local bt = b:t():contiguous() -- (5,8)
    return {
      dl.matmul(a:t():contiguous():t(), b),      -- a stored column-major
      dl.matmul(a, bt:t()),                       -- b transposed view
      dl.matmul(bt, a:t()),                       -- both transposed
      dl.matmul(wide:narrow(2, 3, 8), b),        -- leading dimension > columns
      dl.matmul(big:select(3, 2), b),            -- no unit stride: copied
      dl.matmul(col, b),                          -- expanded (stride 0): copied
      dl.matmul(a:unsqueeze(1):expand(3, 6, 8), b), -- expanded batch
    }
  end, 1e-2, dt == dl.float16 and 1e-1 or 1e-4)
end

-- --- alpha, beta, empty K -----------------------------------------------------------------

for _, dt in ipairs({dl.float32, dl.float64, dl.int64, dl.int32}) do
  T.cuda_case("addmm alpha/beta: " .. dt.name, function(dev)
    local m1 = (T.randn(5, 6, {seed = 20}) * 5):to(dt)
    local m2 = (T.randn(6, 4, {seed = 21}) * 5):to(dt)
    local inp = (T.randn(5, 4, {seed = 22}) * 5):to(dt)
    local row = (T.randn(4, {seed = 23}) * 5):to(dt)
    m1, m2, inp, row = T.to(dev, m1, m2, inp, row)
    local r = {
      dl.addmm(inp, m1, m2),
      dl.addmm(inp, m1, m2, {beta = 3, alpha = -2}),
      dl.addmm(row, m1, m2, {beta = 2, alpha = 3}), -- input broadcast
      dl.addmm(inp, m1, m2, {beta = 0}),
    }
    if dt == dl.float32 or dt == dl.float64 then -- fractional factors
      r[#r + 1] = dl.addmm(inp, m1, m2, {beta = 0.5, alpha = 1.5})
    end
    return r
  end, 1e-5, 1e-3)
end

T.cuda_case("addmm beta=0 ignores NaN in input; 0-dim input beside CUDA matrices", function(dev)
  local inp = dl.full({3, 4}, 0 / 0):to(dev)
  local m1, m2 = T.to(dev, T.randn(3, 5, {seed = 30}), T.randn(5, 4, {seed = 31}))
  return {dl.addmm(inp, m1, m2, {beta = 0}), dl.addmm(dl.tensor(2.5), m1, m2, {beta = 2})}
end, 1e-5, f32_atol(5))

for _, dt in ipairs({dl.float32, dl.float64, dl.float16, dl.bfloat16, dl.int64}) do
  T.cuda_case("empty K gives zeros (and beta * input): " .. dt.name, function(dev)
    local a, b = T.to(dev, dl.ones(3, 0, {dtype = dt}), dl.ones(0, 4, {dtype = dt}))
    local inp = dl.full({3, 4}, 3, {dtype = dt}):to(dev)
    local p, q = T.to(dev, dl.ones(2, 3, 0, {dtype = dt}), dl.ones(2, 0, 4, {dtype = dt}))
    return {dl.matmul(a, b), dl.addmm(inp, a, b, {beta = 2}), dl.bmm(p, q),
      dl.matmul(dl.ones(0, {dtype = dt}):to(dev), dl.ones(0, {dtype = dt}):to(dev))}
  end, 0, 0)
end

T.cuda_case("empty M, N and batch", function(dev)
  local z1, b1 = T.to(dev, dl.ones(0, 5), dl.ones(5, 3))
  local a2, z2 = T.to(dev, dl.ones(4, 5), dl.ones(5, 0))
  local z3, b3 = T.to(dev, dl.ones(0, 4, 5), dl.ones(0, 5, 3))
  return {dl.matmul(z1, b1), dl.matmul(a2, z2), dl.bmm(z3, b3)}
end, 0, 0)

-- --- dtypes -------------------------------------------------------------------------------

for _, dt in ipairs({dl.float16, dl.bfloat16}) do
  T.cuda_case("half types, float32 accumulation: " .. dt.name, function(dev)
    -- the CPU converts the rounded inputs to float32, multiplies, rounds once
    local a, b = T.to(dev, T.randn(33, 257, {seed = 40}):to(dt), T.randn(257, 65, {seed = 41}):to(dt))
    local p, q = T.to(dev, T.randn(3, 17, 64, {seed = 42}):to(dt), T.randn(3, 64, 9, {seed = 43}):to(dt))
    return {dl.matmul(a, b), dl.bmm(p, q), dl.matmul(b:t(), a:t())}
  end, 1e-2, 5e-2)
end

T.cuda_case("integers: exact, with wrap-around", function(dev)
  local r = {}
  for _, dt in ipairs({dl.int64, dl.int32, dl.uint8}) do
    local scale = dt == dl.int64 and 2 ^ 40 or (dt == dl.int32 and 2 ^ 20 or 1)
    local a = (T.randn(9, 17, {seed = 50}) * scale):to(dt)
    local b = (T.randn(17, 6, {seed = 51}) * scale):to(dt)
    if dt == dl.uint8 then a, b = (T.randn(9, 17, {seed = 50}):abs() * 60):to(dt), (T.randn(17, 6, {seed = 51}):abs() * 60):to(dt) end
    local p = (T.randn(4, 9, 17, {seed = 52}) * 100):to(dt)
    a, b, p = T.to(dev, a, b, p)
    r[#r + 1] = dl.matmul(a, b)
    r[#r + 1] = dl.matmul(p, b)               -- batch stride 0 for b
    r[#r + 1] = dl.matmul(a:t():contiguous():t(), b:t():contiguous():t()) -- column-major
    r[#r + 1] = dl.addmm(dl.ones(9, 6, {dtype = dt}):to(dev), a, b, {beta = 3, alpha = 2})
  end
  return r
end, 0, 0)

T.cuda_case("bool outer", function(dev)
  local a = dl.tensor({true, false, true}):to(dev)
  local b = dl.tensor({false, true, true, true}):to(dev)
  return dl.outer(a, b)
end, 0, 0)

-- --- large sizes ---------------------------------------------------------------------------

T.cuda_case("1024x1024x1024 float32", function(dev)
  local a, b = T.to(dev, T.randn(1024, 1024, {seed = 60}), T.randn(1024, 1024, {seed = 61}))
  return dl.matmul(a, b)
end, 1e-5, f32_atol(1024))

T.cuda_case("1024x1024x1024 float64", function(dev)
  local a, b = T.to(dev, T.randn(1024, 1024, {seed = 62}):double(), T.randn(1024, 1024, {seed = 63}):double())
  return dl.matmul(a, b)
end, 1e-10, 1e-9)

T.cuda_case("1024x1024x1024 bfloat16", function(dev)
  local a, b = T.to(dev, T.randn(1024, 1024, {seed = 62}):bfloat16(), T.randn(1024, 1024, {seed = 63}):bfloat16())
  return dl.matmul(a, b)
end, 1e-2, 0.1)

T.cuda_case("odd large shapes float32: 1000x777 @ 777x1023, batched 16x129x300 @ 300x65", function(dev)
  local a, b = T.to(dev, T.randn(1000, 777, {seed = 64}), T.randn(777, 1023, {seed = 65}))
  local p, q = T.to(dev, T.randn(16, 129, 300, {seed = 66}), T.randn(16, 300, 65, {seed = 67}))
  return {dl.matmul(a, b), dl.matmul(p, q)}
end, 1e-5, f32_atol(777))

T.cuda_case("integer 256x300x200 int64", function(dev)
  local a, b = T.to(dev, (T.randn(256, 300, {seed = 68}) * 1000):long(), (T.randn(300, 200, {seed = 69}) * 1000):long())
  return dl.matmul(a, b)
end, 0, 0)

-- --- gradients -----------------------------------------------------------------------------

T.cuda_case("gradients of mm, bmm, mv, dot, matmul with broadcast batch", function(dev)
  local out = {}
  local function grads(fn, ...)
    local leaves = {}
    for i, t in ipairs({...}) do leaves[i] = t:to(dev):requires_grad_() end
    local y = fn(table.unpack(leaves))
    local g = (y:dim() == 0 and dl.tensor(1.5) or T.randn(y:size(), {seed = 99})):to(dev)
    local gs = dl.autograd.grad(y, leaves, {grad_outputs = g})
    for _, t in ipairs(gs) do out[#out + 1] = t end
    out[#out + 1] = y:detach()
  end
  grads(dl.mm, T.randn(5, 6, {seed = 70}), T.randn(6, 4, {seed = 71}))
  grads(dl.bmm, T.randn(3, 5, 6, {seed = 72}), T.randn(3, 6, 4, {seed = 73}))
  grads(dl.mv, T.randn(5, 6, {seed = 74}), T.randn(6, {seed = 75}))
  grads(dl.dot, T.randn(6, {seed = 76}), T.randn(6, {seed = 77}))
  grads(dl.matmul, T.randn(3, 5, 6, {seed = 78}), T.randn(6, 4, {seed = 79})) -- b's gradient folds the batch
  grads(function(a, b, c) return dl.addmm(c, a, b, {beta = 0.5, alpha = 2}) end,
    T.randn(5, 6, {seed = 80}), T.randn(6, 4, {seed = 81}), T.randn(5, 4, {seed = 82}))
  return out
end, 1e-5, f32_atol(20))

T.cuda_case("gradients with summed broadcast batch dims (float64)", function(dev)
  local a = T.randn(2, 1, 4, 5, {seed = 82}):double():to(dev):requires_grad_()
  local b = T.randn(3, 5, 2, {seed = 83}):double():to(dev):requires_grad_()
  local y = dl.matmul(a, b)
  local g = T.randn(2, 3, 4, 2, {seed = 84}):double():to(dev)
  return dl.autograd.grad(y, {a, b}, {grad_outputs = g})
end, 1e-10, 1e-10)

-- --- errors --------------------------------------------------------------------------------

T.case("operands on different devices are refused, naming both", function()
  local a, b = dl.ones(2, 3):cuda(), dl.ones(3, 2)
  T.raises(function() return dl.matmul(a, b) end, "matmul: expected all tensors on one device")
  T.raises(function() return dl.addmm(dl.ones(2, 2), a, b:cuda()) end, "addmm: expected all tensors")
  T.raises(function() return dl.mm(a, dl.ones(3, 2, {dtype = dl.float64}):cuda()) end, "same dtype")
end)

T.done()
