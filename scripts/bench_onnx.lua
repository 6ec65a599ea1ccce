-- bench_onnx.lua - inference of a torchvision model imported from ONNX:
-- dlua (dl.onnx.load) next to ONNX Runtime on the same CPU threads, same
-- file, same input; the ratio is ONNX Runtime's time over dlua's (> 1: dlua
-- is faster).
--
--   dlua scripts/bench_onnx.lua [--arch resnet50] [--batch 1] [--size 224]
--        [--threads 2] [--runs 10] [--rounds 3] [--model FILE.onnx] [--ort-python PATH]
--
-- The model is exported by torch.onnx.export (Debian's /usr/bin/python3 with
-- torch and torchvision, random weights, opset 13) unless --model names a
-- file.  ONNX Runtime is PyPI's onnxruntime in the venv under the build
-- directory that test_onnx_export.lua makes (build/onnxruntime-venv), or
-- --ort-python.  Each round runs dlua then ONNX Runtime, each 2 warm-ups then
-- --runs timed runs; every round's best, median and ratio of medians are
-- printed, then the median and range of the rounds' ratios.  Figures taken
-- on a shared machine are provisional.
local parse = dofile((arg[0]:match("^(.*)/[^/]*$") or ".") .. "/benchopts.lua")
local opts = parse("bench_onnx", arg, {arch = "resnet50", batch = 1, size = 224, threads = 2, runs = 10, rounds = 3,
  model = "", ["ort-python"] = ""}, {})
local here = arg[0]:match("^(.*)/[^/]*$") or "."
local helper = here .. "/../tests/lua/onnx_helper.py"
local tmp = os.getenv("TMPDIR") or "/tmp"
local work = string.format("%s/bench_onnx_%s", tmp, opts.arch)
os.execute("mkdir -p '" .. work .. "'")

local function sh(cmd)
  local p = assert(io.popen(cmd .. " 2>&1"))
  local out = p:read("a")
  local ok = p:close()
  return ok, out
end

local path = opts.model
if path == "" then
  path = work .. "/model.onnx"
  local f = io.open(path)
  if f then
    f:close()
  else
    local code = string.format([[
import torch, torchvision
torch.manual_seed(0)
m = getattr(torchvision.models, %q)().eval()
torch.onnx.export(m, torch.randn(1, 3, %d, %d), %q, input_names=["input"], output_names=["logits"],
                  dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}}, opset_version=13)
]], opts.arch, opts.size, opts.size, path)
    local ok, out = sh("/usr/bin/python3 -c '" .. code:gsub("'", "'\\''") .. "'")
    if not ok then
      io.stderr:write("bench_onnx: torch.onnx.export failed:\n", out, "\n")
      os.exit(2)
    end
  end
end

dl.set_num_threads(opts.threads)
dl.manual_seed(1)
local x = dl.randn(opts.batch, 3, opts.size, opts.size)
local input = work .. "/input.pb"
dl.onnx.save_tensor(input, x)

local m = dl.onnx.load(path)
m:eval()
local function time_dlua()
  local times = {}
  dl.no_grad(function()
    for _ = 1, 2 do m(x) end
    for i = 1, opts.runs do
      local t0 = dl.clock()
      local y = m(x)
      y:sum():item()
      times[i] = dl.clock() - t0
    end
  end)
  table.sort(times)
  return times[1], times[(#times + 1) // 2]
end
local ort_py = opts["ort-python"]
if ort_py == "" then
  local build = os.getenv("DL_BUILD_DIR") or (here .. "/../build")
  ort_py = build .. "/onnxruntime-venv/bin/python"
end
-- ONNX Runtime's best and median over opts.runs (after its warm-ups), or nil
local function time_ort()
  local ok, out = sh(string.format("OMP_NUM_THREADS=%d '%s' '%s' ortbench '%s' '%s' %d", opts.threads, ort_py,
    helper, path, input, opts.runs))
  if not ok then
    io.stderr:write("bench_onnx: ONNX Runtime did not run (", ort_py, "; make the venv by running ",
      "tests/lua/test_onnx_export.lua, or pass --ort-python):\n", out:sub(-400), "\n")
    return nil
  end
  local b, md = out:match("best ([%d.]+) median ([%d.]+)")
  return tonumber(b), tonumber(md)
end

-- rounds alternate the two (this machine's speed drifts on a scale of
-- minutes); each round's ratio compares runs taken seconds apart
print(string.format("%s, batch %d, %dx%d, %d threads, %d rounds of %d runs each (provisional on a shared machine)",
  opts.arch, opts.batch, opts.size, opts.size, opts.threads, opts.rounds, opts.runs))
print(string.format("%-6s %14s %14s %14s %14s %10s", "round", "dlua best ms", "dlua median", "ORT best ms",
  "ORT median", "ratio"))
local ratios = {}
for r = 1, opts.rounds do
  local best, median = time_dlua()
  local obest, omedian = time_ort()
  if not obest then
    print(string.format("%-6d %14.1f %14.1f", r, best * 1e3, median * 1e3))
  else
    ratios[#ratios + 1] = omedian / median
    print(string.format("%-6d %14.1f %14.1f %14.1f %14.1f %9.2fx", r, best * 1e3, median * 1e3, obest * 1e3,
      omedian * 1e3, omedian / median))
  end
end
if #ratios > 0 then
  table.sort(ratios)
  print(string.format("dlua / onnxruntime speed (ratio of medians): %.2fx median of %d rounds, range %.2f-%.2fx",
    ratios[(#ratios + 1) // 2], #ratios, ratios[1], ratios[#ratios]))
end
