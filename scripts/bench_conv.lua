-- bench_conv.lua - float32 conv2d forward and backward (input + weight
-- gradients) times on ResNet-50 layer shapes, through the raw kernels in
-- dl._nn, for both ways of handing tensors to oneDNN ("plain" NCHW buffers
-- and "any": oneDNN's own blocked layouts with reorders).  Best of 7 runs
-- after a warm-up.  Unless --no-torch is given, runs scripts/bench_conv.py with
-- Debian's python3 and prints PyTorch's times beside ours.
-- Usage: dlua scripts/bench_conv.lua [--no-torch] [--threads N] [--batch N]
local dl = require "dl"

local threads, batch, with_torch = 2, 8, true
local i = 1
while arg and arg[i] do
  if arg[i] == "--no-torch" then with_torch = false
  elseif arg[i] == "--threads" and arg[i + 1] then threads = tonumber(arg[i + 1]); i = i + 1
  elseif arg[i] == "--batch" and arg[i + 1] then batch = tonumber(arg[i + 1]); i = i + 1
  else error("bench_conv: unknown argument " .. arg[i] .. " (expected --no-torch, --threads N, --batch N)") end
  i = i + 1
end
dl.set_num_threads(threads)

-- name, C, H, O, k, stride, pad (keep in step with bench_conv.py)
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

-- The best time: the machine may be shared, and the minimum is the least
-- disturbed by other load.
local function best_ms(f, runs)
  f()
  local best = math.huge
  for _ = 1, runs do
    local t0 = dl.clock()
    f()
    best = math.min(best, (dl.clock() - t0) * 1e3)
  end
  return best
end

local torch = {}
if with_torch then
  local dir = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
  local py = os.getenv("DL_TEST_PYTHON") or "/usr/bin/python3"
  local p = io.popen(string.format("%s %s/bench_conv.py %d %d", py, dir, threads, batch))
  for line in p:lines() do
    local name, f, b = line:match("^torch (%S+) (%S+) (%S+)")
    if name then torch[name] = {tonumber(f), tonumber(b)} end
  end
  p:close()
end

print(string.format("conv2d float32, batch %d, %d threads; ms (best of 7); auto = the default's pick",
  batch, threads))
print(string.format("%-14s %9s %9s %9s %9s %5s %9s %9s", "layer", "plain fwd", "plain bwd", "any fwd",
  "any bwd", "auto", "torch fwd", "torch bwd"))
local saved = dl._nn.conv2d_layout()
local total = {plain = 0, any = 0, auto = 0, torch = 0}
for _, l in ipairs(LAYERS) do
  local name, C, H, O, k, s, p = table.unpack(l)
  local x = dl.randn(batch, C, H, H)
  local w = dl.randn(O, C, k, k)
  local fo = {stride = s, padding = p}
  local bo = {stride = s, padding = p, need = {true, true, false}}
  local row = {}
  for _, layout in ipairs({"plain", "any"}) do
    dl._nn.conv2d_layout(layout)
    local y = dl._nn.conv2d_forward(x, w, nil, fo)
    local gy = dl.randn(table.unpack(y.shape))
    local f = best_ms(function() dl._nn.conv2d_forward(x, w, nil, fo) end, 7)
    local b = best_ms(function() dl._nn.conv2d_backward(gy, x, w, bo) end, 7)
    row[#row + 1], row[#row + 2] = f, b
    total[layout] = total[layout] + f + b
    collectgarbage()
  end
  local pick = k == 1 and "plain" or "any" -- conv.c's AUTO rule
  total.auto = total.auto + (pick == "plain" and row[1] + row[2] or row[3] + row[4])
  local t = torch[name] or {0 / 0, 0 / 0}
  total.torch = total.torch + t[1] + t[2]
  print(string.format("%-14s %9.2f %9.2f %9.2f %9.2f %5s %9.2f %9.2f", name, row[1], row[2], row[3],
    row[4], pick, t[1], t[2]))
end
dl._nn.conv2d_layout(saved)
print(string.format("total fwd+bwd: plain %.1f  any %.1f  auto %.1f  torch %.1f", total.plain,
  total.any, total.auto, total.torch))
