-- test_attention_cuda.lua - the fused CUDA kernels of
-- scaled_dot_product_attention against the CPU: outputs and the gradients
-- of q, k and v in float32 and float64 over head dims 16..256 (also not a
-- multiple of 32, and Ev != E), plain and causal attention with L < S and
-- L > S, bool and float masks broadcast over batch or heads, long sequences
-- with ragged tiles, dropout (the same Philox stream on both devices, so
-- the same mask), the half types (computed with float32 accumulation,
-- against the CPU's float32 result on the same rounded inputs), autocast,
-- and the device memory bound.  Skipped (exit 77) without a GPU.
local T = require "testlib"
T.require_cuda()
local F = dl.nn.functional
local sdpa = F.scaled_dot_product_attention

-- out and the three gradients of one call on dev; inputs drawn on the CPU.
-- shapes: a row of SHAPES ({name, q shape, k shape, v shape}).
local function run(dev, row, opts, dtype, seed)
  local shapes = {row[2], row[3], row[4]}
  local function draw(shape, s)
    local t = T.randn(shape, {seed = s})
    if dtype then t = t:to(dtype) end
    return t:to(dev):requires_grad_()
  end
  local q, k, v = draw(shapes[1], seed or 1), draw(shapes[2], (seed or 1) + 1),
    draw(shapes[3], (seed or 1) + 2)
  local o = {}
  for key, val in pairs(opts or {}) do o[key] = dl.is_tensor(val) and val:to(dev) or val end
  if o.dropout_p then dl.manual_seed(77) end
  local y = sdpa(q, k, v, o)
  local gy = T.randn(y.shape, {seed = 9}):to(y.dtype):to(dev)
  y:backward(gy)
  return {y, q.grad, k.grad, v.grad}
end

local SHAPES = {
  {"plain", {2, 3, 37, 64}, {2, 3, 45, 64}, {2, 3, 45, 64}},
  {"L > S", {2, 2, 70, 32}, {2, 2, 20, 32}, {2, 2, 20, 48}},
  {"head dim 16", {3, 4, 50, 16}, {3, 4, 50, 16}, {3, 4, 50, 16}},
  {"head dim 100, Ev 40", {1, 2, 33, 100}, {1, 2, 65, 100}, {1, 2, 65, 40}},
  {"head dim 128", {2, 2, 64, 128}, {2, 2, 64, 128}, {2, 2, 64, 128}},
  {"head dim 256", {1, 2, 40, 256}, {1, 2, 40, 256}, {1, 2, 40, 256}},
  {"long", {1, 2, 300, 64}, {1, 2, 300, 64}, {1, 2, 300, 64}},
  {"broadcast k, v", {2, 3, 30, 32}, {2, 1, 50, 32}, {1, 50, 32}},
}

for _, s in ipairs(SHAPES) do
  for _, causal in ipairs({false, true}) do
    T.cuda_case("float32 " .. s[1] .. (causal and " causal" or ""), function(dev)
      return run(dev, s, {is_causal = causal})
    end, 1e-4, 1e-5)
  end
end

T.cuda_case("float64", function(dev)
  return {run(dev, SHAPES[1], {}, dl.float64), run(dev, SHAPES[4], {is_causal = true}, dl.float64)}
end, 1e-10, 1e-12)

T.cuda_case("masks", function(dev)
  dl.manual_seed(11) -- the same masks for both devices
  local bm = dl.rand(37, 45):gt(0.3)
  bm[5]:fill_(false) -- a fully masked row
  local out = {run(dev, SHAPES[1], {attn_mask = bm})}
  out[2] = run(dev, SHAPES[1], {attn_mask = dl.rand(2, 1, 1, 45):gt(0.2)})
  out[3] = run(dev, SHAPES[1], {attn_mask = T.randn(3, 37, 45, {seed = 4})})
  local fm = T.randn(2, 1, 37, 45, {seed = 5})
  fm[1][1][7]:fill_(-math.huge)
  out[4] = run(dev, SHAPES[1], {attn_mask = fm})
  out[5] = run(dev, SHAPES[1], {scale = 0.3})
  return out
end, 1e-4, 1e-5)

T.cuda_case("dropout draws the CPU's mask", function(dev)
  return {run(dev, SHAPES[1], {dropout_p = 0.3}), run(dev, SHAPES[7], {dropout_p = 0.1, is_causal = true})}
end, 1e-4, 1e-5)

-- the half types: CUDA computes on the rounded inputs with float32
-- accumulation; the CPU reference converts the same inputs to float32
if T.cuda then
  for _, dt in ipairs({dl.bfloat16, dl.float16}) do
    T.case(tostring(dt) .. " against the CPU in float32", function()
      for _, s in ipairs({SHAPES[1], SHAPES[5], SHAPES[7]}) do
        for _, causal in ipairs({false, true}) do
          local cuda = run("cuda", s, {is_causal = causal}, dt)
          local cpu = run("cpu", s, {is_causal = causal}, dt)
          for i = 1, 4 do
            T.eq(cuda[i].dtype, dt)
            T.close(cuda[i]:cpu():float(), cpu[i]:float(), 2e-2, 1e-3, s[1] .. " result " .. i)
          end
        end
      end
    end)
  end

  T.case("autocast runs attention in the half dtype", function()
    local q = T.randn(2, 4, 16, 32, {seed = 3}):cuda()
    local y = dl.autocast({dtype = "bf16"}, function() return sdpa(q, q, q, {is_causal = true}) end)
    T.eq(y.dtype, dl.bfloat16)
    T.close(y:float():cpu(), sdpa(q:cpu(), q:cpu(), q:cpu(), {is_causal = true}), 2e-2)
  end)

  T.case("device memory: (1, 1, 4096, 64) never holds a 4096 x 4096 matrix", function()
    local q = T.randn(1, 1, 4096, 64, {seed = 8}):cuda():requires_grad_()
    dl.cuda.synchronize()
    dl.cuda.reset_peak_memory_stats()
    local base = dl.cuda.memory_allocated()
    local y = sdpa(q, q, q, {is_causal = true})
    y:backward(dl.ones(1, 1, 4096, 64):cuda())
    dl.cuda.synchronize()
    local peak = dl.cuda.max_memory_allocated() - base
    T.truthy(peak < 16 * 2 ^ 20, string.format("peak %.1f MiB", peak / 2 ^ 20))
  end)

  T.case("bad input on CUDA", function()
    local q = dl.randn(1, 2, 4, 300):cuda()
    T.raises(function() sdpa(q, q, q) end, "head dims up to 256")
    T.raises(function() sdpa(q, q:cpu(), q) end, "expected all tensors on one device")
    T.shape_eq(sdpa(q:narrow(-1, 1, 8), q:narrow(-1, 1, 8), q:narrow(-1, 1, 8)), {1, 2, 4, 8})
  end)
end

T.done()
