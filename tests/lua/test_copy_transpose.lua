-- test_copy_transpose.lua - copies whose source is unit-stride along another
-- dimension than the destination's innermost (m:t():contiguous(), permutes,
-- channels-last to NCHW and back, into a transposed view) run in cache-sized
-- tiles (src/core/tensor.c, copy_transposed); here
-- their results equal the element-by-element conversion copy's for every
-- element size, shapes that are no multiple of the tile, outer dimensions,
-- offsets and sizes below and above the tiled path's threshold.
local T = require "testlib"

-- values exact in every dtype used below (small integers)
local function ints(shape, dtype)
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  return (dl.arange(n) % 97):view(table.unpack(shape)):to(dtype)
end

-- a dtype-changing copy never takes the tiled path: the reference
local function same_as_reference(view, msg)
  local got = view:contiguous()
  T.truthy(got:is_contiguous(), msg .. ": contiguous")
  T.same_bits(got:double(), view:double(), msg)
  T.eq(tostring(got.dtype), tostring(view.dtype), msg .. ": dtype")
end

T.case("2-D transposes of every element size", function()
  for _, dt in ipairs({dl.uint8, dl.bool, dl.float16, dl.bfloat16, dl.int32, dl.float32, dl.int64,
                       dl.float64}) do
    for _, shape in ipairs({{300, 257}, {33, 1100}, {1000, 40}, {7, 9}}) do
      local m = dt == dl.bool and ints(shape, dl.int64):gt(40) or ints(shape, dt)
      same_as_reference(m:t(), string.format("%s %dx%d transposed", tostring(dt), shape[1], shape[2]))
    end
  end
end)

T.case("permutes with outer dimensions, slices with offsets", function()
  local x = ints({3, 5, 7, 40, 50}, dl.float32)
  same_as_reference(x:permute(1, 5, 3, 2, 4), "5-D permute")
  same_as_reference(x:permute(5, 4, 3, 2, 1), "5-D reversal")
  same_as_reference(x:transpose(4, 5), "last two swapped")
  local big = ints({130, 600}, dl.float64)
  same_as_reference(big:narrow(1, 3, 120):narrow(2, 5, 590):t(), "offset slice transposed")
  local heads = ints({8, 64, 6, 32}, dl.float32) -- (B, T, heads, d) -> (B, heads, T, d)
  same_as_reference(heads:transpose(2, 3), "attention heads")
end)

T.case("channels-last to NCHW", function()
  local x = ints({4, 24, 30, 17}, dl.float32):contiguous({memory_format = "channels_last"})
  T.truthy(T.is_channels_last(x), "input is channels-last")
  same_as_reference(x, "NHWC -> NCHW")
end)

T.case("NCHW to channels-last, and into a destination dense in another order", function()
  local CL = {memory_format = "channels_last"}
  for _, dt in ipairs({dl.uint8, dl.float16, dl.float32, dl.float64}) do
    -- 3 channels (an image: rows of 3 on the element-by-element path), 64, odd sizes
    -- (float32 RGB images of 32768 elements and more interleave in registers,
    -- eight pixels at a time: rows of 224, 103 and 1001)
    for _, shape in ipairs({{1, 3, 224, 224}, {2, 3, 101, 103}, {1, 3, 40, 1001}, {2, 3, 37, 45},
                            {1, 64, 56, 56}, {3, 17, 9, 40}}) do
      local x = ints(shape, dt)
      local got = x:contiguous(CL)
      local msg = string.format("%s %s", tostring(dt), table.concat(shape, "x"))
      T.truthy(T.is_channels_last(got), msg .. ": channels-last")
      T.same_bits(got:double(), x:double(), msg)
      -- copy_ into an existing channels-last tensor from a strided view (rows
      -- 5 elements longer than the view's)
      local wide = {shape[1], shape[2], shape[3], shape[4] + 5}
      local view = ints(wide, dt):narrow(4, 3, shape[4])
      local y = dl.zeros(shape, {dtype = dt}):contiguous(CL)
      y:copy_(view)
      T.same_bits(y:double(), view:double(), msg .. ": copy_ of a strided view")
    end
  end
  -- a transposed view as the destination: dense in the order (2, 1)
  local dst = dl.zeros(300, 257):t()
  local src = ints({257, 300}, dl.float32)
  dst:copy_(src)
  T.same_bits(dst:double(), src:double(), "into a transposed view")
  T.same_bits(dst:t():contiguous():double(), src:t():double(), "its storage holds the transpose")
end)

T.case("clone keeps a dense layout (channels-last, transposed), else comes out contiguous", function()
  local CL = {memory_format = "channels_last"}
  local x = ints({2, 5, 7, 9}, dl.float32):contiguous(CL)
  local c = x:clone()
  T.truthy(T.is_channels_last(c), "channels-last clone")
  T.same_bits(c, x, "channels-last values")
  c:fill_(0)
  T.truthy(x:abs():sum():item() > 0, "the clone has its own storage")
  local m = ints({40, 30}, dl.float64)
  local mt = m:t()
  local ct = mt:clone()
  T.eq(T.fmt(ct:stride()), T.fmt(mt:stride()), "a transposed matrix keeps its strides")
  T.same_bits(ct, mt, "transposed values")
  local nar = m:narrow(2, 3, 20) -- not dense: contiguous
  local cn = nar:clone()
  T.truthy(cn:is_contiguous(), "a slice comes out contiguous")
  T.same_bits(cn, nar, "slice values")
  local a = dl.randn(2, 3, 4, 5):contiguous(CL):requires_grad_(true)
  local g = dl.randn(2, 3, 4, 5)
  a:clone():backward(g)
  T.same_bits(a.grad, g, "the gradient passes through unchanged")
end)

T.case("gradients through a transposed copy", function()
  local a = dl.randn(200, 300, {requires_grad = true})
  local g = dl.randn(300, 200)
  local y = a:t():contiguous()
  y:backward(g)
  T.same_bits(a.grad, g:t():contiguous():double():float(), "grad is the transposed gradient")
end)

T.done()
