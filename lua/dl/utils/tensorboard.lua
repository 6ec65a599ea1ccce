-- dl.utils.tensorboard: PyTorch's torch.utils.tensorboard.SummaryWriter,
-- writing TensorBoard event files (src/io/tfevent.c) that `tensorboard
-- --logdir` shows live.
--
--   local tb = require "dl.utils.tensorboard"     -- or dl.utils.tensorboard
--   local writer <close> = tb.SummaryWriter("runs/exp1", {flush_secs = 10})
--   writer:add_scalar("loss/train", loss, step)
--   writer:add_image("input", img, step)           -- (C, H, W) uint8 or float in [0, 1]
--   writer:add_histogram("fc.weight", w, epoch)
--
-- Invariants: every argument is checked here and a bad one raises an error
-- naming the method and the argument ("SummaryWriter.add_scalar: global_step
-- must be a finite integer, got nan") before anything is written; the
-- writer stays usable after such an error.  Records are appended and
-- flushed every max_queue records, every flush_secs (checked when something
-- is added), on flush() and on close(); a closed writer refuses adds.
local dl = require "dl"
local util = require "dl.util"

local C = dl._tensorboard
local fail = util.fail

local M = {}

local SummaryWriter = util.class("SummaryWriter")
M.SummaryWriter = SummaryWriter

local function check_tag(tag, op, what)
  if type(tag) ~= "string" then fail("%s: %s must be a string, got %s", op, what or "tag", type(tag)) end
  if tag == "" then fail("%s: %s must not be empty", op, what or "tag") end
  return tag
end

local function check_step(step, op)
  if step == nil then return 0 end
  if type(step) ~= "number" then fail("%s: global_step must be an integer, got %s", op, type(step)) end
  if step ~= step or step == math.huge or step == -math.huge then
    fail("%s: global_step must be a finite integer, got %s", op, util.pyrepr(step))
  end
  return util.check_int(step, op, "global_step")
end

local function check_walltime(t, op)
  if t == nil then return nil end
  if type(t) ~= "number" or t ~= t or t < 0 or t == math.huge then
    fail("%s: walltime must be a finite number >= 0, got %s", op,
      type(t) == "number" and util.pyrepr(t) or type(t))
  end
  return t
end

local function check_value(v, op)
  if dl.is_tensor(v) then
    if v:numel() ~= 1 then fail("%s: scalar_value must be a number or a one-element tensor, got %d elements", op, v:numel()) end
    v = v:item()
  end
  if type(v) == "boolean" then v = v and 1 or 0 end
  if type(v) ~= "number" then fail("%s: scalar_value must be a number, got %s", op, type(v)) end
  return v
end

local function hostname()
  return C.hostname()
end

-- SummaryWriter(log_dir, {comment=, flush_secs=120, max_queue=10, filename_suffix=""})
function SummaryWriter:__init(log_dir, opts)
  local op = "SummaryWriter"
  opts = util.check_options(opts, op, {"comment", "flush_secs", "max_queue", "filename_suffix"})
  if not C.available() then
    fail("SummaryWriter: this dlua was built without protobuf-c, so it cannot write TensorBoard event files (install libprotobuf-c-dev and protobuf-c-compiler and rebuild)")
  end
  local comment = opts.comment == nil and "" or util.check_string(opts.comment, op, "comment")
  if log_dir == nil then
    log_dir = "runs/" .. os.date("%b%d_%H-%M-%S") .. "_" .. hostname() .. comment
  end
  check_tag(log_dir, op, "log_dir")
  self.flush_secs = opts.flush_secs == nil and 120 or util.check_number(opts.flush_secs, op, "flush_secs")
  self.max_queue = opts.max_queue == nil and 10 or util.check_int(opts.max_queue, op, "max_queue", 1)
  self.filename_suffix = opts.filename_suffix == nil and "" or
    util.check_string(opts.filename_suffix, op, "filename_suffix")
  if self.filename_suffix:find("/", 1, true) then
    fail("%s: filename_suffix must not contain '/', got '%s'", op, self.filename_suffix)
  end
  self.log_dir = log_dir
  self._writer = C.open(log_dir, self.filename_suffix, self.flush_secs, self.max_queue)
  self._subs = {} -- add_scalars' writers, by directory
  self._sub_order = {}
end

function SummaryWriter:get_logdir() return self.log_dir end

-- The path of the main event file.
function SummaryWriter:get_filename() return self._writer:path() end

function SummaryWriter:add_scalar(tag, scalar_value, global_step, walltime)
  local op = "SummaryWriter.add_scalar"
  check_tag(tag, op)
  local v = check_value(scalar_value, op)
  local step = check_step(global_step, op)
  self._writer:scalar(tag, v, step, check_walltime(walltime, op))
end

-- PyTorch's layout: each key of tag_scalar_dict gets its own run,
-- <log_dir>/<main_tag with / as _>_<key>, holding the scalar under main_tag.
function SummaryWriter:add_scalars(main_tag, tag_scalar_dict, global_step, walltime)
  local op = "SummaryWriter.add_scalars"
  check_tag(main_tag, op, "main_tag")
  if type(tag_scalar_dict) ~= "table" or dl.is_tensor(tag_scalar_dict) then
    fail("%s: tag_scalar_dict must be a table of tag = value, got %s", op,
      dl.is_tensor(tag_scalar_dict) and "tensor" or type(tag_scalar_dict))
  end
  local step = check_step(global_step, op)
  walltime = check_walltime(walltime, op)
  local keys = {}
  for k, v in pairs(tag_scalar_dict) do
    check_tag(k, op, "a key of tag_scalar_dict")
    check_value(v, op)
    keys[#keys + 1] = k
  end
  table.sort(keys)
  self._writer:path() -- raises when closed
  for _, k in ipairs(keys) do
    local dir = self.log_dir .. "/" .. main_tag:gsub("/", "_") .. "_" .. k
    local w = self._subs[dir]
    if not w then
      w = C.open(dir, self.filename_suffix, self.flush_secs, self.max_queue)
      self._subs[dir] = w
      self._sub_order[#self._sub_order + 1] = dir
    end
    w:scalar(main_tag, check_value(tag_scalar_dict[k], op), step, walltime)
  end
end

-- img_tensor: (C, H, W) by default; dataformats "CHW", "HWC" or "HW".  uint8
-- is taken as is, floating point as [0, 1] (times 255, clamped, truncated
-- as PyTorch does).  C is 1, 3 or 4.  The 5th argument is dataformats or an
-- options table {dataformats=}.
function SummaryWriter:add_image(tag, img_tensor, global_step, walltime, dataformats)
  local op = "SummaryWriter.add_image"
  check_tag(tag, op)
  if type(dataformats) == "table" then
    dataformats = util.check_options(dataformats, op, {"dataformats"}).dataformats
  end
  dataformats = dataformats == nil and "CHW" or
    util.check_string(dataformats, op, "dataformats", {"CHW", "HWC", "HW"})
  if not dl.is_tensor(img_tensor) then fail("%s: img_tensor must be a tensor, got %s", op, type(img_tensor)) end
  local step = check_step(global_step, op)
  walltime = check_walltime(walltime, op)
  local img = img_tensor:detach()
  local want = #dataformats
  if img:dim() ~= want then
    fail("%s: img_tensor must have %d dimensions (%s), got shape {%s}", op, want, dataformats,
      table.concat(img.shape, ", "))
  end
  if dataformats == "HW" then img = img:unsqueeze(1)
  elseif dataformats == "HWC" then img = img:permute(3, 1, 2) end
  local c, h, w = img.shape[1], img.shape[2], img.shape[3]
  if c ~= 1 and c ~= 3 and c ~= 4 then
    fail("%s: img_tensor must have 1, 3 or 4 channels (%s), got shape {%s}", op, dataformats,
      table.concat(img_tensor.shape, ", "))
  end
  if h < 1 or w < 1 then
    fail("%s: img_tensor is empty (shape {%s})", op, table.concat(img_tensor.shape, ", "))
  end
  img = img:cpu()
  if img.dtype ~= dl.uint8 then
    if not img:is_floating_point() then
      fail("%s: img_tensor must be uint8 or floating point, got %s", op, tostring(img.dtype))
    end
    img = img:double():mul(255):clamp(0, 255):to(dl.uint8)
  end
  local png = dl.image.encode(img:contiguous(), "png")
  self._writer:image(tag, png, h, w, c, step, walltime)
end

-- values: a tensor (any shape, any real dtype) or a table of numbers.  bins:
-- only "tensorflow" (TensorBoard's default exponential buckets), as PyTorch's
-- default.
function SummaryWriter:add_histogram(tag, values, global_step, bins, walltime)
  local op = "SummaryWriter.add_histogram"
  check_tag(tag, op)
  if bins ~= nil and bins ~= "tensorflow" then
    fail("%s: bins must be \"tensorflow\", got %s", op, util.pyrepr(bins))
  end
  local step = check_step(global_step, op)
  walltime = check_walltime(walltime, op)
  local t
  if dl.is_tensor(values) then
    t = values:detach():cpu():double():contiguous()
  elseif type(values) == "table" then
    for i = 1, #values do
      if type(values[i]) ~= "number" then fail("%s: values[%d] must be a number, got %s", op, i, type(values[i])) end
    end
    if #values == 0 then fail("%s: values is empty", op) end
    t = dl.tensor(values, {dtype = dl.float64})
  else
    fail("%s: values must be a tensor or a table of numbers, got %s", op, type(values))
  end
  if t:numel() == 0 then fail("%s: values is empty", op) end
  self._writer:histogram(tag, t, step, walltime)
end

-- Written as PyTorch does: tag "<tag>/text_summary", the text plugin's string tensor.
function SummaryWriter:add_text(tag, text_string, global_step, walltime)
  local op = "SummaryWriter.add_text"
  check_tag(tag, op)
  if type(text_string) ~= "string" then fail("%s: text_string must be a string, got %s", op, type(text_string)) end
  local step = check_step(global_step, op)
  self._writer:text(tag .. "/text_summary", text_string, step, check_walltime(walltime, op))
end

-- PyTorch's layout: a run <log_dir>/<run_name (default: the time)> holding
-- the hparams plugin's experiment, session start and end, and each metric
-- as a scalar at global_step.  hparam_dict values are numbers, strings,
-- booleans or one-element tensors; hparam_domain_discrete (optional) maps a
-- name to the list of its possible values.
function SummaryWriter:add_hparams(hparam_dict, metric_dict, hparam_domain_discrete, run_name, global_step)
  local op = "SummaryWriter.add_hparams"
  local function dict(t, what)
    if type(t) ~= "table" or dl.is_tensor(t) then
      fail("%s: %s must be a table of name = value, got %s", op, what, dl.is_tensor(t) and "tensor" or type(t))
    end
    local keys = {}
    for k in pairs(t) do
      check_tag(k, op, "a key of " .. what)
      keys[#keys + 1] = k
    end
    table.sort(keys)
    return keys
  end
  local function hvalue(v, what)
    if dl.is_tensor(v) then v = check_value(v, op) end
    local tv = type(v)
    if tv ~= "number" and tv ~= "string" and tv ~= "boolean" then
      fail("%s: %s must be a number, string, boolean or one-element tensor, got %s", op, what, tv)
    end
    return v
  end
  local names, metrics = dict(hparam_dict, "hparam_dict"), dict(metric_dict, "metric_dict")
  local domains = hparam_domain_discrete or {}
  if type(domains) ~= "table" then fail("%s: hparam_domain_discrete must be a table, got %s", op, type(domains)) end
  for k, list in pairs(domains) do
    if hparam_dict[k] == nil then fail("%s: hparam_domain_discrete names '%s', which is not in hparam_dict", op, tostring(k)) end
    if type(list) ~= "table" or #list == 0 then fail("%s: hparam_domain_discrete['%s'] must be a list of values", op, k) end
  end
  local hps = {}
  for i, k in ipairs(names) do
    local v = hvalue(hparam_dict[k], "hparam_dict['" .. k .. "']")
    local e = {k, v}
    if domains[k] then
      e.domain = {}
      for j, d in ipairs(domains[k]) do
        if type(d) ~= type(v) then
          fail("%s: hparam_domain_discrete['%s'][%d] must be a %s like the value, got %s", op, k, j, type(v), type(d))
        end
        e.domain[j] = d
      end
    end
    hps[i] = e
  end
  local mvals = {}
  for i, k in ipairs(metrics) do mvals[i] = check_value(metric_dict[k], op) end
  if run_name == nil then run_name = string.format("%.6f", C.time()) end
  check_tag(run_name, op, "run_name")
  local step = check_step(global_step, op)
  self._writer:path() -- raises when closed
  local w <close> = M.SummaryWriter(self.log_dir .. "/" .. run_name,
    {flush_secs = self.flush_secs, max_queue = self.max_queue, filename_suffix = self.filename_suffix})
  w._writer:hparams(hps, metrics, step)
  for i, k in ipairs(metrics) do w:add_scalar(k, mvals[i], step) end
end

function SummaryWriter:flush()
  self._writer:flush()
  for _, d in ipairs(self._sub_order) do self._subs[d]:flush() end
end

-- Flushes and closes every file; closing twice is harmless.
function SummaryWriter:close()
  if self._closed then return end
  self._closed = true
  local ok, err = pcall(self._writer.close, self._writer)
  for _, d in ipairs(self._sub_order) do
    local ok2, err2 = pcall(self._subs[d].close, self._subs[d])
    if ok and not ok2 then ok, err = ok2, err2 end
  end
  if not ok then error(err, 0) end
end

SummaryWriter.__close = SummaryWriter.close

function SummaryWriter:__tostring()
  return string.format("SummaryWriter(log_dir='%s'%s)", self.log_dir, self._closed and ", closed" or "")
end

-- Reads an event file back: a list of {wall_time, step, kind, tag, ...}
-- ("file_version", "scalar" value, "image" height/width/channels/png,
-- "histogram" min/max/num/sum/sum_squares/bucket_limit/bucket, "text" text),
-- and whether the file ended in a torn record (which is skipped).
function M.read_events(path)
  check_tag(path, "tensorboard.read_events", "path")
  return C.read(path)
end

-- CRC-32C and TFRecord's masked form (for tests and tools).
M.crc32c = C.crc32c
M.masked_crc32c = function(s) return C.mask(C.crc32c(s)) end

return M
