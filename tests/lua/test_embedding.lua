-- test_embedding.lua - the embedding family on known small values: lookups
-- of 1-based ids of any shape, padding_idx (its row gets no gradient),
-- scale_grad_by_freq, max_norm's renormalisation, bags in every mode (empty
-- bags, padding entries, per_sample_weights, include_last_offset, 2-D
-- input), the kernel entry points dl._nn.embedding_forward/backward/
-- renorm_, the modules (initialisation, from_pretrained and freeze,
-- printing, state_dict), results independent of the thread count, and bad
-- input: ids out of range, offsets not increasing or out of range, shape and
-- dtype mismatches -- each a clear error naming the argument, the process
-- healthy after it.  (test_embedding_torch.lua compares with PyTorch,
-- test_embedding_grad.lua checks gradients by finite differences.)
local T = require "testlib"
local F, nn = dl.nn.functional, dl._nn

local F64 = dl.float64

-- rows 1..4 of a (4, 2) weight: row r is {10 r, 10 r + 1}
local function weight(dt)
  return dl.tensor({{10, 11}, {20, 21}, {30, 31}, {40, 41}}, {dtype = dt or dl.float32})
end

T.case("embedding: lookups and gradients on known values", function()
  for _, dt in ipairs({dl.float32, F64}) do
    local w = weight(dt):requires_grad_()
    local ids = dl.tensor({{4, 1, 4}, {2, 2, 2}})
    local y = F.embedding(ids, w, {padding_idx = 2})
    T.shape_eq(y, {2, 3, 2})
    T.tensor_eq(y[1], {{40, 41}, {10, 11}, {40, 41}})
    T.tensor_eq(y[2][1], {20, 21}, 0, "the padding row is looked up as it is")
    y:backward(dl.ones(2, 3, 2, {dtype = dt}))
    T.tensor_eq(w.grad, {{1, 1}, {0, 0}, {0, 0}, {2, 2}}, 0, "padding row: no gradient")
    -- scale_grad_by_freq divides each row by its id's count
    w.grad = nil
    F.embedding(ids, w, {scale_grad_by_freq = true}):sum():backward()
    T.tensor_eq(w.grad, {{1, 1}, {1, 1}, {0, 0}, {1, 1}})
    -- kernel entry points
    T.tensor_eq(nn.embedding_forward(w, dl.tensor({3})), {{30, 31}})
    local gw = nn.embedding_backward(dl.ones(2, 3, 2, {dtype = dt}), ids, 4, {padding_idx = -3})
    T.tensor_eq(gw, {{1, 1}, {0, 0}, {0, 0}, {2, 2}}, 0, "padding_idx -3 is row 2")
  end
  -- any dtype is looked up; int32 ids work; a 0-dim id gives a row
  local iw = dl.tensor({{1, 2}, {3, 4}})
  T.tensor_eq(F.embedding(dl.tensor({2, 1}, {dtype = dl.int32}), iw), {{3, 4}, {1, 2}})
  T.tensor_eq(F.embedding(dl.tensor(2), weight()), {20, 21})
  T.tensor_eq(F.embedding(dl.tensor({2}), weight():to(dl.bfloat16)), {{20, 21}})
  T.shape_eq(F.embedding(dl.zeros(0, 3, {dtype = dl.int64}), weight()), {0, 3, 2})
end)

T.case("embedding: max_norm renormalises the rows looked up, in place", function()
  local w = dl.tensor({{3, 4}, {0.3, 0.4}, {6, 8}})
  local y = F.embedding(dl.tensor({1, 2, 1}), w, {max_norm = 1})
  local s = 1 / (5 + 1e-7)
  T.tensor_eq(w, {{3 * s, 4 * s}, {0.3, 0.4}, {6, 8}}, 1e-6, "row 1 scaled once, rows 2 and 3 kept")
  T.tensor_eq(y, {{3 * s, 4 * s}, {0.3, 0.4}, {3 * s, 4 * s}}, 1e-6)
  local v = dl.tensor({{1.0, -2.0}, {0.0, 0.0}})
  nn.embedding_renorm_(v, dl.tensor({1}), 1, math.huge)
  T.tensor_eq(v, {{0.5, -1}, {0, 0}}, 1e-6, "inf-norm")
end)

T.case("embedding_bag: every mode, padding, weights, empty bags", function()
  local w = weight():requires_grad_()
  local ids, off = dl.tensor({1, 2, 4, 3, 2}), dl.tensor({1, 3, 3})
  -- bags {1, 2}, {}, {4, 3, 2}
  T.tensor_eq(F.embedding_bag(ids, w, off, {mode = "sum"}), {{30, 32}, {0, 0}, {90, 93}})
  T.tensor_eq(F.embedding_bag(ids, w, off), {{15, 16}, {0, 0}, {30, 31}}, 1e-6, "mean by default")
  local ymax = F.embedding_bag(ids, w, off, {mode = "max"})
  T.tensor_eq(ymax, {{20, 21}, {0, 0}, {40, 41}})
  ymax:sum():backward()
  T.tensor_eq(w.grad, {{0, 0}, {1, 1}, {0, 0}, {1, 1}}, 0, "max: the winners get the gradient")
  -- padding entries take no part (mean divides by the others)
  w.grad = nil
  local y = F.embedding_bag(ids, w, off, {mode = "mean", padding_idx = 2})
  T.tensor_eq(y, {{10, 11}, {0, 0}, {35, 36}}, 1e-6)
  y:sum():backward()
  T.tensor_eq(w.grad, {{1, 1}, {0, 0}, {0.5, 0.5}, {0.5, 0.5}}, 1e-6)
  -- per_sample_weights (sum) and their gradient: dot(grad_output, row)
  local psw = dl.tensor({1, 2, 0.5, -1, 3}):requires_grad_()
  local ys = F.embedding_bag(ids, w, off, {mode = "sum", per_sample_weights = psw})
  T.tensor_eq(ys, {{50, 53}, {0, 0}, {50, 52.5}}, 1e-6)
  ys:sum():backward()
  T.tensor_eq(psw.grad, {21, 41, 81, 61, 41}, 1e-6)
  -- include_last_offset and 2-D input
  T.tensor_eq(F.embedding_bag(ids, w, dl.tensor({1, 3, 6}), {mode = "sum", include_last_offset = true}),
    {{30, 32}, {90, 93}})
  T.tensor_eq(F.embedding_bag(dl.tensor({{1, 2}, {3, 4}}), w, nil, {mode = "sum"}), {{30, 32}, {70, 72}})
  -- no ids at all: every bag empty
  T.tensor_eq(F.embedding_bag(dl.zeros(0, {dtype = dl.int64}), w, dl.tensor({1, 1})), {{0, 0}, {0, 0}})
end)

T.case("embedding, embedding_bag: results do not depend on the thread count", function()
  local w = T.randn(50, 64, {seed = 3})
  dl.manual_seed(4)
  local ids = dl.randint(1, 51, {4000})
  local gy = T.randn(4000, 64, {seed = 5})
  local off = dl.arange(1, 4001, 7)
  local gyb = T.randn(off:numel(), 64, {seed = 6})
  local function run()
    local out = {nn.embedding_backward(gy, ids, 50), nn.embedding_backward(gy, ids, 50, {scale_grad_by_freq = true})}
    for _, mode in ipairs({"sum", "mean", "max"}) do
      local wl = w:clone():requires_grad_()
      local y = F.embedding_bag(ids, wl, off, {mode = mode})
      y:backward(gyb)
      out[#out + 1] = y
      out[#out + 1] = wl.grad
    end
    return out
  end
  T.same_across_threads(run, {1, 3}, "embedding")
end)

-- --- modules ------------------------------------------------------------------------

T.case("nn.Embedding, nn.EmbeddingBag: initialisation, from_pretrained, printing", function()
  dl.manual_seed(0)
  local e = dl.nn.Embedding(100, 8, {padding_idx = -1})
  T.eq(e.padding_idx, 100, "a negative padding_idx is kept as the 1-based row")
  T.eq(tostring(e), "Embedding(100, 8, padding_idx=100)")
  T.tensor_eq(e.weight[100], {0, 0, 0, 0, 0, 0, 0, 0}, 0, "padding row zeroed")
  local m = e.weight:narrow(1, 1, 99)
  T.near(m:mean():item(), 0, 0.1, "N(0, 1) mean")
  T.near(m:std():item(), 1, 0.1, "N(0, 1) std")
  local keys = {}
  for k in pairs(e:state_dict()) do keys[#keys + 1] = k end
  T.eq(table.concat(keys, ","), "weight")
  local pre = weight()
  local fp = dl.nn.Embedding.from_pretrained(pre)
  T.truthy(not fp.weight.requires_grad, "frozen by default")
  T.eq(#fp:parameters(), 1, "a frozen weight is still a parameter")
  pre[1][1] = 99
  T.eq(fp.weight[1][1]:item(), 99, "from_pretrained shares the tensor")
  local ft = dl.nn.Embedding.from_pretrained(weight(), {freeze = false, padding_idx = 2})
  T.truthy(ft.weight.requires_grad, "freeze=false trains")
  T.tensor_eq(ft.weight[2], {20, 21}, 0, "from_pretrained keeps the padding row")
  T.tensor_eq(ft(dl.tensor({3})), {{30, 31}})
  local b = dl.nn.EmbeddingBag(10, 3, {mode = "max", max_norm = 2, norm_type = 1})
  T.eq(tostring(b), "EmbeddingBag(10, 3, max_norm=2, norm_type=1, mode=max)")
  T.shape_eq(b(dl.tensor({{1, 2}, {3, 4}})), {2, 3})
  local bp = dl.nn.EmbeddingBag.from_pretrained(weight(), {mode = "sum"})
  T.tensor_eq(bp(dl.tensor({1, 4}), dl.tensor({1})), {{50, 52}})
  T.tensor_eq(bp(dl.tensor({1, 4, 2}), dl.tensor({1, 2}), dl.tensor({2.0, 1.0, 1.0})), {{20, 22}, {60, 62}})
end)

-- --- bad input ---------------------------------------------------------------------

T.case("embedding, embedding_bag: bad input raises clear errors", function()
  local w = weight()
  local ids = dl.tensor({1, 2})
  T.raises(function() F.embedding(dl.tensor({1, 5}), w) end,
    "embedding: input has id 5 (element 2), out of range for 4 embeddings (ids are 1..4)")
  T.raises(function() F.embedding(dl.tensor({0}), w) end, "embedding: input has id 0 (element 1)")
  T.raises(function() F.embedding(dl.tensor({-1}), w) end, "embedding: input has id -1")
  T.raises(function() F.embedding(dl.tensor({1.0}), w) end,
    "embedding: input must be an int64 (or int32) tensor of 1-based ids, got float32")
  T.raises(function() F.embedding({1}, w) end, "embedding: input must be a tensor of ids")
  T.raises(function() F.embedding(ids, dl.ones(4)) end, "embedding: weight must be 2-D")
  T.raises(function() F.embedding(ids, w, {padding_idx = 5}) end, "embedding: padding_idx 5 is out of range for 4")
  T.raises(function() F.embedding(ids, w, {padding_idx = 0}) end, "embedding: padding_idx 0 is invalid")
  T.raises(function() F.embedding(ids, w, {max_norm = -1}) end, "embedding: max_norm must be a positive number")
  T.raises(function() F.embedding(ids, w, {sparse = true}) end, "embedding: sparse=true is not supported")
  T.raises(function() F.embedding(ids, w, {padding = 1}) end, "embedding: unknown option 'padding'")
  T.raises(function() nn.embedding_backward(dl.ones(3, 2), ids, 4) end,
    "embedding_backward: grad_output has shape [3, 2], expected the input's [2] and one more dim")
  T.raises(function() nn.embedding_backward(dl.ones(2, 2), dl.tensor({1, 9}), 4) end,
    "embedding_backward: input has id 9")
  -- bags
  local bag = F.embedding_bag
  T.raises(function() bag(dl.tensor({1, 2, 3}), w, dl.tensor({2, 3})) end,
    "embedding_bag: offsets[1] must be 1 (the first bag starts at the first id), got 2")
  T.raises(function() bag(dl.tensor({1, 2, 3}), w, dl.tensor({1, 3, 2})) end,
    "embedding_bag: offsets must be non-decreasing, got 2 after 3 (offsets[3])")
  T.raises(function() bag(dl.tensor({1, 2, 3}), w, dl.tensor({1, 6})) end,
    "embedding_bag: offsets[2] is 6, past the end of input (3 ids)")
  T.raises(function() bag(dl.tensor({1, 2, 3}), w, dl.tensor({1, 2}), {include_last_offset = true}) end,
    "embedding_bag: with include_last_offset, the last offset must be 4")
  T.raises(function() bag(dl.tensor({1, 2, 7}), w, dl.tensor({1})) end, "embedding_bag: input has id 7")
  T.raises(function() bag(dl.tensor({1, 2}), w) end, "embedding_bag: offsets are required when input is 1-D")
  T.raises(function() bag(dl.tensor({{1, 2}}), w, dl.tensor({1})) end,
    "embedding_bag: offsets must be nil when input is 2-D")
  T.raises(function() bag(dl.tensor({{{1}}}), w) end, "embedding_bag: input must be 1-D (with offsets) or 2-D")
  T.raises(function() bag(ids, w, dl.tensor({{1}})) end, "embedding_bag: offsets must be 1-D")
  T.raises(function() bag(ids, w, dl.tensor({1.0})) end, "embedding_bag: offsets must be an int64")
  T.raises(function() bag(ids, w, dl.tensor({1}), {per_sample_weights = dl.ones(2)}) end,
    "embedding_bag: per_sample_weights is only supported for mode 'sum'")
  T.raises(function() bag(ids, w, dl.tensor({1}), {mode = "sum", per_sample_weights = dl.ones(3)}) end,
    "embedding_bag: per_sample_weights has shape [3], expected the input's [2]")
  T.raises(function() bag(ids, w, dl.tensor({1}), {mode = "sum", per_sample_weights = dl.ones(2, {dtype = F64})}) end,
    "embedding_bag: per_sample_weights (float64) must have the weight's dtype (float32)")
  T.raises(function() bag(ids, w, dl.tensor({1}), {mode = "median"}) end,
    "embedding_bag: mode must be 'sum', 'mean' or 'max', got median")
  T.raises(function() bag(ids, w, dl.tensor({1}), {mode = "max", scale_grad_by_freq = true}) end,
    "embedding_bag: scale_grad_by_freq is not supported with mode 'max'")
  T.raises(function() bag(ids, dl.ones(4, 2, {dtype = dl.int64}), dl.tensor({1})) end,
    "embedding_bag: weight must be a floating-point tensor")
  -- modules
  T.raises(function() dl.nn.Embedding(4, 2, {padding_idx = 5}) end, "Embedding: padding_idx must be within 1..4")
  T.raises(function() dl.nn.Embedding(4, 2, {dropout = 1}) end, "Embedding: unknown option 'dropout'")
  T.raises(function() dl.nn.Embedding(4, 2, {sparse = true}) end, "Embedding: sparse=true is not supported")
  T.raises(function() dl.nn.EmbeddingBag(4, 2, {mode = "min"}) end, "EmbeddingBag: mode must be one of sum, mean, max")
  T.raises(function() dl.nn.Embedding.from_pretrained(dl.ones(3)) end,
    "Embedding.from_pretrained: embeddings must be a 2-D tensor")
  T.raises(function() dl.nn.Embedding(4, 2)(dl.tensor({5})) end, "embedding: input has id 5")
  -- the process is healthy afterwards
  T.tensor_eq(F.embedding(dl.tensor({4}), w), {{40, 41}})
end)

T.done()
