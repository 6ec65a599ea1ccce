-- test_text_data.lua - dl.text's data side: the fortunes reader (against an
-- independent awk count, and a made-up fortunes folder), TextDataset with
-- pad_collate (shapes, padding, masks, labels), the DataLoader with and
-- without workers, LMDataset blocks, seeded splits, and bad input.
local T = require "testlib"
local dl = require "dl"
local text = dl.text

local FORTUNES = "/usr/share/games/fortunes"

local function write(path, s)
  local f = assert(io.open(path, "wb"))
  f:write(s)
  f:close()
end

local function small_tokenizer()
  local f = text.fortunes({"computers", "linux", "zippy"})
  local docs = {}
  for i, s in ipairs(f) do docs[i] = s.text end
  return text.BPETokenizer.train(docs, {vocab_size = 600, special_tokens = {"<pad>", "<|endoftext|>", "<cls>"}}), f
end

-- --- fortunes ----------------------------------------------------------------------------------

T.case("fortunes: quotes per category match an awk count", function()
  local f = text.fortunes()
  T.truthy(#f.categories >= 40, "the Debian package has 40+ categories")
  local per = {}
  for _, s in ipairs(f) do
    per[s.label] = (per[s.label] or 0) + 1
    T.eq(f.categories[s.label], s.category)
    T.truthy(s.text:find("%S") and s.text:sub(-1) ~= "\n" and s.text:sub(1, 1) ~= "\n",
      "a quote has text and no newline at either end")
  end
  for i = 2, #f.categories do T.truthy(f.categories[i - 1] < f.categories[i], "categories sorted by name") end
  -- awk: a quote ends at a line holding only "%" (or at the end of the file)
  -- and counts when it has a character other than white space
  local awk = [[awk 'FNR == 1 { if (NR > 1) { if (cur ~ /[^ \t\n\r\v\f]/) q++; print q } q = 0; cur = "" }
    /^%$/ { if (cur ~ /[^ \t\n\r\v\f]/) q++; cur = ""; next } { cur = cur $0 "\n" }
    END { if (cur ~ /[^ \t\n\r\v\f]/) q++; print q }']]
  local files = {}
  for i, c in ipairs(f.categories) do files[i] = "'" .. FORTUNES .. "/" .. c .. "'" end
  local p = assert(io.popen(awk .. " " .. table.concat(files, " ")))
  local counts = {}
  for line in p:lines() do counts[#counts + 1] = tonumber(line) end
  p:close()
  T.eq(#counts, #f.categories)
  local total = 0
  for i, c in ipairs(f.categories) do
    T.eq(per[i], counts[i], "quotes in " .. c)
    total = total + counts[i]
  end
  T.eq(#f, total)
  -- a few known facts: pratchett has 2 quotes (no closing %), tao 82 (3 empty ones)
  local byname = {}
  for i, c in ipairs(f.categories) do byname[c] = per[i] end
  T.eq(byname.pratchett, 2)
  T.eq(byname.tao, 82)
end)

T.case("fortunes: chosen categories get labels in the order given", function()
  local f = text.fortunes({"zippy", "art"})
  T.eq(f.categories[1], "zippy")
  T.eq(f.categories[2], "art")
  local n = {0, 0}
  for _, s in ipairs(f) do n[s.label] = n[s.label] + 1 end
  local all = text.fortunes()
  local want = {}
  for _, s in ipairs(all) do want[s.category] = (want[s.category] or 0) + 1 end
  T.eq(n[1], want.zippy)
  T.eq(n[2], want.art)
  T.eq(text.fortunes("pratchett")[2].text:sub(1, 14), "The Assassin m")
end)

T.case("fortunes: a made-up folder (.u8, .dat, off/, rot13, CRLF, empty quotes)", function()
  local root = T.tmpdir() .. "/fortunes_fake"
  os.execute("rm -rf '" .. root .. "' && mkdir -p '" .. root .. "/off' '" .. root .. "/sub'")
  write(root .. "/alpha", "one\n%\n\n%\n\ntwo\nlines\n\n%\n  \t\n%\nthree")
  write(root .. "/beta", "plain version\n%\n")
  write(root .. "/beta.u8", "caf\u{E9} version\n%\n")
  write(root .. "/gamma.u8", "%\nonly u8\n")
  write(root .. "/crlf", "a\r\n%\r\nb\r\n")
  write(root .. "/alpha.dat", string.rep("\0", 24))
  write(root .. "/notes.txt", "not a fortune file\n")
  write(root .. "/.hidden", "hidden\n")
  write(root .. "/sub/delta", "in a folder\n")
  write(root .. "/off/rude", "Uryyb, jbeyq!\n%\nFrperg\n")
  -- strfile header: version, count, longest, shortest, flags (STR_ROTATED = 4), delimiter
  write(root .. "/off/rude.dat", string.pack(">I4I4I4I4I4", 2, 2, 14, 7, 4) .. "%\0\0\0")
  write(root .. "/off/plain", "not rotated\n")
  local f = text.fortunes(nil, {root = root})
  T.eq(table.concat(f.categories, ","), "alpha,beta,crlf,gamma")
  local got = {}
  for _, s in ipairs(f) do got[#got + 1] = s.category .. "=" .. s.text end
  T.eq(table.concat(got, "|"), "alpha=one|alpha=two\nlines|alpha=three|beta=caf\u{E9} version|crlf=a|crlf=b|gamma=only u8")
  local off = text.fortunes(nil, {root = root, offensive = true})
  T.eq(table.concat(off.categories, ","), "alpha,beta,crlf,gamma,off/plain,off/rude")
  got = {}
  for _, s in ipairs(off) do
    if s.category:sub(1, 4) == "off/" then got[#got + 1] = s.text end
  end
  T.eq(table.concat(got, "|"), "not rotated|Hello, world!|Secret")
  T.raises(function() text.fortunes({"alpha", "nope"}, {root = root}) end,
    "fortunes: no category 'nope' in '" .. root .. "' (there are: alpha, beta, crlf, gamma)")
  T.raises(function() text.fortunes({"alpha", "alpha"}, {root = root}) end, "category 'alpha' is listed twice")
  T.raises(function() text.fortunes(nil, {root = root .. "/missing"}) end, "fortunes: cannot read the fortunes folder")
  T.raises(function() text.fortunes(nil, {root = root .. "/sub/delta"}) end, "cannot read the fortunes folder")
  T.raises(function() text.fortunes({}, {root = root}) end, "categories must be a non-empty list")
  T.raises(function() text.fortunes(nil, {rot = 1}) end, "unknown option 'rot'")
  os.execute("mkdir -p '" .. root .. "/empty'")
  T.raises(function() text.fortunes(nil, {root = root .. "/empty"}) end, "no fortune files in")
end)

-- --- TextDataset and padding --------------------------------------------------------------------

T.case("TextDataset: ids, labels, truncation, bos/eos", function()
  local tok, f = small_tokenizer()
  local ds = text.TextDataset(f, tok)
  T.eq(#ds, #f)
  for _, i in ipairs{1, 2, 100, #f} do
    local ids, label = ds:get(i)
    T.eq(ids.dtype, dl.int64)
    T.eq(table.concat(ids:tolist(), ","), table.concat(tok:encode(f[i].text):tolist(), ","), "sample " .. i)
    T.eq(label, f[i].label)
    T.eq(ds:length(i), ids:numel())
  end
  local cls, eot = tok:token_to_id("<cls>"), tok:token_to_id("<|endoftext|>")
  local d2 = text.TextDataset(f, tok, {max_length = 8, bos = "<cls>", eos = eot})
  local long
  for i = 1, #f do
    if tok:encode(f[i].text):numel() > 20 then long = i break end
  end
  local ids = d2:get(long):tolist()
  T.eq(#ids, 8)
  T.eq(ids[1], cls)
  T.eq(ids[8], eot)
  local full = tok:encode(f[long].text):tolist()
  for k = 2, 7 do T.eq(ids[k], full[k - 1]) end
  -- plain strings, labels from the options, no labels at all
  local d3 = text.TextDataset({"hello", "there world"}, tok, {labels = {2, 1}})
  local x, y = d3:get(2)
  T.eq(tok:decode(x), "there world")
  T.eq(y, 1)
  local d4 = text.TextDataset({"a", ""}, tok)
  T.eq(select("#", d4:get(1)), 1, "no label")
  T.eq(d4:get(2):numel(), 0, "an empty text has no ids")
  T.raises(function() ds:get(0) end, "TextDataset:get: index 0 out of range")
  T.raises(function() text.TextDataset({"a"}, {}) end, "a tokenizer (dl.text.BPETokenizer or CharTokenizer) is required")
  T.raises(function() text.TextDataset({"a", 5}, tok) end, "sample 2 must be a string or a {text =, label =} table")
  T.raises(function() text.TextDataset({{text = "a", label = 1}, {text = "b"}}, tok) end, "some samples have a label")
  T.raises(function() text.TextDataset({"a"}, tok, {labels = {1, 2}}) end, "labels must be a list of 1 integers")
  T.raises(function() text.TextDataset({"a"}, tok, {bos = "<nope>"}) end, 'bos "<nope>" is not a token')
  T.raises(function() text.TextDataset({"a"}, tok, {max_length = 2, bos = 1, eos = 2}) end, "max_length must be at least 3")
end)

T.case("pad_collate: shapes, padding, key padding mask, labels", function()
  local tok = small_tokenizer()
  local pad = tok:token_to_id("<pad>")
  local texts = {"a", "hello world, how are you", "", "xyz xyz"}
  local ds = text.TextDataset(texts, tok, {labels = {3, 1, 2, 2}})
  local collate = text.pad_collate{pad_id = pad}
  local samples = {}
  for i = 1, #ds do samples[i] = table.pack(ds:get(i)) end
  local b = collate(samples)
  local lens = {}
  for i, s in ipairs(texts) do lens[i] = tok:encode(s):numel() end
  local T_ = math.max(table.unpack(lens))
  T.shape_eq(b.ids, {4, T_})
  T.eq(b.ids.dtype, dl.int64)
  T.eq(table.concat(b.lengths:tolist(), ","), table.concat(lens, ","))
  T.eq(table.concat(b.labels:tolist(), ","), "3,1,2,2")
  T.eq(b.labels.dtype, dl.int64)
  T.eq(b.key_padding_mask.dtype, dl.bool)
  T.shape_eq(b.key_padding_mask, {4, T_})
  local ids, mask = b.ids:tolist(), b.key_padding_mask:tolist()
  for i = 1, 4 do
    local want = tok:encode(texts[i]):tolist()
    for t = 1, T_ do
      if t <= lens[i] then
        T.eq(ids[i][t], want[t])
        T.eq(mask[i][t], false)
      else
        T.eq(ids[i][t], pad, "padding id")
        T.eq(mask[i][t], true, "mask at padding")
      end
    end
  end
  -- unlabeled samples: no labels field
  local nb = collate({table.pack(tok:encode("a b")), table.pack(tok:encode("c"))})
  T.eq(nb.labels, nil)
  T.shape_eq(nb.ids, {2, 2})
  T.raises(function() text.pad_collate{} end, "pad_id is required")
  T.raises(function() collate({}) end, "an empty batch")
  T.raises(function() collate({{dl.zeros(2, 2), n = 1}}) end, "sample 1's ids are not a 1-D tensor")
end)

T.case("DataLoader: the same batches with and without workers", function()
  local tok, f = small_tokenizer()
  local ds = text.TextDataset(f, tok, {max_length = 48})
  local collate = text.pad_collate{pad_id = tok:token_to_id("<pad>")}
  local function batches(workers)
    local loader = dl.data.DataLoader(ds, {batch_size = 16, shuffle = true, seed = 5, num_workers = workers,
      collate = collate})
    local out = {}
    for i, b in loader:iter() do
      out[i] = table.concat(b.ids:view(-1):tolist(), ",") .. "|" .. table.concat(b.labels:tolist(), ",") .. "|" ..
        table.concat(b.lengths:tolist(), ",")
      T.truthy(b.ids.shape[2] <= 48)
    end
    return out, #loader
  end
  local a, n = batches(0)
  local b = batches(2)
  T.eq(#a, n)
  T.eq(n, (#ds + 15) // 16)
  for i = 1, #a do T.eq(a[i], b[i], "batch " .. i) end
  -- every sample once per epoch
  local seen = 0
  for _, b1 in dl.data.DataLoader(ds, {batch_size = 100, collate = collate}):iter() do seen = seen + b1.ids.shape[1] end
  T.eq(seen, #ds)
end)

-- --- language-model blocks ------------------------------------------------------------------------

T.case("LMDataset: blocks, targets shifted by one, strides", function()
  local tokens = dl.arange(1, 22, {dtype = dl.int64}) -- 1..21
  local ds = text.LMDataset(tokens, 5)
  -- (21 - 1 - 5) // 5 + 1 = 4 blocks starting at 1, 6, 11, 16
  T.eq(#ds, 4)
  local x, y = ds:get(4)
  T.eq(table.concat(x:tolist(), ","), "16,17,18,19,20")
  T.eq(table.concat(y:tolist(), ","), "17,18,19,20,21")
  local s = text.LMDataset(tokens, 5, {stride = 3})
  T.eq(#s, (21 - 1 - 5) // 3 + 1)
  T.eq(s:get(2):tolist()[1], 4)
  T.eq(#text.LMDataset({1, 2, 3}, 3), 0, "too short for one block")
  T.eq(#text.LMDataset({1, 2, 3, 4}, 3), 1)
  -- batches from the DataLoader's default collate
  local loader = dl.data.DataLoader(ds, {batch_size = 3})
  for i, bx, by in loader:iter() do
    if i == 1 then
      T.shape_eq(bx, {3, 5})
      T.eq(table.concat(by[2]:tolist(), ","), "7,8,9,10,11")
    end
  end
  T.raises(function() text.LMDataset(dl.zeros(2, 3), 2) end, "tokens must be a 1-D tensor")
  T.raises(function() text.LMDataset(tokens, 0) end, "block_size must be at least 1")
  T.raises(function() ds:get(5) end, "LMDataset:get: index 5 out of range (dataset of 4)")
end)

T.case("train_val_split and lm_datasets are seeded", function()
  local list = {}
  for i = 1, 50 do list[i] = i end
  local a, b = text.train_val_split(list, 0.2, {seed = 42})
  local c, d = text.train_val_split(list, 0.2, {seed = 42})
  local e = select(2, text.train_val_split(list, 0.2, {seed = 43}))
  T.eq(#a, 40)
  T.eq(#b, 10)
  T.eq(table.concat(b, ","), table.concat(d, ","), "same seed, same split")
  T.eq(table.concat(a, ","), table.concat(c, ","))
  T.truthy(table.concat(b, ",") ~= table.concat(e, ","), "another seed, another split")
  local seen = {}
  for _, v in ipairs(a) do seen[v] = true end
  for _, v in ipairs(b) do
    T.truthy(not seen[v], "disjoint")
    seen[v] = true
  end
  for i = 1, 50 do T.truthy(seen[i], "covering") end
  for i = 2, #a do T.truthy(a[i - 1] < a[i], "order kept") end
  T.raises(function() text.train_val_split(list, 1.5) end, "val_fraction must be a number from 0 to 1")

  local tok, f = small_tokenizer()
  local tr, va = text.lm_datasets(f, tok, 32, {seed = 1, val_fraction = 0.1, separator = "<|endoftext|>"})
  local tr2 = text.lm_datasets(f, tok, 32, {seed = 1, val_fraction = 0.1, separator = "<|endoftext|>"})
  T.eq(table.concat(tr:get(7):tolist(), ","), table.concat(tr2:get(7):tolist(), ","), "seeded")
  local train_docs, val_docs = text.train_val_split(f, 0.1, {seed = 1})
  local ntok = 0
  for _, d in ipairs(train_docs) do ntok = ntok + tok:encode(d.text):numel() + 1 end
  T.eq(tr.tokens:numel(), ntok, "train stream: its documents and one separator each")
  T.eq(#tr, (ntok - 1 - 32) // 32 + 1)
  T.eq(va.tokens:eq(tok:token_to_id("<|endoftext|>")):sum():item(), #val_docs, "one separator per document")
  T.eq(tok:decode(tr.tokens:narrow(1, 1, tok:encode(train_docs[1].text):numel())), train_docs[1].text)
end)

T.done()
