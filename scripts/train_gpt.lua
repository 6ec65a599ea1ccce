-- train_gpt.lua - trains a small GPT (dl.models.GPT: nanoGPT's shape) on the
-- whole fortunes corpus (Debian's fortunes package, every category) and
-- samples text from its checkpoints.
--
--   dlua scripts/train_gpt.lua                                 # the default run: a few minutes on 2 cores
--   dlua scripts/train_gpt.lua --sample                        # text from checkpoints/gpt/ckpt.safetensors
--   dlua scripts/train_gpt.lua --sample --prompt "Life is" --temperature 0.8 --top-k 40
--   dlua scripts/train_gpt.lua --tokenizer bpe --vocab-size 1024
--   dlua scripts/train_gpt.lua --export-data gpt_data.safetensors --max-iters 0
--   /usr/bin/python3 scripts/train_gpt.py --data gpt_data.safetensors   # the PyTorch twin
--   dlua scripts/train_gpt.lua --help
--
-- Data: the quotes of every fortunes category, split by a seeded permutation
-- into training and validation documents (--val-fraction); the tokenizer
-- (characters by default, or byte-level BPE) is trained on the training
-- documents only, with one special token <|endoftext|> that ends every
-- document (and, for characters, <unk> for a character the training text
-- lacks).  Each part is one token stream; a training batch takes
-- --batch-size blocks of --block-size + 1 tokens at random offsets (nanoGPT's
-- get_batch).  The loss is evaluated on --eval-blocks blocks spread evenly over
-- each stream (the same blocks every time, in both frameworks).
--
-- Recipe (nanoGPT's): AdamW (betas 0.9/--beta2, weight decay on 2-D weights
-- only), linear warm-up for --warmup-iters then cosine decay to --min-lr at
-- --lr-decay-iters, gradient clipping at --grad-clip (0: none).  A
-- checkpoint (dl.train.checkpoint: model, AdamW state, the config and the
-- tokenizer; written to a temporary name and renamed) goes to
-- <out-dir>/ckpt.safetensors after every evaluation.
--
-- --export-data FILE writes the two token streams and the recipe as
-- safetensors for scripts/train_gpt.py, the PyTorch twin, which trains the
-- same model with the same recipe on the same tokens (ids 1-based there too;
-- it shifts them) and prints its losses on the same evaluation blocks.
--
-- --sample generates with the KV cache (--no-kv-cache: nanoGPT's way, the
-- whole context again for every token); both give the same tokens for the
-- same --seed while the text fits in block_size.
--
-- Exit status: 0 done, 2 bad options or input (one line on stderr), 1 anything else.
local dl = require "dl"
local text = require "dl.text"
local train = require "dl.train"
local cli = require "dl.train.cli"
local checkpoint = train.checkpoint
local json = train.json

local PROG = "train_gpt"
local die, checked = cli.die, cli.checked

local SPEC = {
  {name = "tokenizer", type = "choice", choices = {"char", "bpe"}, default = "char", help = "character or byte-level BPE tokens"},
  {name = "vocab-size", type = "int", min = 258, default = 1024, help = "BPE vocabulary size (with --tokenizer bpe)"},
  {name = "fortunes", default = "/usr/share/games/fortunes", metavar = "DIR", help = "the fortunes folder"},
  {name = "val-fraction", type = "number", min = 0.001, max = 0.5, default = 0.1, help = "share of the documents held out"},
  {name = "block-size", type = "int", min = 2, default = 64, help = "context length in tokens"},
  {name = "n-layer", type = "int", min = 1, default = 4, help = "transformer blocks"},
  {name = "n-head", type = "int", min = 1, default = 4, help = "attention heads"},
  {name = "n-embd", type = "int", min = 1, default = 128, help = "embedding width"},
  {name = "dropout", type = "number", min = 0, max = 0.9, default = 0.0, help = "dropout probability"},
  {name = "bias", type = "flag", default = true, help = "biases in Linear and LayerNorm"},
  {name = "batch-size", type = "int", min = 1, default = 16, help = "blocks per step"},
  {name = "max-iters", type = "int", min = 0, default = 500, help = "optimizer steps (0: prepare the data and stop)"},
  {name = "lr", type = "number", min = 0, default = 2e-3, help = "peak learning rate"},
  {name = "min-lr", type = "number", min = 0, default = 2e-4, help = "learning rate at the end of the cosine"},
  {name = "warmup-iters", type = "int", min = 0, default = 50, help = "linear warm-up steps"},
  {name = "lr-decay-iters", type = "int", min = 1, metavar = "N", default_text = "max-iters", help = "step where the cosine reaches min-lr"},
  {name = "weight-decay", type = "number", min = 0, default = 0.1, help = "AdamW weight decay (2-D weights only)"},
  {name = "beta2", type = "number", min = 0, max = 0.9999, default = 0.99, help = "AdamW beta2"},
  {name = "grad-clip", type = "number", min = 0, default = 1.0, help = "clip the gradient norm to this (0: off)"},
  {name = "eval-interval", type = "int", min = 1, default = 250, help = "steps between evaluations and checkpoints"},
  {name = "eval-blocks", type = "int", min = 1, default = 100, help = "blocks per stream in an evaluation"},
  {name = "log-every", type = "int", min = 1, default = 50, help = "steps between loss lines"},
  {name = "seed", type = "int", default = 1337, help = "seed of the split, the initialisation, the batches and sampling"},
  {name = "threads", type = "int", min = 1, default = 2, help = "compute threads"},
  {name = "out-dir", default = "./checkpoints/gpt", metavar = "DIR", help = "where ckpt.safetensors goes"},
  {name = "export-data", metavar = "FILE", help = "write the token streams and recipe for scripts/train_gpt.py"},
  {name = "sample", type = "flag", default = false, help = "generate text from --checkpoint instead of training"},
  {name = "checkpoint", metavar = "FILE", default_text = "<out-dir>/ckpt.safetensors", help = "checkpoint to sample from"},
  {name = "prompt", default = "", help = "text the samples continue (empty: a new document)"},
  {name = "num-samples", type = "int", min = 1, default = 3, help = "samples to draw"},
  {name = "max-new-tokens", type = "int", min = 0, default = 300, help = "tokens per sample"},
  {name = "temperature", type = "number", min = 0, default = 0.8, help = "softmax temperature (0: greedy)"},
  {name = "top-k", type = "int", min = 0, default = 40, help = "sample among the k likeliest tokens (0: all)"},
  {name = "kv-cache", type = "flag", default = true, help = "generate with the KV cache (O(T) per token)"},
}

local HELP = {
  usage = "dlua scripts/train_gpt.lua [options]   |   dlua scripts/train_gpt.lua --sample [options]",
  description = "Trains a nanoGPT-shaped language model on Debian's fortunes, or samples from a checkpoint.",
}

local SEP = "<|endoftext|>"

local file_exists = require("dl.util").file_exists

local function ensure_dir(dir)
  os.execute("mkdir -p -- '" .. dir:gsub("'", "'\\''") .. "' 2>/dev/null")
end

-- --- data -----------------------------------------------------------------------------------

-- The corpus split and tokenized: {tok =, train = ids, val = ids, ndocs = {train, val}}.
local function prepare(o)
  local docs = checked("--fortunes " .. o.fortunes, text.fortunes, nil, {root = o.fortunes})
  local texts = {}
  for i, d in ipairs(docs) do texts[i] = d.text end
  local tr, va = text.train_val_split(texts, o.val_fraction, {seed = o.seed})
  if #tr == 0 or #va == 0 then die("--val-fraction %g leaves an empty split of %d documents", o.val_fraction, #texts) end
  local tok
  if o.tokenizer == "char" then
    tok = text.CharTokenizer.train(tr, {special_tokens = {SEP}, unk_token = "<unk>"})
  else
    tok = text.BPETokenizer.train(tr, {vocab_size = o.vocab_size, special_tokens = {SEP}})
  end
  local opts = {separator = SEP}
  return {tok = tok, train = tok:encode_stream(tr, opts), val = tok:encode_stream(va, opts), ndocs = {#tr, #va},
    categories = #docs.categories}
end

-- Start offsets (1-based) of n blocks of len tokens spread evenly over a
-- stream of N tokens: start_j = floor((j - 1) * (N - len) / (n - 1)) + 1.
local function spread_starts(N, len, n)
  if N < len then return {} end
  if n == 1 then return {1} end
  local out = {}
  for j = 1, n do out[j] = (j - 1) * (N - len) // (n - 1) + 1 end
  return out
end

-- x, y (B, T) int64 from a stream at the given 1-based starts.
local function blocks(data, starts, T)
  local B = #starts
  local s = dl.tensor(starts, {dtype = dl.int64}) - 1
  local idx = (s:unsqueeze(2) + dl.arange(1, T + 1, {dtype = dl.int64})):view(B * T)
  local x = data:index_select(1, idx):view(B, T)
  local y = data:index_select(1, idx + 1):view(B, T)
  return x, y
end

-- The mean loss over fixed evaluation blocks, in batches.
local function evaluate(model, data, starts, T, B)
  model:eval()
  local sum, n = 0, 0
  dl.no_grad(function()
    for i = 1, #starts, B do
      local part = table.move(starts, i, math.min(i + B - 1, #starts), 1, {})
      local x, y = blocks(data, part, T)
      local _, loss = model(x, y)
      sum = sum + loss:item() * #part
      n = n + #part
    end
  end)
  model:train()
  return n > 0 and sum / n or 0 / 0
end

-- nanoGPT's schedule: warm-up, cosine to min_lr at decay_iters, then min_lr.
-- it is the 0-based step.
local function lr_at(o, it)
  local decay = o.lr_decay_iters or o.max_iters
  if it < o.warmup_iters then return o.lr * (it + 1) / (o.warmup_iters + 1) end
  if it > decay then return o.min_lr end
  local ratio = (it - o.warmup_iters) / math.max(1, decay - o.warmup_iters)
  return o.min_lr + 0.5 * (1 + math.cos(math.pi * ratio)) * (o.lr - o.min_lr)
end

local RECIPE_KEYS = {"block_size", "n_layer", "n_head", "n_embd", "dropout", "bias", "batch_size", "max_iters",
  "lr", "min_lr", "warmup_iters", "lr_decay_iters", "weight_decay", "beta2", "grad_clip", "eval_interval",
  "eval_blocks", "log_every", "seed"}

local function export_data(path, o, d)
  local recipe = {vocab_size = d.tok.vocab_size}
  for _, k in ipairs(RECIPE_KEYS) do recipe[k] = o[k] end
  recipe.lr_decay_iters = o.lr_decay_iters or o.max_iters
  checked("--export-data " .. path, dl.save, path, {train = d.train:to(dl.int32), val = d.val:to(dl.int32)},
    {format = "dlua-gpt-data-1", recipe = json.encode(recipe), tokenizer = d.tok:to_json()})
end

-- --- sampling ---------------------------------------------------------------------------------

local function sample(o)
  local path = o.checkpoint or (o.out_dir .. "/ckpt.safetensors")
  if not file_exists(path) then die("--checkpoint %s: no such file (train first, or name one)", path) end
  local ck = checked("--checkpoint " .. path, checkpoint.load, path)
  local meta = ck.meta
  if type(meta.gpt) ~= "table" or type(meta.tokenizer) ~= "string" then
    die("--checkpoint %s: not a train_gpt checkpoint (no model config or tokenizer)", path)
  end
  local tok = checked("--checkpoint " .. path, text.tokenizer_from_json, meta.tokenizer)
  local model = checked("--checkpoint " .. path, dl.models.GPT, meta.gpt)
  checked("--checkpoint " .. path, model.load_state_dict, model, ck.model)
  local sep = tok:token_to_id(SEP)
  local prompt = {sep}
  if o.prompt ~= "" then
    for _, id in ipairs(checked("--prompt", tok.encode, tok, o.prompt, {as = "table"})) do prompt[#prompt + 1] = id end
  end
  if #prompt > meta.gpt.block_size then
    die("--prompt is %d tokens, the model's context is %d", #prompt, meta.gpt.block_size)
  end
  dl.manual_seed(o.seed)
  local idx = dl.tensor({prompt}, {dtype = dl.int64})
  print(string.format("%s: %s, %d parameters, step %d, val loss %.4f; %s, temperature %g, top-k %s", PROG, path,
    model:get_num_params(), meta.step or 0, meta.val_loss or 0 / 0, o.kv_cache and "KV cache" or "no cache",
    o.temperature, o.top_k > 0 and tostring(o.top_k) or "all"))
  for s = 1, o.num_samples do
    local t0 = dl.clock()
    local out = model:generate(idx, o.max_new_tokens, {temperature = o.temperature,
      top_k = o.top_k > 0 and o.top_k or nil, use_cache = o.kv_cache})
    local dt = dl.clock() - t0
    local ids = out[1]:narrow(1, 2, out.shape[2] - 1)
    print(string.format("--- sample %d (%d tokens, %.1f tokens/s)", s, o.max_new_tokens, o.max_new_tokens / dt))
    print((tok:decode(ids):gsub(SEP:gsub("%p", "%%%0"), "\n%%\n")))
  end
  return 0
end

-- --- training ---------------------------------------------------------------------------------

local function main(argv)
  local o = cli.options(argv, SPEC, HELP)
  if not o then return 0 end
  dl.set_num_threads(o.threads)
  if o.sample then return sample(o) end
  if o.n_embd % o.n_head ~= 0 then die("--n-embd %d is not divisible by --n-head %d", o.n_embd, o.n_head) end
  if o.lr_decay_iters and o.lr_decay_iters < o.warmup_iters then
    die("--lr-decay-iters %d is before the end of the warm-up (%d)", o.lr_decay_iters, o.warmup_iters)
  end

  local t_start = dl.clock()
  local d = prepare(o)
  local T, B = o.block_size, o.batch_size
  local ntrain, nval = d.train.shape[1], d.val.shape[1]
  if ntrain <= T + 1 or nval <= T + 1 then die("--block-size %d is longer than a token stream", T) end
  print(string.format("%s: %d documents (%d categories) -> %d train / %d val; %s tokenizer, vocab %d; %d / %d tokens (%.1fs)",
    PROG, d.ndocs[1] + d.ndocs[2], d.categories, d.ndocs[1], d.ndocs[2], o.tokenizer, d.tok.vocab_size, ntrain,
    nval, dl.clock() - t_start))
  if o.export_data then
    export_data(o.export_data, o, d)
    print("data for the PyTorch twin: " .. o.export_data)
  end
  if o.max_iters == 0 then return 0 end

  dl.manual_seed(o.seed)
  local cfg = {vocab_size = d.tok.vocab_size, block_size = T, n_layer = o.n_layer, n_head = o.n_head,
    n_embd = o.n_embd, dropout = o.dropout, bias = o.bias}
  local model = checked(nil, dl.models.GPT, cfg)
  local optimizer = model:configure_optimizers{weight_decay = o.weight_decay, lr = o.lr, betas = {0.9, o.beta2}}
  local params = model:parameters()
  local eval_train = spread_starts(ntrain, T + 1, o.eval_blocks)
  local eval_val = spread_starts(nval, T + 1, o.eval_blocks)
  ensure_dir(o.out_dir)
  local ck_path = o.out_dir .. "/ckpt.safetensors"
  print(string.format("model: %d layers, %d heads, %d wide, context %d, %d parameters; batch %d, %d steps, %d threads",
    o.n_layer, o.n_head, o.n_embd, T, model:get_num_params(), B, o.max_iters, dl.get_num_threads()))

  local last = {}
  local function eval_and_save(step)
    local t0 = dl.clock()
    last.train = evaluate(model, d.train, eval_train, T, B)
    last.val = evaluate(model, d.val, eval_val, T, B)
    print(string.format("step %d: train loss %.4f, val loss %.4f (eval %.1fs)", step, last.train, last.val,
      dl.clock() - t0))
    local opts = {}
    for k, v in pairs(o) do opts[k] = v end
    checked("--out-dir " .. o.out_dir, checkpoint.save, ck_path, {model = model, optimizer = optimizer,
      meta = {gpt = cfg, tokenizer = d.tok:to_json(), step = step, val_loss = last.val, train_loss = last.train,
        options = opts, dlua = dl.__version__}})
  end

  local run_loss, run_n, t_log, tokens = 0, 0, dl.clock(), 0
  model:train()
  for it = 0, o.max_iters - 1 do
    local lr = lr_at(o, it)
    for _, g in ipairs(optimizer.param_groups) do g.lr = lr end
    local starts = (dl.randint(1, ntrain - T + 1, {B})):tolist()
    local x, y = blocks(d.train, starts, T)
    local _, loss = model(x, y)
    optimizer:zero_grad()
    loss:backward()
    if o.grad_clip > 0 then dl.nn.utils.clip_grad_norm_(params, o.grad_clip) end
    local l = loss:item()
    if train.guard.nonfinite(l) then
      die("%s", select(2, pcall(train.guard.check_loss, l, string.format("step %d", it + 1))))
    end
    optimizer:step()
    run_loss, run_n, tokens = run_loss + l, run_n + 1, tokens + B * T
    local step = it + 1
    if step % o.log_every == 0 or step == o.max_iters then
      local dt = dl.clock() - t_log
      print(string.format("step %d/%d: loss %.4f, lr %.2e, %.0f tokens/s", step, o.max_iters, run_loss / run_n,
        lr, tokens / dt))
      run_loss, run_n, tokens, t_log = 0, 0, 0, dl.clock()
    end
    if step % o.eval_interval == 0 or step == o.max_iters then
      eval_and_save(step)
      t_log = dl.clock()
    end
  end
  print(string.format("final: train loss %.4f, val loss %.4f after %d steps; checkpoint %s; time %.1fs",
    last.train, last.val, o.max_iters, ck_path, dl.clock() - t_start))
  return 0
end

cli.run(PROG, main, arg)
