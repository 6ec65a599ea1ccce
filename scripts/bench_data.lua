-- bench_data.lua - images per second of the training input pipeline:
-- ImageFolder of photo-sized JPEGs -> RandomResizedCrop(224),
-- RandomHorizontalFlip, ToTensor, Normalize -> DataLoader(batch_size 32,
-- shuffle) at 0, 1 and 2 workers.  Generates the JPEGs first (500x375 and
-- similar sizes, quality 90, smooth shapes plus noise), then - unless
-- --no-torch is given - runs scripts/bench_data.py (torchvision + Pillow, the
-- same folder and settings) with Debian's python3 and prints the ratio.
-- Each figure is the best of --repeat full epochs after one warm-up epoch;
-- the "0 (cpu)" row divides by process CPU time instead of wall time, which
-- other load on a shared machine does not disturb.
-- Usage: dlua scripts/bench_data.lua [--images N] [--workers 0,1,2] [--repeat R]
--                                    [--dir PATH] [--no-torch]
local dl = require "dl"
local TF = dl.transforms

local nimages, workers, repeats, with_torch = 256, {0, 1, 2}, 3, true
local dir = (os.getenv("TMPDIR") or "/tmp") .. "/dlua_bench_data"
local i = 1
while arg and arg[i] do
  local a = arg[i]
  if a == "--no-torch" then with_torch = false
  elseif a == "--images" then nimages = tonumber(arg[i + 1]); i = i + 1
  elseif a == "--repeat" then repeats = tonumber(arg[i + 1]); i = i + 1
  elseif a == "--dir" then dir = arg[i + 1]; i = i + 1
  elseif a == "--workers" then
    workers = {}
    for w in arg[i + 1]:gmatch("%d+") do workers[#workers + 1] = tonumber(w) end
    i = i + 1
  else
    error("bench_data: unknown argument " .. a .. " (expected --images N, --workers 0,1,2, --repeat R, --dir PATH, --no-torch)")
  end
  i = i + 1
end

-- --- the images ------------------------------------------------------------------------

local SIZES = {{375, 500}, {500, 375}, {333, 500}, {480, 640}, {360, 480}, {400, 600}}

local function photo(h, w, k)
  -- low-frequency colour fields, a few soft edges and sensor-like noise
  local y = dl.linspace(0, 1, h):reshape(1, h, 1)
  local x = dl.linspace(0, 1, w):reshape(1, 1, w)
  local c = dl.tensor({{{0}}, {{2.1}}, {{4.2}}})
  local base = (x * (3 + k % 5) + y * (2 + k % 3) + c):sin() * 80 + 128
  local edge = ((x - 0.3 - (k % 7) * 0.05) * 40):tanh() * 30 + ((y - 0.6) * 25):tanh() * 20
  local noise = dl.randn(3, h, w) * 12
  return (base + edge + noise):clamp(0, 255):to(dl.uint8)
end

local exists = require("dl.util").file_exists

local function prepare()
  local stamp = dir .. "/.complete_" .. nimages
  if exists(stamp) then return end
  os.execute("rm -rf '" .. dir .. "' && mkdir -p '" .. dir .. "/a' '" .. dir .. "/b'")
  dl.manual_seed(0)
  io.write(string.format("bench_data: writing %d JPEGs to %s ... ", nimages, dir))
  io.flush()
  for k = 1, nimages do
    local s = SIZES[(k - 1) % #SIZES + 1]
    dl.image.save(photo(s[1], s[2], k), string.format("%s/%s/%04d.jpg", dir, k % 2 == 0 and "a" or "b", k),
      {quality = 90})
  end
  io.open(stamp, "w"):close()
  print("done")
end

-- --- timing ---------------------------------------------------------------------------------

local function bench(nw)
  local tf = TF.Compose{TF.RandomResizedCrop(224), TF.RandomHorizontalFlip(), TF.ToTensor(),
    TF.Normalize({0.485, 0.456, 0.406}, {0.229, 0.224, 0.225})}
  local ds = dl.data.ImageFolder{root = dir, transform = tf}
  local loader = dl.data.DataLoader(ds, {batch_size = 32, shuffle = true, num_workers = nw, seed = 1})
  local best, best_cpu = math.huge, math.huge
  for r = 0, repeats do
    local t0, c0, n = dl.clock(), os.clock(), 0
    for _, x in loader:iter() do n = n + x.shape[1] end
    local dt, dc = dl.clock() - t0, os.clock() - c0
    if r > 0 and dt < best then best = dt end -- r == 0 warms the page cache and threads
    if r > 0 and dc < best_cpu then best_cpu = dc end
    assert(n == #ds)
  end
  loader:close()
  return #ds / best, #ds / best_cpu
end

prepare()
local ours, ours_cpu = {}, nil
for _, w in ipairs(workers) do
  local wall, cpu = bench(w)
  ours[w] = wall
  if w == 0 then ours_cpu = cpu end
end

local theirs, theirs_cpu = {}, nil
if with_torch then
  local script = (debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "scripts") .. "/bench_data.py"
  local wl = {}
  for k, w in ipairs(workers) do wl[k] = tostring(w) end
  local cmd = string.format("/usr/bin/python3 '%s' --dir '%s' --workers %s --repeat %d 2>&1", script, dir,
    table.concat(wl, ","), repeats)
  local p = io.popen(cmd)
  local out = p:read("a")
  if not p:close() then
    io.stderr:write("bench_data: the torchvision twin failed:\n", out, "\n")
  end
  for w, v in out:gmatch("workers=(%d+) images_per_s=([%d.]+)") do theirs[tonumber(w)] = tonumber(v) end
  theirs_cpu = tonumber(out:match("workers=0 images_per_s=[%d.]+ images_per_cpu_s=([%d.]+)"))
end

print(string.format("%d JPEGs (500x375 and similar), RandomResizedCrop(224) + flip + ToTensor + Normalize, batch 32",
  nimages))
print(string.format("%-8s %14s %18s %8s", "workers", "dlua img/s", "torchvision img/s", "ratio"))
for _, w in ipairs(workers) do
  local t = theirs[w]
  print(string.format("%-8d %14.1f %18s %8s", w, ours[w], t and string.format("%.1f", t) or "-",
    t and string.format("%.2fx", ours[w] / t) or "-"))
end
if ours_cpu then
  -- images per CPU-second with no workers: independent of other load on the machine
  print(string.format("%-8s %14.1f %18s %8s", "0 (cpu)", ours_cpu, theirs_cpu and string.format("%.1f", theirs_cpu) or "-",
    theirs_cpu and string.format("%.2fx", ours_cpu / theirs_cpu) or "-"))
end
