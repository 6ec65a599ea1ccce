-- train_text.lua - classifies the quotes of Debian's fortunes by category:
-- an EmbeddingBag baseline (--model bag) or a small Transformer encoder
-- (--model transformer) on byte-level BPE tokens; prints validation accuracy
-- and a confusion matrix.
--
--   dlua scripts/train_text.lua                          # the bag baseline (seconds)
--   dlua scripts/train_text.lua --model transformer      # the encoder (a couple of minutes on 2 cores)
--   dlua scripts/train_text.lua --categories computers,science,law --epochs 5
--   dlua scripts/train_text.lua --model transformer --export-data text_data.safetensors
--   /usr/bin/python3 scripts/train_text.py --data text_data.safetensors   # the PyTorch twin
--   dlua scripts/train_text.lua --help
--
-- Data: the quotes of --categories (default six of similar size: politics
-- 703, science 625, songs-poems 720, work 630, men-women 582, zippy 548
-- quotes in Debian's fortunes; the issue's computers 1051 / people 1251 /
-- law 206 are far apart), split per category by a seeded permutation
-- (--split-seed, --val-fraction).  The BPE tokenizer (--vocab-size, special
-- tokens <pad> and <cls>) is trained on the training quotes only; a quote is
-- cut to --max-length tokens.
--
-- Models (embedding width --dim, --classes outputs):
--   bag          EmbeddingBag(mode mean, padding_idx <pad>) -> Linear
--   transformer  token + learned position embeddings -> --layers
--                TransformerEncoderLayer(--heads, feed-forward 4 x dim, GELU,
--                pre-norm, dropout --dropout, batch_first) with the batch's
--                key-padding mask -> LayerNorm -> mean over the real tokens
--                (--pool mean) or the <cls> token put first (--pool cls) -> Linear
-- Training: AdamW (--lr, --weight-decay), the learning rate cosine-decayed
-- from --lr to 0 over all steps, gradient clipping at --grad-clip, batches of
-- --batch-size quotes in a seeded random order (--seed, which also seeds the
-- initialisation), --epochs passes.
--
-- --export-data FILE writes the token ids, labels and the recipe for
-- scripts/train_text.py, the PyTorch twin (same model, same recipe, same
-- tokens; its own random numbers).
--
-- Exit status: 0 done, 2 bad options or input (one line on stderr), 1 anything else.
local dl = require "dl"
local text = require "dl.text"
local train = require "dl.train"
local cli = require "dl.train.cli"
local json = train.json
local nn = dl.nn
local F = nn.functional

local PROG = "train_text"
local die, checked = cli.die, cli.checked

local DEFAULT_CATEGORIES = "politics,science,songs-poems,work,men-women,zippy"

local SPEC = {
  {name = "model", type = "choice", choices = {"bag", "transformer"}, default = "bag", help = "the classifier"},
  {name = "categories", default = DEFAULT_CATEGORIES, metavar = "A,B,...", help = "fortune files, one class each"},
  {name = "fortunes", default = "/usr/share/games/fortunes", metavar = "DIR", help = "the fortunes folder"},
  {name = "val-fraction", type = "number", min = 0.01, max = 0.9, default = 0.2, help = "share of each category held out"},
  {name = "split-seed", type = "int", default = 1, help = "seed of the train/validation split"},
  {name = "vocab-size", type = "int", min = 260, default = 2000, help = "BPE vocabulary size"},
  {name = "max-length", type = "int", min = 2, default = 128, help = "tokens kept of a quote"},
  {name = "dim", type = "int", min = 1, default = 64, help = "embedding width"},
  {name = "layers", type = "int", min = 1, default = 2, help = "encoder layers (transformer)"},
  {name = "heads", type = "int", min = 1, default = 4, help = "attention heads (transformer)"},
  {name = "dropout", type = "number", min = 0, max = 0.9, default = 0.1, help = "dropout (transformer)"},
  {name = "pool", type = "choice", choices = {"mean", "cls"}, default = "mean", help = "sequence summary (transformer)"},
  {name = "epochs", type = "int", min = 0, default_text = "bag 20, transformer 8", help = "passes over the training quotes"},
  {name = "batch-size", type = "int", min = 1, default = 32, help = "quotes per step"},
  {name = "lr", type = "number", min = 0, default_text = "bag 1e-2, transformer 1e-3", help = "peak learning rate"},
  {name = "weight-decay", type = "number", min = 0, default = 0.01, help = "AdamW weight decay"},
  {name = "grad-clip", type = "number", min = 0, default = 1.0, help = "clip the gradient norm to this (0: off)"},
  {name = "seed", type = "int", default = 1337, help = "seed of the initialisation and the batch order"},
  {name = "threads", type = "int", min = 1, default = 2, help = "compute threads"},
  {name = "export-data", metavar = "FILE", help = "write tokens, labels and recipe for scripts/train_text.py"},
}

local HELP = {
  usage = "dlua scripts/train_text.lua [options]",
  description = "Classifies Debian's fortunes by category with an EmbeddingBag or a Transformer encoder.",
}

local DEFAULTS = {bag = {epochs = 20, lr = 1e-2}, transformer = {epochs = 8, lr = 1e-3}}

-- --- data ---------------------------------------------------------------------------------------

local function split_list(s)
  local out = {}
  for part in s:gmatch("[^,]+") do out[#out + 1] = part:match("^%s*(.-)%s*$") end
  return out
end

-- The quotes split per category (so each class keeps its share), tokenized:
-- {tok =, names =, train = {ids = {tensor...}, labels = {...}}, val = {...}}.
local function prepare(o)
  local cats = split_list(o.categories)
  if #cats < 2 then die("--categories needs at least two names, got '%s'", o.categories) end
  local docs = checked("--categories", text.fortunes, cats, {root = o.fortunes})
  local by = {}
  for _, d in ipairs(docs) do
    by[d.label] = by[d.label] or {}
    table.insert(by[d.label], d)
  end
  local tr, va = {}, {}
  for label = 1, #cats do
    local t, v = text.train_val_split(by[label] or {}, o.val_fraction, {seed = o.split_seed + label})
    if #t == 0 or #v == 0 then die("--categories: '%s' has too few quotes to split", cats[label]) end
    table.move(t, 1, #t, #tr + 1, tr)
    table.move(v, 1, #v, #va + 1, va)
  end
  local texts = {}
  for i, d in ipairs(tr) do texts[i] = d.text end
  local tok = text.BPETokenizer.train(texts, {vocab_size = o.vocab_size, special_tokens = {"<pad>", "<cls>"}})
  local cls = o.pool == "cls" and o.model == "transformer"
  local function encode(list)
    local ds = text.TextDataset(list, tok, {max_length = o.max_length, bos = cls and "<cls>" or nil})
    local ids, labels = {}, {}
    for i = 1, #ds do ids[i], labels[i] = ds:get(i) end
    return {ids = ids, labels = labels}
  end
  return {tok = tok, names = docs.categories, train = encode(tr), val = encode(va),
    pad = tok:token_to_id("<pad>")}
end

-- --- models -------------------------------------------------------------------------------------

local Bag = nn.Module:extend("BagClassifier")

function Bag:__init(c)
  self.embedding = nn.EmbeddingBag(c.vocab, c.dim, {mode = "mean", padding_idx = c.pad})
  self.fc = nn.Linear(c.dim, c.classes)
end

function Bag:forward(batch)
  return self.fc(self.embedding(batch.ids))
end

local Encoder = nn.Module:extend("EncoderClassifier")

function Encoder:__init(c)
  self.pool = c.pool
  self.embedding = nn.Embedding(c.vocab, c.dim, {padding_idx = c.pad})
  self.position = nn.Embedding(c.max_length, c.dim)
  local layer = nn.TransformerEncoderLayer(c.dim, c.heads, {dim_feedforward = 4 * c.dim, dropout = c.dropout,
    activation = "gelu", batch_first = true, norm_first = true})
  self.encoder = nn.TransformerEncoder(layer, c.layers)
  self.norm = nn.LayerNorm(c.dim)
  self.fc = nn.Linear(c.dim, c.classes)
end

function Encoder:forward(batch)
  local ids, mask = batch.ids, batch.key_padding_mask
  local T = ids.shape[2]
  local x = self.embedding(ids) + self.position(dl.arange(1, T + 1, {dtype = dl.int64}))
  x = self.norm(self.encoder(x, {src_key_padding_mask = mask}))
  if self.pool == "cls" then return self.fc(x:select(2, 1)) end
  local keep = mask:logical_not():unsqueeze(3):to(x.dtype)
  local pooled = (x * keep):sum(2) / batch.lengths:unsqueeze(2):to(x.dtype)
  return self.fc(pooled)
end

-- --- training -----------------------------------------------------------------------------------

local function batches(part, order, B, collate)
  local out = {}
  for i = 1, #order, B do
    local samples = {}
    for j = i, math.min(i + B - 1, #order) do
      local k = order[j]
      samples[#samples + 1] = {part.ids[k], part.labels[k]}
    end
    out[#out + 1] = collate(samples)
  end
  return out
end

local function identity(n)
  local t = {}
  for i = 1, n do t[i] = i end
  return t
end

-- accuracy and the confusion matrix (rows: true class, columns: predicted)
local function evaluate(model, data, B, collate, C)
  model:eval()
  local confusion = {}
  for i = 1, C do confusion[i] = {} for j = 1, C do confusion[i][j] = 0 end end
  local correct, n = 0, 0
  dl.no_grad(function()
    for _, b in ipairs(batches(data, identity(#data.ids), B, collate)) do
      local pred, truth = model(b):argmax(2):tolist(), b.labels:tolist()
      for k, p in ipairs(pred) do
        confusion[truth[k]][p] = confusion[truth[k]][p] + 1
        if p == truth[k] then correct = correct + 1 end
      end
      n = n + #pred
    end
  end)
  model:train()
  return correct / n, confusion
end

local function print_confusion(conf, names)
  local C = #names
  local w = 12
  local head = {string.format("%-" .. w .. "s", "true \\ pred")}
  for j = 1, C do head[#head + 1] = string.format("%" .. w .. "s", names[j]:sub(1, w - 1)) end
  print(table.concat(head))
  local m = conf
  for i = 1, C do
    local row = {string.format("%-" .. w .. "s", names[i]:sub(1, w - 1))}
    for j = 1, C do row[#row + 1] = string.format("%" .. w .. "d", m[i][j]) end
    print(table.concat(row))
  end
end

local RECIPE_KEYS = {"model", "dim", "layers", "heads", "dropout", "pool", "max_length", "epochs", "batch_size", "lr",
  "weight_decay", "grad_clip", "seed"}

local function export_data(path, o, d)
  local recipe = {vocab = d.tok.vocab_size, pad = d.pad, classes = #d.names, names = d.names}
  for _, k in ipairs(RECIPE_KEYS) do recipe[k] = o[k] end
  local tensors = {}
  for _, part in ipairs {"train", "val"} do
    local p = d[part]
    local lens = {}
    for i, t in ipairs(p.ids) do lens[i] = t.shape[1] end
    tensors[part .. ".ids"] = dl.cat(p.ids, 1):to(dl.int32)
    tensors[part .. ".lengths"] = dl.tensor(lens, {dtype = dl.int32})
    tensors[part .. ".labels"] = dl.tensor(p.labels, {dtype = dl.int32})
  end
  checked("--export-data " .. path, dl.save, path, tensors, {format = "dlua-text-data-1", recipe = json.encode(recipe)})
end

local function main(argv)
  local o = cli.options(argv, SPEC, HELP)
  if not o then return 0 end
  o.epochs = o.epochs or DEFAULTS[o.model].epochs
  o.lr = o.lr or DEFAULTS[o.model].lr
  if o.model == "transformer" and o.dim % o.heads ~= 0 then
    die("--dim %d is not divisible by --heads %d", o.dim, o.heads)
  end
  dl.set_num_threads(o.threads)
  local t_start = dl.clock()
  local d = prepare(o)
  local C = #d.names
  local ntr, nva = #d.train.ids, #d.val.ids
  local counts = {}
  for _, l in ipairs(d.train.labels) do counts[l] = (counts[l] or 0) + 1 end
  local parts = {}
  for i, n in ipairs(d.names) do parts[i] = string.format("%s %d", n, counts[i] or 0) end
  print(string.format("%s: %d classes (train: %s); %d train / %d val quotes; BPE vocab %d (%.1fs)", PROG, C,
    table.concat(parts, ", "), ntr, nva, d.tok.vocab_size, dl.clock() - t_start))
  if o.export_data then
    export_data(o.export_data, o, d)
    print("data for the PyTorch twin: " .. o.export_data)
  end

  dl.manual_seed(o.seed)
  local c = {vocab = d.tok.vocab_size, dim = o.dim, classes = C, pad = d.pad, max_length = o.max_length,
    heads = o.heads, layers = o.layers, dropout = o.dropout, pool = o.pool}
  local model = o.model == "bag" and Bag(c) or Encoder(c)
  local params = model:parameters()
  local nparams = 0
  for _, p in ipairs(params) do nparams = nparams + p:numel() end
  local optimizer = dl.optim.AdamW(params, {lr = o.lr, weight_decay = o.weight_decay})
  local collate = text.pad_collate{pad_id = d.pad}
  local steps_per_epoch = (ntr + o.batch_size - 1) // o.batch_size
  local total = steps_per_epoch * o.epochs
  print(string.format("model: %s, %d parameters; %d epochs of %d steps, batch %d, lr %g, %d threads", o.model, nparams,
    o.epochs, steps_per_epoch, o.batch_size, o.lr, dl.get_num_threads()))

  local step = 0
  model:train()
  for epoch = 1, o.epochs do
    local t0 = dl.clock()
    local order = dl.randperm(ntr):tolist()
    local sum, n = 0, 0
    for _, b in ipairs(batches(d.train, order, o.batch_size, collate)) do
      local lr = 0.5 * o.lr * (1 + math.cos(math.pi * step / total))
      for _, g in ipairs(optimizer.param_groups) do g.lr = lr end
      local loss = F.cross_entropy(model(b), b.labels)
      optimizer:zero_grad()
      loss:backward()
      if o.grad_clip > 0 then nn.utils.clip_grad_norm_(params, o.grad_clip) end
      optimizer:step()
      local l = loss:item()
      if train.guard.nonfinite(l) then die("the loss is %s at step %d (try a lower --lr)", tostring(l), step + 1) end
      sum, n, step = sum + l * b.labels.shape[1], n + b.labels.shape[1], step + 1
    end
    local acc = evaluate(model, d.val, o.batch_size, collate, C)
    print(string.format("epoch %d/%d: train loss %.4f, val accuracy %.2f%% (%.1fs)", epoch, o.epochs, sum / n,
      100 * acc, dl.clock() - t0))
  end
  local acc, conf = evaluate(model, d.val, o.batch_size, collate, C)
  print(string.format("final: val accuracy %.2f%% (%d quotes, %s, seed %d); time %.1fs", 100 * acc, nva, o.model,
    o.seed, dl.clock() - t_start))
  print_confusion(conf, d.names)
  return 0
end

cli.run(PROG, main, arg)
