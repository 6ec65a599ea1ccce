-- test_tensorboard.lua - dl.utils.tensorboard.SummaryWriter: event files read
-- back by TensorBoard itself (PyPI `tensorboard` in a venv made once under the
-- build directory; tensorboard_read.py) hold every scalar, image (decoded
-- pixels), histogram and text written, add_scalars' sub-runs and add_hparams'
-- plugin data included; a file
-- cut mid-record still yields every complete record (TensorBoard's loader and
-- ours); CRC-32C and its masked form against known values; bad arguments
-- raise errors naming the argument and leave the writer usable.
local T = require "testlib"
local tb = dl.utils.tensorboard

local here = T.dir
local root = T.fresh_dir("tensorboard")

local sh = T.sh

-- The venv's python with tensorboard (made once under the build directory).
local function tb_python()
  local py, out = T.venv("tensorboard-venv", "tensorboard, PIL", "tensorboard pillow")
  if not py then
    error("cannot make the TensorBoard venv (" .. T.python() .. " -m venv needs python3-venv; "
      .. "pip install tensorboard needs network access to PyPI):\n" .. out, 0)
  end
  return py
end

local PY -- the venv's python, set below

local function read_tb(mode, path)
  local ok, out = sh(string.format("'%s' '%s/tensorboard_read.py' %s '%s'", PY, here, mode, path))
  if not ok then error("tensorboard_read.py failed:\n" .. out, 2) end
  local chunk = assert(load(out:match("return .*$"), "=tensorboard_read", "t"))
  return chunk()
end

local function event_files(dir)
  local ok, out = sh("ls '" .. dir .. "' | grep tfevents")
  assert(ok, "no event file in " .. dir)
  local files = {}
  for f in out:gmatch("[^\n]+") do files[#files + 1] = dir .. "/" .. f end
  return files
end

T.case("CRC-32C and the masked form: known values", function()
  T.eq(tb.crc32c("123456789"), 0xE3069283)
  T.eq(tb.crc32c(""), 0)
  T.eq(tb.crc32c(string.rep("\0", 32)), 0x8A9136AA) -- RFC 3720 B.4
  T.eq(tb.crc32c(string.rep("\255", 32)), 0x62A8AB43)
  T.eq(tb.masked_crc32c("123456789"), 0xC78AB0E5) -- ((c >> 15 | c << 17) + 0xa282ead8) mod 2^32
  T.eq(tb.masked_crc32c(""), 0xA282EAD8)
end)

-- A build without protobuf-c has no event files: SummaryWriter says so, and
-- the rest is skipped (status 77), never passed.
if not dl._tensorboard.available() then
  T.case("without protobuf-c, SummaryWriter raises a clear error", function()
    T.raises(function() tb.SummaryWriter(root .. "/none") end, "built without protobuf-c")
  end)
  print(string.format("%d passed, %d failed; SKIP the rest: this dlua was built without protobuf-c", T.passed, T.failed))
  os.exit(T.failed == 0 and 77 or 1)
end

PY = tb_python()

-- What the run writes, kept to compare against.
dl.manual_seed(5)
local run = root .. "/run1"
local scalars = {}
for i = 1, 25 do scalars[i] = {i * 10, 1 / i + (i % 3) * 0.25} end
local img_u8 = dl.randint(0, 256, {3, 5, 7}):to(dl.uint8)
local img_f = dl.rand(1, 4, 6)
local img_hwc = dl.randint(0, 256, {3, 2, 4}):to(dl.uint8) -- H, W, C = 3, 2, 4 (RGBA)
local hist_vals = dl.randn(2000):mul(3)
local hist_small = {0.5, 0.5, -2, 7, 0, 1e-13}
local text = "**loss** fell: 0.25 \226\134\146 ok"

T.case("SummaryWriter writes scalars, images, histograms, text; <close> closes", function()
  do
    local w <close> = tb.SummaryWriter(run, {flush_secs = 30, filename_suffix = ".test"})
    T.truthy(w:get_filename():match("/events%.out%.tfevents%.%d+%..+%.test$"), w:get_filename())
    for _, s in ipairs(scalars) do w:add_scalar("loss/train", s[2], s[1]) end
    w:add_scalar("lr", dl.tensor(0.125), 3)
    w:add_scalars("acc", {top1 = 0.5, top5 = 0.875}, 1)
    w:add_scalars("acc", {top1 = 0.625, top5 = 0.9375}, 2)
    w:add_image("img/u8", img_u8, 1)
    w:add_image("img/float_gray", img_f, 2)
    w:add_image("img/hwc", img_hwc, 3, nil, "HWC")
    w:add_histogram("weights", hist_vals, 4)
    w:add_histogram("small", hist_small, 5)
    w:add_text("notes", text, 6)
    T.eq(w.log_dir, run)
  end
  -- closed by <close>: adding now is an error, closing again is not
end)

local acc = read_tb("acc", run)

T.case("TensorBoard reads every scalar back", function()
  local got = acc.scalars["loss/train"]
  T.eq(#got, #scalars)
  for i, s in ipairs(scalars) do
    T.eq(got[i][1], s[1], "step")
    T.eq(got[i][2], string.unpack("f", string.pack("f", s[2])), "value (float32)")
  end
  T.eq(acc.scalars.lr[1][1], 3)
  T.eq(acc.scalars.lr[1][2], 0.125)
end)

T.case("add_scalars: one sub-run per key, PyTorch's layout", function()
  for key, vals in pairs {top1 = {0.5, 0.625}, top5 = {0.875, 0.9375}} do
    local sub = read_tb("acc", run .. "/acc_" .. key)
    T.eq(#sub.scalars.acc, 2, key)
    for i = 1, 2 do
      T.eq(sub.scalars.acc[i][1], i)
      T.eq(sub.scalars.acc[i][2], vals[i], key)
    end
  end
end)

-- HWC bytes of a (C, H, W) uint8 tensor
local function hwc_bytes(t)
  local c, h, w = t.shape[1], t.shape[2], t.shape[3]
  local flat = t:permute(2, 3, 1):contiguous():view(-1):tolist()
  T.eq(#flat, c * h * w)
  return string.char(table.unpack(flat))
end

T.case("TensorBoard reads the images: size, mode and every pixel", function()
  local function check(tag, chw, mode)
    local e = acc.images[tag][1]
    T.truthy(e, "image " .. tag)
    T.eq(e[2], chw.shape[3], tag .. " width")
    T.eq(e[3], chw.shape[2], tag .. " height")
    T.eq(e[4], mode, tag .. " mode")
    T.truthy(e[5] == hwc_bytes(chw), tag .. " pixels differ")
  end
  check("img/u8", img_u8, "RGB")
  -- floats are [0, 1]: times 255, clamped, truncated (PyTorch's conversion)
  check("img/float_gray", img_f:double():mul(255):clamp(0, 255):to(dl.uint8), "L")
  check("img/hwc", img_hwc:permute(3, 1, 2), "RGBA")
  T.eq(acc.images["img/u8"][1][1], 1)
  T.eq(acc.images["img/hwc"][1][1], 3)
end)

-- counts of values in [lo, hi)
local function count_in(vals, lo, hi)
  local n = 0
  for _, v in ipairs(vals) do if v >= lo and v < hi then n = n + 1 end end
  return n
end

T.case("TensorBoard reads the histograms: min, max, num, sum, buckets", function()
  for tag, vals in pairs {weights = hist_vals:double():tolist(), small = hist_small} do
    local e = acc.histograms[tag][1]
    T.truthy(e, "histogram " .. tag)
    local mn, mx, sum, sq = math.huge, -math.huge, 0, 0
    for _, v in ipairs(vals) do
      mn, mx, sum, sq = math.min(mn, v), math.max(mx, v), sum + v, sq + v * v
    end
    T.eq(e[2], mn, tag .. " min")
    T.eq(e[3], mx, tag .. " max")
    T.eq(e[4], #vals, tag .. " num")
    T.near(e[5], sum, 1e-9 * #vals, tag .. " sum")
    T.near(e[6], sq, 1e-9 * sq, tag .. " sum_squares")
    local limits, counts = e[7], e[8]
    T.eq(#limits, #counts)
    -- TensorBoard's buckets: the first is empty (its limit is the left edge);
    -- bucket i holds limits[i-1] <= v < limits[i]; all values are covered
    T.eq(counts[1], 0, tag .. " first bucket")
    T.eq(count_in(vals, -math.huge, limits[1]), 0, tag .. " values left of the first limit")
    local total = 0
    for i = 2, #limits do
      T.eq(counts[i], count_in(vals, limits[i - 1], limits[i]), tag .. " bucket " .. i)
      total = total + counts[i]
    end
    T.eq(total, #vals, tag .. " all values counted")
    -- the limits are TensorBoard's defaults: 0 or +-1e-12 * 1.1^k
    for _, l in ipairs(limits) do
      local k = l == 0 and 0 or math.log(math.abs(l) / 1e-12) / math.log(1.1)
      T.near(k, math.floor(k + 0.5), 1e-6, tag .. " limit " .. l)
    end
  end
  T.eq(acc.histograms.weights[1][1], 4)
end)

T.case("TensorBoard reads the text", function()
  local e = acc.texts["notes/text_summary"]
  T.truthy(e, "text tag")
  T.eq(e[1][1], 6)
  T.eq(e[1][2], text)
end)

T.case("our reader agrees", function()
  local files = event_files(run)
  T.eq(#files, 1)
  local ev, truncated = tb.read_events(files[1])
  T.eq(truncated, false)
  T.eq(ev[1].kind, "file_version")
  T.eq(ev[1].file_version, "brain.Event:2")
  T.eq(ev[2].kind, "scalar")
  T.eq(ev[2].step, 10)
  T.eq(ev[2].value, string.unpack("f", string.pack("f", 1.25)))
  local kinds = {}
  for _, e in ipairs(ev) do kinds[e.kind] = (kinds[e.kind] or 0) + 1 end
  T.eq(kinds.scalar, 26)
  T.eq(kinds.image, 3)
  T.eq(kinds.histogram, 2)
  T.eq(kinds.text, 1)
  local img = ev[#ev - 3]
  T.eq(img.kind, "image")
  T.eq(img.height, 3)
  T.eq(img.width, 2)
  T.eq(img.channels, 4)
  T.truthy(img.png == dl.image.encode(img_hwc:permute(3, 1, 2):contiguous(), "png"), "PNG bytes")
end)

T.case("a file cut mid-record yields every complete record", function()
  local f = event_files(run)[1]
  local data = assert(io.open(f, "rb")):read("a")
  local full = read_tb("loader", f)
  local ours = tb.read_events(f)
  T.eq(#full, #ours)
  -- record boundaries: walk the framing
  local ends, pos = {}, 1
  while pos <= #data do
    local len = string.unpack("<I8", data, pos)
    pos = pos + 12 + len + 4
    ends[#ends + 1] = pos - 1
  end
  T.eq(#ends, #full)
  for _, cut in ipairs {ends[5] + 3, ends[5] + 13, ends[30] - 1, ends[#ends] - 1, #data - 20} do
    local complete = 0
    for _, e in ipairs(ends) do if e <= cut then complete = complete + 1 end end
    local g = root .. "/cut.tfevents"
    local o = assert(io.open(g, "wb"))
    o:write(data:sub(1, cut))
    o:close()
    local tbev = read_tb("loader", g)
    T.eq(#tbev, complete, "TensorBoard's loader, cut at " .. cut)
    for i = 1, complete do T.eq(tbev[i][3], full[i][3], "record " .. i) end
    local ev, truncated = tb.read_events(g)
    T.eq(#ev, complete, "our reader, cut at " .. cut)
    T.eq(truncated, true)
  end
end)

T.case("add_hparams: TensorBoard's hparams plugin reads the experiment, values and metrics", function()
  local w <close> = tb.SummaryWriter(root .. "/hp")
  w:add_hparams({lr = 0.125, batch = 32, optim = "sgd", nesterov = true, wd = dl.tensor(0.5)},
    {["hparam/top1"] = 0.75, ["hparam/loss"] = 0.25}, {optim = {"sgd", "adam"}}, "trial1", 7)
  local r = read_tb("hparams", root .. "/hp/trial1")
  T.eq(#r.hparams, 5)
  local want = {batch = "DATA_TYPE_FLOAT64", lr = "DATA_TYPE_FLOAT64", nesterov = "DATA_TYPE_BOOL",
    optim = "DATA_TYPE_STRING", wd = "DATA_TYPE_FLOAT64"}
  for _, h in ipairs(r.hparams) do
    T.eq(h[2], want[h[1]], h[1] .. " type")
    T.eq(#h[3], h[1] == "optim" and 2 or 0, h[1] .. " domain")
  end
  T.eq(r.hparams[4][1], "optim")
  T.eq(r.hparams[4][3][2], "adam")
  T.eq(r.values.lr, 0.125)
  T.eq(r.values.batch, 32)
  T.eq(r.values.optim, "sgd")
  T.eq(r.values.nesterov, true)
  T.eq(r.values.wd, 0.5)
  table.sort(r.metrics)
  T.eq(r.metrics[1], "hparam/loss")
  T.eq(r.metrics[2], "hparam/top1")
  T.eq(r.status, "STATUS_SUCCESS")
  T.eq(r.scalars["hparam/top1"][1][1], 7)
  T.eq(r.scalars["hparam/top1"][1][2], 0.75)
  T.eq(r.scalars["hparam/loss"][1][2], 0.25)
  w:add_hparams({lr = 0.5}, {["hparam/top1"] = 0.5}) -- default run name: the time
  local ok, out = sh("ls -d '" .. root .. "/hp/'1*")
  T.truthy(ok and out:match("/hp/%d+%.%d+\n"), out)
  T.raises(function() w:add_hparams({lr = {}}, {}) end, "SummaryWriter.add_hparams: hparam_dict['lr'] must be a number, string, boolean or one-element tensor, got table")
  T.raises(function() w:add_hparams({lr = 1}, {m = "x"}) end, "scalar_value must be a number, got string")
  T.raises(function() w:add_hparams({lr = 1}, {}, {lr = {"a"}}) end, "hparam_domain_discrete['lr'][1] must be a number like the value, got string")
  T.raises(function() w:add_hparams({lr = 1}, {}, {mom = {1}}) end, "names 'mom', which is not in hparam_dict")
  T.raises(function() w:add_hparams(5, {}) end, "hparam_dict must be a table of name = value, got number")
end)

T.case("SIGKILL while writing: every record on disk reads back intact", function()
  local dlua = arg and arg[-1]
  T.truthy(dlua, "the dlua running this test")
  local dir = root .. "/killed"
  local script = root .. "/killed.lua"
  local f = assert(io.open(script, "w"))
  f:write(string.format([[
local w = dl.utils.tensorboard.SummaryWriter(%q, {flush_secs = 0})
local i = 0
while true do
  i = i + 1
  w:add_scalar("s", i, i)
  w:add_histogram("h", dl.randn(5000), i)
end
]], dir))
  f:close()
  local ok = sh(string.format("'%s' '%s' & pid=$!; sleep 1.5; kill -KILL $pid; wait $pid; true", dlua, script))
  T.truthy(ok)
  local ev = tb.read_events(event_files(dir)[1])
  T.truthy(#ev > 10, "records written before the kill: " .. #ev)
  local last_scalar = 0
  for i = 2, #ev do
    local e = ev[i]
    if e.kind == "scalar" then
      T.eq(e.value, last_scalar + 1, "scalars in order")
      last_scalar = e.value
    else
      T.eq(e.kind, "histogram")
      T.eq(e.num, 5000)
    end
  end
  T.eq(#read_tb("loader", event_files(dir)[1]), #ev, "TensorBoard's loader agrees")
end)

T.case("flush writes pending records; max_queue and flush_secs flush by themselves", function()
  local w <close> = tb.SummaryWriter(root .. "/flush", {flush_secs = 3600, max_queue = 3})
  local f = w:get_filename()
  w:add_scalar("a", 1, 1)
  w:add_scalar("a", 2, 2)
  T.eq(#tb.read_events(f), 1, "two pending, only file_version on disk")
  w:add_scalar("a", 3, 3)
  T.eq(#tb.read_events(f), 4, "max_queue reached")
  w:add_scalar("a", 4, 4)
  w:flush()
  T.eq(#tb.read_events(f), 5)
  local w2 <close> = tb.SummaryWriter(root .. "/flush0", {flush_secs = 0})
  w2:add_scalar("a", 1, 1)
  T.eq(#tb.read_events(w2:get_filename()), 2, "flush_secs = 0 flushes each record")
end)

T.case("bad arguments: clear errors, the writer stays usable", function()
  local w <close> = tb.SummaryWriter(root .. "/bad")
  T.raises(function() w:add_scalar("x", 1, 0 / 0) end, "SummaryWriter.add_scalar: global_step must be a finite integer, got nan")
  T.raises(function() w:add_scalar("x", 1, math.huge) end, "global_step must be a finite integer, got inf")
  T.raises(function() w:add_scalar("x", 1, 1.5) end, "global_step must be an integer, got 1.5")
  T.raises(function() w:add_scalar("x", 1, "3") end, "global_step must be an integer, got string")
  T.raises(function() w:add_scalar(7, 1, 1) end, "SummaryWriter.add_scalar: tag must be a string, got number")
  T.raises(function() w:add_scalar("", 1, 1) end, "tag must not be empty")
  T.raises(function() w:add_scalar("x", "high", 1) end, "scalar_value must be a number, got string")
  T.raises(function() w:add_scalar("x", dl.ones(2), 1) end, "one-element tensor, got 2 elements")
  T.raises(function() w:add_image("i", dl.rand(2, 4, 4), 1) end, "SummaryWriter.add_image: img_tensor must have 1, 3 or 4 channels (CHW), got shape {2, 4, 4}")
  T.raises(function() w:add_image("i", dl.rand(4, 4), 1) end, "img_tensor must have 3 dimensions (CHW), got shape {4, 4}")
  T.raises(function() w:add_image("i", dl.rand(5, 4, 3), 1) end, "1, 3 or 4 channels (CHW), got shape {5, 4, 3}")
  T.raises(function() w:add_image("i", dl.rand(4, 3, 5), 1, nil, "HWC") end, "1, 3 or 4 channels (HWC), got shape {4, 3, 5}")
  T.raises(function() w:add_image("i", dl.rand(3, 0, 4), 1) end, "img_tensor is empty")
  T.raises(function() w:add_image("i", dl.ones(3, 2, 2, {dtype = dl.int64}), 1) end, "must be uint8 or floating point, got")
  T.raises(function() w:add_image("i", dl.rand(3, 2, 2), 1, nil, "NCHW") end, "dataformats must be one of CHW, HWC, HW")
  T.raises(function() w:add_image("i", "pixels", 1) end, "img_tensor must be a tensor, got string")
  T.raises(function() w:add_histogram("h", dl.tensor({1, 0 / 0}), 1) end, "add_histogram: values must be finite (element 2 is")
  T.raises(function() w:add_histogram("h", dl.empty(0), 1) end, "SummaryWriter.add_histogram: values is empty")
  T.raises(function() w:add_histogram("h", {1, "a"}, 1) end, "values[2] must be a number, got string")
  T.raises(function() w:add_histogram("h", dl.rand(3), 1, "auto") end, "bins must be \"tensorflow\"")
  T.raises(function() w:add_text("t", 5, 1) end, "SummaryWriter.add_text: text_string must be a string, got number")
  T.raises(function() w:add_scalars("m", 5, 1) end, "tag_scalar_dict must be a table")
  T.raises(function() w:add_scalar("x", 1, 1, -5) end, "walltime must be a finite number >= 0, got -5")
  T.raises(function() tb.SummaryWriter(root .. "/bad2", {flush_sec = 1}) end, "unknown option 'flush_sec'")
  T.raises(function() tb.SummaryWriter(42) end, "SummaryWriter: log_dir must be a string, got number")
  local ok, err = sh("touch '" .. root .. "/afile'")
  T.truthy(ok, err)
  local e = T.raises(function() tb.SummaryWriter(root .. "/afile/run") end, "cannot create '" .. root .. "/afile/run'")
  T.truthy(e:find("^SummaryWriter: cannot create"), "no position prefix: " .. e)
  -- still usable, and nothing bad was written
  w:add_scalar("x", 2, 1)
  w:add_scalar("x", 3, 2)
  w:close()
  T.raises(function() w:add_scalar("x", 4, 3) end, "SummaryWriter.add_scalar: the writer is closed")
  w:close()
  local ev = tb.read_events(event_files(root .. "/bad")[1])
  T.eq(#ev, 3)
  T.eq(ev[3].value, 3)
  T.raises(function() tb.read_events(root .. "/nope") end, "nope")
end)

T.case("a corrupted record is an error, not a wrong value", function()
  local f = event_files(run)[1]
  local data = assert(io.open(f, "rb")):read("a")
  local bad = data:sub(1, 60) .. string.char((data:byte(61) + 1) % 256) .. data:sub(62)
  local g = root .. "/corrupt.tfevents"
  local o = assert(io.open(g, "wb"))
  o:write(bad)
  o:close()
  T.raises(function() tb.read_events(g) end, "CRC mismatch")
end)

T.case("dl.utils.tensorboard is require-able as well as indexable", function()
  T.truthy(require("dl.utils.tensorboard") == tb)
  T.truthy(require("dl.utils").tensorboard == tb)
end)

T.done()
