-- bench_rnn.lua - one nn.LSTM (or nn.GRU) on the CPU, float32, timed
-- forward + backward (out:sum():backward()) and forward alone under
-- dl.no_grad, as the best and the median of --runs after a warm-up.  The
-- default shape is issue 19's: 2 layers, hidden 512, input 512, sequence
-- 100, batch 64.  Unless --no-torch is given it runs scripts/bench_rnn.py
-- (the same model and shapes with torch.set_num_threads(--threads)) under
-- --torch-python, the frameworks taking turns --rounds times, and prints
-- the ratio PyTorch time / dlua time of the best runs (above 1: dlua
-- faster).  Debian's PyTorch multiplies on the reference BLAS, so its
-- iterations take most of a minute here: it runs --torch-runs times (after
-- one warm-up) per round.
-- Usage: dlua scripts/bench_rnn.lua [--mode lstm|gru] [--layers 2] [--hidden 512] [--input 512]
--          [--seq 100] [--batch 64] [--threads 2] [--runs 5] [--torch-runs 2] [--rounds 1]
--          [--bidirectional] [--no-torch] [--torch-python /usr/bin/python3]
local dir = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
local opts = dofile(dir .. "/benchopts.lua")("bench_rnn", arg,
  {mode = "lstm", layers = 2, hidden = 512, input = 512, seq = 100, batch = 64, threads = 2, runs = 5,
   ["torch-runs"] = 2, rounds = 1, ["torch-python"] = "/usr/bin/python3"}, {"no-torch", "bidirectional"})
if opts.mode ~= "lstm" and opts.mode ~= "gru" then
  io.stderr:write("bench_rnn: --mode is lstm or gru\n")
  os.exit(2)
end
dl.set_num_threads(opts.threads)
dl.manual_seed(0)

local cls = opts.mode == "lstm" and dl.nn.LSTM or dl.nn.GRU
local m = cls(opts.input, opts.hidden, {num_layers = opts.layers, bidirectional = opts.bidirectional})
local x = dl.randn(opts.seq, opts.batch, opts.input):requires_grad_()

local timed_runs = dofile(dir .. "/benchtimed.lua")
local function timed(f) return timed_runs(f, opts.runs) end

local function train_step()
  m:zero_grad()
  x.grad = nil
  local out = m(x)
  out:sum():backward()
end

local function forward()
  dl.no_grad(function() return m(x) end)
end

local best = {}
local function keep(who, what, b, med)
  local k = who .. " " .. what
  if not best[k] or b < best[k][1] then best[k] = {b, med} end
end

local function run_torch()
  -- THP_MEM_ALLOC_ENABLE=1: PyTorch's huge-page allocation (dlua's host cache advises huge pages)
  local cmd = string.format("THP_MEM_ALLOC_ENABLE=1 %s %q %s %d %d %d %d %d %d %d %s 2>&1", opts["torch-python"],
    dir .. "/bench_rnn.py", opts.mode, opts.layers, opts.hidden, opts.input, opts.seq, opts.batch,
    opts.threads, opts["torch-runs"], opts.bidirectional and "1" or "0")
  local p = assert(io.popen(cmd))
  local out = p:read("a")
  p:close()
  local tb, tm, fb, fm = out:match("torch %a+ ([%d.]+) ([%d.]+) ([%d.]+) ([%d.]+)")
  if not tb then
    io.stderr:write("bench_rnn: PyTorch gave no figures:\n" .. out .. "\n")
    return false
  end
  keep("torch", "train", tonumber(tb), tonumber(tm))
  keep("torch", "forward", tonumber(fb), tonumber(fm))
  return true
end

print(string.format("bench_rnn: %s, %d layers%s, hidden %d, input %d, seq %d, batch %d, float32, "
  .. "%d threads; best (median) of %d runs (PyTorch %d) in each of %d rounds, ms", opts.mode:upper(),
  opts.layers, opts.bidirectional and " bidirectional" or "", opts.hidden, opts.input, opts.seq,
  opts.batch, opts.threads, opts.runs, opts["torch-runs"], opts.rounds))
local with_torch = not opts["no-torch"]
for r = 1, opts.rounds do
  keep("dlua", "train", timed(train_step))
  keep("dlua", "forward", timed(forward))
  print(string.format("  round %d: dlua forward+backward %.1f ms, forward %.1f ms", r,
    best["dlua train"][1], best["dlua forward"][1]))
  io.stdout:flush()
  if with_torch then with_torch = run_torch() end
end
for _, what in ipairs {"train", "forward"} do
  local label = what == "train" and "forward+backward" or "forward (no_grad)"
  local d, t = best["dlua " .. what], best["torch " .. what]
  local line = string.format("  %-18s dlua %8.1f (%8.1f)", label, d[1], d[2])
  if t then
    line = line .. string.format("   torch %8.1f (%8.1f)   torch/dlua %.2fx", t[1], t[2], t[1] / d[1])
  end
  print(line)
end
