-- dl.text: text data - tokenizers, the fortunes corpus, datasets and batching.
--
--   BPETokenizer  byte-level BPE (GPT-2's scheme): trained here (C, src/data/
--                 tokenizer_train.c) or loaded from a Hugging Face tokenizer.json;
--                 saved as a tokenizer.json that the `tokenizers` library loads.
--   CharTokenizer one id per character (Unicode code point).
--   fortunes()    Debian's fortune cookie files as {text=, label=} samples.
--   TextDataset   texts (+ labels) tokenized once, for dl.data.DataLoader, with
--                 pad_collate() padding each batch to its longest sequence.
--   LMDataset     a token stream cut into blocks: x = block[1..T], y = block[2..T+1].
--
-- Invariants:
--  - Ids are 1-based, like every index in dlua: id k of dlua is id k-1 of
--    Hugging Face / tiktoken / PyTorch code.  Special tokens have fixed ids:
--    the ones given at training come first (1, 2, ...) in the order given.
--  - BPE round trip is exact on any byte string: decode(encode(s)) == s for
--    invalid UTF-8, NUL bytes and "" too.
--  - Special tokens in a text become their own id (never split) unless
--    split_special_tokens = true; training never merges across them.
--  - Text datasets hold their token ids in one int64 tensor; get(i) returns a
--    view, so DataLoader batches are cheap and identical for any num_workers
--    (these Lua datasets are read on the main thread).
--  - Every seeded choice (split, shuffle) is a Philox permutation of the seed:
--    the same seed gives the same split on every machine.
local dl = require "dl"
local util = require "dl.util"
local C = dl._text
local D = dl._data

local text = {}

local fail = util.fail

-- Returns the results of a pcall, or raises its error without the position
-- inside this file (errors from the C side are "op: facts", like util.fail's).
local function try(ok, ...)
  if ok then return ... end
  local msg = tostring((...))
  error((msg:gsub("^[^\n]-text%.lua:%d+: ", "")), 0)
end

-- --- tokenizers ------------------------------------------------------------------------

local Tokenizer = {}
Tokenizer.__index = Tokenizer

local BPETokenizer = setmetatable({}, {__index = Tokenizer})
BPETokenizer.__index = BPETokenizer
BPETokenizer.__name = "dl.text.BPETokenizer"
local CharTokenizer = setmetatable({}, {__index = Tokenizer})
CharTokenizer.__index = CharTokenizer
CharTokenizer.__name = "dl.text.CharTokenizer"
text.BPETokenizer, text.CharTokenizer = BPETokenizer, CharTokenizer

for _, cls in ipairs{BPETokenizer, CharTokenizer} do
  cls.__len = function(self) return self.vocab_size end
  cls.__tostring = function(self)
    local sp = {}
    for i, s in ipairs(self.special_tokens) do sp[i] = string.format("%q", s) end
    local extra = self.kind == "bpe" and string.format(", %d merges, pretokenize=%q", self.num_merges,
      self.pretokenize) or ""
    return string.format("%s(vocab_size=%d%s, special_tokens={%s})", cls.__name:gsub("^dl%.text%.", ""),
      self.vocab_size, extra, table.concat(sp, ", "))
  end
end

-- Wraps a C tokenizer in its class.
local function wrap(c)
  local kind = c:kind()
  local self = setmetatable({_c = c, kind = kind, vocab_size = c:size()},
    kind == "bpe" and BPETokenizer or CharTokenizer)
  local specials = {}
  for i, id in ipairs(c:specials()) do specials[i] = c:token(id) end
  self.special_tokens = specials
  if kind == "bpe" then
    self.pretokenize = c:pretokenize()
    self.num_merges = c:num_merges()
  else
    local u = c:unk()
    self.unk_token = u and c:token(u) or nil
  end
  return self
end

local function as_list(v, op, what)
  if type(v) == "string" then return {v} end
  if type(v) ~= "table" or dl.is_tensor(v) then fail("%s: %s must be a string or a list of strings", op, what) end
  for i, s in ipairs(v) do
    if type(s) ~= "string" then fail("%s: %s[%d] is a %s, not a string", op, what, i, type(s)) end
  end
  return v
end

local function check_specials(v, op)
  if v == nil then return {} end
  if type(v) ~= "table" or dl.is_tensor(v) then fail("%s: special_tokens must be a list of strings", op) end
  for i, s in ipairs(v) do
    if type(s) ~= "string" then fail("%s: special_tokens[%d] must be a string", op, i) end
  end
  return v
end

local function read_file(path, op)
  if type(path) ~= "string" then fail("%s: file names must be strings, got %s", op, type(path)) end
  local f, err = io.open(path, "rb")
  if not f then fail("%s: cannot open %s", op, err) end
  local s, rerr = f:read("a")
  f:close()
  if not s then fail("%s: cannot read '%s': %s", op, path, tostring(rerr)) end
  return s
end

-- feeds texts (strings) or files (paths) to a C trainer, one at a time
local function train(op, copts, texts, files)
  local tr = try(pcall(C.trainer, copts))
  if texts then
    for _, s in ipairs(texts) do try(pcall(tr.feed, tr, s)) end
  else
    for _, p in ipairs(files) do try(pcall(tr.feed, tr, read_file(p, op))) end
  end
  return wrap(try(pcall(tr.finish, tr)))
end

local bpe_keys = {"vocab_size", "special_tokens", "min_frequency", "pretokenize"}

local function bpe_options(op, opts)
  opts = util.check_options(opts, op, bpe_keys)
  if opts.vocab_size == nil then fail("%s: vocab_size is required", op) end
  local vs = util.check_int(opts.vocab_size, op, "vocab_size", 1)
  local sp = check_specials(opts.special_tokens, op)
  local pre = opts.pretokenize == nil and "gpt2" or util.check_string(opts.pretokenize, op, "pretokenize", {"gpt2", "none"})
  local mf = opts.min_frequency == nil and 2 or util.check_int(opts.min_frequency, op, "min_frequency", 1)
  return {what = op, kind = "bpe", vocab_size = vs, special_tokens = sp, pretokenize = pre, min_frequency = mf}
end

-- cls.train(texts, opts) and cls.train_files(paths, opts) for a class whose
-- options are read by options(op, opts)
local function trainers(cls, name, options)
  cls.train = function(texts, opts)
    local op = name .. ".train"
    local copts = options(op, opts)
    return train(op, copts, as_list(texts, op, "texts"))
  end
  cls.train_files = function(paths, opts)
    local op = name .. ".train_files"
    local copts = options(op, opts)
    return train(op, copts, nil, as_list(paths, op, "paths"))
  end
end

-- BPETokenizer.train(texts, {vocab_size =, special_tokens = {}, min_frequency = 2,
--   pretokenize = "gpt2"|"none"}): texts is a string or a list of strings.
-- vocab_size counts everything (specials + 256 bytes + merges) and is a
-- maximum: training stops earlier when no pair occurs min_frequency times.
-- The pair with the highest count merges next; ties go to the smallest
-- (left id, right id), ids being: specials, the 256 bytes in byte order,
-- then merged tokens in merge order - so the same texts and options always
-- give the same tokenizer.  pretokenize = "gpt2" keeps merges inside GPT-2's
-- pieces (words with their leading space, numbers, punctuation runs, white
-- space), "none" lets them cross word boundaries (each text between special
-- tokens is one piece: encoding cost grows as n log n in its length).
-- BPETokenizer.train_files(paths, opts): each file is one training text.
trainers(BPETokenizer, "BPETokenizer", bpe_options)

local char_keys = {"special_tokens", "unk_token"}

local function char_options(op, opts)
  opts = util.check_options(opts, op, char_keys)
  local sp = {}
  for i, s in ipairs(check_specials(opts.special_tokens, op)) do sp[i] = s end
  local unk
  if opts.unk_token ~= nil then
    util.check_string(opts.unk_token, op, "unk_token")
    for i, s in ipairs(sp) do if s == opts.unk_token then unk = i end end
    if not unk then
      sp[#sp + 1] = opts.unk_token
      unk = #sp
    end
  end
  return {what = op, kind = "char", special_tokens = sp, unk = unk}
end

-- CharTokenizer.train(texts, {special_tokens = {}, unk_token = nil}) (and
-- train_files): the vocabulary is the special tokens, then every character
-- of the texts (valid UTF-8) in code-point order.  unk_token (added to the
-- specials when not among them) stands for characters outside the
-- vocabulary; without it such a character is an error naming it.
trainers(CharTokenizer, "CharTokenizer", char_options)

-- text.load_tokenizer(path): a tokenizer.json (BPE) or a dlua CharTokenizer file.
function text.load_tokenizer(path)
  if type(path) ~= "string" then fail("load_tokenizer: path must be a string, got %s", type(path)) end
  return wrap(try(pcall(C.load, path)))
end

-- text.tokenizer_from_json(s): the same from JSON text.
function text.tokenizer_from_json(s)
  if type(s) ~= "string" then fail("tokenizer_from_json: JSON text (a string) expected, got %s", type(s)) end
  return wrap(try(pcall(C.from_json, s)))
end

function BPETokenizer.load(path)
  local t = text.load_tokenizer(path)
  if t.kind ~= "bpe" then fail("BPETokenizer.load: '%s' holds a character tokenizer", path) end
  return t
end

function CharTokenizer.load(path)
  local t = text.load_tokenizer(path)
  if t.kind ~= "char" then fail("CharTokenizer.load: '%s' holds a BPE tokenizer", path) end
  return t
end

local encode_keys = {"as", "split_special_tokens"}

local function encode_options(op, opts)
  opts = util.check_options(opts, op, encode_keys)
  local as = opts.as == nil and "tensor" or util.check_string(opts.as, op, "as", {"tensor", "table"})
  local split = util.opt_bool(opts.split_special_tokens, false, op, "split_special_tokens")
  return as == "table", not split
end

-- tok:encode(s [, {as = "tensor"|"table", split_special_tokens = false}]):
-- the 1-based ids of s, a 1-D int64 tensor (default) or a Lua table.
function Tokenizer:encode(s, opts)
  if type(s) ~= "string" then fail("encode: a string expected, got %s", type(s)) end
  local as_table, allow = encode_options("encode", opts)
  local c = self._c
  return try(pcall(c.encode, c, s, allow, as_table))
end

-- tok:encode_batch(texts [, opts]): a list with each text's ids.
function Tokenizer:encode_batch(texts, opts)
  as_list(texts, "encode_batch", "texts")
  local as_table, allow = encode_options("encode_batch", opts)
  local out = {}
  local c = self._c
  for i, s in ipairs(texts) do out[i] = try(pcall(c.encode, c, s, allow, as_table)) end
  return out
end

-- tok:encode_stream(texts [, {separator = token or id, split_special_tokens}]):
-- all texts' ids in one 1-D int64 tensor, each text followed by the separator
-- when one is given (e.g. "<|endoftext|>"), and the (n,) int64 lengths.
function Tokenizer:encode_stream(texts, opts)
  local op = "encode_stream"
  as_list(texts, op, "texts")
  opts = util.check_options(opts, op, {"separator", "split_special_tokens"})
  local sep = opts.separator ~= nil and self:_id(opts.separator, op, "separator") or nil
  local split = util.opt_bool(opts.split_special_tokens, false, op, "split_special_tokens")
  local c = self._c
  return try(pcall(c.encode_list, c, texts, not split, sep))
end

-- an id given as a token (its text) or a 1-based id
function Tokenizer:_id(v, op, what)
  if type(v) == "string" then
    local id = self._c:token_id(v)
    if not id then fail("%s: %s %q is not a token of the vocabulary", op, what, v) end
    return id
  end
  local id = util.check_int(v, op, what)
  if id < 1 or id > self.vocab_size then fail("%s: %s %d is out of range (1 to %d)", op, what, id, self.vocab_size) end
  return id
end

local function decode_ids(ids, op)
  if dl.is_tensor(ids) then
    if ids:dim() ~= 1 then fail("%s: ids must be 1-D, got %d dimensions (decode_batch takes 2-D)", op, ids:dim()) end
    if ids.dtype == dl.float32 or ids.dtype == dl.float64 or ids.dtype == dl.float16 or ids.dtype == dl.bfloat16
        or ids.dtype == dl.bool then
      fail("%s: ids must be an integer tensor, got %s", op, tostring(ids.dtype))
    end
    return ids:to("cpu"):to(dl.int64):contiguous()
  end
  if type(ids) ~= "table" then fail("%s: ids must be a tensor or a table of integers, got %s", op, type(ids)) end
  return ids
end

-- tok:decode(ids [, {skip_special_tokens = false}]): the text of 1-based ids
-- (a 1-D integer tensor or a table).
function Tokenizer:decode(ids, opts)
  opts = util.check_options(opts, "decode", {"skip_special_tokens"})
  local skip = util.opt_bool(opts.skip_special_tokens, false, "decode", "skip_special_tokens")
  local c = self._c
  return try(pcall(c.decode, c, decode_ids(ids, "decode"), skip))
end

-- tok:decode_batch(ids [, opts]): ids a 2-D tensor (one row per text) or a
-- list; a list of texts.
function Tokenizer:decode_batch(ids, opts)
  local rows = {}
  if dl.is_tensor(ids) then
    if ids:dim() ~= 2 then fail("decode_batch: ids must be 2-D, got %d dimensions", ids:dim()) end
    for i = 1, ids.shape[1] do rows[i] = ids[i] end
  elseif type(ids) == "table" then
    rows = ids
  else
    fail("decode_batch: ids must be a 2-D tensor or a list, got %s", type(ids))
  end
  local out = {}
  for i, r in ipairs(rows) do out[i] = self:decode(r, opts) end
  return out
end

function Tokenizer:token_to_id(s)
  if type(s) ~= "string" then fail("token_to_id: a string expected, got %s", type(s)) end
  return self._c:token_id(s)
end

function Tokenizer:id_to_token(id)
  return self._c:token(self:_id(id, "id_to_token", "id"))
end

function Tokenizer:is_special(id) return self._c:is_special(self:_id(id, "is_special", "id")) end

-- The ids of the special tokens, in id order.
function Tokenizer:special_ids() return self._c:specials() end

-- BPE: the merges by rank, each {left, right} as byte strings.
function Tokenizer:merges()
  local out = {}
  if self.kind ~= "bpe" then return out end
  local c = self._c
  for i, m in ipairs(c:merges()) do out[i] = {c:token(m[1]), c:token(m[2])} end
  return out
end

function Tokenizer:save(path)
  if type(path) ~= "string" then fail("save: path must be a string, got %s", type(path)) end
  local c = self._c
  try(pcall(c.save, c, path))
end

function Tokenizer:to_json() return self._c:to_json() end

-- text.pretokenize(s): GPT-2's pieces of s (what BPE merges stay inside).
function text.pretokenize(s)
  if type(s) ~= "string" then fail("pretokenize: a string expected, got %s", type(s)) end
  return C.pretokenize(s)
end

-- --- the fortunes corpus ------------------------------------------------------------------

local DEFAULT_FORTUNES = "/usr/share/games/fortunes"

-- The quotes of one fortune file: separated by lines holding only "%";
-- quotes of white space only are skipped; a quote's text loses its leading
-- and trailing newlines (blank lines around it), nothing else.
local function split_quotes(s, rot13)
  if rot13 then
    s = s:gsub("%a", function(c)
      local b = c:byte()
      local base = b >= 97 and 97 or 65
      return string.char((b - base + 13) % 26 + base)
    end)
  end
  s = s:gsub("\r\n", "\n")
  s = "\n" .. s
  if s:sub(-1) ~= "\n" then s = s .. "\n" end
  local out, from = {}, 2
  while true do
    local i, j = s:find("\n%\n", from - 1, true)
    local q = s:sub(from, i and i - 1 or #s - 1)
    if q:find("%S") then out[#out + 1] = q:match("^\n*(.-)\n*$") end
    if not i then break end
    from = j + 1
    if from > #s then break end
  end
  return out
end

-- strfile's header (a .dat file) says the texts are rot13'ed (STR_ROTATED)
local function rotated(dat)
  local f = io.open(dat, "rb")
  if not f then return false end
  local h = f:read(24)
  f:close()
  if not h or #h < 24 then return false end
  local flags = string.unpack(">I4", h, 17)
  return flags & 4 ~= 0
end

-- The categories under root: name -> file (X.u8 preferred over X), in
-- off/ too when offensive.
local function fortune_files(root, offensive, op)
  local ok, dirs, files = pcall(D.listdir, root)
  if not ok then fail("%s: cannot read the fortunes folder '%s' (%s)", op, root, tostring(dirs):gsub("^listdir: ", "")) end
  local found = {}
  local function scan(dir, prefix, list)
    local have = {}
    for _, n in ipairs(list) do have[n] = true end
    for _, n in ipairs(list) do
      local base = n:match("^(.*)%.u8$") or n
      if base:sub(1, 1) ~= "." and not base:find(".", 1, true) and base ~= "" then
        local file = have[base .. ".u8"] and base .. ".u8" or base
        found[prefix .. base] = {path = dir .. "/" .. file, rot13 = rotated(dir .. "/" .. base .. ".dat")}
      end
    end
  end
  scan(root, "", files)
  if offensive then
    for _, d in ipairs(dirs) do
      if d == "off" then
        local ok2, _, offfiles = pcall(D.listdir, root .. "/off")
        if ok2 then scan(root .. "/off", "off/", offfiles) end
      end
    end
  end
  return found
end

-- text.fortunes(categories | nil [, {root = "/usr/share/games/fortunes", offensive = false}])
-- -> list of {text =, label =, category =}, with .categories (names by label).
-- A category is a fortune file: X.u8 (fortune's UTF-8 version) when present,
-- else X; files with another extension (X.dat indexes) are not read.  With
-- offensive = true the off/ folder's files join as "off/X" (un-rot13'ed when
-- their .dat says so).  categories: a list of names (labels 1, 2, ... in that
-- order) or nil for all, sorted by name.
function text.fortunes(categories, opts)
  local op = "fortunes"
  opts = util.check_options(opts, op, {"root", "offensive"})
  local root = opts.root == nil and DEFAULT_FORTUNES or util.check_string(opts.root, op, "root")
  local offensive = util.opt_bool(opts.offensive, false, op, "offensive")
  local found = fortune_files(root, offensive, op)
  local names = {}
  if categories == nil then
    for n in pairs(found) do names[#names + 1] = n end
    table.sort(names)
    if #names == 0 then fail("%s: no fortune files in '%s'", op, root) end
  else
    if type(categories) == "string" then categories = {categories} end
    if type(categories) ~= "table" or #categories == 0 then
      fail("%s: categories must be a non-empty list of names or nil", op)
    end
    local seen = {}
    for i, n in ipairs(categories) do
      if type(n) ~= "string" then fail("%s: categories[%d] must be a string", op, i) end
      if not found[n] then
        local have = {}
        for k in pairs(found) do have[#have + 1] = k end
        table.sort(have)
        fail("%s: no category '%s' in '%s' (there are: %s)", op, n, root, table.concat(have, ", "))
      end
      if seen[n] then fail("%s: category '%s' is listed twice", op, n) end
      seen[n] = true
      names[i] = n
    end
  end
  local out = {categories = names}
  for label, n in ipairs(names) do
    local f = found[n]
    for _, q in ipairs(split_quotes(read_file(f.path, op), f.rot13)) do
      out[#out + 1] = {text = q, label = label, category = n}
    end
  end
  return out
end

-- --- splitting -----------------------------------------------------------------------------

-- text.train_val_split(list, val_fraction [, {seed =}]) -> train, val: a
-- seeded random split of a list (samples, documents); each part keeps the
-- list's order.  val gets round(n * val_fraction) items.
function text.train_val_split(list, val_fraction, opts)
  local op = "train_val_split"
  opts = util.check_options(opts, op, {"seed"})
  if type(list) ~= "table" or dl.is_tensor(list) then fail("%s: list must be a table", op) end
  if type(val_fraction) ~= "number" or val_fraction < 0 or val_fraction > 1 then
    fail("%s: val_fraction must be a number from 0 to 1", op)
  end
  local n = #list
  local nval = math.floor(n * val_fraction + 0.5)
  local seed = opts.seed == nil and D.seed() or util.check_int(opts.seed, op, "seed")
  local is_val = {}
  if n > 0 then
    local perm = D.randperm(n, seed, 0):tolist()
    for k = 1, nval do is_val[perm[k]] = true end
  end
  local train, val = {}, {}
  for i = 1, n do
    local into = is_val[i] and val or train
    into[#into + 1] = list[i]
  end
  return train, val
end

-- --- TextDataset and padding --------------------------------------------------------------------

local TextDataset = {}
TextDataset.__index = TextDataset
TextDataset.__name = "dl.text.TextDataset"
TextDataset.__len = function(self) return #self._len end
text.TextDataset = TextDataset
setmetatable(TextDataset, {__call = function(_, ...) return text._text_dataset(...) end})

-- TextDataset(samples, tokenizer [, {labels =, max_length =, bos =, eos =,
--   split_special_tokens = false}]): samples are {text =, label =} tables
-- (what fortunes() returns) or strings (labels then come from opts.labels, or
-- there are none).  Every text is encoded once; get(i) returns its ids (a
-- 1-D int64 view) and its label.  bos/eos (a token or an id) go before/after
-- each text; max_length truncates the text so that the whole (bos and eos
-- included) fits.
function text._text_dataset(samples, tok, opts)
  local op = "TextDataset"
  opts = util.check_options(opts, op, {"labels", "max_length", "bos", "eos", "split_special_tokens"})
  if type(samples) ~= "table" or dl.is_tensor(samples) then fail("%s: samples must be a list", op) end
  if getmetatable(tok) ~= BPETokenizer and getmetatable(tok) ~= CharTokenizer then
    fail("%s: a tokenizer (dl.text.BPETokenizer or CharTokenizer) is required", op)
  end
  local texts, labels, nlabels = {}, nil, 0
  for i, s in ipairs(samples) do
    if type(s) == "string" then
      texts[i] = s
    elseif type(s) == "table" and type(s.text) == "string" then
      texts[i] = s.text
      if s.label ~= nil then
        labels = labels or {}
        labels[i] = util.check_int(s.label, op, "label of sample " .. i)
        nlabels = nlabels + 1
      end
    else
      fail("%s: sample %d must be a string or a {text =, label =} table", op, i)
    end
  end
  if labels and nlabels ~= #texts then fail("%s: some samples have a label and some do not", op) end
  if opts.labels ~= nil then
    if labels then fail("%s: labels given twice (in the samples and in opts.labels)", op) end
    if dl.is_tensor(opts.labels) then opts.labels = opts.labels:tolist() end
    if type(opts.labels) ~= "table" or #opts.labels ~= #texts then
      fail("%s: labels must be a list of %d integers", op, #texts)
    end
    labels = {}
    for i, l in ipairs(opts.labels) do labels[i] = util.check_int(l, op, "labels[" .. i .. "]") end
  end
  local bos = opts.bos ~= nil and tok:_id(opts.bos, op, "bos") or nil
  local eos = opts.eos ~= nil and tok:_id(opts.eos, op, "eos") or nil
  local extra = (bos and 1 or 0) + (eos and 1 or 0)
  local max_length
  if opts.max_length ~= nil then
    max_length = util.check_int(opts.max_length, op, "max_length", extra + 1)
  end
  local split = util.opt_bool(opts.split_special_tokens, false, op, "split_special_tokens")
  local c = tok._c
  local ids, lens = try(pcall(c.encode_list, c, texts, not split))
  local starts, lengths = {}, {}
  local off = 0
  for i, l in ipairs(lens:tolist()) do
    starts[i] = off
    lengths[i] = l
    off = off + l
  end
  return setmetatable({tokenizer = tok, labels = labels, max_length = max_length, bos = bos, eos = eos,
    _ids = ids, _start = starts, _len = lengths,
    _bos = bos and dl.tensor({bos}, {dtype = dl.int64}), _eos = eos and dl.tensor({eos}, {dtype = dl.int64})},
    TextDataset)
end

-- ds:get(i) -> ids (1-D int64), label (when the dataset has labels)
function TextDataset:get(i)
  local n = #self._len
  if math.type(i) ~= "integer" or i < 1 or i > n then
    fail("TextDataset:get: index %s out of range (dataset of %d)", tostring(i), n)
  end
  local len = self._len[i]
  local keep = len
  if self.max_length then
    keep = math.min(len, self.max_length - (self.bos and 1 or 0) - (self.eos and 1 or 0))
  end
  local ids = keep > 0 and self._ids:narrow(1, self._start[i] + 1, keep) or dl.empty({0}, {dtype = dl.int64})
  if self.bos or self.eos then
    local parts = {}
    if self._bos then parts[#parts + 1] = self._bos end
    parts[#parts + 1] = ids
    if self._eos then parts[#parts + 1] = self._eos end
    ids = dl.cat(parts, 1)
  end
  if self.labels then return ids, self.labels[i] end
  return ids
end

-- The length in tokens of sample i (as get returns it).
function TextDataset:length(i)
  local l = self._len[i] + (self.bos and 1 or 0) + (self.eos and 1 or 0)
  return self.max_length and math.min(l, self.max_length) or l
end

-- text.pad_collate{pad_id =} -> a DataLoader collate function.  It takes
-- samples of (ids [, label]) and returns one table:
--   ids              (B, T) int64, each row padded with pad_id to T, the
--                    longest length in the batch
--   lengths          (B,) int64
--   labels           (B,) int64 (when the samples have labels)
--   key_padding_mask (B, T) bool, true at padding - PyTorch's convention for
--                    nn.MultiheadAttention / Transformer key_padding_mask
function text.pad_collate(opts)
  local op = "pad_collate"
  opts = util.check_options(opts, op, {"pad_id"})
  if opts.pad_id == nil then fail("%s: pad_id is required (e.g. tokenizer:token_to_id(\"<pad>\"))", op) end
  local pad = util.check_int(opts.pad_id, op, "pad_id")
  return function(samples)
    local b = #samples
    if b == 0 then fail("%s: an empty batch", op) end
    local t, lens, labels, nlabels = 0, {}, nil, 0
    for k, s in ipairs(samples) do
      local ids = s[1]
      if not dl.is_tensor(ids) or ids:dim() ~= 1 then fail("%s: sample %d's ids are not a 1-D tensor", op, k) end
      lens[k] = ids.shape[1]
      if lens[k] > t then t = lens[k] end
      if s[2] ~= nil then
        labels = labels or {}
        labels[k] = s[2]
        nlabels = nlabels + 1
      end
    end
    if labels and nlabels ~= b then fail("%s: some samples have a label and some do not", op) end
    local out = dl.full({b, t}, pad, {dtype = dl.int64})
    for k, s in ipairs(samples) do
      if lens[k] > 0 then out[k]:narrow(1, 1, lens[k]):copy_(s[1]) end
    end
    local lengths = dl.tensor(lens, {dtype = dl.int64})
    local mask = dl.arange(1, t + 1, {dtype = dl.int64}):unsqueeze(1):gt(lengths:unsqueeze(2))
    local batch = {ids = out, lengths = lengths, key_padding_mask = mask}
    if labels then
      local col = {}
      for k = 1, b do col[k] = {labels[k], n = 1} end
      batch.labels = dl.data.default_collate(col)[1] -- integers -> int64, as the DataLoader does
    end
    return batch
  end
end

-- --- language-model blocks --------------------------------------------------------------------

local LMDataset = {}
LMDataset.__index = LMDataset
LMDataset.__name = "dl.text.LMDataset"
LMDataset.__len = function(self) return self._n end
text.LMDataset = LMDataset
setmetatable(LMDataset, {__call = function(_, ...) return text._lm_dataset(...) end})

-- LMDataset(tokens, block_size [, {stride = block_size}]): tokens a 1-D
-- integer tensor (or a table) of ids; block i starts at token
-- (i-1)*stride + 1 and get(i) returns x = tokens[s .. s+T-1] and
-- y = tokens[s+1 .. s+T] (T = block_size), int64 views.  There are
-- floor((N - 1 - T) / stride) + 1 blocks (0 when N <= T); the default stride
-- uses every token once as a target (consecutive blocks share one token).
function text._lm_dataset(tokens, block_size, opts)
  local op = "LMDataset"
  opts = util.check_options(opts, op, {"stride"})
  if type(tokens) == "table" and not dl.is_tensor(tokens) then tokens = dl.tensor(tokens, {dtype = dl.int64}) end
  if not dl.is_tensor(tokens) or tokens:dim() ~= 1 then fail("%s: tokens must be a 1-D tensor of ids", op) end
  local T = util.check_int(block_size, op, "block_size", 1)
  local stride = opts.stride == nil and T or util.check_int(opts.stride, op, "stride", 1)
  local data = tokens:to(dl.int64):contiguous()
  local n = data.shape[1]
  local nb = n > T and (n - 1 - T) // stride + 1 or 0
  return setmetatable({tokens = data, block_size = T, stride = stride, _n = nb}, LMDataset)
end

function LMDataset:get(i)
  if math.type(i) ~= "integer" or i < 1 or i > self._n then
    fail("LMDataset:get: index %s out of range (dataset of %d)", tostring(i), self._n)
  end
  local s = (i - 1) * self.stride + 1
  return self.tokens:narrow(1, s, self.block_size), self.tokens:narrow(1, s + 1, self.block_size)
end

-- text.lm_datasets(docs, tokenizer, block_size [, {val_fraction = 0.1, seed =,
--   separator =, stride =}]) -> train, val LMDatasets: the documents are split
-- (train_val_split, seeded), each part encoded into one stream (documents
-- joined by the separator token, e.g. "<|endoftext|>") and cut into blocks.
-- A document is a string or a {text =} table.
function text.lm_datasets(docs, tok, block_size, opts)
  local op = "lm_datasets"
  opts = util.check_options(opts, op, {"val_fraction", "seed", "separator", "stride"})
  if getmetatable(tok) ~= BPETokenizer and getmetatable(tok) ~= CharTokenizer then
    fail("%s: a tokenizer (dl.text.BPETokenizer or CharTokenizer) is required", op)
  end
  if type(docs) ~= "table" then fail("%s: docs must be a list", op) end
  local texts = {}
  for i, d in ipairs(docs) do
    if type(d) == "string" then texts[i] = d
    elseif type(d) == "table" and type(d.text) == "string" then texts[i] = d.text
    else fail("%s: document %d must be a string or a {text =} table", op, i) end
  end
  local vf = opts.val_fraction == nil and 0.1 or opts.val_fraction
  local tr, va = text.train_val_split(texts, vf, {seed = opts.seed})
  local sopts = {separator = opts.separator}
  local function make(list)
    local ids = #list > 0 and tok:encode_stream(list, sopts) or dl.empty({0}, {dtype = dl.int64})
    return text._lm_dataset(ids, block_size, {stride = opts.stride})
  end
  return make(tr), make(va)
end

return text
