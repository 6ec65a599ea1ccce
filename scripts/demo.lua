-- demo.lua - a short tour of dlua's tensors; the README's main command runs it
-- until the training program takes its place.
print(string.format("dlua %s, %d CPU threads, CUDA available: %s", dl.__version__,
  dl.get_num_threads(), tostring(dl.cuda.is_available())))

local function show(label, v) print(label); print(v); print() end

local t = dl.arange(1, 7):view(2, 3)
show("t = dl.arange(1, 7):view(2, 3)", t)
show("t:sum(2)  -- dimensions are 1-based", t:sum(2))
show("t:t():float() / 2", t:t():float() / 2)

dl.manual_seed(0)
local x = dl.randn(4, 3)
local w = dl.randn(3, 2)
show("x = dl.randn(4, 3); w = dl.randn(3, 2); x:matmul(w):relu()", x:matmul(w):relu())
local values, indices = x:max(2)
show("x:max(2) -> values", values)
show("           indices (1-based)", indices)

-- float32 matrix multiply through oneDNN
local n = 1024
local a, b = dl.randn(n, n), dl.randn(n, n)
a:matmul(b) -- warm-up
local t0 = dl.clock()
local reps = 5
for _ = 1, reps do local _ = a:matmul(b) end
local secs = (dl.clock() - t0) / reps
print(string.format("%dx%d @ %dx%d float32 matmul: %.1f ms, %.0f GFLOP/s", n, n, n, n,
  secs * 1e3, 2 * n ^ 3 / secs / 1e9))
