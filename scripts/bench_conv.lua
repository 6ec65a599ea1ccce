-- bench_conv.lua - float32 conv2d forward and backward (input + weight
-- gradients) times on ResNet-50 layer shapes, through the raw kernels in
-- dl._nn, for both ways of handing tensors to oneDNN ("plain": our NCHW
-- buffers; "any": oneDNN's own blocked layouts, with reorders), and which of
-- the two the default ("auto") picks.  Each time is the best of 7 calls after
-- a warm-up, and with --runs N the best over N repetitions of the whole
-- table: on a shared machine the minimum is the figure least disturbed by
-- other load.  Unless --no-torch is given, each repetition also runs
-- scripts/bench_conv.py with Debian's python3 (torch.nn.functional.conv2d,
-- which Debian's torch 1.13 sends to oneDNN) and prints its times beside ours.
-- Usage: dlua scripts/bench_conv.lua [--no-torch] [--threads N] [--batch N] [--runs N]
local dl = require "dl"

local threads, batch, runs, with_torch = 2, 8, 1, true
local i = 1
while arg and arg[i] do
  if arg[i] == "--no-torch" then with_torch = false
  elseif arg[i] == "--threads" and arg[i + 1] then threads = tonumber(arg[i + 1]); i = i + 1
  elseif arg[i] == "--batch" and arg[i + 1] then batch = tonumber(arg[i + 1]); i = i + 1
  elseif arg[i] == "--runs" and arg[i + 1] then runs = tonumber(arg[i + 1]); i = i + 1
  else
    error("bench_conv: unknown argument " .. arg[i] ..
      " (expected --no-torch, --threads N, --batch N, --runs N)")
  end
  i = i + 1
end
dl.set_num_threads(threads)

-- name, C, H, O, k, stride, pad (passed on to bench_conv.py)
local LAYERS = {
  {"stem7x7s2", 3, 224, 64, 7, 2, 3},
  {"l1_1x1_64", 64, 56, 64, 1, 1, 0},
  {"l1_3x3_64", 64, 56, 64, 3, 1, 1},
  {"l1_1x1_256", 64, 56, 256, 1, 1, 0},
  {"l2_3x3s2_128", 128, 56, 128, 3, 2, 1},
  {"l2_1x1_512", 512, 28, 128, 1, 1, 0},
  {"l2_down1x1s2", 256, 56, 512, 1, 2, 0},
  {"l3_down1x1s2", 512, 28, 1024, 1, 2, 0},
  {"l3_3x3_256", 256, 14, 256, 3, 1, 1},
  {"l3_1x1_1024", 1024, 14, 256, 1, 1, 0},
  {"l3_1x1_256", 256, 14, 1024, 1, 1, 0},
  {"l4_3x3_512", 512, 7, 512, 3, 1, 1},
  {"l4_1x1_2048", 512, 7, 2048, 1, 1, 0},
}

local function best_ms(f, n)
  f()
  local best = math.huge
  for _ = 1, n do
    local t0 = dl.clock()
    f()
    best = math.min(best, (dl.clock() - t0) * 1e3)
  end
  return best
end

-- best[name] = {plain fwd, plain bwd, any fwd, any bwd, torch fwd, torch bwd}
local best = {}
for _, l in ipairs(LAYERS) do best[l[1]] = {math.huge, math.huge, math.huge, math.huge, 0 / 0, 0 / 0} end
local function keep(name, k, v)
  local b = best[name]
  if b[k] ~= b[k] or v < b[k] then b[k] = v end
end

local dir = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
local py = os.getenv("DL_TEST_PYTHON") or "/usr/bin/python3"
local saved = dl._nn.conv2d_layout()
for _ = 1, runs do
  if with_torch then
    local specs = {}
    for j, l in ipairs(LAYERS) do specs[j] = table.concat(l, ",") end
    local p = io.popen(string.format("%s %s/bench_conv.py %d %d %s", py, dir, threads, batch, table.concat(specs, " ")))
    for line in p:lines() do
      local name, f, b = line:match("^torch (%S+) (%S+) (%S+)")
      if name and best[name] then
        keep(name, 5, tonumber(f))
        keep(name, 6, tonumber(b))
      end
    end
    p:close()
  end
  for _, l in ipairs(LAYERS) do
    local name, C, H, O, k, s, p = table.unpack(l)
    local x = dl.randn(batch, C, H, H)
    local w = dl.randn(O, C, k, k)
    local fo = {stride = s, padding = p}
    local bo = {stride = s, padding = p, need = {true, true, false}}
    for j, layout in ipairs({"plain", "any"}) do
      dl._nn.conv2d_layout(layout)
      local y = dl._nn.conv2d_forward(x, w, nil, fo)
      local gy = dl.randn(table.unpack(y.shape))
      keep(name, 2 * j - 1, best_ms(function() dl._nn.conv2d_forward(x, w, nil, fo) end, 7))
      keep(name, 2 * j, best_ms(function() dl._nn.conv2d_backward(gy, x, w, bo) end, 7))
      collectgarbage()
    end
  end
end
dl._nn.conv2d_layout(saved)

print(string.format("conv2d float32, batch %d, %d threads; ms, best of 7 calls x %d runs", batch,
  threads, runs))
print(string.format("%-14s %9s %9s %9s %9s %5s %9s %9s", "layer", "plain fwd", "plain bwd",
  "any fwd", "any bwd", "auto", "torch fwd", "torch bwd"))
local total = {0, 0, 0, 0}
for _, l in ipairs(LAYERS) do
  local name, k = l[1], l[5]
  local b = best[name]
  local pick = k == 1 and "plain" or "any" -- conv.c's AUTO rule
  total[1] = total[1] + b[1] + b[2]
  total[2] = total[2] + b[3] + b[4]
  total[3] = total[3] + (pick == "plain" and b[1] + b[2] or b[3] + b[4])
  total[4] = total[4] + b[5] + b[6]
  print(string.format("%-14s %9.2f %9.2f %9.2f %9.2f %5s %9.2f %9.2f", name, b[1], b[2], b[3], b[4],
    pick, b[5], b[6]))
end
print(string.format("total fwd+bwd: plain %.1f  any %.1f  auto %.1f  torch %.1f", table.unpack(total)))
