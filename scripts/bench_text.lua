-- bench_text.lua - the text models on the CPU against PyTorch, ratios in one
-- run (issue 19):
--   GPT training step: dl.models.GPT (--layers 6, --width 384, --heads 6,
--     context --context 256, batch --batch 16, vocabulary --vocab 128):
--     forward, loss, backward, gradient clipping, AdamW; tokens/s;
--   generation at batch 1 with the KV cache (model:generate, top-k 40,
--     --gen-tokens tokens from a one-token prompt); tokens/s;
--   LSTM (2 layers, hidden 512, sequence 100, batch 64) forward+backward:
--     scripts/bench_rnn.lua, run by this script with the same threads and
--     --torch-python (--no-lstm leaves it out).
-- Unless --no-torch is given the twin scripts/bench_text.py (the same GPT
-- from scripts/gpt_torch.py, a cache written the same way) runs under
-- --torch-python, the frameworks taking turns --rounds times; each side's
-- best time counts and the ratio is dlua's tokens/s over PyTorch's (above 1:
-- dlua faster).  Debian's PyTorch 1.13 multiplies on the reference BLAS (a
-- training step takes a minute); a PyPI build in a venv is the fair
-- opponent: --torch-python /path/to/venv/bin/python.
-- Usage: dlua scripts/bench_text.lua [--threads 2] [--runs 3] [--rounds 2] [--gen-tokens 128]
--          [--layers 6 --width 384 --heads 6 --context 256 --batch 16 --vocab 128]
--          [--torch-python /usr/bin/python3] [--no-torch] [--no-lstm]
local dir = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
local opts = dofile(dir .. "/benchopts.lua")("bench_text", arg,
  {threads = 2, runs = 3, rounds = 2, ["gen-tokens"] = 128, layers = 6, width = 384, heads = 6, context = 256,
   batch = 16, vocab = 128, ["torch-python"] = "/usr/bin/python3"}, {"no-torch", "no-lstm"})
dl.set_num_threads(opts.threads)
dl.manual_seed(0)

local B, T = opts.batch, opts.context
local ngen = math.min(opts["gen-tokens"], T - 1)
local model = dl.models.GPT{vocab_size = opts.vocab, block_size = T, n_layer = opts.layers, n_head = opts.heads,
  n_embd = opts.width, dropout = 0.0}
local optimizer = model:configure_optimizers{weight_decay = 0.1, lr = 6e-4, betas = {0.9, 0.95}}
local params = model:parameters()
local x = dl.randint(1, opts.vocab + 1, {B, T})
local y = dl.randint(1, opts.vocab + 1, {B, T})
local prompt = dl.ones({1, 1}, {dtype = dl.int64})

local timed_runs = dofile(dir .. "/benchtimed.lua")
local function timed(f) return timed_runs(f, opts.runs) end

local function train_step()
  local _, loss = model(x, y)
  optimizer:zero_grad()
  loss:backward()
  dl.nn.utils.clip_grad_norm_(params, 1.0)
  optimizer:step()
end

local function generate()
  model:generate(prompt, ngen, {top_k = 40})
end

local best = {}
local function keep(k, b, med)
  if not best[k] or b < best[k][1] then best[k] = {b, med} end
end

local function run_torch()
  -- THP_MEM_ALLOC_ENABLE=1: PyTorch's huge-page allocation (dlua's host cache advises huge pages)
  local cmd = string.format("THP_MEM_ALLOC_ENABLE=1 %s %q --layers %d --width %d --heads %d --context %d --batch %d --vocab %d "
    .. "--gen-tokens %d --threads %d --runs %d 2>&1", opts["torch-python"], dir .. "/bench_text.py", opts.layers,
    opts.width, opts.heads, T, B, opts.vocab, ngen, opts.threads, opts.runs)
  local p = assert(io.popen(cmd))
  local out = p:read("a")
  p:close()
  local tb, tm = out:match("train ([%d.]+) ([%d.]+)")
  local gb, gm = out:match("generate ([%d.]+) ([%d.]+)")
  if not (tb and gb) then
    io.stderr:write("bench_text: PyTorch gave no figures:\n" .. out .. "\n")
    return false
  end
  keep("torch train", tonumber(tb), tonumber(tm))
  keep("torch generate", tonumber(gb), tonumber(gm))
  return true
end

print(string.format("bench_text: GPT %d layers, width %d, %d heads, context %d, batch %d, vocab %d (%d parameters), "
  .. "float32, %d threads; best (median) of %d runs in each of %d rounds", opts.layers, opts.width, opts.heads, T, B,
  opts.vocab, model:get_num_params(), opts.threads, opts.runs, opts.rounds))
io.stdout:flush()
local with_torch = not opts["no-torch"]
for r = 1, opts.rounds do
  keep("dlua train", timed(train_step))
  keep("dlua generate", timed(generate))
  print(string.format("  round %d: dlua train step %.1f ms, generate %d tokens %.1f ms", r, best["dlua train"][1],
    ngen, best["dlua generate"][1]))
  io.stdout:flush()
  if with_torch then with_torch = run_torch() end
end

local rows = {
  {"train", "GPT training step", B * T, 1.2},
  {"generate", "generation, batch 1, KV cache", ngen, 1.5},
}
print("| benchmark | dlua tokens/s | PyTorch tokens/s | ratio | target |")
print("|---|---|---|---|---|")
for _, row in ipairs(rows) do
  local d, t = best["dlua " .. row[1]], best["torch " .. row[1]]
  local dt = row[3] / (d[1] / 1e3)
  if t then
    local tt = row[3] / (t[1] / 1e3)
    print(string.format("| %s | %.0f | %.0f | %.2fx | %.1fx |", row[2], dt, tt, dt / tt, row[4]))
  else
    print(string.format("| %s | %.0f | - | - | %.1fx |", row[2], dt, row[4]))
  end
end
io.stdout:flush()

if not opts["no-lstm"] then
  -- the LSTM row is bench_rnn.lua's (issue 19's shape is its default)
  local exe = arg[-1] or "dlua"
  local cmd = string.format("%q %q --threads %d --runs %d --rounds %d --torch-python %q %s 2>&1", exe,
    dir .. "/bench_rnn.lua", opts.threads, opts.runs, opts.rounds, opts["torch-python"],
    opts["no-torch"] and "--no-torch" or "")
  local p = assert(io.popen(cmd))
  local out = p:read("a")
  p:close()
  io.write(out)
  local ratio = out:match("forward%+backward.-torch/dlua ([%d.]+)x")
  print(string.format("LSTM (2 layers, hidden 512, seq 100, batch 64) forward+backward: ratio %s (target 1.0x)",
    ratio and (ratio .. "x") or "-"))
end
