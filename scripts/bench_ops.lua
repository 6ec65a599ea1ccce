-- bench_ops.lua - single CPU ops side by side with PyTorch: the ops that
-- decide how fast everything around the convolutions runs (elementwise math,
-- reductions, softmax, copies, gathers, bmm, layer norm, embedding,
-- attention), each timed as the best of --runs after a warm-up, on --threads
-- threads.  Unless --no-torch is given
-- it also runs scripts/bench_ops.py (same ops, same shapes) under each of
-- --torch-python (comma-separated interpreters; default Debian's
-- /usr/bin/python3), each op timed by dlua and then by PyTorch, the list
-- gone through --rounds times (the twins stay up between ops).  The ratio
-- is the fastest PyTorch's best time over dlua's best (above 1: dlua
-- faster), then the lowest and highest ratio of one round's best times
-- (how far the figure moves from round to round; the first round left out
-- when there are three or more); the last line is the
-- geometric mean of the ratios.
-- --only a,b,c times just the named rows (the names of OPS below, as the
-- twin prints them).
-- Usage: dlua scripts/bench_ops.lua [--threads 2] [--runs 5] [--rounds 3] [--no-torch]
--          [--torch-python /usr/bin/python3,/path/to/venv/bin/python] [--only sum,sum_dim]
local dir = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
local opts = dofile(dir .. "/benchopts.lua")("bench_ops", arg,
  {threads = 2, runs = 5, rounds = 3, ["torch-python"] = "/usr/bin/python3", only = ""}, {"no-torch"})
dl.set_num_threads(opts.threads)
dl.manual_seed(0)
local F = dl.nn.functional

local n = 10000000
local x, y = dl.randn(n), dl.randn(n)
local m = dl.randn(4096, 4096)
local xg, gy = dl.randn(n):requires_grad_(), dl.randn(n)
local xa = x:abs()
local s3 = dl.randn(64, 256, 384)
local s3h = s3:bfloat16()
local mg, mgy = m:clone():requires_grad_(), dl.randn(4096)
local mh = m:bfloat16()
-- logsumexp over an inner dim (the reduced dim is not the last)
local l3, l3gy = dl.randn(64, 512, 128), dl.randn(64, 128)
local l3g = l3:clone():requires_grad_()
local mask = s3:gt(0.5)
local parts = {dl.randn(1000000), dl.randn(1000000), dl.randn(1000000), dl.randn(1000000)}
local rows = dl.randn(8192, 4096)
local idx = dl.randint(1, 8193, {1000})
local ba, bb = dl.randn(96, 256, 64), dl.randn(96, 64, 256)
-- layer norm over a transformer's activations: 32 sequences of 128 tokens, 768 features
local lx, lw, lb, lgy = dl.randn(4096, 768), dl.randn(768), dl.randn(768), dl.randn(4096, 768)
local lxg, lwg, lbg = lx:clone():requires_grad_(), lw:clone():requires_grad_(), lb:clone():requires_grad_()
-- token embeddings: 32 x 128 ids into a BERT-sized table (30522 x 768)
local eids, ew, egy = dl.randint(1, 30523, {32, 128}), dl.randn(30522, 768), dl.randn(32, 128, 768)
local ewg = ew:clone():requires_grad_()
-- attention: batch 16, 6 heads, T = 256, head dim 64, causal
local aq, ak, av = dl.randn(16, 6, 256, 64), dl.randn(16, 6, 256, 64), dl.randn(16, 6, 256, 64)
local gq, gk, gv = aq:clone():requires_grad_(), ak:clone():requires_grad_(), av:clone():requires_grad_()
local agy = dl.randn(16, 6, 256, 64)

local OPS = {
  {"add", "a + b (1e7 float32)", function() return x + y end},
  {"exp", "exp (1e7)", function() return x:exp() end},
  {"tanh", "tanh (1e7)", function() return x:tanh() end},
  {"erf", "erf (1e7)", function() return x:erf() end},
  {"sigmoid", "sigmoid (1e7)", function() return x:sigmoid() end},
  {"pow", "pow(|x|, y) (1e7)", function() return xa:pow(y) end},
  {"gelu", "gelu (1e7)", function() return F.gelu(x) end},
  {"silu", "silu (1e7)", function() return F.silu(x) end},
  {"gelu_bwd", "gelu forward+backward (1e7)", function()
    return dl.autograd.grad(F.gelu(xg), {xg}, {grad_outputs = gy})[1]
  end},
  {"gelu_tanh_bwd", "gelu tanh forward+backward (1e7)", function()
    return dl.autograd.grad(F.gelu(xg, {approximate = "tanh"}), {xg}, {grad_outputs = gy})[1]
  end},
  {"silu_bwd", "silu forward+backward (1e7)", function()
    return dl.autograd.grad(F.silu(xg), {xg}, {grad_outputs = gy})[1]
  end},
  {"sum", "sum() (1e7)", function() return x:sum() end},
  {"mean", "mean() (1e7)", function() return x:mean() end},
  {"sum_dim", "sum(2) (4096x4096)", function() return m:sum(2) end},
  {"sum_dim1", "sum(1) (4096x4096)", function() return m:sum(1) end},
  {"mean_dim", "mean(2) (4096x4096)", function() return m:mean(2) end},
  {"max_dim", "max(2) values+indices (4096x4096)", function() return m:max(2) end},
  {"argmax", "argmax(2) (4096x4096)", function() return m:argmax(2) end},
  {"amax", "amax() (1e7)", function() return x:amax() end},
  {"prod_dim", "prod(2) (4096x4096)", function() return m:prod(2) end},
  {"norm_dim", "norm(2, 2) (4096x4096)", function() return m:norm(2, 2) end},
  {"logsumexp", "logsumexp(2) (4096x4096)", function() return m:logsumexp(2) end},
  {"logsumexp_bwd", "logsumexp(2) forward+backward (4096x4096)", function()
    return dl.autograd.grad(mg:logsumexp(2), {mg}, {grad_outputs = mgy})[1]
  end},
  {"logsumexp_inner", "logsumexp(2) (64x512x128)", function() return l3:logsumexp(2) end},
  {"logsumexp_inner_bwd", "logsumexp(2) forward+backward (64x512x128)", function()
    return dl.autograd.grad(l3g:logsumexp(2), {l3g}, {grad_outputs = l3gy})[1]
  end},
  {"amax_bf16", "amax(2) bf16 (4096x4096)", function() return mh:amax(2) end},
  {"softmax", "softmax(-1) (64x256x384)", function() return F.softmax(s3, -1) end},
  {"softmax_bf16", "softmax(-1) bf16 (64x256x384)", function() return F.softmax(s3h, -1) end},
  {"log_softmax", "log_softmax(-1) (same)", function() return F.log_softmax(s3, -1) end},
  {"transpose_copy", "m:t():contiguous() (4096x4096)", function() return m:t():contiguous() end},
  {"cat", "cat of 4 x 1e6", function() return dl.cat(parts, 1) end},
  {"index_select", "index_select 1000 rows of 4096", function() return rows:index_select(1, idx) end},
  {"masked_fill", "masked_fill (64x256x384)", function() return s3:masked_fill(mask, 0) end},
  {"bmm", "bmm (96 x 256x64 @ 64x256)", function() return dl.bmm(ba, bb) end},
  {"layer_norm", "layer_norm (4096x768)", function() return F.layer_norm(lx, 768, lw, lb) end},
  {"layer_norm_fwd_bwd", "layer_norm forward+backward (same)", function()
    local y = F.layer_norm(lxg, 768, lwg, lbg)
    return dl.autograd.grad(y, {lxg, lwg, lbg}, {grad_outputs = lgy})[1]
  end},
  {"embedding", "embedding (32x128 ids, 30522x768)", function() return F.embedding(eids, ew) end},
  {"embedding_fwd_bwd", "embedding forward+backward (same)", function()
    return dl.autograd.grad(F.embedding(eids, ewg), {ewg}, {grad_outputs = egy})[1]
  end},
  {"sdpa", "scaled_dot_product_attention causal (16x6x256x64)", function()
    return F.scaled_dot_product_attention(aq, ak, av, {is_causal = true})
  end},
  {"sdpa_fwd_bwd", "the same, forward + backward", function()
    local out = F.scaled_dot_product_attention(gq, gk, gv, {is_causal = true})
    dl.autograd.grad(out, {gq, gk, gv}, {grad_outputs = agy})
    return out
  end},
}

if opts.only ~= "" then
  local keep, sel = {}, {}
  for name in opts.only:gmatch("[^,]+") do keep[name] = true end
  for _, op in ipairs(OPS) do if keep[op[1]] then sel[#sel + 1] = op end end
  OPS = sel
end

-- each round's best time (name -> {round -> ms}); the table's figures are
-- their minimum and the range of their ratios
local ours_r, theirs_r = {}, {}
local round = 0

local function min_of(t)
  local m = math.huge
  for _, v in pairs(t) do m = math.min(m, v) end
  return m
end

-- dlua's best time of op
local function time_ours(op)
  local r <close> = op[3]() -- warm-up (and the result's buffer in the cache)
  local best = math.huge
  for _ = 1, opts.runs do
    local t0 = dl.clock()
    local out <close> = op[3]()
    best = math.min(best, dl.clock() - t0)
  end
  ours_r[op[1]] = ours_r[op[1]] or {}
  ours_r[op[1]][round] = best * 1e3
end

-- One twin per interpreter, serving op names written to its named pipe.
-- Every pipe is made before any twin starts (a failure then leaves no twin
-- waiting), and opened read-write, which never blocks, only after every
-- twin has started, so no twin inherits another's pipe: closing a pipe ends
-- its twin, and a twin that fails shows as the end of its output.
local twins = {}
if not opts["no-torch"] then
  for py in opts["torch-python"]:gmatch("[^,]+") do
    local fifo = os.tmpname()
    os.remove(fifo)
    if not os.execute("mkfifo '" .. fifo .. "'") then
      for _, t in ipairs(twins) do os.remove(t.fifo) end
      error("bench_ops: mkfifo " .. fifo .. " failed")
    end
    twins[#twins + 1] = {py = py, fifo = fifo}
  end
  for _, t in ipairs(twins) do
    -- THP_MEM_ALLOC_ENABLE=1: PyTorch 2.x's huge-page allocation, as dlua's
    -- host cache advises huge pages (1.13 ignores it)
    local cmd = string.format("THP_MEM_ALLOC_ENABLE=1 %s %s/bench_ops.py --threads %d --runs %d --serve '%s' 2>&1",
      t.py, dir, opts.threads, opts.runs, t.fifo)
    t.out = assert(io.popen(cmd))
  end
  for _, t in ipairs(twins) do t.cmd = assert(io.open(t.fifo, "r+")) end
end

local function stop(t)
  if t.stopped then return "" end
  t.stopped = true
  t.cmd:close()
  local rest = t.out:read("a")
  t.out:close()
  os.remove(t.fifo)
  return rest
end

-- PyTorch's best time of op under each twin, right after dlua's.  The
-- twin answers "NAME ms" or "NAME <why not>"; other lines (warnings) are
-- passed to stderr.
local function time_theirs(op)
  local name = op[1]
  for _, t in ipairs(twins) do
    if not t.stopped then
      t.cmd:write(name, "\n")
      t.cmd:flush()
      local answer
      repeat
        local line = t.out:read("l")
        if not line then break end
        if line:sub(1, #name + 1) == name .. " " then
          answer = line:sub(#name + 2)
        else
          io.stderr:write("bench_ops: ", t.py, ": ", line, "\n")
        end
      until answer
      local ms = answer and tonumber(answer)
      if ms and ms < math.huge then
        local tr = theirs_r[name] or {}
        theirs_r[name] = tr
        tr[round] = math.min(tr[round] or math.huge, ms)
      elseif answer then
        io.stderr:write("bench_ops: " .. t.py .. " gave no figure for " .. name .. ": " .. answer .. "\n")
      else
        io.stderr:write("bench_ops: " .. t.py .. " ended at " .. name .. "\n" .. stop(t) .. "\n")
      end
    end
  end
end

-- each op timed by dlua and then by every twin, --rounds times over the
-- list, so both sides of a ratio run within a second of each other (this
-- machine's memory bandwidth changes speed on a scale of minutes); the
-- twins are stopped whatever happens
local ok, err = pcall(function()
  for r = 1, opts.rounds do
    round = r
    for _, op in ipairs(OPS) do
      time_ours(op)
      time_theirs(op)
    end
  end
end)
for _, t in ipairs(twins) do stop(t) end
if not ok then error(err, 0) end

print(string.format("bench_ops: %d threads, best of %d runs in each of %d rounds, dlua and PyTorch alternating op by op",
  opts.threads, opts.runs, opts.rounds))
print("| op (size) | dlua ms | PyTorch ms | ratio | ratio by round |")
print("|---|---|---|---|---|")
local logsum, count = 0, 0
for _, op in ipairs(OPS) do
  local a, b = min_of(ours_r[op[1]]), theirs_r[op[1]] and min_of(theirs_r[op[1]])
  if b then
    logsum, count = logsum + math.log(b / a), count + 1
    -- the lowest and highest of the rounds' own ratios, past the first
    -- round when there are three or more (PyTorch's first calls of an op
    -- can still be taking fresh pages from the system, up to 10x slower)
    local lo, hi = math.huge, 0
    for r, ms in pairs(theirs_r[op[1]]) do
      if r > 1 or opts.rounds < 3 then
        local q = ms / ours_r[op[1]][r]
        lo, hi = math.min(lo, q), math.max(hi, q)
      end
    end
    print(string.format("| `%s` | %.2f | %.2f | %.2fx | %.2f-%.2f |", op[2], a, b, b / a, lo, hi))
  else
    print(string.format("| `%s` | %.2f | - | - | - |", op[2], a))
  end
end
if count > 0 then print(string.format("geometric mean: %.2fx over %d ops", math.exp(logsum / count), count)) end
