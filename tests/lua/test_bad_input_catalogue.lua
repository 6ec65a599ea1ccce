-- test_bad_input_catalogue.lua - the reliability issue's bad-input catalogue
-- (beyond test_bad_input.lua's tensor-level cases): what a user reaches from
-- Lua when training - layers, losses and labels, devices, optimizers, data
-- loaders, every file loader (images, safetensors, IDX, ImageFolder,
-- checkpoints) given missing, unreadable, truncated or wrong-kind files, a
-- checkpoint of another architecture, empty batches and non-finite losses.
--
-- Each case raises one Lua error whose message contains the culprit (the op,
-- the file, the label, the option); after each case the state is checked to
-- still compute, and at the end a full training step runs.  Under the
-- sanitizer build (scripts/test_sanitize.sh) the same run proves that no
-- error path leaks or touches freed memory.
local T = require "testlib"

local F = dl.nn.functional
local D = dl.data
local ck = require "dl.train.checkpoint"
local guard = require "dl.train.guard"

-- --- the files: valid ones, then broken copies ------------------------------
local dir = T.fresh_dir("bad_input_catalogue")
local function path(name) return dir .. "/" .. name end
local function write(name, bytes)
  local f = assert(io.open(path(name), "wb"))
  f:write(bytes)
  f:close()
  return path(name)
end
local slurp = T.read_file

dl.manual_seed(0)
dl.image.save(dl.randint(0, 256, {3, 6, 6}):to(dl.uint8), path("ok.png"))
dl.image.save(dl.randint(0, 256, {3, 16, 16}):to(dl.uint8), path("ok.jpg"))
dl.save(path("weights.safetensors"), {w = dl.ones(2, 3)})
D.write_idx(path("ok.idx"), dl.zeros(2, 3, {dtype = dl.uint8}))
local png, jpg = slurp(path("ok.png")), slurp(path("ok.jpg"))
local st, idx = slurp(path("weights.safetensors")), slurp(path("ok.idx"))
write("trunc.png", png:sub(1, #png // 2))
write("trunc.jpg", jpg:sub(1, #jpg // 2))
write("trunc.safetensors", st:sub(1, #st - 5))
write("trunc.idx", idx:sub(1, #idx - 2))
write("empty.bin", "")
write("text.png", "hello, this is not a PNG\n")
write("bad_magic.idx", "\1\2\3\4\0\0\0\1x")

-- a checkpoint of a tiny MLP (the "other architecture")
local function mlp()
  return dl.nn.Sequential(dl.nn.Flatten(), dl.nn.Linear(12, 5), dl.nn.ReLU(), dl.nn.Linear(5, 3))
end
do
  local m = mlp()
  local opt = dl.optim.SGD(m:parameters(), {lr = 0.1, momentum = 0.9})
  ck.save(path("mlp_checkpoint.safetensors"), {model = m, optimizer = opt, meta = {arch = "mlp"}})
end

-- ImageFolders: good, empty class, no classes, one corrupt image
local function folder(name, files)
  for rel, bytes in pairs(files) do
    local p = path(name .. "/" .. rel)
    os.execute("mkdir -p '" .. p:match("^(.*)/[^/]*$") .. "'")
    write(name .. "/" .. rel, bytes)
  end
  return path(name)
end
folder("no_classes", {["loose.png"] = png})
os.execute("mkdir -p '" .. path("empty_class/dogs") .. "'")
folder("empty_class", {["cats/a.png"] = png})
folder("loops", {["cats/a.png"] = png})
os.execute("ln -s . '" .. path("loops/cats/l1") .. "' && ln -s .. '" .. path("loops/cats/l2") .. "'")
folder("corrupt", {["cats/a.png"] = png, ["cats/b.png"] = png, ["dogs/c.png"] = png:sub(1, 40),
  ["dogs/d.png"] = png})

local function loader_over(root, opts)
  local tf = dl.transforms.Compose({dl.transforms.Resize(4), dl.transforms.CenterCrop(4),
    dl.transforms.ToTensor()})
  local ds = D.ImageFolder({root = root, transform = tf})
  opts = opts or {}
  opts.batch_size = opts.batch_size or 2
  return D.DataLoader(ds, opts)
end
local function drain(loader)
  local n = 0
  for _ in loader:iter(1) do n = n + 1 end
  return n
end

local m3 = dl.nn.Linear(3, 2)
local cases = {
  -- shapes the layers and losses refuse
  {"matmul inner sizes", function() return dl.matmul(dl.ones(2, 3), dl.ones(4, 5)) end, "matmul: shapes [2, 3] and [4, 5]"},
  {"conv2d channels", function() return F.conv2d(dl.ones(1, 4, 5, 5), dl.ones(2, 3, 3, 3)) end, "conv2d: input has 4 channels"},
  {"conv2d 2-D input", function() return F.conv2d(dl.ones(5, 5), dl.ones(2, 3, 3, 3)) end, "got 2-D [5, 5]"},
  {"Linear features", function() return m3(dl.ones(2, 4)) end, "Linear: input has 4 features"},
  {"BatchNorm2d channels", function() return dl.nn.BatchNorm2d(3)(dl.ones(2, 4, 5, 5)) end, "BatchNorm2d: input has 4 channels"},
  {"max_pool2d kernel too big", function() return F.max_pool2d(dl.ones(1, 1, 2, 2), 5) end, "max_pool2d: input plane 2x2 is too small"},
  {"resnet on an unbatched image", function() return dl.models.resnet18({num_classes = 3})(dl.ones(3, 8, 8)) end, "BatchNorm2d"},
  -- class labels
  {"cross_entropy label above the classes", function() return F.cross_entropy(dl.ones(2, 3), dl.tensor({1, 4})) end, "target label 4 is out of range for 3 classes"},
  {"cross_entropy label 0 (1-based)", function() return F.cross_entropy(dl.ones(2, 3), dl.tensor({0, 1})) end, "target label 0 is out of range"},
  {"cross_entropy negative label", function() return F.cross_entropy(dl.ones(2, 3), dl.tensor({-3, 1})) end, "target label -3 is out of range"},
  {"cross_entropy batch mismatch", function() return F.cross_entropy(dl.ones(2, 3), dl.tensor({1, 2, 3})) end, "expected target of shape [2]"},
  {"cross_entropy float labels", function() return F.cross_entropy(dl.ones(2, 3), dl.tensor({1.0, 2.0})) end, "cross_entropy"},
  {"nll_loss label", function() return F.nll_loss(dl.ones(2, 3), dl.tensor({1, 9})) end, "nll_loss: target label 9"},
  {"CrossEntropyLoss module label", function() return dl.nn.CrossEntropyLoss()(dl.ones(2, 3), dl.tensor({1, 5})) end, "target label 5"},
  -- dtypes and devices (no GPU here, or a CPU-only build: a clear refusal, never a crash)
  {"matmul int64 by float32", function() return dl.matmul(dl.ones(2, 2, {dtype = dl.int64}), dl.ones(2, 2)) end, "int64 and float32"},
  {"device string", function() return dl.ones(2, {device = "cuda:x"}) end, "invalid device 'cuda:x'"},
  {"device index past the GPUs", function() return dl.ones(2, {device = "cuda:7"}) end, "cuda"},
  {"tensor to cuda", function() if T.cuda then error("cuda:7: skipped, a GPU is present") end return dl.ones(2):to("cuda:7") end, "cuda"},
  {"module to a missing device", function() return dl.nn.Linear(2, 2):to("cuda:7") end, "cuda"},
  -- options
  {"SGD negative lr", function() return dl.optim.SGD(m3:parameters(), {lr = -1}) end, "SGD: Invalid learning rate: -1"},
  {"SGD misspelt option", function() return dl.optim.SGD(m3:parameters(), {lr = 0.1, mom = 0.9}) end, "unknown option 'mom'"},
  {"Adam beta out of range", function() return dl.optim.Adam(m3:parameters(), {betas = {1.5, 0.9}}) end, "Invalid beta parameter at index 1"},
  {"optimizer without parameters", function() return dl.optim.SGD({}, {lr = 0.1}) end, "empty parameter list"},
  {"DataLoader batch_size 0", function() return D.DataLoader(D.TensorDataset(dl.ones(4, 2)), {batch_size = 0}) end, "DataLoader: batch_size must be at least 1, got 0"},
  {"DataLoader misspelt option", function() return D.DataLoader(D.TensorDataset(dl.ones(4, 2)), {batchsize = 2}) end, "unknown option 'batchsize'"},
  {"TensorDataset lengths", function() return D.TensorDataset(dl.ones(4, 2), dl.ones(3)) end, "size mismatch"},
  {"Conv2d zero channels", function() return dl.nn.Conv2d(0, 3, 3) end, "in_channels must be at least 1"},
  {"resnet zero classes", function() return dl.models.resnet18({num_classes = 0}) end, "num_classes must be at least 1"},
  {"Resize negative", function() return dl.transforms.Resize(-3) end, "Resize: size must be a positive integer"},
  {"Normalize lengths", function() return dl.transforms.Normalize({0.5, 0.5}, {0.2, 0.2, 0.2}) end, "mean has 2 values but std has 3"},
  {"Normalize channels", function() return dl.transforms.Normalize({0.5, 0.5}, {0.2, 0.2})(dl.ones(3, 2, 2)) end, "image with 3 channels"},
  {"image mode", function() return dl.image.load(path("ok.png"), {mode = "CMYK"}) end, 'mode must be "RGB" or "L"'},
  {"shape too large to allocate", function() return dl.empty(1 << 40, 1 << 20) end, "shape too large"},
  -- autograd misuse
  {"backward twice", function()
    local x = dl.ones(2, {requires_grad = true})
    local y = (x * x):sum()
    y:backward()
    y:backward()
  end, "a second time"},
  {"backward of a vector", function() (dl.ones(2, {requires_grad = true}) * 2):backward() end, "one-element output"},
  -- safetensors files
  {"load: missing file", function() return dl.load(path("nope.safetensors")) end, path("nope.safetensors") .. ": cannot open"},
  {"load: a folder", function() return dl.load(dir) end, "not a regular file"},
  {"load: unreadable path", function() return dl.load(path("ok.png") .. "/x.safetensors") end, "Not a directory"},
  {"load: truncated", function() return dl.load(path("trunc.safetensors")) end, path("trunc.safetensors") .. ": tensor 'w'"},
  {"load: a PNG", function() return dl.load(path("ok.png")) end, "not a safetensors file?"},
  {"load: zero bytes", function() return dl.load(path("empty.bin")) end, "file is 0 bytes"},
  {"save: unwritable folder", function() return dl.save("/dev/null/x.safetensors", {w = dl.ones(1)}) end, "save: /dev/null/x.safetensors: cannot write"},
  {"save: a number as a tensor", function() return dl.save(path("y.safetensors"), {w = 5}) end, "value for 'w' is a number"},
  -- images
  {"image: missing", function() return dl.image.load(path("nope.png")) end, path("nope.png")},
  {"image: truncated PNG", function() return dl.image.load(path("trunc.png")) end, "truncated PNG file"},
  {"image: truncated JPEG", function() return dl.image.load(path("trunc.jpg")) end, "trunc.jpg"},
  {"image: a safetensors file", function() return dl.image.load(path("weights.safetensors")) end, "not a JPEG or PNG image"},
  {"image: zero bytes", function() return dl.image.load(path("empty.bin")) end, "empty file (0 bytes)"},
  {"image: text named .png", function() return dl.image.load(path("text.png")) end, "text.png': not a JPEG or PNG"},
  {"image: a folder", function() return dl.image.load(dir) end, "is not a regular file"},
  {"image: garbage bytes", function() return dl.image.decode("garbage bytes") end, "'<bytes>': not a JPEG or PNG"},
  {"image.save: unknown format", function() return dl.image.save(dl.zeros(3, 2, 2, {dtype = dl.uint8}), path("x.gif")) end, "cannot tell the format"},
  -- IDX files
  {"idx: missing", function() return D.read_idx(path("nope.idx")) end, "idx: cannot open '" .. path("nope.idx")},
  {"idx: truncated", function() return D.read_idx(path("trunc.idx")) end, "trunc.idx': truncated"},
  {"idx: bad magic", function() return D.read_idx(path("bad_magic.idx")) end, "not an IDX file (bad magic 01 02 03 04)"},
  {"idx: a PNG", function() return D.read_idx(path("ok.png")) end, "not an IDX file"},
  {"idx: zero bytes", function() return D.read_idx(path("empty.bin")) end, "too short for an IDX header"},
  {"mnist: missing folder", function() return D.mnist(path("no_mnist")) end, "no train-images-idx3-ubyte"},
  -- ImageFolder trees
  {"ImageFolder: missing root", function() return D.ImageFolder({root = path("nothere")}) end, "root '" .. path("nothere") .. "' does not exist"},
  {"ImageFolder: root is a file", function() return D.ImageFolder({root = path("ok.png")}) end, "is not a folder"},
  {"ImageFolder: no class folders", function() return D.ImageFolder({root = path("no_classes")}) end, "couldn't find any class folder"},
  {"ImageFolder: a class without images", function() return D.ImageFolder({root = path("empty_class")}) end, "found no valid file for the class dogs"},
  {"ImageFolder: symlink loops", function() return D.ImageFolder({root = path("loops")}) end, "symlink loop: '" .. path("loops/cats/l1")},
  {"DataLoader: a corrupt image (main thread)", function() return drain(loader_over(path("corrupt"))) end, "dogs/c.png"},
  {"DataLoader: a corrupt image (2 workers)", function() return drain(loader_over(path("corrupt"), {num_workers = 2})) end, "dogs/c.png"},
  -- checkpoints
  {"checkpoint: a weights file", function() return ck.load(path("weights.safetensors")) end, "is not a training checkpoint"},
  {"checkpoint: a PNG", function() return ck.load(path("ok.png")) end, path("ok.png")},
  {"checkpoint: missing", function() return ck.load(path("nope.safetensors")) end, "nope.safetensors: no such file"},
  {"checkpoint: truncated", function() return ck.load(path("trunc.safetensors")) end, "trunc.safetensors"},
  {"checkpoint of another architecture", function()
    local c = ck.load(path("mlp_checkpoint.safetensors"))
    return dl.models.resnet18({num_classes = 3}):load_state_dict(c.model)
  end, "Error(s) in loading state_dict for ResNet"},
  {"checkpoint with other layer sizes", function()
    local c = ck.load(path("mlp_checkpoint.safetensors"))
    local other = dl.nn.Sequential(dl.nn.Flatten(), dl.nn.Linear(12, 7), dl.nn.ReLU(), dl.nn.Linear(7, 3))
    return other:load_state_dict(c.model)
  end, "size mismatch"},
  -- empty batches and non-finite losses
  {"empty batch: its loss is NaN and the guard stops", function()
    local loss = F.cross_entropy(dl.ones(0, 3), dl.zeros(0, {dtype = dl.int64}))
    return guard.check_loss(loss, "epoch 1, batch 1")
  end, "the loss became NaN at epoch 1, batch 1"},
  {"+inf loss", function() return guard.check_loss(dl.tensor(math.huge), "step 7") end, "the loss became +inf at step 7"},
  {"-inf loss", function() return guard.check_loss(-math.huge, "step 8") end, "the loss became -inf at step 8"},
  {"overflowing logits", function()
    local logits = dl.tensor({{3e38, -3e38, 0}}):mul(10)
    return guard.check_loss(F.cross_entropy(logits, dl.tensor({2})), "step 9")
  end, "the loss became"},
  {"loss of many elements", function() return guard.check_loss(dl.ones(3)) end, "the loss has 3 elements"},
}

local function healthy()
  local y = dl.arange(1, 7):view(2, 3):sum(2)
  return y[1]:item() == 6 and y[2]:item() == 15
end

for _, c in ipairs(cases) do
  T.case(c[1], function()
    local err = T.raises(c[2], c[3], c[1])
    T.truthy(not err:find("PANIC"), "no panic")
    T.truthy(not err:find("\n%s*$"), "no trailing blank lines")
    T.truthy(healthy(), "the state computes after the error")
  end)
end

T.case("an empty dataset gives no batches (not an error)", function()
  T.eq(drain(D.DataLoader(D.TensorDataset(dl.ones(0, 2)), {batch_size = 2})), 0)
end)

T.case("skip_bad steps over the corrupt image and says which", function()
  local l = loader_over(path("corrupt"), {num_workers = 2, skip_bad = true, batch_size = 1})
  local n = 0
  for _, x in l:iter(1) do n = n + x.shape[1] end
  T.eq(n, 3, "three good images")
end)

T.case("a good ImageFolder still loads after the broken ones", function()
  os.execute("rm -f '" .. path("corrupt/dogs/c.png") .. "'")
  T.eq(drain(loader_over(path("corrupt"), {num_workers = 2})), 2)
end)

T.case("catalogue is big enough", function() T.truthy(#cases >= 40, #cases .. " cases") end)

T.case("a training step works after every error", function()
  dl.manual_seed(3)
  local m = mlp()
  local opt = dl.optim.SGD(m:parameters(), {lr = 0.1})
  local x, y = dl.randn(4, 3, 2, 2), dl.tensor({1, 2, 3, 1})
  local first
  for _ = 1, 5 do
    opt:zero_grad()
    local loss = F.cross_entropy(m(x), y)
    loss:backward()
    opt:step()
    first = first or guard.check_loss(loss, "healthy run")
  end
  T.truthy(F.cross_entropy(m(x), y):item() < first, "the loss falls")
end)

os.execute("rm -rf '" .. dir .. "'")
T.done()
