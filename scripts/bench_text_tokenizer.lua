-- bench_text_tokenizer.lua - speed of dl.text's byte-level BPE: training on
-- the fortunes corpus (Debian's `fortunes`), encoding the corpus (as its
-- 15k quotes, and as the raw files in one string), a larger synthetic text
-- (corpus words reshuffled, numbers, non-ASCII characters, so the piece cache
-- also misses; as ~2 KB documents and in one string) and the quotes without
-- pre-tokenization; decoding.  Each round trip is checked.  Every figure is
-- the best of --rounds, as MB per second of wall time and of process CPU time
-- (single-threaded work: the CPU figure is what other load on a shared
-- machine does not disturb).
--
-- With a Python that has Hugging Face `tokenizers` (--python, default
-- build/venv-hf/bin/python when present: python3 -m venv build/venv-hf &&
-- build/venv-hf/bin/pip install tokenizers), scripts/bench_text_tokenizer.py
-- loads the tokenizer.json dlua saved, encodes the same document lists with
-- encode_batch on one thread (ids compared by a checksum: they must be
-- identical) and trains its own BpeTrainer with the same settings.
--
-- Usage: dlua scripts/bench_text_tokenizer.lua [--vocab 4096] [--synthetic_mb 32]
--          [--rounds 3] [--python PATH] [--no_hf]
local dl = require "dl"
local text = dl.text
local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "scripts"
local opts = dofile(here .. "/benchopts.lua")("bench_text_tokenizer", arg,
  {vocab = 4096, synthetic_mb = 32, rounds = 3, python = ""}, {"no_hf"})

local FORTUNES = "/usr/share/games/fortunes"
local tmp = (os.getenv("TMPDIR") or "/tmp") .. "/dlua_bench_text"
os.execute("mkdir -p '" .. tmp .. "'")

local function write(path, s)
  local f = assert(io.open(path, "wb"))
  f:write(s)
  f:close()
end

-- best wall and CPU seconds of fn over the rounds; fn's last result
local function timed(fn)
  local best, best_cpu, res = math.huge, math.huge, nil
  for _ = 1, opts.rounds do
    local t0, c0 = dl.clock(), os.clock()
    res = fn()
    best = math.min(best, dl.clock() - t0)
    best_cpu = math.min(best_cpu, os.clock() - c0)
  end
  return best, best_cpu, res
end

-- the texts ------------------------------------------------------------------------------------

local fortunes = text.fortunes()
local docs, raw = {}, {}
for i, s in ipairs(fortunes) do docs[i] = s.text end
for _, c in ipairs(fortunes.categories) do
  local f = assert(io.open(FORTUNES .. "/" .. c, "rb"))
  raw[#raw + 1] = f:read("a")
  f:close()
end
local corpus = table.concat(raw)
local doc_bytes = 0
for _, d in ipairs(docs) do doc_bytes = doc_bytes + #d end

-- synthetic: corpus words in a seeded random order, with numbers and runs of
-- non-ASCII characters (valid UTF-8, so that Hugging Face sees the same text),
-- as documents of about 2 KB
local function synthetic(mb)
  local words = {}
  for w in corpus:gmatch("%S+") do words[#words + 1] = w end
  local x = 12345
  local function rand(n)
    x = (x * 6364136223846793005 + 1442695040888963407) & 0x7FFFFFFFFFFFFFFF
    return (x >> 33) % n
  end
  local seps = {" ", " ", " ", " ", " ", "\n", ", ", ".  ", "\n\n", "\t"}
  local odd = {"é", "ß", "Ω", "ж", "中", "文", "٣", "²", "Ⅻ", "\u{A0}", "\u{3000}", "\u{301}", "😀", "€", "'s", "'ll"}
  local out, n, target, docs_out, doc, dn = {}, 0, mb * 1e6, {}, {}, 0
  while n < target do
    local r, piece = rand(100), nil
    if r < 3 then
      piece = tostring(rand(100000))
    elseif r < 4 then
      local b = {}
      for k = 1, 1 + rand(6) do b[k] = odd[rand(#odd) + 1] end
      piece = table.concat(b)
    else
      piece = words[rand(#words) + 1]
    end
    piece = piece .. seps[rand(#seps) + 1]
    doc[#doc + 1] = piece
    n, dn = n + #piece, dn + #piece
    if dn >= 2000 then
      docs_out[#docs_out + 1] = table.concat(doc)
      doc, dn = {}, 0
    end
  end
  if #doc > 0 then docs_out[#docs_out + 1] = table.concat(doc) end
  return docs_out
end
local synth_docs = synthetic(opts.synthetic_mb)
local synth = table.concat(synth_docs)

-- a checksum of 0-based ids that the Python twin computes the same way
local function checksum(ids)
  local n = ids:numel()
  local w = dl.arange(0, n, {dtype = dl.int64}) % 1009 + 1
  return ((ids - 1) * w):sum():item(), n
end

-- dlua ----------------------------------------------------------------------------------------

local specials = {"<|endoftext|>", "<pad>"}
local train_s, train_cpu, tok = timed(function()
  return text.BPETokenizer.train(docs, {vocab_size = opts.vocab, special_tokens = specials})
end)
local none_tok = text.BPETokenizer.train(docs, {vocab_size = opts.vocab, special_tokens = specials, pretokenize = "none"})
local tok_path = tmp .. "/tokenizer.json"
tok:save(tok_path)

local rows = {}
-- one row: encode (texts a list: one call for all, ids concatenated), decode, check
local function encode_row(name, t, texts, key)
  local list = type(texts) == "table"
  local bytes, whole = 0, list and table.concat(texts) or texts
  bytes = #whole
  local wall, cpu, ids = timed(function()
    if list then return (t:encode_stream(texts)) end
    return t:encode(texts)
  end)
  local dwall, dcpu, back = timed(function() return t:decode(ids) end)
  assert(back == whole, "round trip failed on " .. name)
  local sum, n = checksum(ids)
  rows[#rows + 1] = {name = name, bytes = bytes, ids = n, wall = wall, cpu = cpu, dwall = dwall, dcpu = dcpu,
    sum = sum, key = key}
end
encode_row(string.format("fortunes, %d docs", #docs), tok, docs, "corpus")
encode_row("fortunes, one string", tok, corpus)
encode_row(string.format("synthetic, %d docs", #synth_docs), tok, synth_docs, "synthetic")
encode_row("synthetic, one string", tok, synth)
encode_row("fortunes, no pre-tok", none_tok, docs)

-- Hugging Face tokenizers ------------------------------------------------------------------------

local hf = {}
local python = opts.python
if python == "" then
  local venv = here .. "/../build/venv-hf/bin/python"
  if io.open(venv) then python = venv end
end
if not opts.no_hf and python ~= "" then
  write(tmp .. "/corpus.txt", table.concat(docs, "\0"))
  write(tmp .. "/synthetic.txt", table.concat(synth_docs, "\0"))
  local cmd = string.format("RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false '%s' '%s/bench_text_tokenizer.py' "
    .. "--tokenizer '%s' --dir '%s' --vocab %d --rounds %d 2>&1", python, here, tok_path, tmp, opts.vocab, opts.rounds)
  local p = io.popen(cmd)
  local out = p:read("a")
  if not p:close() then
    io.stderr:write("bench_text_tokenizer: the Python twin failed:\n", out, "\n")
  else
    for k, mbs, cpu_mbs, n, sum in out:gmatch("encode (%S+) mb_s=([%d.]+) mb_cpu_s=([%d.]+) ids=(%d+) sum=(%d+)") do
      hf[k] = {mbs = tonumber(mbs), cpu = tonumber(cpu_mbs), ids = tonumber(n), sum = math.tointeger(tonumber(sum))}
    end
    hf.train_s = tonumber(out:match("train s=([%d.]+)"))
    hf.train_cpu = tonumber(out:match("train s=[%d.]+ cpu_s=([%d.]+)"))
    hf.version = out:match("tokenizers=(%S+)")
  end
end

-- report --------------------------------------------------------------------------------------------

print(string.format("byte-level BPE, vocab %d (%d merges), GPT-2 pre-tokenization, %d fortunes (%.2f MB)",
  tok.vocab_size, tok.num_merges, #docs, doc_bytes / 1e6))
print(string.format("training: %.2f s (%.2f s CPU) = %.2f MB/s (%.2f MB/CPU-s)%s", train_s, train_cpu,
  doc_bytes / train_s / 1e6, doc_bytes / train_cpu / 1e6,
  hf.train_s and string.format("   HF tokenizers %s BpeTrainer: %.2f s (%.2f s CPU)", hf.version or "?", hf.train_s,
    hf.train_cpu) or ""))
print(string.format("%-26s %7s %9s %8s %9s %11s %8s %11s %10s", "encode", "MB", "ids", "MB/s", "MB/CPU-s",
  "decode MB/s", "HF MB/s", "HF MB/CPU-s", "HF ids"))
for _, r in ipairs(rows) do
  local h = r.key and hf[r.key]
  local same = h and (h.ids == r.ids and h.sum == r.sum and "identical" or "DIFFER") or "-"
  print(string.format("%-26s %7.2f %9d %8.1f %9.1f %11.1f %8s %11s %10s", r.name, r.bytes / 1e6, r.ids,
    r.bytes / r.wall / 1e6, r.bytes / r.cpu / 1e6, r.bytes / r.dwall / 1e6,
    h and string.format("%.1f", h.mbs) or "-", h and string.format("%.1f", h.cpu) or "-", same))
end
