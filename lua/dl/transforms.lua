-- dl.transforms: torchvision's image transforms, written the Lua way.
--
-- Images are uint8 tensors C x H x W (what dl.image.load returns) until
-- ToTensor turns them into float32 in [0, 1]; every transform also takes a
-- batch N x C x H x W (one draw of random parameters for the whole batch, as
-- torchvision does for batched tensors).
--
-- Each C transform is one step of a C pipeline (src/io/pipeline.c).  Compose
-- merges consecutive C transforms into one pipeline, so crop, resize, flip,
-- ToTensor and Normalize run as one pass; a plain Lua function (or any
-- callable) may stand between them and runs in the calling thread.  Data
-- loaders run the leading C pipeline in their worker threads and the rest on
-- the main thread (see dl.data).
--
-- Randomness: single calls draw from dl's default generator (dl.manual_seed
-- makes them reproducible); DataLoader workers draw per sample from
-- (loader seed, epoch, sample index).
local dl = require "dl"
local util = require "dl.util"
local C = dl._transforms

local T = {}

T.InterpolationMode = {NEAREST = "nearest", BILINEAR = "bilinear", BICUBIC = "bicubic"}

-- --- argument helpers -------------------------------------------------------------

local function fail(name, msg, level) error(name .. ": " .. msg, (level or 1) + 2) end


local function is_int(v) return math.type(v) == "integer" or (type(v) == "number" and v == math.floor(v)) end

-- size: n or {n} -> {n} (or {n, n} when square); {h, w} -> {h, w}
local function size_arg(name, size, square)
  if type(size) == "number" then
    if not is_int(size) or size < 1 then fail(name, "size must be a positive integer, got " .. tostring(size), 2) end
    return square and {size, size} or {size}
  end
  if type(size) == "table" and (#size == 1 or #size == 2) then
    for i = 1, #size do
      if not is_int(size[i]) or size[i] < 1 then fail(name, "size values must be positive integers", 2) end
    end
    if #size == 1 then return square and {size[1], size[1]} or {size[1]} end
    return {size[1], size[2]}
  end
  fail(name, "size must be a number or a {h, w} table, got " .. tostring(size), 2)
end

-- torchvision's padding forms -> {left, top, right, bottom}
local function padding_arg(name, p)
  if type(p) == "number" then
    if not is_int(p) or p < 0 then fail(name, "padding must be a non-negative integer", 2) end
    return {p, p, p, p}
  end
  if type(p) == "table" then
    for i = 1, #p do
      if not is_int(p[i]) or p[i] < 0 then fail(name, "padding values must be non-negative integers", 2) end
    end
    if #p == 1 then return {p[1], p[1], p[1], p[1]} end
    if #p == 2 then return {p[1], p[2], p[1], p[2]} end
    if #p == 4 then return {p[1], p[2], p[3], p[4]} end
    fail(name, "padding must have 1, 2 or 4 values, got " .. #p, 2)
  end
  fail(name, "padding must be a number or a table, got " .. type(p), 2)
end

local function pair_arg(name, key, v, default)
  if v == nil then return default end
  if type(v) ~= "table" or #v ~= 2 or type(v[1]) ~= "number" or type(v[2]) ~= "number" then
    fail(name, key .. " must be a {min, max} pair", 2)
  end
  return {v[1], v[2]}
end

local function interp_arg(name, v)
  if v == nil then return "bilinear" end
  if v ~= "nearest" and v ~= "bilinear" and v ~= "bicubic" then
    fail(name, "interpolation must be \"nearest\", \"bilinear\" or \"bicubic\", got " .. tostring(v), 2)
  end
  return v
end

local function padding_mode_arg(name, v)
  if v == nil then return "constant" end
  if v ~= "constant" and v ~= "edge" and v ~= "reflect" and v ~= "symmetric" then
    fail(name, "padding_mode must be constant, edge, reflect or symmetric, got " .. tostring(v), 2)
  end
  return v
end

-- --- C transforms --------------------------------------------------------------------

local CT = {}
CT.__index = CT
CT.__name = "dl.transforms.Transform"

function CT.__call(self, x)
  if not dl.is_tensor(x) then fail(self._name, "expected an image tensor, got " .. type(x), 1) end
  return self._pipe:apply(x)
end

function CT.__tostring(self) return self._repr end

local function ctransform(name, step, repr)
  step.kind = step.kind or name
  local ok, pipe = pcall(C.pipeline, {step})
  if not ok then error(pipe, 3) end
  return setmetatable({_name = name, _steps = {step}, _pipe = pipe, _repr = repr or (name .. "()")}, CT)
end

local function is_ctransform(t) return getmetatable(t) == CT end
T.is_c_transform = is_ctransform

local function fmt_list(t)
  if type(t) ~= "table" then return tostring(t) end
  local parts = {}
  for i, v in ipairs(t) do parts[i] = tostring(v) end
  return "{" .. table.concat(parts, ", ") .. "}"
end

function T.Resize(size, opts)
  opts = util.check_options(opts, "Resize", {"interpolation", "max_size", "antialias"})
  local s = size_arg("Resize", size, false)
  if opts.max_size ~= nil and (not is_int(opts.max_size) or #s ~= 1) then
    fail("Resize", "max_size must be an integer, and size a single number")
  end
  if util.opt_bool(opts.antialias, true, "Resize", "antialias") == false then
    fail("Resize", "antialias=false is not supported (resizing always antialiases, as on Pillow images)")
  end
  return ctransform("Resize", {size = s, max_size = opts.max_size, interpolation = interp_arg("Resize", opts.interpolation)},
    "Resize(size=" .. fmt_list(size) .. ")")
end

function T.CenterCrop(size)
  return ctransform("CenterCrop", {size = size_arg("CenterCrop", size, true)}, "CenterCrop(size=" .. fmt_list(size) .. ")")
end

function T.RandomCrop(size, opts)
  opts = util.check_options(opts, "RandomCrop", {"padding", "pad_if_needed", "fill", "padding_mode"})
  local step = {size = size_arg("RandomCrop", size, true), pad_if_needed = util.opt_bool(opts.pad_if_needed, false, "RandomCrop", "pad_if_needed"),
    fill = opts.fill or 0, padding_mode = padding_mode_arg("RandomCrop", opts.padding_mode)}
  if opts.padding ~= nil then step.padding = padding_arg("RandomCrop", opts.padding) end
  return ctransform("RandomCrop", step, "RandomCrop(size=" .. fmt_list(size) .. ")")
end

-- RandomResizedCrop(size [, {scale =, ratio =, interpolation =}]); also
-- RandomResizedCrop.get_params(img, scale, ratio) -> top, left, height, width
-- (top and left 1-based), drawn from the default generator as the transform
-- itself draws them.
T.RandomResizedCrop = setmetatable({}, {__call = function(_, size, opts)
  opts = util.check_options(opts, "RandomResizedCrop", {"scale", "ratio", "interpolation", "antialias"})
  util.opt_bool(opts.antialias, true, "RandomResizedCrop", "antialias")
  return ctransform("RandomResizedCrop", {size = size_arg("RandomResizedCrop", size, true),
    scale = pair_arg("RandomResizedCrop", "scale", opts.scale, {0.08, 1.0}),
    ratio = pair_arg("RandomResizedCrop", "ratio", opts.ratio, {3 / 4, 4 / 3}),
    interpolation = interp_arg("RandomResizedCrop", opts.interpolation)},
    "RandomResizedCrop(size=" .. fmt_list(size) .. ")")
end})

function T.RandomResizedCrop.get_params(img, scale, ratio)
  if not dl.is_tensor(img) then fail("RandomResizedCrop.get_params", "an image tensor is required") end
  local s = img.shape
  scale = pair_arg("RandomResizedCrop", "scale", scale, {0.08, 1.0})
  ratio = pair_arg("RandomResizedCrop", "ratio", ratio, {3 / 4, 4 / 3})
  return C.rrc_params(s[#s - 1], s[#s], scale[1], scale[2], ratio[1], ratio[2])
end

local function prob_arg(name, p)
  if type(p) == "table" then
    util.check_options(p, name, {"p"})
    p = p.p
  end
  if p == nil then return 0.5 end
  if type(p) ~= "number" or p < 0 or p > 1 then fail(name, "p must be a number in [0, 1]", 2) end
  return p
end

function T.RandomHorizontalFlip(p)
  p = prob_arg("RandomHorizontalFlip", p)
  return ctransform("RandomHorizontalFlip", {p = p}, "RandomHorizontalFlip(p=" .. p .. ")")
end

function T.RandomVerticalFlip(p)
  p = prob_arg("RandomVerticalFlip", p)
  return ctransform("RandomVerticalFlip", {p = p}, "RandomVerticalFlip(p=" .. p .. ")")
end

-- ColorJitter(brightness, contrast, saturation, hue) or ColorJitter{brightness=, ...}
function T.ColorJitter(b, c, s, h)
  if type(b) == "table" and c == nil then
    local o = util.check_options(b, "ColorJitter", {"brightness", "contrast", "saturation", "hue"})
    b, c, s, h = o.brightness, o.contrast, o.saturation, o.hue
  end
  local step = {}
  local function range(key, v, center, lo, hi, clip)
    if v == nil then return end
    local r
    if type(v) == "number" then
      if v < 0 then fail("ColorJitter", "if " .. key .. " is a single number, it must be non negative", 3) end
      r = {center - v, center + v}
      if clip then r[1] = math.max(r[1], 0) end
    elseif type(v) == "table" and #v == 2 then
      r = {v[1], v[2]}
      if not (lo <= r[1] and r[1] <= r[2] and r[2] <= hi) then
        fail("ColorJitter", key .. " values should be between (" .. lo .. ", " .. hi .. ")", 3)
      end
    else
      fail("ColorJitter", key .. " should be a single number or a {min, max} pair", 3)
    end
    if r[1] == center and r[2] == center then return end
    if key == "hue" and (r[1] < -0.5 or r[2] > 0.5) then fail("ColorJitter", "hue values should be between (-0.5, 0.5)", 3) end
    step[key] = r
  end
  range("brightness", b, 1, 0, math.huge, true)
  range("contrast", c, 1, 0, math.huge, true)
  range("saturation", s, 1, 0, math.huge, true)
  range("hue", h, 0, -0.5, 0.5, false)
  return ctransform("ColorJitter", step, "ColorJitter()")
end

function T.Grayscale(n)
  if type(n) == "table" then n = util.check_options(n, "Grayscale", {"num_output_channels"}).num_output_channels end
  n = n or 1
  return ctransform("Grayscale", {num_output_channels = n}, "Grayscale(num_output_channels=" .. tostring(n) .. ")")
end

function T.ToTensor() return ctransform("ToTensor", {}, "ToTensor()") end

function T.Normalize(mean, std, opts)
  opts = util.check_options(opts, "Normalize", {"inplace"})
  util.opt_bool(opts.inplace, false, "Normalize", "inplace")
  local function vals(v, key)
    if type(v) == "number" then return {v} end
    if type(v) ~= "table" or #v == 0 then fail("Normalize", key .. " must be a number or a list of numbers", 3) end
    for i = 1, #v do
      if type(v[i]) ~= "number" then fail("Normalize", key .. " must hold numbers", 3) end
    end
    return v
  end
  return ctransform("Normalize", {mean = vals(mean, "mean"), std = vals(std, "std")},
    "Normalize(mean=" .. fmt_list(mean) .. ", std=" .. fmt_list(std) .. ")")
end

function T.Pad(padding, opts)
  opts = util.check_options(opts, "Pad", {"fill", "padding_mode"})
  return ctransform("Pad", {padding = padding_arg("Pad", padding), fill = opts.fill or 0,
    padding_mode = padding_mode_arg("Pad", opts.padding_mode)}, "Pad(padding=" .. fmt_list(padding) .. ")")
end

-- --- Lambda and Compose ------------------------------------------------------------------

local function callable(f)
  if type(f) == "function" then return true end
  local mt = getmetatable(f)
  return mt ~= nil and type(mt) == "table" and mt.__call ~= nil
end

function T.Lambda(fn)
  if not callable(fn) then fail("Lambda", "a function is required, got " .. type(fn)) end
  return fn
end

local Compose = {}
Compose.__index = Compose
Compose.__name = "dl.transforms.Compose"

function T.Compose(list)
  if type(list) ~= "table" then fail("Compose", "a list of transforms is required, got " .. type(list)) end
  local stages, cur = {}, nil
  local function add_c(steps)
    if not cur then
      cur = {steps = {}}
      stages[#stages + 1] = cur
    end
    for _, s in ipairs(steps) do cur.steps[#cur.steps + 1] = s end
  end
  for i = 1, #list do
    local t = list[i]
    if is_ctransform(t) then
      add_c(t._steps)
    elseif getmetatable(t) == Compose then
      for _, st in ipairs(t._stages) do
        if st.steps then add_c(st.steps) else cur = nil; stages[#stages + 1] = {fn = st.fn} end
      end
    elseif callable(t) then
      cur = nil
      stages[#stages + 1] = {fn = t}
    else
      fail("Compose", "item " .. i .. " is not a transform (got " .. type(t) .. ")")
    end
  end
  for _, st in ipairs(stages) do
    if st.steps then
      local ok, pipe = pcall(C.pipeline, st.steps)
      if not ok then error(pipe, 2) end
      st.pipe = pipe
    end
  end
  return setmetatable({transforms = list, _stages = stages}, Compose)
end

function Compose.__call(self, x)
  for _, st in ipairs(self._stages) do
    if st.pipe then
      if not dl.is_tensor(x) then error("Compose: a C transform got " .. type(x) .. ", not an image tensor", 2) end
      x = st.pipe:apply(x)
    else
      x = st.fn(x)
    end
  end
  return x
end

function Compose.__tostring(self)
  local parts = {}
  for i, t in ipairs(self.transforms) do parts[i] = "    " .. tostring(t) end
  return "Compose(\n" .. table.concat(parts, "\n") .. "\n)"
end

function Compose.__len(self) return #self.transforms end

-- For data loaders: splits a transform into the C pipeline that can run in
-- worker threads (applied right after decoding; nil = decode only) and the
-- remaining stages (a function for the main thread, or nil).
function T._split(tf)
  if tf == nil then return nil, nil end
  if is_ctransform(tf) then return tf._pipe, nil end
  if getmetatable(tf) == Compose then
    local stages = tf._stages
    local first, rest_from = nil, 1
    if stages[1] and stages[1].pipe then first, rest_from = stages[1].pipe, 2 end
    if rest_from > #stages then return first, nil end
    local rest = {}
    for i = rest_from, #stages do rest[#rest + 1] = stages[i] end
    return first, function(x)
      for _, st in ipairs(rest) do
        if st.pipe then x = st.pipe:apply(x) else x = st.fn(x) end
      end
      return x
    end
  end
  if callable(tf) then return nil, tf end
  error("transform must be a dl.transforms transform or a function, got " .. type(tf), 3)
end

-- --- functional forms -------------------------------------------------------------------------

local F = {}
T.functional = F

local function once(name, step, img)
  step.kind = name
  return C.pipeline({step}):apply(img)
end

function F.resize(img, size, opts)
  return T.Resize(size, opts)(img)
end

function F.center_crop(img, size) return T.CenterCrop(size)(img) end

-- crop(img, top, left, height, width): top/left 1-based; a box reaching
-- outside the image is padded with zeros (as torchvision does)
function F.crop(img, top, left, height, width)
  return once("crop", {crop = {top, left, height, width}}, img)
end

function F.resized_crop(img, top, left, height, width, size, opts)
  opts = util.check_options(opts, "resized_crop", {"interpolation", "antialias"})
  util.opt_bool(opts.antialias, true, "resized_crop", "antialias")
  return once("resized_crop", {crop = {top, left, height, width}, size = size_arg("resized_crop", size, true),
    interpolation = interp_arg("resized_crop", opts.interpolation)}, img)
end

function F.hflip(img) return once("RandomHorizontalFlip", {p = 1}, img) end
function F.vflip(img) return once("RandomVerticalFlip", {p = 1}, img) end

function F.pad(img, padding, opts) return T.Pad(padding, opts)(img) end

function F.adjust_brightness(img, f) return C.adjust(img, "brightness", f) end
function F.adjust_contrast(img, f) return C.adjust(img, "contrast", f) end
function F.adjust_saturation(img, f) return C.adjust(img, "saturation", f) end
function F.adjust_hue(img, f) return C.adjust(img, "hue", f) end

function F.rgb_to_grayscale(img, n) return T.Grayscale(n or 1)(img) end
function F.to_tensor(img) return T.ToTensor()(img) end
function F.normalize(img, mean, std) return T.Normalize(mean, std)(img) end

return T
