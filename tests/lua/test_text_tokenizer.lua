-- test_text_tokenizer.lua - dl.text's tokenizers: BPE merges checked by hand,
-- encoding against a plain Lua reference, GPT-2 pre-tokenization against a
-- regex engine (Python's re), exact round trips on any bytes and on the whole
-- fortunes corpus, special tokens, save/load (Hugging Face tokenizer.json),
-- the character tokenizer, and bad input.
local T = require "testlib"
local dl = require "dl"
local text = dl.text

local FORTUNES = "/usr/share/games/fortunes"

-- a deterministic byte generator (no dependence on dl's RNG)
local function lcg(seed)
  local x = seed
  return function(n)
    x = (x * 6364136223846793005 + 1442695040888963407) & 0x7FFFFFFFFFFFFFFF
    return (x >> 33) % n
  end
end

local function random_bytes(rand, n)
  local b = {}
  for i = 1, n do b[i] = string.char(rand(256)) end
  return table.concat(b)
end

local function corpus_texts()
  local f = text.fortunes()
  local docs = {}
  for i, s in ipairs(f) do docs[i] = s.text end
  return docs
end

local function same_list(got, want, msg)
  T.eq(#got, #want, (msg or "lists") .. ": length")
  for i = 1, #want do
    if got[i] ~= want[i] then
      T.fail(string.format("%s: item %d is %q, expected %q", msg or "lists", i, tostring(got[i]), tostring(want[i])))
    end
  end
end

local function merges_as_strings(tok)
  local out = {}
  for i, m in ipairs(tok:merges()) do out[i] = m[1] .. "+" .. m[2] end
  return out
end

-- --- training, checked by hand -----------------------------------------------------------------

T.case("BPE merges by hand: aaabdaaabac without pre-tokenization", function()
  -- The Wikipedia example.  Counts, ties to the smallest (left id, right id);
  -- byte ids follow byte order, merged tokens come later:
  --   aaabdaaabac: aa 4, ab 2, bd da ba ac 1          -> a+a (4)
  --   Z=aa: ZabdZabac: Za 2, ab 2 (tie: a < Z)         -> a+b
  --   Y=ab: ZYdZYac: ZY 2                               -> aa+ab
  --   X=aaab: XdXac: Xd dX Xa ac all 1 (min_frequency 1): smallest left id a -> a+c
  --   W=ac: XdXW: Xd dX XW 1: smallest left id d        -> d+aaab
  --   X V=daaab W: XV VW: X < V                         -> aaab+daaab
  --   U W                                              -> aaabdaaab+ac
  local tok = text.BPETokenizer.train("aaabdaaabac", {vocab_size = 1000, pretokenize = "none", min_frequency = 1})
  same_list(merges_as_strings(tok), {"a+a", "a+b", "aa+ab", "a+c", "d+aaab", "aaab+daaab", "aaabdaaab+ac"}, "merges")
  T.eq(tok.vocab_size, 256 + 7)
  T.eq(tok:encode("aaabdaaabac"):numel(), 1)
  -- with the default min_frequency = 2 only the first three pairs qualify
  local tok2 = text.BPETokenizer.train("aaabdaaabac", {vocab_size = 1000, pretokenize = "none"})
  same_list(merges_as_strings(tok2), {"a+a", "a+b", "aa+ab"}, "merges (min_frequency 2)")
  -- vocab_size caps the merges
  local tok3 = text.BPETokenizer.train("aaabdaaabac", {vocab_size = 258, pretokenize = "none"})
  same_list(merges_as_strings(tok3), {"a+a", "a+b"}, "merges (vocab_size 258)")
end)

T.case("BPE merges by hand: GPT-2 pieces, specials first", function()
  -- pieces: "low" 1, " low" 4, " lower" 2, " newest" 6, " widest" 3 (the
  -- space belongs to the word after it; "<pad>" is cut out).  Ids: <pad> 1,
  -- <|endoftext|> 2, byte b is b + 3.
  --  e+s 9 (tie with s+t 9: e < s) | es+t 9 | l+o 7 (w+e is 2 now: newest
  --  has w+es) tie o+w 7: l < o | lo+w 7 | " "+n 6, " "+low 6, e+w 6, n+e 6:
  --  " " is the smallest left id -> " "+n, then " "+low | e+w (e < " n") |
  --  " n"+ew | " new"+est | " "+w 3, d+est 3, i+d 3, w+i 3: " " smallest ...
  local corpus = "low<pad> low low low low lower lower newest newest newest newest newest newest widest widest widest"
  local tok = text.BPETokenizer.train(corpus, {vocab_size = 1000, special_tokens = {"<pad>", "<|endoftext|>"}})
  local want = {"e+s", "es+t", "l+o", "lo+w", " +n", " +low", "e+w", " n+ew", " new+est", " +w", "d+est",
    "i+dest", " w+idest", "e+r", " low+er"}
  same_list(merges_as_strings(tok), want, "merges")
  T.eq(tok:token_to_id("<pad>"), 1)
  T.eq(tok:token_to_id("<|endoftext|>"), 2)
  T.eq(tok:token_to_id("a"), string.byte("a") + 3)
  T.eq(tok:token_to_id("es"), 256 + 2 + 1)
  T.eq(tok:token_to_id(" lower"), 256 + 2 + 15)
  same_list(tok:encode(" lowest newer", {as = "table"}),
    {tok:token_to_id(" low"), tok:token_to_id("est"), tok:token_to_id(" new"), tok:token_to_id("er")}, "encode")
  -- "<pad>" joins no merge: no token holds any of its characters next to others
  for _, m in ipairs(tok:merges()) do T.truthy(not (m[1] .. m[2]):find("[<>|]"), "a merge crossed a special token") end
end)

T.case("BPE training is deterministic and stops at vocab_size", function()
  local docs = {}
  local f = assert(io.open(FORTUNES .. "/computers", "rb"))
  local s = f:read("a")
  f:close()
  local a = text.BPETokenizer.train(s, {vocab_size = 700, special_tokens = {"<pad>"}})
  local b = text.BPETokenizer.train_files(FORTUNES .. "/computers", {vocab_size = 700, special_tokens = {"<pad>"}})
  T.eq(a.vocab_size, 700)
  T.eq(a:to_json(), b:to_json(), "same text, same tokenizer")
  docs = nil
end)

-- --- encoding against a reference -------------------------------------------------------------

-- Plain BPE in Lua: per piece, merge the adjacent pair of lowest rank
-- (leftmost first) until none is left; ids by the tokens' bytes.
local function reference_encode(tok, s)
  local rank = {}
  for r, m in ipairs(tok:merges()) do
    rank[m[1]] = rank[m[1]] or {}
    rank[m[1]][m[2]] = r
  end
  local pieces = tok.pretokenize == "gpt2" and text.pretokenize(s) or (#s > 0 and {s} or {})
  local ids = {}
  for _, p in ipairs(pieces) do
    local sym = {}
    for i = 1, #p do sym[i] = p:sub(i, i) end
    while true do
      local best, at = math.huge, nil
      for i = 1, #sym - 1 do
        local r = rank[sym[i]] and rank[sym[i]][sym[i + 1]]
        if r and r < best then best, at = r, i end
      end
      if not at then break end
      sym[at] = sym[at] .. sym[at + 1]
      table.remove(sym, at + 1)
    end
    for _, x in ipairs(sym) do ids[#ids + 1] = tok:token_to_id(x) end
  end
  return ids
end

T.case("BPE encoding equals a plain reference (short and long pieces)", function()
  local docs = corpus_texts()
  local tok = text.BPETokenizer.train(docs, {vocab_size = 1500})
  local rand = lcg(7)
  for k = 1, 40 do
    local d = docs[rand(#docs) + 1]
    same_list(tok:encode(d, {as = "table"}), reference_encode(tok, d), "fortune " .. k)
  end
  -- no pre-tokenization: whole texts are single pieces (> 64 bytes: the heap path)
  local none = text.BPETokenizer.train(docs, {vocab_size = 600, pretokenize = "none"})
  for k = 1, 6 do
    local d = docs[rand(#docs) + 1]
    same_list(none:encode(d, {as = "table"}), reference_encode(none, d), "whole fortune " .. k)
  end
  -- runs of one letter (a+a merges overlap) and random letters, long and short
  local s = string.rep("a", 300) .. " " .. string.rep("ab", 100) .. string.rep("e", 65)
  same_list(none:encode(s, {as = "table"}), reference_encode(none, s), "runs")
  same_list(tok:encode(s, {as = "table"}), reference_encode(tok, s), "runs (gpt2)")
  local letters = "etaoin shrdlu\n"
  for k = 1, 5 do
    local b = {}
    for i = 1, 50 + rand(400) do
      local j = rand(#letters) + 1
      b[i] = letters:sub(j, j)
    end
    local r = table.concat(b)
    same_list(none:encode(r, {as = "table"}), reference_encode(none, r), "random letters " .. k)
  end
end)

-- --- pre-tokenization against a regex engine ------------------------------------------------

T.case("GPT-2 pre-tokenization equals the regex (Python re) on Unicode text", function()
  -- characters of long-assigned Unicode: letters, numbers (Nd, Nl, No),
  -- white space (ASCII, NBSP, em space, ideographic, line separator, NEL),
  -- marks, symbols, emoji, apostrophes for the contractions
  local pool = {"a", "b", "Z", "s", "t", "d", "m", "l", "r", "e", "v", "1", "9", "0", " ", " ", " ", "  ",
    "\t", "\n", "\r", "\v", "\f", "'", "'", "'s", "'ll", "'re", "'ve", "'d", "'m", "'t", "!", ".", ",", "-", "_",
    "é", "ß", "Ω", "ж", "中", "文", "ｶ", "٣", "０", "²", "Ⅻ", "½", "\u{A0}", "\u{2003}", "\u{3000}",
    "\u{2028}", "\u{85}", "\u{301}", "😀", "€", "©", "\u{1C}", "\u{200B}", "ǅ", "ʰ", "Ⅰ", "𝟙"}
  local rand = lcg(11)
  local cases = {"", " ", "  ", "a", "Hello, world!  It's 2024...\n\n  ok  ", "they're we've I'm",
    "x  \n y", "   ", "'", "' s", "\u{3000}\u{3000}a", "a\u{A0}b", "I'LL", "don't", "  \t a"}
  for k = 1, 300 do
    local b = {}
    for i = 1, rand(25) do b[i] = pool[rand(#pool) + 1] end
    cases[#cases + 1] = table.concat(b)
  end
  local tmp = T.tmpdir() .. "/pretok_cases.txt"
  local f = assert(io.open(tmp, "w"))
  for _, c in ipairs(cases) do f:write((c:gsub(".", function(ch) return string.format("%02x", ch:byte()) end)), "\n") end
  f:close()
  local p = assert(io.popen(T.python() .. " " .. T.dir .. "/pretok_oracle.py " .. tmp .. " 2>&1"))
  local out = p:read("a")
  T.truthy(p:close(), "pretok_oracle.py failed: " .. out:sub(1, 500))
  local k = 0
  for line in (out .. ""):gmatch("([^\n]*)\n") do
    k = k + 1
    local want = {}
    for hex in line:gmatch("[^,]+") do want[#want + 1] = (hex:gsub("..", function(h) return string.char(tonumber(h, 16)) end)) end
    same_list(text.pretokenize(cases[k]), want, string.format("pieces of case %d %q", k, cases[k]))
  end
  T.eq(k, #cases, "oracle answers")
end)

T.case("pre-tokenization: bytes that are not UTF-8 are 'other' characters", function()
  same_list(text.pretokenize("ab\255\254cd \128x"), {"ab", "\255\254", "cd", " \128", "x"}, "pieces")
  same_list(text.pretokenize("\0\0 a"), {"\0\0", " a"}, "NUL bytes")
  same_list(text.pretokenize("\xC3"), {"\xC3"}, "a truncated character")
end)

-- --- round trips ---------------------------------------------------------------------------------

T.case("BPE round trip on any bytes (invalid UTF-8, NUL, empty)", function()
  local docs = corpus_texts()
  local sp = {"<pad>", "<|endoftext|>"}
  local toks = {text.BPETokenizer.train(docs, {vocab_size = 1200, special_tokens = sp}),
    text.BPETokenizer.train(docs, {vocab_size = 800, special_tokens = sp, pretokenize = "none"})}
  local rand = lcg(3)
  for _, tok in ipairs(toks) do
    T.eq(tok:decode(tok:encode("")), "")
    T.eq(tok:encode(""):numel(), 0)
    T.eq(tok:decode({}), "")
    for k = 1, 200 do
      local s = random_bytes(rand, rand(k < 150 and 40 or 3000))
      T.eq(tok:decode(tok:encode(s)), s, "random bytes " .. k)
    end
    local odd = {"\0", "\0\0\0", "\255", "\xC3\x28", "\xE2\x82", "\xF0\x9F\x98", "\xED\xA0\x80", "\xC0\xAF",
      "a\0b\255c <pad>\0", "<|endoftext|><|endoftext|>", "<pad", "<|endoftext|", string.rep("\255", 100)}
    for _, s in ipairs(odd) do
      T.eq(tok:decode(tok:encode(s)), s, string.format("%q", s))
      T.eq(tok:decode(tok:encode(s, {split_special_tokens = true})), s, string.format("%q (split)", s))
    end
    -- tables and tensors give the same ids
    local s = docs[5] .. "\0\255"
    same_list(tok:encode(s, {as = "table"}), tok:encode(s):tolist(), "table vs tensor")
    T.eq(tok:decode(tok:encode(s, {as = "table"})), s)
    T.eq(tok:decode(tok:encode(s):to(dl.int32)), s, "int32 ids")
    local ids = tok:encode(s)
    T.eq(tok:decode(dl.cat({ids, ids}):narrow(1, ids:numel() + 1, ids:numel())), s, "a view")
  end
end)

T.case("BPE round trip on the whole fortunes corpus", function()
  local all = {}
  for _, n in ipairs(text.fortunes().categories) do
    local f = assert(io.open(FORTUNES .. "/" .. n, "rb"))
    all[#all + 1] = f:read("a")
    f:close()
  end
  local s = table.concat(all)
  local tok = text.BPETokenizer.train_files(FORTUNES .. "/cookie", {vocab_size = 2000})
  local ids = tok:encode(s)
  T.truthy(ids:numel() < #s / 2.5, "the merges compress the corpus")
  T.eq(tok:decode(ids), s, "whole corpus")
  T.eq(ids.dtype, dl.int64)
  T.truthy(ids:min():item() >= 1 and ids:max():item() <= tok.vocab_size, "ids are 1-based and in range")
end)

-- --- special tokens ---------------------------------------------------------------------------------

T.case("special tokens are never split", function()
  local sp = {"<pad>", "<|endoftext|>", "<|end|>"}
  local tok = text.BPETokenizer.train(corpus_texts(), {vocab_size = 800, special_tokens = sp})
  local eot, pad, fin = tok:token_to_id("<|endoftext|>"), tok:token_to_id("<pad>"), tok:token_to_id("<|end|>")
  same_list({pad, eot, fin}, {1, 2, 3}, "fixed ids, in the order given")
  T.truthy(tok:is_special(eot) and not tok:is_special(10))
  same_list(tok:special_ids(), {1, 2, 3}, "special_ids")
  local ids = tok:encode("hello<|endoftext|>world<pad><pad>x<|end|><|endoftext", {as = "table"})
  local count = {}
  for _, id in ipairs(ids) do count[id] = (count[id] or 0) + 1 end
  T.eq(count[eot], 1)
  T.eq(count[pad], 2)
  T.eq(count[fin], 1, "the longest special wins, the shorter one still matches alone")
  -- in the middle of a word, at both ends
  local e = tok:encode("<|endoftext|>ab<|endoftext|>cd<|endoftext|>", {as = "table"})
  T.eq(e[1], eot)
  T.eq(e[#e], eot)
  T.eq(tok:decode(e), "<|endoftext|>ab<|endoftext|>cd<|endoftext|>")
  T.eq(tok:decode(e, {skip_special_tokens = true}), "abcd")
  -- split_special_tokens = true: the text is ordinary text
  for _, id in ipairs(tok:encode("a<pad>b", {as = "table", split_special_tokens = true})) do
    T.truthy(id ~= pad, "no special id when split")
  end
  -- training text full of specials: nothing merges across them
  local t2 = text.BPETokenizer.train({string.rep("ab<pad>", 50), string.rep("<|endoftext|>b", 40)},
    {vocab_size = 400, special_tokens = sp, pretokenize = "none", min_frequency = 1})
  for _, m in ipairs(t2:merges()) do
    local joined = m[1] .. m[2]
    T.truthy(not joined:find("<", 1, true) and not joined:find(">", 1, true), "merge " .. joined)
  end
end)

-- --- files ------------------------------------------------------------------------------------------

T.case("save / load round trip (tokenizer.json)", function()
  local docs = corpus_texts()
  local tok = text.BPETokenizer.train(docs, {vocab_size = 1000, special_tokens = {"<pad>", "<|endoftext|>"}})
  local path = T.tmpdir() .. "/bpe_tokenizer.json"
  tok:save(path)
  local back = text.load_tokenizer(path)
  T.eq(getmetatable(back), text.BPETokenizer)
  T.eq(back.vocab_size, tok.vocab_size)
  same_list(back.special_tokens, {"<pad>", "<|endoftext|>"}, "specials")
  same_list(merges_as_strings(back), merges_as_strings(tok), "merges")
  local all = table.concat(docs, "<|endoftext|>", 1, 2000)
  same_list(back:encode(all):tolist(), tok:encode(all):tolist(), "same ids")
  T.eq(back:to_json(), tok:to_json(), "saving again gives the same file")
  local none = text.BPETokenizer.train(docs, {vocab_size = 400, pretokenize = "none"})
  none:save(path)
  local nb = text.BPETokenizer.load(path)
  T.eq(nb.pretokenize, "none")
  same_list(nb:encode(docs[3]):tolist(), none:encode(docs[3]):tolist(), "no pre-tokenization")
  -- the file is Hugging Face's format: byte-level characters, 0-based ids
  local j = tok:to_json()
  local obj = dl._train.json_decode(j)
  T.eq(obj.model.type, "BPE")
  T.eq(obj.pre_tokenizer.type, "ByteLevel")
  T.eq(obj.added_tokens[1].content, "<pad>")
  T.eq(obj.added_tokens[1].id, 0)
  T.eq(obj.model.vocab["\u{120}"], tok:token_to_id(" ") - 1, "a space is 'Ġ'")
  T.eq(obj.model.vocab["\u{10A}"], tok:token_to_id("\n") - 1, "a newline is 'Ċ'")
  T.eq(obj.model.vocab["a"], tok:token_to_id("a") - 1)
  T.eq(obj.model.merges[1], (tok:merges()[1][1]:gsub(" ", "\u{120}")) .. " " .. (tok:merges()[1][2]:gsub(" ", "\u{120}")))
end)

-- GPT-2's byte-to-character map, written out here independently of the C
-- code: printable bytes stand for themselves, the others are U+0100 + k.
local function byte_chars()
  local map, k = {}, 0
  for b = 0, 255 do
    if (b >= 33 and b <= 126) or (b >= 161 and b <= 172) or (b >= 174) then
      map[b] = utf8.char(b)
    else
      map[b] = utf8.char(256 + k)
      k = k + 1
    end
  end
  return map
end

local function json_str(s) return '"' .. s:gsub('[\\"]', "\\%0") .. '"' end

-- a tokenizer.json with ids in reverse byte order, two merges and an added token
local function handmade_json(extra)
  local map = byte_chars()
  local v = {}
  for b = 0, 255 do v[#v + 1] = json_str(map[b]) .. ": " .. (255 - b) end
  v[#v + 1] = json_str(map[32] .. "c") .. ": 256"
  v[#v + 1] = '"<eos>": 257'
  v[#v + 1] = json_str(map[32] .. "ca") .. ": 258"
  return [[{"version": "1.0", "added_tokens": [{"id": 257, "content": "<eos>", "special": true}],
    "normalizer": null, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
    "model": {"type": "BPE", "vocab": {]] .. table.concat(v, ", ") .. [[},
    "merges": [ "]] .. map[32] .. [[ c", ["]] .. map[32] .. [[c", "a"] ]}]] .. (extra or "") .. "}"
end

T.case("loading a hand-made tokenizer.json", function()
  local tok = text.tokenizer_from_json(handmade_json())
  T.eq(tok.vocab_size, 259)
  -- ids: byte b is 256 - b (1-based), " c" 257, <eos> 258, " ca" 259
  same_list(tok:encode("a cat<eos>", {as = "table"}), {256 - 97, 259, 256 - 116, 258}, "ids")
  same_list(tok:encode(" c c", {as = "table"}), {257, 257}, "ids")
  T.eq(tok:decode({259, 258, 1}), " ca<eos>\255")
  T.eq(tok:decode({259, 258, 1}, {skip_special_tokens = true}), " ca\255")
end)

-- --- the character tokenizer ----------------------------------------------------------------------

T.case("CharTokenizer: vocabulary, unknown characters, save/load", function()
  local tok = text.CharTokenizer.train({"hello", "wörld ☃"}, {special_tokens = {"<pad>"}, unk_token = "<unk>"})
  -- specials first (the unk token joins them), then characters in code-point order
  T.eq(tok.vocab_size, 2 + 10)
  T.eq(tok:token_to_id("<pad>"), 1)
  T.eq(tok:token_to_id("<unk>"), 2)
  T.eq(tok:id_to_token(3), " ")
  T.eq(tok:id_to_token(4), "d")
  T.eq(tok:id_to_token(11), "ö")
  T.eq(tok:id_to_token(12), "☃")
  same_list(tok:encode("hö☃x\255<pad>", {as = "table"}), {6, 11, 12, 2, 2, 1}, "unknown -> <unk>")
  T.eq(tok:decode(tok:encode("world<pad>")), "world<pad>")
  local path = T.tmpdir() .. "/char_tokenizer.json"
  tok:save(path)
  local back = text.CharTokenizer.load(path)
  T.eq(back.unk_token, "<unk>")
  T.eq(back:to_json(), tok:to_json())
  same_list(back:encode("hello wörld", {as = "table"}), tok:encode("hello wörld", {as = "table"}), "after load")
  -- without an unk token, an unknown character is an error naming it
  local strict = text.CharTokenizer.train("abc\0")
  T.eq(strict.vocab_size, 4)
  T.raises(function() strict:encode("abz") end, "character 'z' (U+007A) at byte 3 is not in the vocabulary")
  T.raises(function() strict:encode("a\255") end, "byte 0xff at byte 2 is not valid UTF-8")
  T.eq(strict:decode(strict:encode("a\0c")), "a\0c")
  local s2 = T.tmpdir() .. "/char2.json"
  strict:save(s2)
  T.eq(text.load_tokenizer(s2):decode({1, 2}), "\0a", "NUL survives the JSON file")
  T.raises(function() text.CharTokenizer.train("ok\255") end, "is not valid UTF-8")
end)

-- --- bad input --------------------------------------------------------------------------------------

T.case("bad input gives clear errors", function()
  local tok = text.BPETokenizer.train("hello hello", {vocab_size = 300, special_tokens = {"<pad>"}})
  T.raises(function() text.BPETokenizer.train("x", {vocab_size = 257, special_tokens = {"<a>", "<b>"}}) end,
    "vocab_size 257 is smaller than the 256 bytes + 2 special tokens")
  T.raises(function() text.BPETokenizer.train("x", {}) end, "vocab_size is required")
  T.raises(function() text.BPETokenizer.train("x", {vocab_size = 300, pretokenize = "bert"}) end, "pretokenize must be one of")
  T.raises(function() text.BPETokenizer.train("x", {vocab_size = 300, special_tokens = {"<a>", "<a>"}}) end,
    "special token 2 repeats special token 1")
  T.raises(function() text.BPETokenizer.train("x", {vocab_size = 300, special_tokens = {""}}) end, "special token 1 is empty")
  T.raises(function() text.BPETokenizer.train("x", {vocab_size = 300, special_tokens = {"\255"}}) end, "not valid UTF-8")
  T.raises(function() text.BPETokenizer.train("x", {vocab_size = 300, colour = 1}) end, "unknown option 'colour'")
  T.raises(function() text.BPETokenizer.train({"a", 3}, {vocab_size = 300}) end, "texts[2] is a number")
  T.raises(function() text.BPETokenizer.train_files("/nonexistent/corpus.txt", {vocab_size = 300}) end,
    "cannot open /nonexistent/corpus.txt")
  local n = tok.vocab_size
  T.raises(function() tok:decode({1, 0}) end, "decode: id 0 at position 2 is out of range (1 to " .. n .. ")")
  T.raises(function() tok:decode({n + 1}) end, "decode: id " .. (n + 1) .. " at position 1 is out of range")
  T.raises(function() tok:decode({1.5}) end, "ids[1] is not an integer")
  T.raises(function() tok:decode(dl.tensor({1.0, 2.0})) end, "ids must be an integer tensor")
  T.raises(function() tok:decode(dl.ones({2, 2}, {dtype = dl.int64})) end, "ids must be 1-D")
  T.raises(function() tok:encode(12) end, "encode: a string expected")
  T.raises(function() tok:encode("x", {as = "list"}) end, "as must be one of")
  T.raises(function() tok:id_to_token(0) end, "id 0 is out of range")
  T.raises(function() text.load_tokenizer("/nonexistent/tokenizer.json") end,
    "load_tokenizer: cannot open '/nonexistent/tokenizer.json'")
  local bad = {
    {"", "tokenizer JSON:"},
    {"{", "tokenizer JSON:"},
    {"[1, 2]", "the top level must be an object"},
    {"{}", "neither a tokenizer.json"},
    {'{"model": 3}', '"model" must be an object'},
    {'{"model": {"type": "WordPiece"}}', 'model.type must be "BPE"'},
    {'{"model": {"vocab": {}}, "pre_tokenizer": {"type": "Whitespace"}}', "pre_tokenizer must be"},
    {'{"normalizer": {"type": "NFC"}, "model": {}}', "a normalizer is not supported"},
    {'{"model": {"vocab": {"a": 0}, "merges": []}, "pre_tokenizer": {"type": "ByteLevel"}}', "byte 0x00 has no token"},
    {'{"model": {"vocab": {"a": -1}}, "pre_tokenizer": {"type": "ByteLevel"}}', "an id must be an integer"},
    {'{"model": {"vocab": {"a": 0, "b": 0}}, "pre_tokenizer": {"type": "ByteLevel"}}', "id 0 appears twice"},
    {'{"model": {"vocab": {"a": 5, "b": 1}}, "pre_tokenizer": {"type": "ByteLevel"}}', "the ids are not 0..n-1"},
    {'{"model": {"vocab": {"a": 1, "b": 0, "c": 1}}, "pre_tokenizer": {"type": "ByteLevel"}}', "appears twice"},
    {'{"model": {"vocab": {"a b": 0}}, "pre_tokenizer": {"type": "ByteLevel"}}', "not in the byte-level alphabet"},
    {'{"model": {"dropout": 0.1, "vocab": {}}, "pre_tokenizer": {"type": "ByteLevel"}}', "model.dropout is not supported"},
    {'{"model": {"vocab": {}}, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": true}}', "add_prefix_space = true is not supported"},
    {'{"type": "dlua.CharTokenizer", "version": 2}', "unknown dlua.CharTokenizer version"},
    {'{"type": "dlua.CharTokenizer", "version": 1, "special_tokens": [], "chars": "aba"}', "repeats the bytes"},
    {'{"type": "dlua.CharTokenizer", "version": 1, "special_tokens": ["<p>"], "unk_token": "<u>", "chars": "a"}', "unk_token is not one of special_tokens"},
  }
  for _, c in ipairs(bad) do T.raises(function() text.tokenizer_from_json(c[1]) end, c[2], "json " .. c[1]) end
  -- hand-made files with one broken piece each
  local good = handmade_json()
  T.raises(function() text.tokenizer_from_json(good:gsub('"merges": %[ "', '"merges": [ "q')) end, "is not a token of model.vocab")
  T.raises(function() text.tokenizer_from_json(good:gsub('%["Ġc", "a"%]', '["Ġc", "a", "t"]')) end,
    'must be "a b" or ["a", "b"]')
  T.raises(function() text.tokenizer_from_json(good:gsub('"merges": %[', '"merges": ["a t", ')) end,
    "the merged token is not in model.vocab")
  T.raises(function() text.tokenizer_from_json(good:gsub('"lstrip"', '"x"'):gsub('"special": true', '"lstrip": true')) end,
    "lstrip = true is not supported")
  -- a file on disk that is not JSON
  local p = T.tmpdir() .. "/broken_tokenizer.json"
  local f = assert(io.open(p, "wb"))
  f:write(good:sub(1, 300))
  f:close()
  T.raises(function() text.load_tokenizer(p) end, "load_tokenizer: '" .. p .. "': tokenizer JSON:")
  -- the process is healthy afterwards
  T.eq(tok:decode(tok:encode("hello <pad>")), "hello <pad>")
end)

T.done()
