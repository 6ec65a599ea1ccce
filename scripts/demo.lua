-- demo.lua - a short tour of dlua's tensors (the README's main command runs it
-- until the training program takes its place).
print("dlua " .. dl.__version__ .. ", " .. dl.get_num_threads() .. " threads, cuda: " ..
  tostring(dl.cuda.is_available()))
local t = dl.arange(1, 7):view(2, 3)
print("t = dl.arange(1, 7):view(2, 3)")
print(t)
print("t.shape = {" .. table.concat(t.shape, ", ") .. "}, dtype " .. tostring(t.dtype))
print("t:transpose(1, 2)")
print(t:transpose(1, 2))
