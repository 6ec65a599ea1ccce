-- test_safetensors.lua - dl.save / dl.load: round trips for every dtype, 0-dim,
-- empty and non-contiguous tensors, metadata, the header layout, mmapped
-- views (in-place writes, lifetime), atomic writes, and a catalogue of
-- malformed files written byte by byte here, each a clear error.
local T = require "testlib"

local dir = T.tmpdir() .. "/safetensors"
os.execute("mkdir -p '" .. dir .. "'")
local function tmp(name) return dir .. "/" .. name end

local read_all = T.read_file

local function write_all(path, bytes)
  local f = assert(io.open(path, "wb"))
  f:write(bytes)
  f:close()
end

-- A file from a header string (used as is) and raw data bytes.
local function write_st(path, header, data)
  write_all(path, string.pack("<I8", #header) .. header .. (data or ""))
end

local function header_of(path)
  local s = read_all(path)
  local n = string.unpack("<I8", s)
  return s:sub(9, 8 + n), n, s
end

local function tmp_leftovers()
  local p = io.popen("ls -a '" .. dir .. "'")
  local out = p:read("a")
  p:close()
  local left = {}
  for name in out:gmatch("[^\n]+") do
    if name:find(".tmp.", 1, true) then left[#left + 1] = name end
  end
  return left
end

T.case("round trip: every dtype, known values", function()
  local p = tmp("dtypes.safetensors")
  local src = {
    f32 = dl.tensor({{1.5, -2.25, 3}, {1e-30, 3.4e38, -0.0}}, {dtype = dl.float32}),
    f64 = dl.tensor({1 / 3, -1e300, 5e-324}, {dtype = dl.float64}),
    f16 = dl.tensor({0.5, -65504, 6.1035e-05, 1 / 3}):half(),
    bf16 = dl.tensor({1.0, -3.0e38, 0.00390625, 1 / 3}):bfloat16(),
    i64 = dl.tensor({math.maxinteger, math.mininteger, 0, -7}, {dtype = dl.int64}),
    i32 = dl.tensor({2147483647, -2147483648, 12}, {dtype = dl.int32}),
    u8 = dl.tensor({0, 255, 17}, {dtype = dl.uint8}),
    b = dl.tensor({{true, false}, {false, true}}),
  }
  dl.save(p, src)
  local got, meta = dl.load(p)
  T.eq(next(meta), nil, "no metadata")
  local n = 0
  for k, v in pairs(src) do
    n = n + 1
    T.truthy(got[k], "missing " .. k)
    T.eq(got[k].dtype, v.dtype, k .. " dtype")
    T.shape_eq(got[k], v.shape, k)
    T.tensor_eq(got[k], v, 0, k)
  end
  local m = 0
  for _ in pairs(got) do m = m + 1 end
  T.eq(m, n, "tensor count")
  -- exact bit patterns of the narrow floats
  T.eq(got.f16:tolist()[4], src.f16:tolist()[4])
  T.eq(got.bf16:tolist()[4], src.bf16:tolist()[4])
  T.eq(got.i64:tolist()[1], math.maxinteger)
end)

T.case("round trip: 0-dim, empty, non-contiguous", function()
  local p = tmp("shapes.safetensors")
  local base = dl.arange(24, {dtype = dl.float32}):view(2, 3, 4)
  local src = {
    scalar = dl.tensor(3.25, {dtype = dl.float64}),
    iscalar = dl.tensor(42),
    empty = dl.zeros(0, 5),
    empty3 = dl.zeros(2, 0, 3, {dtype = dl.int32}),
    transposed = base:transpose(1, 3),
    permuted = base:permute(2, 3, 1),
    narrowed = base:narrow(3, 2, 2),
    selected = base:select(2, 2),
    expanded = dl.tensor({1, 2, 3}, {dtype = dl.int64}):expand(4, 3),
    half_t = base:half():transpose(1, 2),
  }
  dl.save(p, src)
  local got = dl.load(p)
  T.eq(got.scalar:dim(), 0)
  T.eq(got.scalar:item(), 3.25)
  T.eq(got.iscalar:item(), 42)
  T.eq(got.iscalar.dtype, dl.int64)
  T.shape_eq(got.empty, {0, 5})
  T.shape_eq(got.empty3, {2, 0, 3})
  T.eq(got.empty3.dtype, dl.int32)
  for _, k in ipairs({"transposed", "permuted", "narrowed", "selected", "expanded", "half_t"}) do
    T.shape_eq(got[k], src[k].shape, k)
    T.eq(got[k]:is_contiguous(), true, k .. " is loaded contiguous")
    T.tensor_eq(got[k], src[k], 0, k)
  end
  T.tensor_eq(got.transposed[1][1], {0, 12})
  -- the expanded tensor is stored at full size, not as its 3 distinct values
  local h = header_of(p)
  T.truthy(h:find('"expanded":{"dtype":"I64","shape":[4,3]', 1, true), h)
end)

T.case("metadata and names", function()
  local p = tmp("meta.safetensors")
  local odd = 'quote" back\\slash\nnew\tline é 😀 \1'
  dl.save(p, {[odd] = dl.ones(2), plain = dl.zeros(1)}, {format = "pt", note = odd, empty = ""})
  local got, meta = dl.load(p)
  T.tensor_eq(got[odd], {1, 1})
  T.tensor_eq(got.plain, {0})
  T.eq(meta.format, "pt")
  T.eq(meta.note, odd)
  T.eq(meta.empty, "")
  -- an empty set of tensors is a valid file too
  dl.save(p, {}, {k = "v"})
  local none, m2 = dl.load(p)
  T.eq(next(none), nil)
  T.eq(m2.k, "v")
  dl.save(p, {})
  local h = header_of(p)
  T.eq(h:gsub(" +$", ""), "{}")
end)

T.case("header layout: sorted, aligned, padded, deterministic", function()
  local p1, p2 = tmp("order1.safetensors"), tmp("order2.safetensors")
  local ts = {
    zeta = dl.ones(3, {dtype = dl.uint8}),
    alpha = dl.ones(3, {dtype = dl.float32}),
    beta = dl.ones(1, {dtype = dl.float64}),
    gamma = dl.ones(5):half(),
    delta = dl.ones(2, {dtype = dl.bool}),
  }
  dl.save(p1, ts, {b = "2", a = "1"})
  dl.save(p2, ts, {a = "1", b = "2"})
  T.eq(read_all(p1), read_all(p2), "identical bytes for identical input")
  local h, n = header_of(p1)
  T.eq((8 + n) % 8, 0, "data starts 8-byte aligned")
  T.eq(h:sub(1, 1), "{")
  T.truthy(h:match("^{.*} *$"), "padding is spaces after the JSON")
  -- metadata first, then names in sorted order
  local keys = {}
  for k in h:gmatch('"([%w_]+)":{') do keys[#keys + 1] = k end
  T.eq(table.concat(keys, ","), "__metadata__,alpha,beta,delta,gamma,zeta")
  -- every tensor's offset is a multiple of its element size
  for name, dt, b in h:gmatch('"(%w+)":{"dtype":"(%w+)","shape":%b[],"data_offsets":%[(%d+),') do
    local size = ({F64 = 8, F32 = 4, F16 = 2, U8 = 1, BOOL = 1})[dt]
    T.eq(tonumber(b) % size, 0, name .. " aligned")
  end
  T.truthy(h:find('"beta":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}', 1, true), h)
end)

T.case("saving over an existing file replaces it", function()
  local p = tmp("replace.safetensors")
  dl.save(p, {x = dl.ones(100)})
  dl.save(p, {y = dl.zeros(2)})
  local got = dl.load(p)
  T.eq(got.x, nil)
  T.tensor_eq(got.y, {0, 0})
  T.eq(#tmp_leftovers(), 0, "no temporary files left")
end)

local function mapped(path)
  local f = io.open("/proc/self/maps", "r")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s:find(path, 1, true) ~= nil
end

T.case("mmapped views: in-place writes, lifetime, no copies", function()
  local p = tmp("mapped.safetensors")
  local n = 1 << 20
  dl.save(p, {big = dl.arange(n, {dtype = dl.float32}), small = dl.tensor({1, 2, 3}, {dtype = dl.int64})})
  local before_bytes = read_all(p)
  collectgarbage()
  collectgarbage()
  local mem0 = dl.memory_allocated()
  local keep
  do
    local t = dl.load(p)
    -- aligned tensors are views on the mapping: no 4 MB allocation
    T.truthy(dl.memory_allocated() - mem0 < 1 << 20, "load copied the data")
    T.eq(t.big[n]:item(), n - 1)
    keep = t.big
    t.small:add_(10) -- copy-on-write: allowed, and the file stays as it was
    T.tensor_eq(t.small, {11, 12, 13})
  end
  collectgarbage()
  collectgarbage()
  -- the table and the other tensor are gone; the held view is still valid
  local junk = {}
  for i = 1, 20 do junk[i] = dl.ones(1000) end
  T.eq(keep[1]:item(), 0)
  T.eq(keep[n]:item(), n - 1)
  T.eq(keep:narrow(1, 1000, 3):sum():item(), 999 + 1000 + 1001)
  keep:mul_(2)
  T.eq(keep[n]:item(), 2 * (n - 1))
  T.eq(read_all(p), before_bytes, "file unchanged by in-place writes")
  local again = dl.load(p)
  T.tensor_eq(again.small, {1, 2, 3})
  T.eq(again.big[n]:item(), n - 1)
  again = nil
  if mapped(p) ~= nil then
    T.eq(mapped(p), true, "mapping alive while a view is held")
    keep = nil
    collectgarbage()
    collectgarbage()
    T.eq(mapped(p), false, "mapping released with the last view")
  end
  -- the file can be replaced while a view is held; the view keeps the old data
  local v = dl.load(p).big
  dl.save(p, {big = dl.zeros(4)})
  T.eq(v[n]:item(), n - 1)
  T.shape_eq(dl.load(p).big, {4})
end)

T.case("unaligned tensors are copied", function()
  local p = tmp("unaligned.safetensors")
  -- a 1-byte tensor first puts the F32 one at data offset 1 (data start is aligned)
  local hdr = '{"u":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},' ..
    '"f":{"dtype":"F32","shape":[2],"data_offsets":[1,9]},' ..
    '"d":{"dtype":"F64","shape":[],"data_offsets":[9,17]}}'
  hdr = hdr .. string.rep(" ", (8 - (8 + #hdr) % 8) % 8)
  write_st(p, hdr, string.pack("<B", 7) .. string.pack("<ff", 1.5, -2) .. string.pack("<d", 0.1))
  local t = dl.load(p)
  T.tensor_eq(t.u, {7})
  T.tensor_eq(t.f, {1.5, -2})
  T.eq(t.d:item(), 0.1)
  T.eq(t.d:dim(), 0)
  t.f:add_(1)
  T.tensor_eq(t.f, {2.5, -1})
end)

T.case("JSON escapes in the header", function()
  local p = tmp("escapes.safetensors")
  write_st(p, '{"a\\u00e9\\ud83d\\ude00\\n\\"":{"dtype":"I32","shape":[1],"data_offsets":[0,4]},' ..
    '"__metadata__":{"k\\/":"\\t\\u0041"}}', string.pack("<i4", -5))
  local t, m = dl.load(p)
  T.tensor_eq(t['aé😀\n"'], {-5})
  T.eq(m["k/"], "\tA")
end)

-- --- malformed files -----------------------------------------------------------

local function bad(name, header, data, fragment)
  local p = tmp("bad_" .. name .. ".safetensors")
  write_st(p, header, data)
  local err = T.raises(function() dl.load(p) end, fragment, name)
  if not err:find(p, 1, true) then error(name .. ": message does not name the file: " .. err) end
  return err
end

local F32x2 = string.pack("<ff", 1, 2)

T.case("malformed: sizes and framing", function()
  local p = tmp("zero.safetensors")
  write_all(p, "")
  T.raises(function() dl.load(p) end, "file is 0 bytes, too short")
  write_all(p, "\1\0\0")
  T.raises(function() dl.load(p) end, "file is 3 bytes, too short")
  T.raises(function() dl.load(p) end, p)
  -- header length past the end of the file
  write_all(p, string.pack("<I8", 50) .. "{}")
  T.raises(function() dl.load(p) end, "header length 50 runs past the end of the file")
  -- absurd header length: rejected before anything is allocated
  write_all(p, string.pack("<I8", 1 << 40) .. "{}")
  T.raises(function() dl.load(p) end, "header length 1099511627776 is too large")
  write_all(p, string.pack("<I8", -1) .. "{}")
  T.raises(function() dl.load(p) end, "is too large")
  -- missing file and a directory
  local missing = tmp("does/not/exist.safetensors")
  local err = T.raises(function() dl.load(missing) end, "No such file or directory")
  T.truthy(err:find(missing, 1, true), err)
  T.raises(function() dl.load(dir) end, "not a regular file")
end)

T.case("malformed: header JSON", function()
  bad("notjson", "{abc", "", "header is not valid JSON")
  bad("trailing", '{} x', "", "unexpected data after the JSON value")
  bad("empty", "", "", "header is not valid JSON")
  bad("array", "[1, 2]", "", "header is a JSON array, not an object")
  bad("utf8", '{"\255":1}', "", "header is not valid UTF-8")
  bad("overlong", '{"\192\175":1}', "", "not valid UTF-8")
  bad("deep", string.rep("[", 200) .. string.rep("]", 200), "", "nested too deeply")
  bad("comma", '{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},}', F32x2, "expected a string key")
  bad("control", '{"a\1":1}', "", "control character")
  bad("surrogate", '{"\\ud800":1}', "", "surrogate")
end)

T.case("malformed: entries", function()
  bad("entry_num", '{"a": 5}', "", "entry for tensor 'a' is a number, not an object")
  bad("no_dtype", '{"a":{"shape":[2],"data_offsets":[0,8]}}', F32x2, "tensor 'a' has no \"dtype\"")
  bad("no_shape", '{"a":{"dtype":"F32","data_offsets":[0,8]}}', F32x2, "tensor 'a' has no \"shape\"")
  bad("no_offsets", '{"a":{"dtype":"F32","shape":[2]}}', F32x2, "tensor 'a' has no \"data_offsets\"")
  bad("dtype_num", '{"a":{"dtype":4,"shape":[2],"data_offsets":[0,8]}}', F32x2, "\"dtype\" is a number, not a string")
  bad("dtype_i8", '{"w":{"dtype":"I8","shape":[2],"data_offsets":[0,2]}}', "\1\2", "tensor 'w' has dtype 'I8'")
  bad("dtype_u16", '{"w":{"dtype":"U16","shape":[1],"data_offsets":[0,2]}}', "\1\2", "dtype 'U16', which dlua does not support")
  bad("dtype_f8", '{"w":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}}', "\1\2", "'F8_E4M3'")
  bad("shape_obj", '{"a":{"dtype":"F32","shape":{},"data_offsets":[0,8]}}', F32x2, "\"shape\" is a object, not an array")
  bad("shape_neg", '{"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}}', F32x2, "shape entry 1 is -2, not a non-negative integer")
  bad("shape_frac", '{"a":{"dtype":"F32","shape":[1,2.5],"data_offsets":[0,8]}}', F32x2, "shape entry 2 is 2.5")
  bad("shape_str", '{"a":{"dtype":"F32","shape":["2"],"data_offsets":[0,8]}}', F32x2, "shape entry 1 is a string")
  bad("shape_huge", '{"a":{"dtype":"F32","shape":[99999999999999999999],"data_offsets":[0,8]}}', F32x2, "shape entry 1 is 1e+20")
  bad("shape_overflow", '{"a":{"dtype":"F32","shape":[4294967296,4294967296,4],"data_offsets":[0,8]}}', F32x2,
    "shape [4294967296, 4294967296, 4] is too large")
  bad("shape_9d", '{"a":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,2],"data_offsets":[0,8]}}', F32x2, "has 9 dimensions")
  bad("offsets_len", '{"a":{"dtype":"F32","shape":[2],"data_offsets":[8]}}', F32x2, "must be an array of 2 integers")
  bad("offsets_neg", '{"a":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}}', F32x2, "data_offsets [-8, 0] are not non-negative integers")
  bad("offsets_rev", '{"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}}', F32x2, "begin after they end")
  bad("offsets_past", '{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}', F32x2, "run past the end of the data (8 bytes)")
  bad("nbytes", '{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}', F32x2, "hold 8 bytes but shape [3] of F32 needs 12")
  bad("nbytes_0dim", '{"a":{"dtype":"F64","shape":[],"data_offsets":[0,4]}}', "\0\0\0\0", "shape [] of F64 needs 8")
end)

T.case("malformed: layout, duplicates, metadata", function()
  local e = function(name, b, en, dt, shape)
    return string.format('"%s":{"dtype":"%s","shape":%s,"data_offsets":[%d,%d]}', name, dt or "F32", shape or "[1]", b, en)
  end
  bad("overlap", "{" .. e("a", 0, 8, "F32", "[2]") .. "," .. e("b", 4, 8) .. "}", F32x2, "tensor 'b' at [4, 8) overlaps tensor 'a' at [0, 8)")
  bad("gap", "{" .. e("a", 0, 4) .. "," .. e("b", 8, 12) .. "}", F32x2 .. F32x2:sub(1, 4), "data bytes [4, 8) are not covered")
  bad("lead_gap", "{" .. e("a", 4, 8) .. "}", F32x2, "data bytes [0, 4) are not covered")
  bad("trailing_data", "{" .. e("a", 0, 4) .. "}", F32x2, "trailing bytes")
  bad("dup", "{" .. e("a", 0, 4) .. "," .. e("a", 4, 8) .. "}", F32x2, "duplicate tensor name 'a'")
  bad("meta_num", '{"__metadata__":{"k":1},' .. e("a", 0, 8, "F32", "[2]") .. "}", F32x2, "metadata value for 'k' is a number, not a string")
  bad("meta_arr", '{"__metadata__":[],' .. e("a", 0, 8, "F32", "[2]") .. "}", F32x2, "\"__metadata__\" is a array")
  bad("meta_dup", '{"__metadata__":{},"__metadata__":{},' .. e("a", 0, 8, "F32", "[2]") .. "}", F32x2, "duplicate \"__metadata__\"")
  bad("meta_dupkey", '{"__metadata__":{"k":"1","k":"2"},' .. e("a", 0, 8, "F32", "[2]") .. "}", F32x2, "duplicate metadata key 'k'")
  -- an empty tensor may sit at the boundary between two others, not inside one
  local ok = tmp("ok_empty.safetensors")
  write_st(ok, "{" .. e("a", 0, 4) .. "," .. e("z", 4, 4, "F32", "[0,7]") .. "," .. e("b", 4, 8) .. "}", F32x2)
  local t = dl.load(ok)
  T.shape_eq(t.z, {0, 7})
  T.tensor_eq(t.b, {2})
  bad("empty_inside", "{" .. e("a", 0, 8, "F32", "[2]") .. "," .. e("z", 4, 4, "F32", "[0]") .. "}", F32x2, "overlaps")
end)

T.case("truncated files", function()
  local p = tmp("full.safetensors")
  dl.save(p, {a = dl.arange(10, {dtype = dl.float32}), b = dl.ones(3, {dtype = dl.int64})})
  local s = read_all(p)
  local q = tmp("truncated.safetensors")
  write_all(q, s:sub(1, #s - 5))
  T.raises(function() dl.load(q) end, "run past the end of the data")
  local n = string.unpack("<I8", s)
  write_all(q, s:sub(1, 8 + n - 10))
  T.raises(function() dl.load(q) end, "runs past the end of the file")
  write_all(q, s:sub(1, 7))
  T.raises(function() dl.load(q) end, "too short")
  -- the process is healthy afterwards
  T.tensor_eq(dl.load(p).a:narrow(1, 9, 2), {8, 9})
end)

-- --- bad arguments and write errors ---------------------------------------------

T.case("bad arguments", function()
  local p = tmp("args.safetensors")
  T.raises(function() dl.save(p, dl.ones(2)) end, "table of name -> tensor expected")
  T.raises(function() dl.save(nil, {}) end, "string expected")
  T.raises(function() dl.save(p, {dl.ones(2)}) end, "tensor names must be strings (got the number key 1)")
  T.raises(function() dl.save(p, {[true] = dl.ones(2)}) end, "got a boolean key")
  T.raises(function() dl.save(p, {w = 3}) end, "value for 'w' is a number, not a tensor")
  T.raises(function() dl.save(p, {w = {1, 2}}) end, "value for 'w' is a table, not a tensor")
  T.raises(function() dl.save(p, {w = dl.ones(1)}, {k = 1}) end, "metadata value for 'k' is a number, not a string")
  T.raises(function() dl.save(p, {w = dl.ones(1)}, {"x"}) end, "metadata keys must be strings")
  T.raises(function() dl.save(p, {w = dl.ones(1)}, "meta") end, "metadata table of strings expected")
  T.raises(function() dl.save(p, {w = dl.ones(1)}, {}, 4) end, "unexpected argument")
  T.raises(function() dl.save(p, {__metadata__ = dl.ones(1)}) end, "'__metadata__' is reserved")
  T.raises(function() dl.save(p, {["\255"] = dl.ones(1)}) end, "is not valid UTF-8")
  T.raises(function() dl.save(p, {w = dl.ones(1)}, {k = "\192\128"}) end, "metadata value for 'k' is not valid UTF-8")
  local closed
  do
    local c <close> = dl.ones(2)
    closed = c
  end
  T.raises(function() dl.save(p, {c = closed}) end, "closed")
  T.raises(function() dl.load() end, "string expected")
  T.raises(function() dl.load(p, {devise = "cpu"}) end, "load: unknown option 'devise'")
  T.raises(function() dl.load(p, {device = "tpu"}) end, "invalid device 'tpu'")
  T.raises(function() dl.load(p, {device = 1}) end, "option 'device' must be a string")
  T.raises(function() dl.load(p, "cpu") end, "options table expected")
  T.eq(#tmp_leftovers(), 0, "no temporary files left")
end)

T.case("device option", function()
  local p = tmp("device.safetensors")
  dl.save(p, {w = dl.tensor({1, 2}, {dtype = dl.float32})})
  local t = dl.load(p, {device = "cpu"})
  T.tensor_eq(t.w, {1, 2})
  if dl.cuda.is_available() then
    local g = dl.load(p, {device = "cuda"})
    T.eq(g.w.device, "cuda:0")
    T.tensor_eq(g.w:cpu(), {1, 2})
    dl.save(p, {g = g.w})
    T.tensor_eq(dl.load(p).g, {1, 2})
  else
    T.raises(function() dl.load(p, {device = "cuda"}) end, "load: " .. p .. ": tensor 'w'")
  end
end)

T.case("write errors leave the old file intact", function()
  local p = tmp("keep.safetensors")
  dl.save(p, {old = dl.tensor({1, 2, 3}, {dtype = dl.float32})})
  local before = read_all(p)
  -- unwritable location: names the path and the system's reason
  local nodir = tmp("missing_dir/x.safetensors")
  local err = T.raises(function() dl.save(nodir, {a = dl.ones(1)}) end, "No such file or directory")
  T.truthy(err:find("save: " .. nodir, 1, true), err)
  -- a failure before writing (bad name) does not touch the old file
  T.raises(function() dl.save(p, {["\255"] = dl.ones(1)}) end, "UTF-8")
  T.eq(read_all(p), before)
  -- disk full, simulated by a file size limit in a child process: the write
  -- fails half-way (EFBIG), the temporary file goes, the old file stays
  local dlua = (os.getenv("DL_BUILD_DIR") or "../../build") .. "/dlua"
  local script = tmp("child.lua")
  write_all(script, string.format([[
local ok, err = pcall(dl.save, %q, {big = dl.ones(1 << 20)})
io.write(ok and "saved" or err)
]], p))
  local cmd = string.format("ulimit -f 16; trap '' XFSZ; '%s' '%s' 2>&1", dlua, script)
  local proc = io.popen("sh -c " .. string.format("%q", cmd))
  local out = proc:read("a")
  proc:close()
  T.truthy(out:find("save: " .. p .. ": cannot write: File too large", 1, true), out)
  T.eq(read_all(p), before, "old file intact")
  T.eq(#tmp_leftovers(), 0, "no temporary files left")
  T.tensor_eq(dl.load(p).old, {1, 2, 3})
end)

T.case("large round trip", function()
  local p = tmp("large.safetensors")
  local x = dl.randn(513, 1027)
  local y = dl.randn(300, 7):double():t()
  dl.save(p, {x = x, y = y, xh = x:bfloat16()})
  local t = dl.load(p)
  T.eq(t.x:sub(x):abs():max():item(), 0)
  T.eq(t.y:sub(y):abs():max():item(), 0)
  T.eq(t.xh:float():sub(x:bfloat16():float()):abs():max():item(), 0)
end)

T.done()
