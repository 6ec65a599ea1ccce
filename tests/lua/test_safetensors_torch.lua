-- test_safetensors_torch.lua - safetensors files exchanged with PyTorch (no
-- `safetensors` Python package: the test carries a small reader and writer
-- written with struct + json).  (a) files dl writes are read in Python and
-- compared bit for bit with the torch tensors they came from, every dtype;
-- (b) files Python writes (its own layout, unaligned tensors included) are
-- read by dl and compared; (c) scripts/convert_torchvision.py converts a
-- seeded resnet18 and a DataParallel-style checkpoint, and dl.load sees the
-- same keys, dtypes, shapes and values as torchvision.
local T = require "testlib"

local dir = T.tmpdir() .. "/safetensors_torch"
os.execute("mkdir -p '" .. dir .. "'")
local dl_file, py_file = dir .. "/from_dl.safetensors", dir .. "/from_py.safetensors"
local r18_file, ckpt_file = dir .. "/resnet18.safetensors", dir .. "/ckpt.safetensors"
local pth_file = dir .. "/ckpt.pth"

-- Python helpers shared by both oracle runs: the tensors of (a), deterministic.
local PRELUDE = [==[
import json, struct
RDT = {"F32": torch.float32, "F64": torch.float64, "F16": torch.float16, "BF16": torch.bfloat16,
       "I64": torch.int64, "I32": torch.int32, "U8": torch.uint8, "BOOL": torch.bool}
WDT = {v: k for k, v in RDT.items()}

def st_read(path):
    with open(path, "rb") as f:
        data = f.read()
    n, = struct.unpack("<Q", data[:8])
    hdr = json.loads(data[8:8 + n].decode("utf-8"))
    meta = hdr.pop("__metadata__", {})
    out = {}
    for name, e in hdr.items():
        b, en = e["data_offsets"]
        buf = bytearray(data[8 + n + b:8 + n + en])
        dt = RDT[e["dtype"]]
        t = torch.frombuffer(buf, dtype=dt).reshape(e["shape"]) if buf else torch.empty(e["shape"], dtype=dt)
        out[name] = t
    return out, meta, hdr, n

def cases():
    g = torch.Generator().manual_seed(77)
    out = {}
    floats = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
    special = {torch.float32: [float("inf"), float("-inf"), -0.0, 1e-45, 3.4e38, 1.17e-38],
               torch.float64: [float("inf"), -0.0, 5e-324, 1.7e308, 1 / 3],
               torch.float16: [float("-inf"), -0.0, 6e-08, 65504.0, 1 / 3],
               torch.bfloat16: [float("inf"), -0.0, 1e-40, 3.0e38, 1 / 3]}
    for dt in floats:
        nm = WDT[dt]
        out[nm + "_sp"] = torch.tensor(special[dt], dtype=torch.float64).to(dt)
        out[nm + "_2d"] = (torch.randn(5, 7, generator=g) * 3).to(dt)
        out[nm + "_0d"] = (torch.randn((), generator=g) * 10).to(dt)
        out[nm + "_empty"] = torch.zeros(3, 0, 2, dtype=dt)
    out["I64_x"] = torch.tensor([2**63 - 1, -2**63, 0, -1, 123456789012345])
    out["I32_x"] = torch.tensor([2**31 - 1, -2**31, 0, -1, 7], dtype=torch.int32)
    out["U8_x"] = torch.arange(256, dtype=torch.uint8).reshape(16, 16)
    out["BOOL_x"] = torch.rand(3, 5, generator=g) > 0.5
    out["I64_2d"] = torch.randint(-1000, 1000, (4, 6), generator=g)
    out["I32_0d"] = torch.tensor(-5, dtype=torch.int32)
    out["U8_odd"] = torch.randint(0, 256, (7,), generator=g, dtype=torch.uint8)
    out["BOOL_empty"] = torch.zeros(0, dtype=torch.bool)
    # saved from a permuted view in dl: key -> (base tensor, permutation)
    perms = {"F32_perm": ((torch.randn(2, 3, 4, generator=g)), (2, 0, 1)),
             "BF16_perm": ((torch.randn(4, 6, generator=g)).to(torch.bfloat16), (1, 0)),
             "I64_perm": (torch.randint(-9, 9, (3, 2, 5), generator=g), (1, 2, 0)),
             "F16_perm": ((torch.randn(3, 5, generator=g)).to(torch.float16), (1, 0))}
    return out, perms
]==]

local R = T.torch(PRELUDE .. string.format([==[
import sys, torchvision
out, perms = cases()

# (b) a file written the way other tools may: insertion order, spaces in the
# JSON, a 3-byte bool tensor first so later tensors are not aligned.
py = {"flag": torch.tensor([True, False, True]),
      "w": torch.randn(4, 3),
      "d": torch.randn(2, 2, dtype=torch.float64),
      "h": torch.randn(5).to(torch.float16),
      "bf": torch.randn(2, 3).to(torch.bfloat16),
      "idx": torch.tensor([[1, -2], [3, 2**40]]),
      "i32": torch.tensor([-7, 8], dtype=torch.int32),
      "img": torch.randint(0, 256, (2, 2, 3), dtype=torch.uint8),
      "scalar": torch.tensor(2.5),
      "nothing": torch.zeros(0, 4)}
hdr, blobs, pos = {"__metadata__": {"framework": "torch", "epoch": "3"}}, [], 0
for k, t in py.items():
    b = t.contiguous().reshape(-1)
    if t.dtype == torch.bfloat16:
        b = b.view(torch.int16)
    raw = b.numpy().tobytes()
    hdr[k] = {"dtype": WDT[t.dtype], "shape": list(t.shape), "data_offsets": [pos, pos + len(raw)]}
    blobs.append(raw)
    pos += len(raw)
text = json.dumps(hdr).encode()
text += b" " * ((8 - len(text) %% 8) %% 8)
with open(%q, "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))

# (c) the reference resnet18 (same seed and builder as the script's) and a
# DataParallel-style checkpoint of a small model
torch.manual_seed(3)
sd = torchvision.models.resnet18().state_dict()
keys = sorted(sd)
info = {k: {"dtype": WDT[sd[k].dtype], "shape": list(sd[k].shape)} for k in keys}
probe = {k: sd[k] for k in ["conv1.weight", "fc.bias", "bn1.running_var", "bn1.num_batches_tracked",
                            "layer4.1.bn2.weight"]}
probe["layer1.0.conv1.weight"] = sd["layer1.0.conv1.weight"][5]
probe["fc.weight"] = sd["fc.weight"][:3]
small = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
small[1].num_batches_tracked += 9
small_sd = {"module." + k: v for k, v in small.state_dict().items()}
torch.save({"state_dict": small_sd, "epoch": 12, "arch": "small"}, %q)

emit({"cases": out, "perms": {k: {"base": b, "perm": [p + 1 for p in pm]} for k, (b, pm) in perms.items()},
      "py": py, "keys": keys, "info": info, "probe": probe,
      "small": small.state_dict()})
]==], py_file, pth_file))

-- sd holds each record of recs, bit-equal, and nothing else.
local function same_dict(sd, recs)
  local n = 0
  for k, rec in pairs(recs) do
    n = n + 1
    T.truthy(sd[k], "missing " .. k)
    T.match_torch(sd[k], rec, 0, 0, k)
  end
  local m = 0
  for _ in pairs(sd) do m = m + 1 end
  T.eq(m, n)
end

T.case("(b) dl reads a file PyTorch wrote", function()
  local got, meta = dl.load(py_file)
  T.eq(meta.framework, "torch")
  T.eq(meta.epoch, "3")
  same_dict(got, R.py)
  -- loaded tensors work in ops and in place, unaligned (copied) or not
  got.w:mul_(2)
  T.near(got.w:sum():item(), 2 * T.from_torch(R.py.w):sum():item(), 1e-5)
end)

T.case("(a) PyTorch reads a file dl wrote", function()
  local src = {}
  for k, rec in pairs(R.cases) do src[k] = T.from_torch(rec) end
  for k, p in pairs(R.perms) do
    local t = T.from_torch(p.base):permute(table.unpack(p.perm))
    T.eq(t:is_contiguous(), false, k)
    src[k] = t
  end
  dl.save(dl_file, src, {format = "pt", written_by = "dlua"})
  local res = T.torch(PRELUDE .. string.format([==[
out, perms = cases()
for k, (b, p) in perms.items():
    out[k] = b.permute(p)
got, meta, hdr, n = st_read(%q)
res = {"meta": meta, "aligned": (8 + n) %% 8 == 0, "missing": sorted(set(out) - set(got)),
       "extra": sorted(set(got) - set(out)), "bad": []}
for k, want in out.items():
    if k not in got:
        continue
    t = got[k]
    same = t.dtype == want.dtype and t.shape == want.shape
    if same and want.numel():
        a, b = t.contiguous().reshape(-1), want.contiguous().reshape(-1)
        if a.dtype in (torch.float16, torch.bfloat16):
            a, b = a.view(torch.int16), b.view(torch.int16)
        elif a.dtype == torch.float32:
            a, b = a.view(torch.int32), b.view(torch.int32)
        elif a.dtype == torch.float64:
            a, b = a.view(torch.int64), b.view(torch.int64)
        same = torch.equal(a, b)  # bit for bit
    if not same:
        res["bad"].append(k)
    b0 = hdr[k]["data_offsets"][0]
    if b0 %% t.element_size():
        res["bad"].append(k + " (unaligned)")
order = [k for k in hdr]
res["sorted"] = order == sorted(order)
emit(res)
]==], dl_file))
  T.eq(#res.missing, 0, "missing in file: " .. table.concat(res.missing, ", "))
  T.eq(#res.extra, 0, "extra in file: " .. table.concat(res.extra, ", "))
  T.eq(#res.bad, 0, "differ from torch: " .. table.concat(res.bad, ", "))
  T.eq(res.aligned, true, "data 8-byte aligned")
  T.eq(res.sorted, true, "header keys sorted")
  T.eq(res.meta.format, "pt")
  T.eq(res.meta.written_by, "dlua")
end)

local script = "../../scripts/convert_torchvision.py"
local function convert(args)
  local cmd = string.format("%s %s %s >/dev/null 2>%s/convert.err", T.python(), script, args, dir)
  local ok = os.execute(cmd)
  if not ok then
    local f = io.open(dir .. "/convert.err")
    error("convert_torchvision.py failed: " .. (f and f:read("a") or "?"))
  end
end

T.case("(c) convert_torchvision.py resnet18", function()
  convert("--arch resnet18 --seed 3 --out " .. r18_file)
  local sd, meta = dl.load(r18_file)
  T.eq(meta.format, "pt")
  T.truthy(meta.source:find("resnet18", 1, true), meta.source)
  local keys = {}
  for k in pairs(sd) do keys[#keys + 1] = k end
  table.sort(keys)
  T.eq(#keys, #R.keys, "key count")
  T.eq(table.concat(keys, " "), table.concat(R.keys, " "), "key set")
  for _, k in ipairs(R.keys) do
    local i = R.info[k]
    T.eq(sd[k].dtype.name, ({F32 = "float32", I64 = "int64"})[i.dtype], k .. " dtype")
    T.shape_eq(sd[k], i.shape, k)
  end
  T.eq(sd["bn1.num_batches_tracked"].dtype, dl.int64)
  T.eq(sd["bn1.num_batches_tracked"]:dim(), 0)
  T.truthy(sd["layer1.0.conv1.weight"], "layer1.0.conv1.weight")
  for k, rec in pairs(R.probe) do
    local t = sd[k]
    if k == "layer1.0.conv1.weight" then t = t[6] end
    if k == "fc.weight" then t = t:narrow(1, 1, 3) end
    T.match_torch(t, rec, 0, 0, k)
  end
  T.tensor_eq(sd["bn1.running_var"], dl.ones(64), 0)
end)

T.case("(c) convert_torchvision.py checkpoint with module. prefixes", function()
  convert("--checkpoint " .. pth_file .. " --out " .. ckpt_file)
  local sd = dl.load(ckpt_file)
  same_dict(sd, R.small)
  for k in pairs(sd) do T.truthy(not k:find("module.", 1, true), k) end
  T.eq(sd["1.num_batches_tracked"]:item(), 9)
  -- --pretrained never downloads: a clear failure when the cache lacks the weights
  local cmd = string.format("%s %s --arch resnet18 --pretrained --out %s/x.safetensors 2>&1",
    T.python(), script, dir)
  local home = os.getenv("TORCH_HOME")
  if not home then
    local p = io.popen("TORCH_HOME=" .. dir .. "/nohub " .. cmd)
    local out = p:read("a")
    local ok = p:close()
    T.eq(ok, nil, "fails without cached weights")
    T.truthy(out:find("not in the torch hub cache", 1, true), out)
  end
end)

T.done()
