-- bench_matmul.lua - float32 matmul GFLOP/s at 1024^3 and 2048^3 with 1 and
-- 2 threads: a warm-up, then the best and the median of several runs timed
-- with dl.clock().  Unless --no-torch is given, runs scripts/bench_matmul.py
-- with Debian's python3 and prints PyTorch's figures and the ratio
-- dlua / PyTorch beside ours.
-- Usage: dlua scripts/bench_matmul.lua [--no-torch] [--threads 1,2]
local SIZES = {1024, 2048}
local RUNS = {[1024] = 10, [2048] = 5}

local threads, with_torch = {1, 2}, true
local i = 1
while arg and arg[i] do
  if arg[i] == "--no-torch" then
    with_torch = false
  elseif arg[i] == "--threads" and arg[i + 1] then
    threads = {}
    for t in arg[i + 1]:gmatch("%d+") do threads[#threads + 1] = tonumber(t) end
    i = i + 1
  else
    error("bench_matmul: unknown argument " .. arg[i] .. " (expected --no-torch, --threads 1,2)")
  end
  i = i + 1
end

local function median(xs)
  local s = {}
  for k, v in ipairs(xs) do s[k] = v end
  table.sort(s)
  local n = #s
  return n % 2 == 1 and s[(n + 1) // 2] or (s[n // 2] + s[n // 2 + 1]) / 2
end

-- Inputs: deterministic values in [0, 1) (timing does not depend on them).
local function input(n, shift)
  return ((dl.arange(n * n) * 7 + shift) % 1000):float():view(n, n) / 1000
end
local ok = pcall(input, 2, 0)
if not ok then -- elementwise ops not available: plain constants will do
  input = function(n, shift) return dl.full({n, n}, 0.25 + shift / 1000) end
end

local function bench(n, runs)
  local a, b = input(n, 1), input(n, 2)
  for _ = 1, 2 do dl.matmul(a, b) end -- warm-up
  local rates = {}
  for r = 1, runs do
    local t0 = dl.clock()
    local c <close> = dl.matmul(a, b)
    rates[r] = 2 * n ^ 3 / (dl.clock() - t0) / 1e9
  end
  return math.max(table.unpack(rates)), median(rates)
end

local function script_dir()
  local src = debug.getinfo(1, "S").source
  return src:match("^@(.*)/[^/]*$") or "."
end

-- PyTorch's figures: {[path] = {[threads] = {[n] = {best, median}}}}, or nil.
local function torch_figures()
  local py = os.getenv("DL_TEST_PYTHON") or "/usr/bin/python3"
  local cmd = string.format("%s %q %s 2>/dev/null", py, script_dir() .. "/bench_matmul.py",
    table.concat(threads, " "))
  local p = io.popen(cmd)
  if not p then return nil end
  local res, any = {}, false
  for line in p:lines() do
    local path, t, n, best, med = line:match("^torch (%w+) (%d+) (%d+) ([%d.]+) ([%d.]+)")
    if path then
      t, n = tonumber(t), tonumber(n)
      res[path] = res[path] or {}
      res[path][t] = res[path][t] or {}
      res[path][t][n] = {tonumber(best), tonumber(med)}
      any = true
    end
  end
  p:close()
  return any and res or nil
end

local cpu = "unknown CPU"
local f = io.open("/proc/cpuinfo")
if f then
  cpu = f:read("a"):match("model name%s*:%s*([^\n]+)") or cpu
  f:close()
end
print(string.format("float32 matmul, %s, dlua %s", cpu, dl.__version__))

local ours = {}
for _, t in ipairs(threads) do
  dl.set_num_threads(t)
  ours[t] = {}
  for _, n in ipairs(SIZES) do
    local best, med = bench(n, RUNS[n])
    ours[t][n] = {best, med}
    print(string.format("dlua   threads=%d  %4d^3  best %7.1f GFLOP/s  median %7.1f GFLOP/s", t, n,
      best, med))
  end
end

if with_torch then
  local tf = torch_figures()
  if not tf then
    print("(PyTorch figures unavailable: python3 with torch not found)")
  else
    local names = {mm = "torch.mm (PyTorch's default path, its linked BLAS)",
                   mkldnn = "torch mkldnn_linear (PyTorch through oneDNN)"}
    for _, path in ipairs({"mm", "mkldnn"}) do
      if tf[path] then
        print(names[path] .. ":")
        for _, t in ipairs(threads) do
          for _, n in ipairs(SIZES) do
            local r = tf[path][t] and tf[path][t][n]
            if r then
              print(string.format(
                "torch  threads=%d  %4d^3  best %7.1f GFLOP/s  median %7.1f GFLOP/s" ..
                "   dlua/torch %.2f (best) %.2f (median)",
                t, n, r[1], r[2], ours[t][n][1] / r[1], ours[t][n][2] / r[2]))
            end
          end
        end
      end
    end
  end
end
