-- test_attention.lua - scaled_dot_product_attention on the CPU: known values,
-- masks that must agree (bool vs -inf float, is_causal vs an explicit
-- triangle), fully masked rows (zeros, finite gradients), the per-row
-- log-sum-exp, results independent of the thread count (both backward
-- schedules), dropout (reproducible by seed, the kept fraction, the backward
-- using the forward's mask), the memory bound on a (1, 1, 4096, 64) problem,
-- half dtypes, and bad input (clear errors, the process stays healthy).
local T = require "testlib"
local F = dl.nn.functional
local sdpa = F.scaled_dot_product_attention

local f64 = {dtype = dl.float64}

-- Reference by dense ops (float64): softmax(scale q k^T masked) v.
local function dense_ref(q, k, v, scale)
  local s = dl.matmul(q:double(), k:double():transpose(-1, -2)) * scale
  return dl.matmul(F.softmax(s, -1), v:double())
end

T.case("known values", function()
  local q = dl.tensor({{1.0, 0.0}})
  local k = dl.tensor({{1.0, 0.0}, {0.0, 1.0}})
  local v = dl.tensor({{1.0, 2.0}, {3.0, 4.0}})
  local a, b = math.exp(1) / (math.exp(1) + 1), 1 / (math.exp(1) + 1)
  T.tensor_eq(sdpa(q, k, v, {scale = 1}), {{a + 3 * b, 2 * a + 4 * b}}, 1e-6)
  -- default scale 1/sqrt(E)
  local s = 1 / math.sqrt(2)
  a, b = math.exp(s) / (math.exp(s) + 1), 1 / (math.exp(s) + 1)
  T.tensor_eq(sdpa(q, k, v), {{a + 3 * b, 2 * a + 4 * b}}, 1e-6)
  -- causal: the first query sees only the first key
  local q2 = dl.tensor({{1.0, 0.0}, {0.0, 1.0}})
  T.tensor_eq(sdpa(q2, k, v, {is_causal = true})[1], {1, 2}, 1e-6)
end)

T.case("bool mask = -inf float mask; causal = explicit triangle", function()
  local q, k, v = T.randn(2, 3, 6, 5, {seed = 1}), T.randn(2, 3, 9, 5), T.randn(2, 3, 9, 4)
  local m = dl.rand(6, 9):gt(0.3)
  m[1]:fill_(true)
  local fm = dl.zeros(6, 9):masked_fill(m:logical_not(), -math.huge)
  T.close(sdpa(q, k, v, {attn_mask = m}), sdpa(q, k, v, {attn_mask = fm}), 1e-6)
  local qs, ks, vs = T.randn(2, 7, 4, {seed = 2}), T.randn(2, 7, 4), T.randn(2, 7, 3)
  local tri = dl.ones(7, 7):tril():bool()
  T.close(sdpa(qs, ks, vs, {is_causal = true}), sdpa(qs, ks, vs, {attn_mask = tri}), 1e-6)
  -- L > S: rows past S see every key
  local ql = T.randn(9, 4, {seed = 3})
  local tri2 = dl.ones(9, 7):tril():bool()
  T.close(sdpa(ql, ks[1], vs[1], {is_causal = true}), sdpa(ql, ks[1], vs[1], {attn_mask = tri2}), 1e-6)
end)

T.case("fully masked rows give zeros and finite gradients", function()
  local q = T.randn(1, 2, 4, 3, {seed = 4, dtype = dl.float64}):requires_grad_()
  local k = T.randn(1, 2, 5, 3, {dtype = dl.float64}):requires_grad_()
  local v = T.randn(1, 2, 5, 3, {dtype = dl.float64}):requires_grad_()
  local m = dl.ones(4, 5):bool()
  m[3]:fill_(false)
  local y = sdpa(q, k, v, {attn_mask = m})
  T.tensor_eq(y[1][1][3], {0, 0, 0})
  T.tensor_eq(y[1][2][3], {0, 0, 0})
  y:sum():backward()
  T.tensor_eq(q.grad[1][1][3], {0, 0, 0})
  T.truthy(q.grad:isfinite():all():item() and k.grad:isfinite():all():item() and
    v.grad:isfinite():all():item(), "gradients are finite")
  local _, lse = dl._nn.scaled_dot_product_attention_forward(q, k, v, {attn_mask = m})
  T.eq(lse[1][1][3]:item(), math.huge)
end)

T.case("lse is the log-sum-exp of the scaled scores", function()
  local q, k, v = T.randn(2, 70, 8, {seed = 5}), T.randn(2, 90, 8), T.randn(2, 90, 3)
  local out, lse = dl._nn.scaled_dot_product_attention_forward(q, k, v, {scale = 0.4})
  T.shape_eq(lse, {2, 70})
  T.eq(lse.dtype, dl.float32)
  local s = dl.matmul(q:double(), k:double():transpose(-1, -2)) * 0.4
  local m = s:amax(-1, {keepdim = true})
  local ref = ((s - m):exp():sum(-1, {keepdim = true}):log() + m):squeeze(-1)
  T.close(lse, ref, 1e-6)
  T.close(out, dense_ref(q, k, v, 0.4), 1e-5)
end)

T.case("results do not depend on the thread count", function()
  -- B = 1 and 3 take the two-pass backward on 2 threads, B = 8 the one-pass one
  for _, shape in ipairs({{1, 1, 150, 16}, {3, 1, 100, 8}, {2, 4, 70, 8}}) do
    local function run()
      local q = T.randn(shape, {seed = 6}):requires_grad_()
      local k = T.randn(shape):requires_grad_()
      local v = T.randn(shape):requires_grad_()
      local y = sdpa(q, k, v, {is_causal = true})
      y:backward(T.randn(shape))
      return {y, q.grad, k.grad, v.grad}
    end
    T.same_across_threads(run, {1, 2}, "sdpa " .. T.fmt(shape))
  end
end)

T.case("dropout: kept fraction, reproducible by seed, backward uses the forward's mask", function()
  -- q = k = 0: uniform weights 1/S; v = identity makes out[i, j] = keep_ij / ((1 - p) S)
  local L, S, p = 200, 256, 0.3
  local q, k = dl.zeros(L, 8), dl.zeros(S, 8)
  local v = dl.eye(S):requires_grad_()
  dl.manual_seed(7)
  local y = sdpa(q, k, v, {dropout_p = p})
  local keep = (y * ((1 - p) * S)):round()
  T.truthy(keep:eq(0):logical_or(keep:eq(1)):all():item(), "outputs are 0 or the kept weight")
  local frac = keep:mean():item()
  T.near(frac, 1 - p, 0.01 / (1 - p), "kept fraction") -- ~6 sigma at 51200 draws
  dl.manual_seed(7)
  T.same_bits(sdpa(q, k, v, {dropout_p = p}), y, "same seed, same mask")
  T.truthy(not dl.equal(sdpa(q, k, v, {dropout_p = p}), y), "the stream moves on")
  -- d out / d v[j, e] summed over out's rows: sum_i keep_ij / ((1 - p) S)
  y:sum():backward()
  local want = (keep:sum(1) / ((1 - p) * S)):unsqueeze(2):expand(S, S)
  T.close(v.grad, want, 1e-6)
  -- p = 1 drops everything
  T.tensor_eq(sdpa(q, k, v, {dropout_p = 1}):abs():sum(), 0)
end)

T.case("memory: (1, 1, 4096, 64) never holds a 4096 x 4096 matrix", function()
  local n = 4096
  local q = T.randn(1, 1, n, 64, {seed = 8}):requires_grad_()
  local k = T.randn(1, 1, n, 64):requires_grad_()
  local v = T.randn(1, 1, n, 64):requires_grad_()
  collectgarbage()
  dl.reset_peak_memory_stats()
  local base = dl.max_memory_allocated()
  local y = sdpa(q, k, v, {is_causal = true})
  y:backward(dl.ones(1, 1, n, 64))
  local peak = dl.max_memory_allocated() - base
  -- out, its gradient and dq, dk, dv are 1 MiB each; one (n, n) float32 matrix is 64 MiB
  T.truthy(peak < 16 * 2 ^ 20, string.format("peak %.1f MiB", peak / 2 ^ 20))
  T.truthy(peak > 4 * 2 ^ 20, "the counter sees the results")
  -- rows at both ends against dense math on slices
  for _, r in ipairs({{1, 64}, {2017, 2080}, {n - 63, n}}) do
    local len = r[2] - r[1] + 1
    local qs = q:detach()[1][1]:narrow(1, r[1], len)
    local s = dl.matmul(qs:double(), k:detach()[1][1]:double():t()) / 8
    -- (0-based) query r[1] - 1 + a sees keys j <= r[1] - 1 + a: masked where j - a >= r[1]
    local tri = dl.ones(len, n):triu(r[1]):bool()
    s = s:masked_fill(tri, -math.huge)
    local want = dl.matmul(F.softmax(s, -1), v:detach()[1][1]:double())
    T.close(y:detach()[1][1]:narrow(1, r[1], len), want, 1e-5, 0, "rows " .. r[1] .. ".." .. r[2])
  end
end)

T.case("half dtypes compute in float32 on the CPU", function()
  local q, k, v = T.randn(2, 5, 8, {seed = 9}), T.randn(2, 7, 8), T.randn(2, 7, 4)
  for _, dt in ipairs({dl.bfloat16, dl.float16}) do
    local y = sdpa(q:to(dt), k:to(dt), v:to(dt), {attn_mask = dl.ones(5, 7)})
    T.eq(y.dtype, dt)
    T.close(y, dense_ref(q:to(dt), k:to(dt), v:to(dt), 1 / math.sqrt(8)), 1e-2)
  end
  -- a float32 mask with float64 inputs is converted
  local y = sdpa(q:double(), k:double(), v:double(), {attn_mask = dl.zeros(5, 7)})
  T.eq(y.dtype, dl.float64)
end)

T.case("empty query sequence, empty value features", function()
  local y = sdpa(dl.zeros(2, 0, 4), dl.randn(2, 3, 4), dl.randn(2, 3, 5))
  T.shape_eq(y, {2, 0, 5})
  local q, k = dl.randn(2, 3, 4):requires_grad_(), dl.randn(2, 5, 4):requires_grad_()
  local v = dl.randn(2, 5, 0):requires_grad_()
  y = sdpa(q, k, v)
  T.shape_eq(y, {2, 3, 0})
  y:sum():backward()
  T.eq(q.grad:abs():sum():item(), 0)
  T.eq(k.grad:abs():sum():item(), 0)
  T.shape_eq(v.grad, {2, 5, 0})
end)

T.case("bad input gives clear errors", function()
  local q, k, v = dl.randn(2, 3, 5, 8), dl.randn(2, 3, 7, 8), dl.randn(2, 3, 7, 6)
  T.raises(function() sdpa(q, k, v, {attn_mask = dl.ones(4, 7):bool()}) end,
    "attn_mask of shape [4, 7] does not broadcast to the attention weights' shape [2, 3, 5, 7]")
  T.raises(function() sdpa(q, k, v, {attn_mask = dl.ones(3, 1, 1, 1, 7)}) end, "does not broadcast")
  T.raises(function() sdpa(q, dl.randn(2, 3, 7, 4), v) end,
    "query has embedding size 8 (last dim of [2, 3, 5, 8]), key has 4")
  T.raises(function() sdpa(q, k, dl.randn(2, 3, 6, 6)) end, "key has 7 positions")
  T.raises(function() sdpa(q, k:double(), v) end, "query, key and value must have one dtype")
  T.raises(function() sdpa(q:long(), k:long(), v:long()) end, "must be a floating-point tensor")
  T.raises(function() sdpa(dl.randn(8), k, v) end, "query must have at least 2 dims")
  T.raises(function() sdpa(q, dl.randn(2, 3, 0, 8), dl.randn(2, 3, 0, 6)) end,
    "an empty key sequence")
  T.raises(function() sdpa(dl.randn(2, 5, 0), dl.randn(2, 7, 0), v) end, "embedding size 0")
  T.raises(function() sdpa(dl.randn(4, 5, 8), k, v) end,
    "the batch dims of query [4], key [2, 3] and value [2, 3] do not broadcast")
  T.raises(function() sdpa(q, k, v, {is_causal = true, attn_mask = dl.ones(5, 7):bool()}) end,
    "cannot be combined")
  T.raises(function() sdpa(q, k, v, {dropout_p = 1.5}) end, "dropout_p must be in [0, 1], got 1.5")
  T.raises(function() sdpa(q, k, v, {attn_mask = dl.ones(5, 7):long()}) end,
    "attn_mask must be bool or floating point, got int64")
  T.raises(function() sdpa(q, k, v, {attn_mask = "no"}) end, "attn_mask must be a tensor")
  T.raises(function() sdpa(q, k, v, {is_causal = 1}) end, "is_causal must be a boolean")
  T.raises(function() sdpa(q, k, v, {scale = "x"}) end, "scale must be a number")
  T.raises(function() sdpa(q, k, v, {scale = math.huge}) end, "scale must be a finite number")
  T.raises(function() sdpa(q, k, v, {causal = true}) end, "causal")
  T.raises(function() sdpa(q, k, v, {attn_mask = dl.zeros(5, 7):requires_grad_()}) end,
    "requires grad is not supported")
  T.raises(function() sdpa(q, k) end, "tensor")
  -- still healthy
  T.shape_eq(sdpa(q, k, v), {2, 3, 5, 6})
end)

T.case("a mask modified in place before backward is reported", function()
  local q = dl.randn(3, 4, f64):requires_grad_()
  local m = dl.ones(3, 5, f64)
  local y = sdpa(q, dl.randn(5, 4, f64), dl.randn(5, 2, f64), {attn_mask = m})
  m:add_(1)
  T.raises(function() y:sum():backward() end, "modified by an in-place operation")
end)

-- --- nn.MultiheadAttention ------------------------------------------------------------------

T.case("MultiheadAttention parameters, state_dict names, printing", function()
  local m = dl.nn.MultiheadAttention(8, 2, {kdim = 6, vdim = 4, add_bias_kv = true})
  local names = {}
  for k, v in pairs(m:state_dict()) do names[#names + 1] = k .. " " .. T.fmt(v.shape) end
  T.eq(table.concat(names, ", "), "q_proj_weight {8, 8}, k_proj_weight {8, 6}, v_proj_weight {8, 4}, " ..
    "in_proj_bias {24}, bias_k {1, 1, 8}, bias_v {1, 1, 8}, out_proj.weight {8, 8}, out_proj.bias {8}")
  T.eq(m.in_proj_weight, nil)
  T.eq(m.head_dim, 4)
  T.eq(tostring(dl.nn.MultiheadAttention(8, 2, {bias = false})), "MultiheadAttention(\n" ..
    "  (out_proj): NonDynamicallyQuantizableLinear(in_features=8, out_features=8, bias=False)\n)")
  -- PyTorch's initialisation: zero biases, xavier-bounded projections
  local s = dl.nn.MultiheadAttention(16, 4)
  T.eq(s.in_proj_bias:abs():sum():item(), 0)
  T.eq(s.out_proj.bias:abs():sum():item(), 0)
  T.truthy(s.in_proj_weight:abs():max():item() <= math.sqrt(6 / (16 + 48)), "xavier_uniform_ bound")
end)

T.case("MultiheadAttention: the fused path equals the weights path; dropout only in training", function()
  local m = dl.nn.MultiheadAttention(16, 4, {dropout = 0.5, batch_first = true})
  local x = T.randn(3, 7, 16, {seed = 10})
  local pad = dl.zeros(3, 7):bool()
  pad[1][7]:fill_(true)
  m:eval()
  local a, w = m(x, x, x, {key_padding_mask = pad})
  local b, none = m(x, x, x, {key_padding_mask = pad, need_weights = false})
  T.close(b, a, 1e-5)
  T.eq(none, nil)
  T.shape_eq(w, {3, 7, 7})
  T.close(w:sum(-1), dl.ones(3, 7), 1e-6)
  T.eq(w[1][3][7]:item(), 0) -- the padded key
  local c = m(x, x, x, {is_causal = true, need_weights = false})
  local d = m(x, x, x, {attn_mask = dl.ones(7, 7):bool():triu(1)})
  T.close(c, d, 1e-5)
  m:train()
  dl.manual_seed(3)
  local t1 = m(x, x, x, {need_weights = false})
  dl.manual_seed(3)
  local t2 = m(x, x, x, {need_weights = false})
  T.same_bits(t1, t2, "dropout reproducible by seed")
  T.truthy((t1 - b):abs():max():item() > 1e-3, "dropout changes the output in training")
  local _, wt = m(x, x, x)
  T.truthy((wt:sum(-1) - 1):abs():max():item() > 1e-3, "dropped weights no longer sum to 1")
end)

T.case("MultiheadAttention bad input", function()
  T.raises(function() dl.nn.MultiheadAttention(10, 3) end,
    "MultiheadAttention: embed_dim (10) must be divisible by num_heads (3)")
  T.raises(function() dl.nn.MultiheadAttention(8, 2, {dropuot = 0.1}) end, "unknown option 'dropuot'")
  T.raises(function() dl.nn.MultiheadAttention(8, 2, {dropout = 2}) end, "dropout must be in [0, 1]")
  local m = dl.nn.MultiheadAttention(8, 2, {kdim = 6})
  local q, k, v = dl.randn(5, 2, 8), dl.randn(7, 2, 6), dl.randn(7, 2, 8)
  T.raises(function() m(dl.randn(5, 2, 4), k, v) end, "was expecting embedding dimension of 8, but got 4")
  T.raises(function() m(q, dl.randn(7, 2, 8), v) end, "key has 8 features, expected kdim = 6")
  T.raises(function() m(q, k, dl.randn(7, 2, 6)) end, "value has 6 features, expected vdim = 8")
  T.raises(function() m(q, dl.randn(7, 3, 6), dl.randn(7, 3, 8)) end, "one batch size")
  T.raises(function() m(q, k, dl.randn(6, 2, 8)) end, "key has 7 positions, value has 6")
  T.raises(function() m(q, dl.randn(0, 2, 6), dl.randn(0, 2, 8)) end, "empty key sequence")
  T.raises(function() m(dl.randn(8), k, v) end, "query should be unbatched 2D or batched 3D")
  T.raises(function() m(q, k[1], v) end, "expected key and value to be 3D")
  T.raises(function() m(q, k, v, {attn_mask = dl.ones(5, 6):bool()}) end,
    "the shape of the 2D attn_mask is [5, 6], but should be [5, 7]")
  T.raises(function() m(q, k, v, {attn_mask = dl.ones(2, 5, 7)}) end,
    "the shape of the 3D attn_mask is [2, 5, 7], but should be [4, 5, 7]")
  T.raises(function() m(q, k, v, {key_padding_mask = dl.ones(2, 6):bool()}) end,
    "expected key_padding_mask of shape [2, 7], got [2, 6]")
  T.raises(function() m(q, k, v, {key_padding_mask = dl.ones(2, 7):long()}) end,
    "only bool and floating types of key_padding_mask are supported")
  T.raises(function() m(q, k, v, {need_weight = false}) end, "unknown option 'need_weight'")
  T.shape_eq(m(q, k, v), {5, 2, 8}) -- still healthy
end)

T.done()
