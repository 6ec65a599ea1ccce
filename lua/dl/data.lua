-- dl.data: datasets and the DataLoader (torch.utils.data and torchvision's
-- ImageFolder / MNIST, written the Lua way).
--
-- A dataset is any table with __len and get(i) (1-based) returning one
-- sample's values.  ImageFolder (and Subsets of it) are backed by a C file
-- index: their DataLoader reads, decodes and transforms in C worker threads
-- (pthreads, no Lua) that write straight into the batch tensor.  When the
-- transform holds a Lua function, the C transforms before it still run in the
-- workers and the rest (from the first Lua function on) runs on the main
-- thread, one sample at a time, before the batch is stacked.  Other datasets
-- load on the main thread (num_workers then only affects C-backed datasets).
--
-- Labels are 1-based class indices; shuffling is a Philox permutation of
-- (seed, epoch), so it is reproducible from the seed and differs per epoch.
local dl = require "dl"
local util = require "dl.util"
local C = dl._data

local D = {}

local function fail(name, msg, level) error(name .. ": " .. msg, (level or 1) + 2) end


local function callable(f)
  if type(f) == "function" then return true end
  local mt = getmetatable(f)
  return type(mt) == "table" and mt.__call ~= nil
end

local function check_dataset(name, ds)
  if type(ds) ~= "table" and type(ds) ~= "userdata" then fail(name, "a dataset (table with __len and get) is required", 2) end
  local ok, n = pcall(function() return #ds end)
  if not ok or math.type(n) ~= "integer" then fail(name, "the dataset has no length (__len)", 2) end
  if not callable(ds.get) then fail(name, "the dataset has no get(i) method", 2) end
  return n
end

-- --- ImageFolder ------------------------------------------------------------------

local ImageFolder = {}
ImageFolder.__name = "dl.data.ImageFolder"
local IF_methods = {}

ImageFolder.__index = function(self, k)
  if k == "samples" then
    local ix, s = rawget(self, "_index"), {}
    for i = 1, #ix do s[i] = {ix:path(i), ix:label(i)} end
    rawset(self, "samples", s)
    return s
  elseif k == "targets" then
    local ix, t = rawget(self, "_index"), {}
    for i = 1, #ix do t[i] = ix:label(i) end
    rawset(self, "targets", t)
    return t
  end
  return IF_methods[k]
end
ImageFolder.__len = function(self) return #self._index end
ImageFolder.__tostring = function(self)
  return string.format("ImageFolder(root=%q, %d samples, %d classes)", self.root, #self, #self.classes)
end

local DEFAULT_EXTENSIONS = {".jpg", ".jpeg", ".png"}

-- ImageFolder{root =, transform =, target_transform =, extensions =, mode = "RGB"|"L"}
function D.ImageFolder(opts)
  if type(opts) == "string" then opts = {root = opts} end
  opts = util.check_options(opts, "ImageFolder", {"root", "transform", "target_transform", "extensions", "mode"})
  if type(opts.root) ~= "string" then fail("ImageFolder", "root (a folder path) is required") end
  local exts = {}
  for i, e in ipairs(opts.extensions or DEFAULT_EXTENSIONS) do
    if type(e) ~= "string" or e == "" then fail("ImageFolder", "extensions must be non-empty strings") end
    e = e:lower()
    if e:sub(1, 1) ~= "." then e = "." .. e end
    exts[i] = e
  end
  if #exts == 0 then fail("ImageFolder", "extensions must not be empty") end
  if opts.target_transform ~= nil and not callable(opts.target_transform) then
    fail("ImageFolder", "target_transform must be a function")
  end
  local mode = opts.mode or "RGB"
  if mode ~= "RGB" and mode ~= "L" then fail("ImageFolder", "mode must be \"RGB\" or \"L\"") end
  local ok, ix = pcall(C.scan, opts.root, exts)
  if not ok then error(ix, 2) end
  local pipe, rest = dl.transforms._split(opts.transform)
  local classes = ix:classes()
  local class_to_idx = {}
  for i, c in ipairs(classes) do class_to_idx[c] = i end
  return setmetatable({root = opts.root, classes = classes, class_to_idx = class_to_idx,
    transform = opts.transform, target_transform = opts.target_transform, extensions = exts,
    _index = ix, _pipe = pipe, _rest = rest, _channels = mode == "L" and 1 or 3}, ImageFolder)
end

function IF_methods:get(i)
  if math.type(i) ~= "integer" then fail("ImageFolder:get", "integer index expected, got " .. tostring(i)) end
  local img = self._index:load(i, self._pipe, self._channels)
  if self._rest then img = self._rest(img) end
  local label = self._index:label(i)
  if self.target_transform then label = self.target_transform(label) end
  return img, label
end

function IF_methods:path(i) return self._index:path(i) end

function IF_methods:_c_source()
  return {index = self._index, pipe = self._pipe, rest = self._rest, channels = self._channels,
    target_transform = self.target_transform}
end

-- --- TensorDataset, Subset, random_split --------------------------------------------

local TensorDataset = {}
TensorDataset.__index = TensorDataset
TensorDataset.__name = "dl.data.TensorDataset"
TensorDataset.__len = function(self) return self._n end

function D.TensorDataset(...)
  local ts = table.pack(...)
  if ts.n == 0 then fail("TensorDataset", "at least one tensor is required") end
  local n
  for i = 1, ts.n do
    local t = ts[i]
    if not dl.is_tensor(t) then fail("TensorDataset", "argument " .. i .. " is not a tensor") end
    if t:dim() == 0 then fail("TensorDataset", "tensor " .. i .. " is 0-dimensional") end
    n = n or t.shape[1]
    if t.shape[1] ~= n then
      fail("TensorDataset", "size mismatch between tensors (" .. n .. " vs " .. t.shape[1] .. " along dim 1)")
    end
  end
  return setmetatable({tensors = {table.unpack(ts, 1, ts.n)}, _n = n}, TensorDataset)
end

function TensorDataset:get(i)
  if math.type(i) ~= "integer" or i < 1 or i > self._n then
    fail("TensorDataset:get", "index " .. tostring(i) .. " out of range (dataset of " .. self._n .. ")")
  end
  local out = {}
  for k, t in ipairs(self.tensors) do out[k] = t[i] end
  return table.unpack(out)
end

local Subset = {}
Subset.__index = Subset
Subset.__name = "dl.data.Subset"
Subset.__len = function(self) return #self.indices end

function D.Subset(dataset, indices)
  local n = check_dataset("Subset", dataset)
  local list = {}
  if dl.is_tensor(indices) then indices = indices:tolist() end
  if type(indices) ~= "table" then fail("Subset", "indices must be a table or a tensor") end
  for k, i in ipairs(indices) do
    if math.type(i) ~= "integer" or i < 1 or i > n then
      fail("Subset", "index " .. tostring(i) .. " out of range (dataset of " .. n .. ")")
    end
    list[k] = i
  end
  return setmetatable({dataset = dataset, indices = list}, Subset)
end

function Subset:get(i)
  local j = self.indices[i]
  if not j then fail("Subset:get", "index " .. tostring(i) .. " out of range (subset of " .. #self.indices .. ")") end
  return self.dataset:get(j)
end

function Subset:_c_source()
  local parent = self.dataset
  if not callable(parent._c_source) then return nil end
  local src = parent:_c_source()
  if not src then return nil end
  local map = {}
  for k, i in ipairs(self.indices) do map[k] = src.map and src.map[i] or i end
  src.map = map
  return src
end

-- random_split(dataset, lengths [, {seed =}]) - lengths are counts or
-- fractions summing to 1 (the remainder is spread as torch does)
function D.random_split(dataset, lengths, opts)
  opts = util.check_options(opts, "random_split", {"seed"})
  local n = check_dataset("random_split", dataset)
  if type(lengths) ~= "table" or #lengths == 0 then fail("random_split", "lengths must be a non-empty list") end
  local counts, sum = {}, 0
  for i, v in ipairs(lengths) do sum = sum + v end
  if math.abs(sum - 1) < 1e-9 and sum ~= n then
    local total = 0
    for i, f in ipairs(lengths) do
      if f < 0 or f > 1 then fail("random_split", "fraction at index " .. i .. " is not between 0 and 1") end
      counts[i] = math.floor(n * f)
      total = total + counts[i]
    end
    local rem = n - total
    for i = 0, rem - 1 do
      local k = i % #counts + 1
      counts[k] = counts[k] + 1
    end
  else
    for i, v in ipairs(lengths) do
      if math.type(v) ~= "integer" or v < 0 then fail("random_split", "lengths must be non-negative integers or fractions") end
      counts[i] = v
    end
    if sum ~= n then fail("random_split", "sum of input lengths (" .. sum .. ") does not equal the length of the dataset (" .. n .. ")") end
  end
  local seed = opts.seed == nil and C.seed() or util.check_int(opts.seed, "random_split", "seed")
  local perm = C.randperm(n, seed, 0):tolist()
  local out, off = {}, 0
  for i, c in ipairs(counts) do
    local idx = {}
    for k = 1, c do idx[k] = perm[off + k] end
    off = off + c
    out[i] = D.Subset(dataset, idx)
  end
  return table.unpack(out)
end

-- --- collation ---------------------------------------------------------------------------

local function collate_field(col, where)
  local v = col[1]
  if dl.is_tensor(v) then return dl.stack(col, 1) end
  local ty = type(v)
  if ty == "number" then
    local ints = true
    for _, x in ipairs(col) do ints = ints and math.type(x) == "integer" end
    return dl.tensor(col, {dtype = ints and dl.int64 or dl.float64})
  elseif ty == "boolean" then
    return dl.tensor(col, {dtype = dl.bool})
  elseif ty == "string" then
    return col
  elseif ty == "table" then
    local out = {}
    if #v > 0 then
      for j = 1, #v do
        local sub = {}
        for i, s in ipairs(col) do sub[i] = s[j] end
        out[j] = collate_field(sub, where)
      end
    else
      for k in pairs(v) do
        local sub = {}
        for i, s in ipairs(col) do sub[i] = s[k] end
        out[k] = collate_field(sub, where)
      end
    end
    return out
  end
  error("default_collate: cannot batch values of type " .. ty .. " (" .. where .. ")", 0)
end

-- default_collate(samples): samples is a list of packed tuples
-- (table.pack(dataset:get(i))); returns the batched fields as a list.
function D.default_collate(samples)
  local first = samples[1]
  local out = {}
  for j = 1, first.n do
    local col = {}
    for i, s in ipairs(samples) do col[i] = s[j] end
    out[j] = collate_field(col, "field " .. j)
  end
  out.n = first.n
  return out
end

-- --- DataLoader ------------------------------------------------------------------------------

local DataLoader = {}
DataLoader.__index = DataLoader
DataLoader.__name = "dl.data.DataLoader"

local loader_keys = {"batch_size", "shuffle", "num_workers", "drop_last", "seed", "prefetch", "pin_memory",
  "collate", "collate_fn", "skip_bad", "sampler"}

function D.DataLoader(dataset, opts)
  local n = check_dataset("DataLoader", dataset)
  opts = util.check_options(opts, "DataLoader", loader_keys)
  if opts.collate ~= nil and opts.collate_fn ~= nil then
    util.fail("DataLoader: collate and collate_fn are the same option (PyTorch's name); give one")
  end
  local function int_opt(k, def, lo)
    if opts[k] == nil then return def end
    return util.check_int(opts[k], "DataLoader", k, lo)
  end
  local function bool_opt(k) return util.opt_bool(opts[k], false, "DataLoader", k) end
  local self = setmetatable({
    dataset = dataset,
    batch_size = int_opt("batch_size", 1, 1),
    shuffle = bool_opt("shuffle"),
    num_workers = int_opt("num_workers", 0, 0),
    drop_last = bool_opt("drop_last"),
    prefetch = int_opt("prefetch", 2, 1),
    pin_memory = bool_opt("pin_memory"),
    skip_bad = bool_opt("skip_bad"),
    collate = opts.collate or opts.collate_fn,
    seed = opts.seed,
    epoch = 0,
    _n = n,
  }, DataLoader)
  -- sampler: a table with __len and indices() (the epoch's 1-based dataset
  -- indices, e.g. DistributedSampler); it replaces shuffle
  local sampler = opts.sampler
  if sampler ~= nil then
    if type(sampler) ~= "table" or not callable(sampler.indices) then
      fail("DataLoader", "sampler must have an indices() method (e.g. dl.data.DistributedSampler)")
    end
    if self.shuffle then fail("DataLoader", "sampler and shuffle = true are mutually exclusive") end
    self.sampler, self._n = sampler, #sampler
  end
  if self.collate ~= nil and not callable(self.collate) then fail("DataLoader", "collate must be a function") end
  -- pin_memory: batches land in page-locked memory, so x:to("cuda", {non_blocking=true})
  -- copies without blocking; a no-op on a machine without a GPU
  self._pin = self.pin_memory and dl.cuda.is_available()
  if self.seed == nil then self.seed = C.seed()
  else self.seed = util.check_int(self.seed, "DataLoader", "seed") end
  if callable(dataset._c_source) then self._src = dataset:_c_source() end
  return self
end

DataLoader.__len = function(self)
  local n, b = self._n, self.batch_size
  if self.drop_last then return n // b end
  return (n + b - 1) // b
end

function DataLoader:close()
  if self._c then
    self._c:close()
    self._c = nil
  end
end
DataLoader.__close = DataLoader.close
DataLoader.__gc = DataLoader.close

local function warn(msgs)
  for _, m in ipairs(msgs) do io.stderr:write("DataLoader: warning: skipped a sample: " .. m .. "\n") end
end

-- v with every tensor in it (through plain tables) copied into pinned memory.
local function pin(v)
  if dl.is_tensor(v) then return v:pin_memory() end
  if type(v) == "table" and getmetatable(v) == nil then
    local out = {}
    for k, x in pairs(v) do out[k] = pin(x) end
    return out
  end
  return v
end

-- Turns per-sample outputs of the C workers into the batch (Lua stages on
-- this thread, then stacking or the user's collate).
local function finish_c_batch(self, src, data, labels)
  local need_samples = type(data) == "table" or src.target_transform or self.collate
  if not need_samples then return data, labels end
  local list = labels:tolist()
  local samples = {}
  for k = 1, #list do
    local x = data[k]
    if src.rest then x = src.rest(x) end
    local y = list[k]
    if src.target_transform then y = src.target_transform(y) end
    samples[k] = table.pack(x, y)
  end
  local out = (self.collate or D.default_collate)(samples)
  if self.collate then return out end
  return out[1], out[2]
end

function DataLoader:_c_iter(epoch)
  local src = self._src
  local map = src.map
  if self.sampler then -- the sampler's epoch order through the source's map; a new loader per epoch
    map = {}
    for k, i in ipairs(self.sampler:indices()) do map[k] = src.map and src.map[i] or i end
    self:close()
  end
  if not self._c then
    self._c = C.loader(src.index, {map = map, pipe = src.pipe, channels = src.channels,
      batch_size = self.batch_size, shuffle = self.shuffle, drop_last = self.drop_last,
      skip_bad = self.skip_bad, per_sample = src.rest ~= nil, seed = self.seed,
      num_workers = self.num_workers, prefetch = self.prefetch})
  end
  local c = self._c
  c:start(epoch)
  local closer = setmetatable({}, {__close = function() c:stop() end})
  local function step()
    while true do
      local b, data, labels, _, warnings = c:next()
      if b == nil then return nil end
      if #warnings > 0 then warn(warnings) end
      if data ~= nil then
        local x, y = finish_c_batch(self, src, data, labels)
        if self._pin then x, y = pin(x), pin(y) end
        if self.collate then return b, x end
        return b, x, y
      end
    end
  end
  return step, nil, nil, closer
end

function DataLoader:_lua_iter(epoch)
  local ds, n, bs = self.dataset, self._n, self.batch_size
  local order
  if self.sampler then order = self.sampler:indices()
  elseif self.shuffle then order = C.randperm(n, self.seed, epoch):tolist() end
  local nb = #self
  local b = 0
  local tensors = getmetatable(ds) == TensorDataset and rawget(ds, "get") == nil and not self.collate and ds.tensors
  local function step()
    b = b + 1
    if b > nb then return nil end
    local first = (b - 1) * bs + 1
    local last = math.min(b * bs, n)
    local idx = {}
    for k = first, last do idx[#idx + 1] = order and order[k] or k end
    if tensors then
      local it = dl.tensor(idx, {dtype = dl.int64})
      local out = {}
      for k, t in ipairs(tensors) do out[k] = t:index_select(1, it) end
      if self._pin then out = pin(out) end
      return b, table.unpack(out)
    end
    local samples = {}
    for k, i in ipairs(idx) do samples[k] = table.pack(ds:get(i)) end
    local out = (self.collate or D.default_collate)(samples)
    if self._pin then
      local n = out.n
      out = pin(out)
      out.n = n
    end
    if self.collate then return b, out end
    return b, table.unpack(out, 1, out.n)
  end
  return step, nil, nil, nil
end

-- for i, x, y in loader:iter() do ... end   (i is the 1-based batch number)
-- Each call starts a new epoch (or the given one); breaking out of the loop
-- stops the workers' epoch.
function DataLoader:iter(epoch)
  if epoch == nil then
    self.epoch = self.epoch + 1
    epoch = self.epoch
  elseif math.type(epoch) ~= "integer" or epoch < 0 then
    fail("DataLoader:iter", "epoch must be a non-negative integer")
  else
    self.epoch = epoch
  end
  if self._src then return self:_c_iter(epoch) end
  return self:_lua_iter(epoch)
end

function DataLoader:__tostring()
  return string.format("DataLoader(%d samples, batch_size=%d, %d batches, num_workers=%d)", self._n,
    self.batch_size, #self, self.num_workers)
end

D.DistributedSampler = require("dl.sampler").DistributedSampler

-- --- IDX files and MNIST ------------------------------------------------------------------------

D.read_idx = function(path) return C.idx_read(path) end
D.write_idx = function(path, t, opts)
  opts = util.check_options(opts, "write_idx", {"gzip"})
  return C.idx_write(path, t, opts.gzip)
end

D.FASHION_MNIST_CLASSES = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt",
  "Sneaker", "Bag", "Ankle boot"}
D.MNIST_CLASSES = {"0 - zero", "1 - one", "2 - two", "3 - three", "4 - four", "5 - five", "6 - six",
  "7 - seven", "8 - eight", "9 - nine"}

local exists = util.file_exists

local function find_idx(dir, stem)
  for _, name in ipairs{stem, stem .. ".gz"} do
    if exists(dir .. "/" .. name) then return dir .. "/" .. name end
  end
  local alt = stem:gsub("%-idx(%d)%-", "-idx%1.")
  for _, name in ipairs{alt, alt .. ".gz"} do
    if exists(dir .. "/" .. name) then return dir .. "/" .. name end
  end
  return nil
end

-- mnist(dir [, {train = true, transform =, classes =}]) or
-- mnist{images = path, labels = path [, transform =, classes =]}
-- A dataset of (uint8 1 x 28 x 28 image, 1-based label); .data is the N x 1 x
-- 28 x 28 uint8 tensor, .targets the int64 labels (1-based), .classes the
-- class names (Fashion-MNIST's when the folder's name says "fashion").
function D.mnist(where, opts)
  local images, labels
  if type(where) == "table" then
    opts = util.check_options(where, "mnist", {"images", "labels", "transform", "classes"})
    images, labels = opts.images, opts.labels
    if type(images) ~= "string" or type(labels) ~= "string" then fail("mnist", "images and labels paths are required") end
  elseif type(where) == "string" then
    opts = util.check_options(opts, "mnist", {"train", "transform", "classes"})
    local train = util.opt_bool(opts.train, true, "mnist", "train")
    local prefix = train and "train" or "t10k"
    images = find_idx(where, prefix .. "-images-idx3-ubyte")
    labels = find_idx(where, prefix .. "-labels-idx1-ubyte")
    if not images or not labels then
      fail("mnist", "no " .. prefix .. "-images-idx3-ubyte[.gz] / " .. prefix .. "-labels-idx1-ubyte[.gz] in '" .. where .. "'")
    end
  else
    fail("mnist", "a folder or {images =, labels =} is required")
  end
  local ok, x = pcall(C.idx_read, images)
  if not ok then error(x, 2) end
  local ok2, y = pcall(C.idx_read, labels)
  if not ok2 then error(y, 2) end
  if x:dim() ~= 3 or x.dtype ~= dl.uint8 then fail("mnist", "'" .. images .. "' does not hold N x H x W uint8 images") end
  if y:dim() ~= 1 then fail("mnist", "'" .. labels .. "' does not hold a list of labels") end
  if x.shape[1] ~= y.shape[1] then
    fail("mnist", x.shape[1] .. " images but " .. y.shape[1] .. " labels")
  end
  local targets = y:to(dl.int64) + 1
  local classes = opts.classes
  if not classes then
    local name = (type(where) == "string" and where or images):lower()
    classes = name:find("fashion") and D.FASHION_MNIST_CLASSES or D.MNIST_CLASSES
  end
  local ds = D.TensorDataset(x:unsqueeze(2), targets)
  ds.data, ds.targets, ds.classes = ds.tensors[1], targets, classes
  if opts.transform then
    local tf = opts.transform
    if not callable(tf) then fail("mnist", "transform must be callable") end
    ds.transform = tf
    ds.get = function(self, i)
      local img, t = TensorDataset.get(self, i)
      return tf(img), t:item()
    end
  end
  return ds
end

return D
