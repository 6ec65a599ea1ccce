-- test_data.lua - dl.data: ImageFolder against torchvision's class mapping
-- and sample order; the DataLoader (C workers) - determinism for a seed,
-- equal batches with 0, 1 and 2 workers, shuffling per epoch, drop_last,
-- early stops and closing; errors from bad files surfacing on the main thread;
-- Lua stages, target_transform and collate; TensorDataset, Subset,
-- random_split, Lua datasets; IDX files, dl.data.mnist and the Fashion-MNIST
-- preparation script on a small generated set.
local T = require "testlib"
local dl = require "dl"
local TF = dl.transforms
local D = dl.data

local dir = T.fresh_dir("data")

local ref = T.torch(string.format([==[
import numpy as np, os, torch, warnings, gzip
warnings.filterwarnings("ignore")
from PIL import Image
import torchvision.datasets as datasets
D = %q
rng = np.random.RandomState(7)
root = D + '/folder'
layout = {
    'cat': ['a.jpg', 'b.JPG', 'c.png', 'notes.txt', 'sub/d.jpeg', 'sub/deeper/e.png', 'sub-x/f.jpg'],
    'Dog': ['1.png', '10.png', '2.png'],
    'bird': ['z.jpg', 'y.png'],
    'ant': ['only.jpeg'],
}
for cls, files in layout.items():
    for f in files:
        p = os.path.join(root, cls, f)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        if f.endswith('.txt'):
            open(p, 'w').write('not an image')
            continue
        h, w = rng.randint(20, 40), rng.randint(20, 40)
        a = (rng.rand(h, w, 3) * 255).astype(np.uint8)
        Image.fromarray(a).save(p, format='PNG' if f.lower().endswith('.png') else 'JPEG', quality=90)
ds = datasets.ImageFolder(root)
samples = [[os.path.relpath(p, root), c + 1] for p, c in ds.samples]

# a folder of good images with one bad file of each kind
for kind in ('trunc', 'zero', 'text', 'corrupt'):
    r = D + '/bad_' + kind
    for cls in ('a', 'b'):
        os.makedirs(r + '/' + cls, exist_ok=True)
        for i in range(6):
            a = (rng.rand(24, 24, 3) * 255).astype(np.uint8)
            Image.fromarray(a).save(r + '/%%s/%%d.jpg' %% (cls, i), quality=90)
    good = open(r + '/b/3.jpg', 'rb').read()
    bad = {'trunc': good[:len(good) // 3], 'zero': b'', 'text': b'hello world',
           'corrupt': b'\xff\xd8\xff\xe0' + bytes(rng.randint(0, 256, size=300).astype(np.uint8))}[kind]
    open(r + '/b/3.jpg', 'wb').write(bad)

# IDX files, numpy-written (big-endian), one gzipped, one plain
imgs = rng.randint(0, 256, size=(30, 28, 28)).astype(np.uint8)
labs = rng.randint(0, 10, size=30).astype(np.uint8)
timgs = rng.randint(0, 256, size=(12, 28, 28)).astype(np.uint8)
tlabs = rng.randint(0, 10, size=12).astype(np.uint8)
def idx(arr, code):
    return bytes([0, 0, code, arr.ndim]) + b''.join(int(s).to_bytes(4, 'big') for s in arr.shape) + arr.tobytes()
os.makedirs(D + '/fashion-mini', exist_ok=True)
gzip.open(D + '/fashion-mini/train-images-idx3-ubyte.gz', 'wb').write(idx(imgs, 8))
gzip.open(D + '/fashion-mini/train-labels-idx1-ubyte.gz', 'wb').write(idx(labs, 8))
open(D + '/fashion-mini/t10k-images-idx3-ubyte', 'wb').write(idx(timgs, 8))
open(D + '/fashion-mini/t10k-labels-idx1-ubyte', 'wb').write(idx(tlabs, 8))
f32 = rng.randn(3, 4).astype('>f4')
open(D + '/f32.idx', 'wb').write(bytes([0, 0, 0x0D, 2]) + (3).to_bytes(4, 'big') + (4).to_bytes(4, 'big') + f32.tobytes())
i16 = rng.randint(-30000, 30000, size=(5,)).astype('>i2')
open(D + '/i16.idx', 'wb').write(bytes([0, 0, 0x0B, 1]) + (5).to_bytes(4, 'big') + i16.tobytes())
open(D + '/trunc.idx', 'wb').write(idx(imgs, 8)[:500])
open(D + '/bad.idx', 'wb').write(b'\x01\x02\x03\x04xxxx')

emit({'classes': ds.classes, 'samples': samples, 'imgs': torch.from_numpy(imgs), 'labs': torch.from_numpy(labs.astype(np.int64)),
      'timgs': torch.from_numpy(timgs), 'tlabs': torch.from_numpy(tlabs.astype(np.int64)),
      'f32': torch.from_numpy(f32.astype(np.float32)), 'i16': torch.from_numpy(i16.astype(np.int32))})
]==], dir))

local root = dir .. "/folder"
local fixed = TF.Compose{TF.Resize({16, 16}), TF.ToTensor()}
local aug = TF.Compose{TF.RandomResizedCrop(16), TF.RandomHorizontalFlip(), TF.ColorJitter(0.3, 0.3, 0.3, 0.05),
  TF.ToTensor(), TF.Normalize({0.5, 0.5, 0.5}, {0.25, 0.25, 0.25})}

T.case("ImageFolder: classes, 1-based class_to_idx and sample order as torchvision", function()
  local ds = D.ImageFolder{root = root}
  T.eq(table.concat(ds.classes, ","), table.concat(ref.classes, ","))
  T.eq(table.concat(ds.classes, ","), "Dog,ant,bird,cat")
  for i, c in ipairs(ref.classes) do T.eq(ds.class_to_idx[c], i) end
  T.eq(#ds, #ref.samples)
  for i, s in ipairs(ref.samples) do
    T.eq(ds:path(i), root .. "/" .. s[1], "path " .. i)
    T.eq(ds.samples[i][2], s[2], "label " .. i)
    T.eq(ds.targets[i], s[2])
  end
  -- extensions filter
  local some = D.ImageFolder{root = root, extensions = {"png", ".JPEG"}}
  T.eq(#some, 8)
  for i = 1, #some do T.truthy(some:path(i):match("%.png$") or some:path(i):match("%.jpeg$"), some:path(i)) end
  T.raises(function() D.ImageFolder{root = root, extensions = {"png"}} end, "found no valid file for the class ant")
  T.eq(tostring(ds):match("^ImageFolder"), "ImageFolder")
end)

T.case("ImageFolder:get applies the transform to the decoded image", function()
  local ds = D.ImageFolder{root = root, transform = fixed}
  local x, y = ds:get(3)
  T.tensor_eq(x, fixed(dl.image.load(ds:path(3))), 0)
  T.eq(y, ref.samples[3][2])
  local raw = D.ImageFolder{root = root}
  T.tensor_eq(raw:get(5), dl.image.load(raw:path(5)), 0)
  local gray = D.ImageFolder{root = root, mode = "L", target_transform = function(c) return c * 10 end}
  local g, t = gray:get(1)
  T.shape_eq(g, {1, g.shape[2], g.shape[3]})
  T.eq(t, ref.samples[1][2] * 10)
end)

local function run_loader(ds, opts, epochs)
  local L = D.DataLoader(ds, opts)
  local out = {}
  for _ = 1, epochs or 1 do
    local rows = {}
    for i, x, y in L:iter() do
      rows[#rows + 1] = string.format("%d|%s|%.6f|%s", i, table.concat(x.shape, "x"), x:to(dl.float64):sum():item(),
        table.concat(y:tolist(), ","))
    end
    out[#out + 1] = table.concat(rows, "\n")
  end
  L:close()
  return out
end

T.case("DataLoader: the same batches with 0, 1 and 2 workers; reproducible from the seed", function()
  local ds = D.ImageFolder{root = root, transform = aug}
  local base = {batch_size = 4, shuffle = true, seed = 123}
  local function with(nw, extra)
    local o = {}
    for k, v in pairs(base) do o[k] = v end
    o.num_workers = nw
    for k, v in pairs(extra or {}) do o[k] = v end
    return o
  end
  local r0 = run_loader(ds, with(0), 2)
  local r1 = run_loader(ds, with(1), 2)
  local r2 = run_loader(ds, with(2, {prefetch = 1}), 2)
  T.eq(r1[1], r0[1], "1 worker")
  T.eq(r2[1], r0[1], "2 workers")
  T.eq(r2[2], r0[2], "2 workers, epoch 2")
  T.truthy(r0[1] ~= r0[2], "epochs differ")
  local again = run_loader(ds, with(2), 1)
  T.eq(again[1], r0[1], "a new loader with the seed repeats epoch 1")
  local other = run_loader(ds, with(0, {seed = 124}), 1)
  T.truthy(other[1] ~= r0[1], "another seed differs")
  -- no shuffling: dataset order and labels
  local L = D.DataLoader(ds, {batch_size = 5, num_workers = 2})
  local k = 0
  for i, x, y in L:iter() do
    T.shape_eq(x, {y.shape[1], 3, 16, 16})
    T.eq(x.dtype, dl.float32)
    for _, lab in ipairs(y:tolist()) do
      k = k + 1
      T.eq(lab, ref.samples[k][2])
    end
  end
  T.eq(k, #ds)
  L:close()
end)

T.case("DataLoader: #loader, drop_last, a shuffled epoch covers every sample once", function()
  local ds = D.ImageFolder{root = root, transform = fixed}
  local n = #ds
  T.eq(n, 12)
  T.eq(#D.DataLoader(ds, {batch_size = 5}), 3)
  T.eq(#D.DataLoader(ds, {batch_size = 5, drop_last = true}), 2)
  local L = D.DataLoader(ds, {batch_size = 5, drop_last = true, shuffle = true, num_workers = 2, seed = 5})
  local sizes, seen = {}, {}
  for i, x, y in L:iter() do sizes[#sizes + 1] = x.shape[1] end
  T.eq(table.concat(sizes, ","), "5,5")
  sizes = {}
  for i, x, y in D.DataLoader(ds, {batch_size = 5}):iter() do sizes[#sizes + 1] = x.shape[1] end
  T.eq(table.concat(sizes, ","), "5,5,2")
  local L2 = D.DataLoader(ds, {batch_size = 3, shuffle = true, num_workers = 1, seed = 5})
  local total = 0
  for i, x, y in L2:iter() do
    total = total + x.shape[1]
    for r = 1, x.shape[1] do
      local key = string.format("%.6f", x[r]:sum():item())
      T.truthy(not seen[key], "a sample repeated")
      seen[key] = true
    end
  end
  T.eq(total, n)
  L:close(); L2:close()
end)

T.case("DataLoader: breaking out, closing and collecting never hang", function()
  local ds = D.ImageFolder{root = root, transform = aug}
  local L = D.DataLoader(ds, {batch_size = 2, num_workers = 2, seed = 1})
  for i in L:iter() do if i == 2 then break end end
  local count = 0
  for i in L:iter() do count = count + 1 end
  T.eq(count, #L)
  L:close()
  L:close()
  count = 0
  for i in L:iter() do count = count + 1 end -- a closed loader starts new workers when used again
  T.eq(count, #L)
  L:close()
  do
    local L3 <close> = D.DataLoader(ds, {batch_size = 3, num_workers = 2})
    for i, x in L3:iter() do if i == 1 then break end end
  end
  for _ = 1, 3 do
    local tmp = D.DataLoader(ds, {batch_size = 2, num_workers = 2})
    for i in tmp:iter() do if i == 1 then break end end
  end
  collectgarbage()
  collectgarbage()
end)

T.case("bad files: a Lua error naming the file, from any worker count", function()
  for _, kind in ipairs{"trunc", "zero", "text", "corrupt"} do
    local ds = D.ImageFolder{root = dir .. "/bad_" .. kind, transform = fixed}
    for _, nw in ipairs{0, 2} do
      local L = D.DataLoader(ds, {batch_size = 4, num_workers = nw})
      local e = T.raises(function() for _ in L:iter() do end end, "bad_" .. kind .. "/b/3.jpg", kind)
      -- usable again afterwards
      T.raises(function() for _ in L:iter() do end end, "3.jpg")
      L:close()
    end
    local L = D.DataLoader(ds, {batch_size = 4, num_workers = 2, skip_bad = true})
    local total = 0
    for i, x, y in L:iter() do total = total + x.shape[1]; T.eq(y.shape[1], x.shape[1]) end
    T.eq(total, 11, kind .. ": skip_bad drops the bad file")
    L:close()
  end
  local e = T.raises(function()
    for _ in D.DataLoader(D.ImageFolder{root = dir .. "/bad_zero"}, {batch_size = 2}):iter() do end
  end, "empty file")
end)

T.case("bad roots, empty classes, over-limit images and mismatched shapes", function()
  T.raises(function() D.ImageFolder{root = dir .. "/nope"} end, "root '" .. dir .. "/nope' does not exist")
  os.execute("mkdir -p '" .. dir .. "/noclass' && touch '" .. dir .. "/noclass/x.jpg'")
  T.raises(function() D.ImageFolder{root = dir .. "/noclass"} end, "couldn't find any class folder")
  os.execute("mkdir -p '" .. dir .. "/withempty/a' '" .. dir .. "/withempty/empty' && cp '" .. root .. "/cat/a.jpg' '" .. dir .. "/withempty/a/'")
  T.raises(function() D.ImageFolder{root = dir .. "/withempty"} end, "found no valid file for the class empty")
  T.raises(function() D.ImageFolder{root = root, extensions = {}} end, "extensions")
  T.raises(function() D.ImageFolder{root = root, transform = 5} end, "transform must be")
  T.raises(function() D.ImageFolder{} end, "root")
  T.raises(function() D.ImageFolder{root = root, bogus = 1} end, "unknown option 'bogus'")
  -- over the pixel limit, in a worker
  local old = dl.image.get_max_pixels()
  dl.image.set_max_pixels(500)
  local ds = D.ImageFolder{root = root, transform = fixed}
  T.raises(function() for _ in D.DataLoader(ds, {batch_size = 4, num_workers = 2}):iter() do end end,
    "exceeds the limit of 500 pixels")
  dl.image.set_max_pixels(old)
  -- images of different sizes cannot be stacked
  local raw = D.ImageFolder{root = root}
  T.raises(function() for _ in D.DataLoader(raw, {batch_size = 4, num_workers = 2}):iter() do end end,
    "the transform must make every image the same size")
  -- bad options
  T.raises(function() D.DataLoader(raw, {batch_size = 0}) end, "DataLoader: batch_size must be at least 1, got 0")
  T.raises(function() D.DataLoader(raw, {workers = 2}) end, "unknown option 'workers'")
  T.raises(function() D.DataLoader(raw, {num_workers = -1}) end, "num_workers")
  T.raises(function() D.DataLoader({}, {}) end, "get(i)")
end)

T.case("options are checked as everywhere in dl: unknown names and wrong types", function()
  local ds = D.TensorDataset(dl.ones(4, 2))
  T.raises(function() D.DataLoader(ds, {batchsize = 2}) end,
    "DataLoader: unknown option 'batchsize' (expected: batch_size, shuffle,")
  T.raises(function() D.DataLoader(ds, 4) end, "DataLoader: options table expected, got number")
  T.raises(function() D.DataLoader(ds, dl.ones(2)) end, "DataLoader: options table expected, got tensor")
  T.raises(function() D.DataLoader(ds, {[1] = 4}) end, "DataLoader: option names must be strings")
  T.raises(function() D.DataLoader(ds, {batch_size = "2"}) end, "DataLoader: batch_size must be an integer, got string")
  T.raises(function() D.DataLoader(ds, {batch_size = 1.5}) end, "DataLoader: batch_size must be an integer, got 1.5")
  T.raises(function() D.DataLoader(ds, {num_workers = -1}) end, "DataLoader: num_workers must be at least 0, got -1")
  T.raises(function() D.DataLoader(ds, {shuffle = 1}) end, "DataLoader: shuffle must be a boolean, got number")
  T.raises(function() D.DataLoader(ds, {seed = "x"}) end, "DataLoader: seed must be an integer, got string")
  T.raises(function() D.random_split(ds, {2, 2}, {seed = 0.5}) end, "random_split: seed must be an integer, got 0.5")
  T.raises(function() D.random_split(ds, {2, 2}, {sead = 1}) end, "random_split: unknown option 'sead' (expected: seed)")
  T.raises(function() D.ImageFolder{root = root, bogus = 1} end,
    "ImageFolder: unknown option 'bogus' (expected: root, transform, target_transform, extensions, mode)")
  T.raises(function() D.write_idx(dir .. "/x.idx", dl.ones(2), {zip = true}) end, "write_idx: unknown option 'zip'")
  T.raises(function() D.mnist(dir, {training = true}) end, "mnist: unknown option 'training'")
  T.raises(function() D.mnist(dir, {train = "yes"}) end, "mnist: train must be a boolean, got string")
  -- valid options still work; an integral float is an integer
  local L = D.DataLoader(ds, {batch_size = 2.0, shuffle = false, seed = 3})
  T.eq(L.batch_size, 2)
  T.eq(math.type(L.batch_size), "integer")
  T.eq(#D.random_split(ds, {3, 1}, {seed = 5}), 3)
end)

T.case("Lua stages run on the main thread; target_transform and collate", function()
  local tf = TF.Compose{TF.Resize({12, 12}), TF.ToTensor(), function(x) return x:mean(1, true) end,
    TF.Normalize({0.5}, {0.5})}
  local ds = D.ImageFolder{root = root, transform = tf, target_transform = function(c) return c - 1 end}
  local ref_batches = run_loader(ds, {batch_size = 5, num_workers = 0, shuffle = true, seed = 2})
  T.eq(run_loader(ds, {batch_size = 5, num_workers = 2, shuffle = true, seed = 2})[1], ref_batches[1])
  local L = D.DataLoader(ds, {batch_size = 5})
  for i, x, y in L:iter() do
    T.shape_eq(x, {x.shape[1], 1, 12, 12})
    T.eq(y.dtype, dl.int64)
    if i == 1 then
      T.tensor_eq(x[2], ds:get(2), 1e-6)
      T.eq(y[1]:item(), ref.samples[1][2] - 1)
    end
  end
  local C = D.DataLoader(D.ImageFolder{root = root, transform = fixed}, {batch_size = 4, num_workers = 2,
    collate = function(samples) return #samples end})
  local got = {}
  for i, n in C:iter() do got[#got + 1] = n end
  T.eq(table.concat(got, ","), "4,4,4")
  -- collate_fn, PyTorch's name, is the same option; giving both is an error
  local P = D.DataLoader(D.ImageFolder{root = root, transform = fixed}, {batch_size = 4,
    collate_fn = function(samples) return -#samples end})
  got = {}
  for i, n in P:iter() do got[#got + 1] = n end
  T.eq(table.concat(got, ","), "-4,-4,-4")
  T.raises(function() D.DataLoader(ds, {collate = D.default_collate, collate_fn = D.default_collate}) end,
    "collate and collate_fn are the same option")
end)

T.case("TensorDataset, Subset, random_split and Lua datasets", function()
  local x = dl.arange(0, 20):reshape(10, 2)
  local y = dl.arange(1, 11)
  local td = D.TensorDataset(x, y)
  T.eq(#td, 10)
  local a, b = td:get(3)
  T.tensor_eq(a, {4, 5}); T.eq(b:item(), 3)
  local L = D.DataLoader(td, {batch_size = 4, shuffle = true, seed = 9})
  local seen = {}
  for i, xb, yb in L:iter() do
    for r = 1, yb.shape[1] do
      local v = yb[r]:item()
      T.tensor_eq(xb[r], {2 * (v - 1), 2 * v - 1})
      seen[#seen + 1] = v
    end
  end
  table.sort(seen)
  T.eq(table.concat(seen, ","), "1,2,3,4,5,6,7,8,9,10")
  -- the shuffle is the loader's permutation of (seed, epoch)
  local L1 = D.DataLoader(td, {batch_size = 10, shuffle = true, seed = 9})
  local _, _, yy = L1:iter()()
  T.tensor_eq(yy, dl._data.randperm(10, 9, 1))
  -- Subset and random_split
  local sub = D.Subset(td, {2, 4, 6})
  T.eq(#sub, 3)
  T.tensor_eq(select(2, sub:get(2)), 4)
  local p1, p2 = D.random_split(td, {7, 3}, {seed = 1})
  T.eq(#p1, 7); T.eq(#p2, 3)
  local all = {}
  for _, s in ipairs{p1, p2} do for _, i in ipairs(s.indices) do T.truthy(not all[i]); all[i] = true end end
  local f1, f2, f3 = D.random_split(td, {0.5, 0.3, 0.2})
  T.eq(#f1 + #f2 + #f3, 10); T.eq(#f1, 5)
  T.raises(function() D.random_split(td, {5, 4}) end, "does not equal the length")
  T.raises(function() D.Subset(td, {11}) end, "out of range")
  T.raises(function() D.TensorDataset(x, dl.zeros(3)) end, "size mismatch")
  -- a plain Lua dataset; default collate of tensors, numbers and strings
  local lua_ds = setmetatable({}, {__len = function() return 5 end})
  function lua_ds:get(i) return dl.full({2}, i), i * 1.5, "s" .. i end
  local got = {}
  for i, t, num, s in D.DataLoader(lua_ds, {batch_size = 2}):iter() do
    got[#got + 1] = table.concat(t:sum(2):tolist(), ",") .. "/" .. num.dtype.name .. "/" .. table.concat(s, ",")
  end
  T.eq(table.concat(got, " "), "2,4/float64/s1,s2 6,8/float64/s3,s4 10/float64/s5")
  -- a Subset of an ImageFolder keeps the C workers
  local ds = D.ImageFolder{root = root, transform = fixed}
  local tr, va = D.random_split(ds, {9, 3}, {seed = 4})
  T.eq(#tr, 9)
  local SL = D.DataLoader(va, {batch_size = 3, num_workers = 2})
  T.truthy(SL._src ~= nil, "C path")
  for _, xb, yb in SL:iter() do
    for r = 1, 3 do
      local x1, y1 = va:get(r)
      T.tensor_eq(xb[r], x1, 0)
      T.eq(yb[r]:item(), y1)
    end
  end
end)

T.case("IDX files and dl.data.mnist", function()
  local m = D.mnist(dir .. "/fashion-mini")
  T.eq(#m, 30)
  T.shape_eq(m.data, {30, 1, 28, 28})
  T.eq(m.data.dtype, dl.uint8)
  T.tensor_eq(m.data:squeeze(2), T.from_torch(ref.imgs), 0)
  T.tensor_eq(m.targets, T.from_torch(ref.labs) + 1, 0)
  T.eq(m.classes[1], "T-shirt/top")
  local x1, y1 = m:get(4)
  T.shape_eq(x1, {1, 28, 28}); T.eq(y1:item(), ref.labs.data[4] + 1)
  local t = D.mnist(dir .. "/fashion-mini", {train = false, transform = TF.ToTensor()})
  T.eq(#t, 12)
  local tx, ty = t:get(2)
  T.eq(tx.dtype, dl.float32); T.eq(ty, ref.tlabs.data[2] + 1)
  local batches = 0
  for i, xb, yb in D.DataLoader(t, {batch_size = 5}):iter() do batches = batches + 1; T.eq(xb.dtype, dl.float32) end
  T.eq(batches, 3)
  local f = D.mnist{images = dir .. "/fashion-mini/t10k-images-idx3-ubyte", labels = dir .. "/fashion-mini/t10k-labels-idx1-ubyte"}
  T.eq(#f, 12)
  T.tensor_eq(D.read_idx(dir .. "/f32.idx"), T.from_torch(ref.f32), 0)
  T.tensor_eq(D.read_idx(dir .. "/i16.idx"), T.from_torch(ref.i16), 0)
  -- write and read back, plain and gzipped
  local z = dl.randn(3, 5)
  D.write_idx(dir .. "/w.idx", z)
  T.tensor_eq(D.read_idx(dir .. "/w.idx"), z, 0)
  local u = dl.randint(0, 256, {4, 6}):to(dl.uint8)
  D.write_idx(dir .. "/w.idx.gz", u, {gzip = true})
  T.tensor_eq(D.read_idx(dir .. "/w.idx.gz"), u, 0)
  T.raises(function() D.read_idx(dir .. "/trunc.idx") end, "truncated (expected 23520 bytes of data")
  T.raises(function() D.read_idx(dir .. "/bad.idx") end, "not an IDX file")
  T.raises(function() D.read_idx(dir .. "/none.idx") end, "cannot open")
  T.raises(function() D.mnist(dir) end, "no train-images-idx3-ubyte")
  T.raises(function() D.write_idx(dir .. "/x.idx", dl.zeros({2}, {dtype = dl.int64})) end, "cannot write int64")
end)

T.case("prepare_fashion_mnist.lua writes an ImageFolder with the right labels", function()
  local bin = (os.getenv("DL_BUILD_DIR") or "../../build") .. "/dlua"
  local out = dir .. "/fm"
  local p = io.popen(string.format("'%s' ../../scripts/prepare_fashion_mnist.lua '%s' '%s' 2>&1", bin,
    dir .. "/fashion-mini", out))
  local text = p:read("a")
  T.truthy(p:close(), "script failed: " .. text)
  T.truthy(text:find("train: 30 images in 10 classes", 1, true), text)
  T.truthy(text:find("val: 12 images in 10 classes", 1, true), text)
  local src = D.mnist(dir .. "/fashion-mini")
  for _, split in ipairs{{"train", src}, {"val", D.mnist(dir .. "/fashion-mini", {train = false})}} do
    local ds = D.ImageFolder{root = out .. "/" .. split[1], mode = "L"}
    T.eq(#ds, #split[2])
    for i = 1, #ds do
      local k = tonumber(ds:path(i):match("(%d+)%.png$"))
      local want = split[2].classes[split[2].targets[k]:item()]:gsub("/", "_")
      T.eq(ds.classes[ds.targets[i]], want, "class of " .. ds:path(i))
      T.tensor_eq(ds:get(i), split[2].data[k], 0)
    end
  end
  local p2 = io.popen(string.format("'%s' ../../scripts/prepare_fashion_mnist.lua '%s' '%s' --limit 7 2>&1", bin,
    dir .. "/fashion-mini", dir .. "/fm7"))
  local t2 = p2:read("a")
  p2:close()
  T.truthy(t2:find("train: 7 images", 1, true), t2)
end)

T.done()
