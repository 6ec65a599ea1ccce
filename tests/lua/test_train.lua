-- test_train.lua - the pieces of the training programs (lua/dl/train and the
-- bindings of src/lua/l_train.c): options and --help, JSON, the RNG state,
-- checkpoints and weights loading, evaluation, progress output and the plot.
-- The end-to-end runs of train_resnet.lua are in tests/sh/test_train.sh.
local T = require "testlib"
local dl = require "dl"
local train = require "dl.train"

local tmp = T.tmpdir()

-- --- options ---------------------------------------------------------------------------------

local SPEC = {
  {name = "data", default = "./data/train", help = "folder"},
  {name = "epochs", type = "int", min = 1, default = 10, help = "passes"},
  {name = "lr", type = "number", min = 0, default = 0.001, help = "rate"},
  {name = "lr-schedule", type = "choice", choices = {"none", "step", "cosine"}, default = "none"},
  {name = "augment", type = "flag", default = false, help = "augment"},
  {name = "resume", optional_value = "", metavar = "FILE", help = "resume"},
  {name = "val", help = "val folder"},
}

T.case("args: defaults, both value forms, flags, positional, given", function()
  local o, given, pos = train.args.parse({"--epochs", "3", "--lr=0.5", "--augment", "x.png", "--val", "v"}, SPEC)
  T.eq(o.epochs, 3)
  T.eq(math.type(o.epochs), "integer")
  T.eq(o.lr, 0.5)
  T.eq(o.augment, true)
  T.eq(o.data, "./data/train")
  T.eq(o.lr_schedule, "none")
  T.eq(o.val, "v")
  T.eq(o.resume, nil)
  T.eq(pos[1], "x.png")
  T.eq(#pos, 1)
  T.truthy(given.epochs and given.lr and given.augment and given.val)
  T.eq(given.data, nil)
  local o2 = train.args.parse({"--no-augment", "--resume", "--epochs", "2"}, SPEC)
  T.eq(o2.augment, false)
  T.eq(o2.resume, "")
  T.eq(o2.epochs, 2)
  local o3 = train.args.parse({"--resume", "ck.safetensors", "--", "--epochs"}, SPEC)
  T.eq(o3.resume, "ck.safetensors")
  T.eq(o3.epochs, 10)
  local o4 = train.args.parse({"--lr", "-0"}, SPEC)
  T.eq(o4.lr, 0.0)
  T.eq(math.type(o4.lr), "float")
end)

T.case("args: bad input is one message naming the option", function()
  local function err(argv)
    local ok, e = pcall(train.args.parse, argv, SPEC)
    T.eq(ok, false)
    T.truthy(train.args.is_error(e), "an args.Error")
    return e.message
  end
  T.truthy(err({"--epochs", "x"}):find("--epochs: expected an integer, got 'x'", 1, true))
  T.truthy(err({"--epochs", "0"}):find("--epochs: must be at least 1", 1, true))
  T.truthy(err({"--epochs", "2.5"}):find("expected an integer", 1, true))
  T.truthy(err({"--lr", "fast"}):find("--lr: expected a number", 1, true))
  T.truthy(err({"--lr", "-1"}):find("--lr: must be at least 0", 1, true))
  T.truthy(err({"--lr-schedule", "linear"}):find("expected one of none, step, cosine, got 'linear'", 1, true))
  T.truthy(err({"--epoch", "3"}):find("unknown option --epoch (did you mean --epochs?)", 1, true))
  T.truthy(err({"--bogus"}):find("unknown option --bogus (see --help)", 1, true))
  T.truthy(err({"--epochs"}):find("--epochs needs a value", 1, true))
  T.truthy(err({"--data", "--epochs", "3"}):find("--data needs a value", 1, true))
  T.truthy(err({"--augment=maybe"}):find("--augment: expected on/off", 1, true))
end)

T.case("args: --help lists every option with its default", function()
  local text = train.args.help(SPEC, {usage = "prog [options]", description = "Does things."})
  T.truthy(text:find("usage: prog [options]", 1, true))
  T.truthy(text:find("--epochs N", 1, true))
  T.truthy(text:find("(default: 10)", 1, true))
  T.truthy(text:find("(default: 0.001)", 1, true))
  T.truthy(text:find("--lr-schedule none|step|cosine", 1, true))
  T.truthy(text:find("--[no-]augment", 1, true))
  T.truthy(text:find("--resume [FILE]", 1, true))
  T.truthy(text:find("(default: off)", 1, true))
  T.truthy(text:find("(default: none)", 1, true))
  for line in text:gmatch("[^\n]+") do T.truthy(#line <= 100, "line too long: " .. line) end
  T.truthy(train.args.wants_help({"--epochs", "1", "--help"}))
  T.truthy(train.args.wants_help({"-h"}))
  T.eq(train.args.wants_help({"--", "--help"}), false)
end)

-- --- JSON ------------------------------------------------------------------------------------

T.case("json: round trip keeps integers, floats, strings, nesting", function()
  local v = {a = 1, b = 0.1, c = "x\"y\n\1", d = {1, 2.5, "z", true}, e = {f = false}, g = 3.0, h = {},
    big = 2^60, neg = -7, tiny = 1e-300}
  local s = train.json.encode(v)
  T.eq(s, train.json.encode(v), "deterministic")
  local w = train.json.decode(s)
  T.eq(w.a, 1)
  T.eq(math.type(w.a), "integer")
  T.eq(w.b, 0.1)
  T.eq(w.c, "x\"y\n\1")
  T.eq(w.d[1], 1)
  T.eq(w.d[2], 2.5)
  T.eq(w.d[3], "z")
  T.eq(w.d[4], true)
  T.eq(w.e.f, false)
  T.eq(w.g, 3.0)
  T.eq(math.type(w.g), "float")
  T.eq(w.big, 2^60)
  T.eq(w.neg, -7)
  T.eq(w.tiny, 1e-300)
  T.eq(next(w.h), nil)
  T.eq(train.json.decode('{"k":{"1":[1,null,3]}}').k["1"][3], 3)
end)

T.case("json: bad input", function()
  T.raises(function() train.json.encode({f = print}) end, "json: cannot encode a function")
  T.raises(function() train.json.encode({x = 0 / 0}) end, "json: cannot encode the number")
  T.raises(function() train.json.encode({[true] = 1}) end, "object keys must be strings")
  T.raises(function() train.json.encode({x = dl.ones(1)}) end, "cannot encode a tensor")
  T.raises(function() train.json.decode("{bad") end, "json_decode")
  T.raises(function() train.json.decode("[1,]") end, "json_decode")
  T.raises(function() train.json.decode(5) end, "a string is required")
end)

-- --- RNG state -------------------------------------------------------------------------------

T.case("get_rng_state / set_rng_state restore the stream", function()
  dl.manual_seed(1234)
  dl.randn(5)
  local s = dl.get_rng_state()
  T.eq(s.dtype, dl.int64)
  T.shape_eq(s, {2})
  T.eq(s[1]:item(), 1234)
  local a = dl.randn(7)
  local b = dl.rand(3)
  dl.manual_seed(99)
  dl.rand(10)
  dl.set_rng_state(s)
  T.tensor_eq(dl.randn(7), a, 0)
  T.tensor_eq(dl.rand(3), b, 0)
  T.eq(dl.initial_seed(), 1234)
  T.raises(function() dl.set_rng_state(dl.zeros(3, {dtype = dl.int64})) end, "set_rng_state: expected an int64")
  T.raises(function() dl.set_rng_state(dl.zeros(2)) end, "set_rng_state: expected an int64")
  T.raises(function() dl.set_rng_state("x") end, "set_rng_state: expected the tensor")
  T.raises(function() dl.get_rng_state(1) end, "get_rng_state: takes no arguments")
end)

T.case("sigint: pending counts, watch on/off, isatty", function()
  dl._train.sigint_watch(true)
  T.eq(dl._train.sigint_pending(), 0)
  dl._train.sigint_watch(false)
  T.eq(type(dl._train.isatty(1)), "boolean")
  T.eq(dl._train.isatty(-1), false)
  T.raises(function() dl._train.sigint_watch("yes") end, "boolean expected")
end)

-- --- checkpoints -----------------------------------------------------------------------------

local function small_model(out)
  return dl.nn.Sequential(dl.nn.Flatten(), dl.nn.Linear(12, 6), dl.nn.ReLU(), dl.nn.Linear(6, out or 3))
end

-- the same model with the classifier named fc (what load_weights replaces)
local Net = dl.nn.Module:extend("Net")
function Net:__init(classes)
  self.body = dl.nn.Linear(12, 6)
  self.fc = dl.nn.Linear(6, classes)
end
function Net:forward(x) return self.fc(self.body(x:flatten(2)):relu()) end

T.case("checkpoint: save/load round trip of model, optimizer, RNG, meta, extra tensors", function()
  dl.manual_seed(3)
  local m = small_model()
  local opt = dl.optim.SGD(m:parameters(), {lr = 0.1, momentum = 0.9, weight_decay = 1e-4})
  local x, y = dl.randn(4, 3, 2, 2), dl.tensor({1, 2, 3, 1})
  for _ = 1, 2 do
    opt:zero_grad()
    dl.nn.functional.cross_entropy(m(x), y):backward()
    opt:step()
  end
  opt.param_groups[1].lr = 0.0375
  local path = tmp .. "/train_ck.safetensors"
  local meta = {epoch = 2, step = 7, position = {epoch = 3, batch = 0}, options = {arch = "x", lr = 0.1, augment = false},
    classes = {"a", "b", "c"}}
  local rng = dl.get_rng_state()
  train.checkpoint.save(path, {model = m, optimizer = opt, meta = meta,
    tensors = {["history.loss"] = dl.tensor({2.5, 1.25}, {dtype = dl.float64})}})
  local ck = train.checkpoint.load(path)
  T.eq(ck.meta.step, 7)
  T.eq(ck.meta.position.epoch, 3)
  T.eq(ck.meta.options.lr, 0.1)
  T.eq(ck.meta.options.augment, false)
  T.eq(ck.meta.classes[3], "c")
  T.eq(ck.optimizer_name, "SGD")
  T.tensor_eq(ck.rng_state, rng, 0)
  T.tensor_eq(ck.tensors["history.loss"], {2.5, 1.25}, 0)
  for k, v in pairs(m:state_dict()) do T.tensor_eq(ck.model[k], v, 0, k) end
  -- a fresh model and optimizer continue exactly like the saved ones
  dl.manual_seed(77)
  local m2 = small_model()
  local opt2 = dl.optim.SGD(m2:parameters(), {lr = 0.5, momentum = 0.9, weight_decay = 1e-4})
  train.checkpoint.load_weights(m2, ck.model, {allow_new_classifier = false})
  opt2:load_state_dict(ck.optimizer)
  T.eq(opt2.param_groups[1].lr, 0.0375)
  for _, pair in ipairs {{m, opt}, {m2, opt2}} do
    pair[2]:zero_grad()
    dl.nn.functional.cross_entropy(pair[1](x), y):backward()
    pair[2]:step()
  end
  local p1, p2 = m:parameters(), m2:parameters()
  for i = 1, #p1 do T.tensor_eq(p2[i], p1[i], 0, "parameter " .. i) end
end)

T.case("checkpoint: weights files, classifier replacement, errors in one line", function()
  dl.manual_seed(5)
  local src = Net(3)
  local wpath = tmp .. "/train_w.safetensors"
  dl.save(wpath, src:state_dict())
  local sd, meta = train.checkpoint.read_weights(wpath)
  T.eq(meta, nil)
  T.tensor_eq(sd["body.weight"], src.body.weight, 0)
  -- same classes: everything loads
  local same = Net(3)
  T.eq(train.checkpoint.load_weights(same, sd, {path = wpath, arch = "net"}), false)
  T.tensor_eq(same.fc.weight, src.fc.weight, 0)
  -- another class count: the body loads, the fresh classifier stays
  local other = Net(5)
  local fresh = other.fc.weight:clone()
  T.eq(train.checkpoint.load_weights(other, sd, {path = wpath, arch = "net"}), true)
  T.tensor_eq(other.body.weight, src.body.weight, 0)
  T.tensor_eq(other.fc.weight, fresh, 0)
  -- ... unless that is not allowed (resuming)
  T.raises(function() train.checkpoint.load_weights(Net(5), sd, {path = wpath, arch = "net", allow_new_classifier = false}) end,
    "of another shape (fc.bias [3] vs [5]")
  -- a different model: one line with the offending keys
  local e = T.raises(function() train.checkpoint.load_weights(small_model(), sd, {path = wpath, arch = "seq"}) end,
    wpath .. " does not fit seq: 4 missing (1.bias, 1.weight, 3.bias, ...)")
  T.truthy(e:find("4 unexpected (body.bias, body.weight, fc.bias, ...)", 1, true), e)
  T.eq(e:find("\n"), nil)
  -- body shape differs: not just the classifier
  local Wide = dl.nn.Module:extend("Wide")
  function Wide:__init() self.body = dl.nn.Linear(12, 7) self.fc = dl.nn.Linear(7, 3) end
  T.raises(function() train.checkpoint.load_weights(Wide(), sd, {path = wpath, arch = "wide"}) end,
    "3 of another shape (body.bias [6] vs [7]")
  -- reading: missing file, not a checkpoint, garbage
  T.raises(function() train.checkpoint.read_weights(tmp .. "/nope.safetensors") end, "nope.safetensors: no such file")
  T.raises(function() train.checkpoint.load(wpath) end, "is not a training checkpoint")
  local bad = tmp .. "/train_bad.safetensors"
  local f = io.open(bad, "wb")
  f:write("garbage that is not safetensors")
  f:close()
  local e2 = T.raises(function() train.checkpoint.read_weights(bad) end, "train_bad.safetensors")
  T.eq(e2:find("\n"), nil)
end)

T.case("checkpoint: a checkpoint also serves as a weights file", function()
  dl.manual_seed(8)
  local m = Net(4)
  local opt = dl.optim.SGD(m:parameters(), {lr = 0.1})
  local path = tmp .. "/train_ck2.safetensors"
  train.checkpoint.save(path, {model = m, optimizer = opt, meta = {arch = "net", classes = {"w", "x", "y", "z"}}})
  local sd, meta = train.checkpoint.read_weights(path)
  T.eq(meta.arch, "net")
  T.eq(meta.classes[4], "z")
  T.eq(sd["rng_state"], nil)
  T.tensor_eq(sd["fc.weight"], m.fc.weight, 0)
  T.eq(train.models.num_classes_of(sd), 4)
end)

-- --- models, data helpers, evaluation ------------------------------------------------------------

T.case("models: names, unknown arch, tinycnn shapes", function()
  local names = train.models.names()
  local have = {}
  for _, n in ipairs(names) do have[n] = true end
  T.truthy(have.resnet18 and have.resnet50 and have.tinycnn)
  T.truthy(train.models.exists("tinycnn"))
  T.eq(train.models.exists("resnet51"), false)
  local e = T.raises(function() train.models.build("resnet51", 10) end, "unknown --arch 'resnet51' (available: ")
  T.truthy(e:find("tinycnn", 1, true))
  local m = train.models.build("tinycnn", 7)
  T.shape_eq(m.fc.weight, {7, 16})
end)

T.case("data: spread picks evenly spaced indices", function()
  T.eq(table.concat(train.data.spread(10, 5), ","), "1,3,5,7,9")
  T.eq(table.concat(train.data.spread(10, 3), ","), "1,4,7")
  T.eq(#train.data.spread(10, 0), 10)
  T.eq(#train.data.spread(10, 20), 10)
  T.eq(train.data.default_resize(224), 256)
  T.eq(train.data.default_resize(32), 37)
end)

T.case("data: folder errors are one line naming the option", function()
  local e = T.raises(function() train.data.folder("--data", tmp .. "/no_such_dir") end, "--data " .. tmp .. "/no_such_dir: ")
  T.truthy(e:find("does not exist", 1, true), e)
  os.execute("mkdir -p '" .. tmp .. "/train_empty'")
  local e2 = T.raises(function() train.data.folder("--data", tmp .. "/train_empty") end, "--data " .. tmp .. "/train_empty: ")
  T.eq(e2:find("\n"), nil)
end)

T.case("evaluate: top-1, top-5 and loss against a hand count", function()
  -- a "model" returning fixed logits for 6 samples of 6 classes
  local logits = dl.tensor({
    {9, 1, 2, 3, 4, 5}, -- label 1: top-1 hit
    {1, 9, 2, 3, 4, 5}, -- label 3: rank 5 (1 < 2 < 3 < 4 < 5 < 9 -> class 3 is 5th)
    {1, 2, 9, 3, 4, 5}, -- label 1: rank 6 -> miss
    {1, 2, 3, 9, 4, 5}, -- label 4: hit
    {5, 4, 3, 2, 1, 9}, -- label 1: rank 2
    {1, 1.5, 2, 3, 4, 9}, -- label 6: hit
  }, {dtype = dl.float32})
  local labels = dl.tensor({1, 3, 1, 4, 1, 6})
  local idx = dl.arange(1, 7)
  local ds = dl.data.TensorDataset(idx, labels)
  local loader = dl.data.DataLoader(ds, {batch_size = 4})
  local Lookup = dl.nn.Module:extend("Lookup")
  function Lookup:forward(i) return logits:index_select(1, i) end
  local m = Lookup()
  m:train()
  local r = train.evaluate.run(m, loader)
  T.eq(r.n, 6)
  T.near(r.top1, 3 / 6)
  T.near(r.top5, 5 / 6)
  T.eq(r.k, 5)
  local ce = dl.nn.functional.cross_entropy(logits, labels):item()
  T.near(r.loss, ce, 1e-5)
  T.eq(m.training, true, "mode restored")
end)

-- --- progress --------------------------------------------------------------------------------

local function sink()
  local parts = {}
  return {write = function(self, ...) for _, s in ipairs {...} do parts[#parts + 1] = s end return self end,
    flush = function() end, text = function() return table.concat(parts) end}
end

T.case("progress: plain lines carry the seed's loss line every log_every batches", function()
  local out = sink()
  local p = train.progress.new{epoch = 2, epochs = 5, total = 6, log_every = 3, tty = false, out = out}
  for b = 1, 6 do p:step(b, 4, b * 1.0, 0) end
  local st = p:finish()
  local text = out.text()
  T.truthy(text:find("[2,     3] loss: 2.000  | 3/6", 1, true), text)
  T.truthy(text:find("[2,     6] loss: 5.000  | 6/6", 1, true), text)
  T.eq(text:find("\r", 1, true), nil)
  T.eq(select(2, text:gsub("\n", "")), 2)
  T.near(st.mean_loss, 3.5)
  T.eq(st.images, 24)
end)

T.case("progress: a terminal gets one bar redrawn with \\r", function()
  local out = sink()
  local p = train.progress.new{epoch = 1, epochs = 2, total = 4, log_every = 2, tty = true, out = out}
  for b = 1, 4 do
    p.last_draw = -1 -- draw every step
    p:step(b, 8, 0.5, 0.01)
  end
  p:finish()
  local text = out.text()
  T.truthy(text:find("\r\27[K", 1, true))
  T.truthy(text:find("epoch 1/2 [##########..........] 2/4", 1, true), text)
  T.truthy(text:find("epoch 1/2 [####################] 4/4", 1, true), text)
  T.truthy(text:find("[1,     2] loss: 0.500\n", 1, true), text)
  T.truthy(text:find("img/s", 1, true) and text:find("data ", 1, true) and text:find("took", 1, true))
  T.eq(train.progress.format_time(3725), "1:02:05")
  T.eq(train.progress.format_time(65), "1:05")
  T.eq(train.progress.format_time(1 / 0), "?")
end)

-- --- plot ------------------------------------------------------------------------------------

T.case("plot: primitives draw, clip and reject bad images", function()
  local img = dl.full({3, 20, 30}, 255, {dtype = dl.uint8})
  dl._train.plot_rect(img, 2, 3, 4, 5, {10, 20, 30})
  T.tensor_eq(img[1][4][3], 10, 0)
  T.tensor_eq(img[3][8][6], 30, 0)
  T.tensor_eq(img[1][9][3], 255, 0, "below the rect")
  dl._train.plot_line(img, 0, 15.5, 29, 15.5, {0, 0, 0}, 1)
  T.truthy(img[1][16][10]:item() < 60, "line drawn")
  T.eq(img[1][12][10]:item(), 255, "away from the line")
  -- far outside, NaN and huge coordinates are clipped or skipped
  dl._train.plot_line(img, -1e12, -5, 1e12, 1e300, {0, 0, 0}, 3)
  dl._train.plot_line(img, 0 / 0, 1, 2, 3, {0, 0, 0})
  dl._train.plot_rect(img, -1e300, -1e300, 1e300, 1e300, {1, 2, 3}, 0.5)
  dl._train.plot_text(img, 1e15, 0, "x", {0, 0, 0})
  local g = dl.full({1, 10, 10}, 0, {dtype = dl.uint8})
  dl._train.plot_text(g, 0, 0, "T", {255, 255, 255})
  T.eq(g[1][1]:sum():item(), 5 * 255, "the T's top bar")
  T.eq(dl._train.text_width("abc", 2), 36)
  local v = dl.full({1, 20, 10}, 0, {dtype = dl.uint8})
  dl._train.plot_text(v, 0, 0, "T", {255, 255, 255}, 1, true)
  -- turned counter-clockwise: the T's top bar is the left column, its stem a row
  T.eq(v[1]:select(2, 1):sum():item(), 5 * 255)
  T.eq(v[1][4]:sum():item(), 7 * 255)
  T.raises(function() dl._train.plot_rect(dl.zeros(3, 4, 4), 0, 0, 1, 1, {0, 0, 0}) end,
    "plot.rect: expected a uint8 (C, H, W) image, got float32")
  T.raises(function() dl._train.plot_line(dl.zeros(2, 4, 4, {dtype = dl.uint8}), 0, 0, 1, 1, {0, 0, 0}) end,
    "plot.line: expected 1 or 3 channels, got 2")
  T.raises(function() dl._train.plot_text(dl.zeros(3, 4, 4, {dtype = dl.uint8}):transpose(2, 3), 0, 0, "a", {0, 0, 0}) end,
    "plot.text: the image must be contiguous")
  T.raises(function() dl._train.plot_line(img, 0, 0, 1, 1, {0, 0}) end, "colour components must be numbers in 0..255")
  T.raises(function() dl._train.plot_line(img, 0, 0, 1, 1, {0, 0, 300}) end, "colour components")
  T.raises(function() dl._train.plot_line(img, 0, 0, 1, 1, "red") end, "colour must be a table")
  T.raises(function() dl._train.plot_line(img, "a", 0, 1, 1, {0, 0, 0}) end, "plot_line: argument 2 must be a number")
  T.raises(function() dl._train.plot_line(img, 0, 0, 1, 1, {0, 0, 0}, 0) end, "width must be in (0, 64]")
  T.raises(function() dl._train.plot_text(img, 0, 0, "a", {0, 0, 0}, 17) end, "scale must be 1..16")
  T.raises(function() dl._train.plot_text("img", 0, 0, "a", {0, 0, 0}) end, "plot_text: expected an image tensor")
end)

T.case("plot: nice ticks and smoothing", function()
  local lo, hi, step = train.plot.nice_ticks(0.13, 2.31, 5)
  T.eq(step, 0.5)
  T.near(lo, 0)
  T.near(hi, 2.5)
  lo, hi, step = train.plot.nice_ticks(1, 13, 6, true)
  T.eq(step, 2)
  lo, hi, step = train.plot.nice_ticks(1, 1, 5, true)
  T.eq(step, 1)
  local s = train.plot.smooth({1, 2, 3, 4, 5}, 3)
  T.near(s[1], 1.5)
  T.near(s[3], 3)
  T.near(s[5], 4.5)
  local s2 = train.plot.smooth({1, 0 / 0, 3}, 3)
  T.near(s2[1], 1)
  T.truthy(s2[2] ~= s2[2])
  T.near(s2[3], 3)
end)

T.case("plot: the training chart is a PNG with both curves, also with odd data", function()
  local losses = {}
  for i = 1, 200 do losses[i] = 2 * math.exp(-i / 50) + 0.1 * math.sin(i) end
  losses[50] = 0 / 0
  losses[60] = math.huge
  local val = {{epoch = 1, top1 = 0.6, top5 = 0.9}, {epoch = 2, top1 = 0.75, top5 = 0.97}}
  local path = tmp .. "/train_plot.png"
  os.remove(path)
  local img = train.plot.training_curves(path, {losses = losses, val = val, title = "test run"})
  T.shape_eq(img, {3, 560, 1280})
  local back = dl.image.load(path)
  T.shape_eq(back, {3, 560, 1280})
  T.tensor_eq(back, img, 0)
  -- the smoothed loss colour (dark blue) appears in the left panel, top-1 green in the right
  local function has_colour(x0, x1, rgb)
    local r = img[1]:narrow(2, x0, x1 - x0):eq(rgb[1])
    local g = img[2]:narrow(2, x0, x1 - x0):eq(rgb[2])
    local b = img[3]:narrow(2, x0, x1 - x0):eq(rgb[3])
    return r:logical_and(g):logical_and(b):sum():item() > 0
  end
  local c = train.plot.colors
  T.truthy(has_colour(110, 610, c.smooth), "smoothed loss drawn")
  T.truthy(has_colour(770, 1240, c.top1), "top-1 drawn")
  T.truthy(has_colour(770, 1240, c.top5), "top-5 drawn")
  T.eq(has_colour(770, 1240, c.smooth), false, "no loss in the accuracy panel")
  -- nothing to draw yet, one point, a constant loss
  for _, d in ipairs {{}, {losses = {1.5}}, {losses = {1, 1, 1}, val = {{epoch = 1, top1 = 1, top5 = 1}}}} do
    local im = train.plot.render_training_curves(d)
    T.shape_eq(im, {3, 560, 1280})
  end
  T.raises(function() train.plot.training_curves("/dev/null/x.png", {}) end, "")
end)

T.done()
