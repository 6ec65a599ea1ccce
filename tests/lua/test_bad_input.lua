-- test_bad_input.lua - the foundation's bad-input catalogue: wrong calls from
-- Lua each raise a Lua error with a message naming the op and the facts, and
-- the process stays healthy (the last case computes normally afterwards).
local T = require "testlib"

local a23 = dl.ones(2, 3)
local cases = {
  -- shapes
  {"add shape mismatch", function() return dl.add(dl.ones(2, 3), dl.ones(4)) end, "[2, 3] and [4]"},
  {"view bad size", function() return a23:view(4, 2) end, "invalid for input of size 6"},
  {"view two -1", function() return a23:view(-1, -1) end, "only one dimension can be -1"},
  {"expand incompatible", function() return dl.ones(3):expand(2, 4) end, "expand"},
  {"cat mismatched", function() return dl.cat({dl.ones(2, 3), dl.ones(2, 4)}, 1) end, "cat"},
  {"cat empty list", function() return dl.cat({}) end, "cat"},
  {"in-place broadcast to smaller", function() return dl.ones(3):add_(dl.ones(2, 3)) end, "add_"},
  -- dimensions
  {"transpose dim out of range", function() return a23:transpose(1, 3) end, "out of range"},
  {"dimension 0", function() return a23:size(0) end, "1-based"},
  {"squeeze dim out of range", function() return a23:squeeze(5) end, "out of range"},
  {"index_select dim", function() return a23:index_select(3, dl.tensor({1})) end, "out of range"},
  {"narrow past the end", function() return a23:narrow(2, 3, 2) end, "narrow"},
  -- indices
  {"select index too big", function() return a23[3] end, "out of range"},
  {"index 0", function() return a23[0] end, "1-based"},
  {"gather index out of range", function() return a23:gather(2, dl.tensor({{4}, {1}})) end, "out of range"},
  {"index_select index 0", function() return a23:index_select(1, dl.tensor({0})) end, "out of range"},
  {"float index tensor", function() return a23:index_select(1, dl.tensor({1.0})) end, "index_select"},
  {"topk k too large", function() return dl.ones(3):topk(4) end, "topk"},
  -- types
  {"tensor of strings", function() return dl.tensor({"a"}) end, "string"},
  {"add a string", function() return a23:add("x") end, "tensor or number expected"},
  {"bad dtype name", function() return dl.zeros(2, {dtype = "float33"}) end, "unknown dtype 'float33'"},
  {"bad device", function() return dl.zeros(2, {device = "tpu"}) end, "invalid device 'tpu'"},
  {"item on many", function() return a23:item() end, "one-element"},
  {"integer pow negative", function() return dl.tensor({2}):pow(-1) end, "pow"},
  {"in-place result type", function() return dl.tensor({1, 2}):add_(0.5) end, "can't be cast"},
  {"requires_grad on ints", function() return dl.zeros(2, {dtype = dl.int64, requires_grad = true}) end, "floating"},
  -- tables and options
  {"ragged table", function() return dl.tensor({{1, 2}, {3}}) end, "ragged"},
  {"ragged deeper", function() return dl.tensor({{{1}, {2}}, {{3}, 4}}) end, "ragged"},
  {"unknown option", function() return dl.zeros(2, {dtyp = dl.float32}) end, "unknown option 'dtyp'"},
  {"options not a table", function() return dl.ones(2, 3):add(1, 5) end, "options"},
  {"negative size", function() return dl.zeros(-1) end, "negative size"},
  {"too many dims", function() return dl.zeros(1, 1, 1, 1, 1, 1, 1, 1, 1) end, "at most 8"},
  {"arange zero step", function() return dl.arange(0, 5, 0) end, "step"},
  {"randint low >= high", function() return dl.randint(5, 5, {3}) end, "randint"},
  {"method on a non-tensor", function() return dl.ones(2).add(5, 1) end, "expected a tensor"},
}

for _, c in ipairs(cases) do
  T.case(c[1], function()
    local err = T.raises(c[2], c[3], c[1])
    T.truthy(not err:find("PANIC"), "no panic")
  end)
end

T.case("catalogue is big enough", function() T.truthy(#cases >= 25, #cases .. " cases") end)

T.case("the state is healthy afterwards", function()
  T.tensor_eq(dl.arange(1, 7):view(2, 3):sum(2), {6, 15})
end)

T.done()
