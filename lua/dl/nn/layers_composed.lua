-- dl.nn layers over dl.nn.composed (lua/dl/nn/composed.lua): Conv1d,
-- Conv3d, ConvTranspose1d, ConvTranspose2d, MaxPool1d, MaxPool3d,
-- AvgPool1d, AvgPool3d, PReLU, PixelShuffle, PixelUnshuffle,
-- InstanceNorm1d/2d/3d, Upsample.
--
-- PyTorch's constructor arguments, parameter names, shapes and
-- initialisation (kaiming_uniform_(a = sqrt(5)) weights, bias
-- U(-1/sqrt(fan_in), 1/sqrt(fan_in)), PReLU 0.25, instance norm affine 1/0),
-- so state_dicts load from PyTorch; extra_repr prints what PyTorch prints.
local dl = require "dl"
local util = require "dl.util"
local Module = require "dl.nn.module"
local F = require "dl.nn.functional"

local fail, pyrepr = util.fail, util.pyrepr
local Parameter = Module.Parameter

local L = {}

local factory = Module.factory_kwargs

local function tuple(v, n, op, what, min)
  util.check_tuple(v, n, op, what, min)
  if type(v) == "table" then return {table.unpack(v, 1, n)} end
  local r = {}
  for i = 1, n do r[i] = v end
  return r
end

local layers = require "dl.nn.layers"
-- kaiming_uniform_(a=sqrt(5)) weight, U(-1/sqrt(fan_in), 1/sqrt(fan_in)) bias
local reset_weight_bias = layers.Conv2d.reset_parameters

-- --- convolutions ------------------------------------------------------------------

-- A ConvNd / ConvTransposeNd class: n spatial dims, fn the functional.
local function conv_class(name, n, transposed, fn)
  local cls = Module:extend(name)
  function cls:__init(in_channels, out_channels, kernel_size, opts)
    local keys = {"stride", "padding", "dilation", "groups", "bias", "padding_mode", "dtype", "device"}
    if transposed then keys[#keys + 1] = "output_padding" end
    opts = util.check_options(opts, name, keys)
    self.in_channels = util.check_int(in_channels, name, "in_channels", 1)
    self.out_channels = util.check_int(out_channels, name, "out_channels", 1)
    self.kernel_size = tuple(kernel_size, n, name, "kernel_size", 1)
    self.stride = tuple(opts.stride or 1, n, name, "stride", 1)
    local padding = opts.padding or 0
    if padding == "valid" then padding = 0 end
    if type(padding) == "string" then
      fail("%s: padding must be a number, a table of %d numbers or 'valid', got '%s'", name, n, padding)
    end
    self.padding = tuple(padding, n, name, "padding", 0)
    self.dilation = tuple(opts.dilation or 1, n, name, "dilation", 1)
    self.output_padding = tuple(opts.output_padding or 0, n, name, "output_padding", 0)
    self.groups = util.check_int(opts.groups or 1, name, "groups", 1)
    self.transposed = transposed
    if self.in_channels % self.groups ~= 0 or self.out_channels % self.groups ~= 0 then
      fail("%s: in_channels (%d) and out_channels (%d) must be divisible by groups (%d)", name, self.in_channels,
        self.out_channels, self.groups)
    end
    self.padding_mode = opts.padding_mode or "zeros"
    if self.padding_mode ~= "zeros" then fail("%s: only padding_mode='zeros' is supported", name) end
    local shape
    if transposed then shape = {self.in_channels, self.out_channels // self.groups}
    else shape = {self.out_channels, self.in_channels // self.groups} end
    for i = 1, n do shape[#shape + 1] = self.kernel_size[i] end
    layers._weight_bias(self, name, shape, self.out_channels, opts)
  end
  cls.reset_parameters = reset_weight_bias
  function cls:forward(x)
    if not dl.is_tensor(x) then fail("%s: input must be a tensor, got %s", name, type(x)) end
    local o = {stride = self.stride, padding = self.padding, dilation = self.dilation, groups = self.groups}
    if transposed then o.output_padding = self.output_padding end
    return F[fn](x, self.weight, self.bias, o)
  end
  function cls:extra_repr()
    local function t(v) return pyrepr(v) end
    local s = string.format("%d, %d, kernel_size=%s, stride=%s", self.in_channels, self.out_channels,
      t(self.kernel_size), t(self.stride))
    local function nonzero(v, z)
      for _, x in ipairs(v) do if x ~= z then return true end end
      return false
    end
    if nonzero(self.padding, 0) then s = s .. ", padding=" .. t(self.padding) end
    if nonzero(self.dilation, 1) then s = s .. ", dilation=" .. t(self.dilation) end
    if transposed and nonzero(self.output_padding, 0) then s = s .. ", output_padding=" .. t(self.output_padding) end
    if self.groups ~= 1 then s = s .. ", groups=" .. self.groups end
    if self.bias == nil then s = s .. ", bias=False" end
    return s
  end
  return cls
end

L.Conv1d = conv_class("Conv1d", 1, false, "conv1d")
L.Conv3d = conv_class("Conv3d", 3, false, "conv3d")
L.ConvTranspose1d = conv_class("ConvTranspose1d", 1, true, "conv_transpose1d")
L.ConvTranspose2d = conv_class("ConvTranspose2d", 2, true, "conv_transpose2d")

-- --- pooling ---------------------------------------------------------------------------

-- sizes are kept as given (a number or a table), as PyTorch prints them
-- (AvgPool1d makes them 1-tuples, as PyTorch's)
local function pool_class(name, n, kind)
  local cls = Module:extend(name)
  local function arg(v, what, min)
    util.check_tuple(v, n, name, what, min)
    if type(v) == "table" then return {table.unpack(v, 1, n)} end
    if kind == "avg" and n == 1 then return {math.tointeger(v)} end
    return math.tointeger(v)
  end
  function cls:__init(kernel_size, opts)
    local keys = kind == "max" and {"stride", "padding", "dilation", "ceil_mode"} or
      {"stride", "padding", "ceil_mode", "count_include_pad"}
    opts = util.check_options(opts, name, keys)
    self.kernel_size = arg(kernel_size, "kernel_size", 1)
    self.stride = opts.stride == nil and self.kernel_size or arg(opts.stride, "stride", 1)
    self.padding = arg(opts.padding or 0, "padding", 0)
    self.ceil_mode = util.opt_bool(opts.ceil_mode, false, name, "ceil_mode")
    if kind == "max" then self.dilation = arg(opts.dilation or 1, "dilation", 1)
    else self.count_include_pad = util.opt_bool(opts.count_include_pad, true, name, "count_include_pad") end
  end
  function cls:forward(x)
    local o = {stride = self.stride, padding = self.padding, ceil_mode = self.ceil_mode}
    if kind == "max" then o.dilation = self.dilation else o.count_include_pad = self.count_include_pad end
    return F[kind .. "_pool" .. n .. "d"](x, self.kernel_size, o)
  end
  function cls:extra_repr()
    local s = string.format("kernel_size=%s, stride=%s, padding=%s", pyrepr(self.kernel_size), pyrepr(self.stride),
      pyrepr(self.padding))
    if kind == "max" then s = s .. string.format(", dilation=%s, ceil_mode=%s", pyrepr(self.dilation), pyrepr(self.ceil_mode)) end
    return s
  end
  return cls
end
L.MaxPool1d = pool_class("MaxPool1d", 1, "max")
L.MaxPool3d = pool_class("MaxPool3d", 3, "max")
L.AvgPool1d = pool_class("AvgPool1d", 1, "avg")
L.AvgPool3d = pool_class("AvgPool3d", 3, "avg")

-- --- PReLU, pixel shuffles, upsampling ------------------------------------------------------

L.PReLU = Module:extend("PReLU")
function L.PReLU:__init(opts)
  if math.type(opts) == "integer" then opts = {num_parameters = opts} end
  opts = util.check_options(opts, "PReLU", {"num_parameters", "init", "dtype", "device"})
  self.num_parameters = util.check_int(opts.num_parameters or 1, "PReLU", "num_parameters", 1)
  self.init = opts.init or 0.25
  self.weight = Parameter(dl.full({self.num_parameters}, self.init, factory(opts)))
end
function L.PReLU:forward(x) return F.prelu(x, self.weight) end
function L.PReLU:extra_repr() return "num_parameters=" .. self.num_parameters end

local function shuffle_class(name, fn, what)
  local cls = Module:extend(name)
  function cls:__init(r)
    self[what] = util.check_int(r, name, what, 1)
  end
  function cls:forward(x) return F[fn](x, self[what]) end
  function cls:extra_repr() return what .. "=" .. self[what] end
  return cls
end
L.PixelShuffle = shuffle_class("PixelShuffle", "pixel_shuffle", "upscale_factor")
L.PixelUnshuffle = shuffle_class("PixelUnshuffle", "pixel_unshuffle", "downscale_factor")

L.Upsample = Module:extend("Upsample")
function L.Upsample:__init(opts)
  opts = util.check_options(opts, "Upsample", {"size", "scale_factor", "mode", "align_corners"})
  self.size, self.scale_factor = opts.size, opts.scale_factor
  self.mode = opts.mode or "nearest"
  self.align_corners = opts.align_corners
end
function L.Upsample:forward(x)
  return F.interpolate(x, {size = self.size, scale_factor = self.scale_factor, mode = self.mode,
    align_corners = self.align_corners})
end
function L.Upsample:extra_repr() -- as PyTorch 1.13 prints it
  local s
  if self.size ~= nil then
    s = "size=" .. pyrepr(self.size)
  else
    local f = self.scale_factor
    if type(f) == "table" then
      local r = {}
      for i, v in ipairs(f) do r[i] = v + 0.0 end
      f = r
    else
      f = f + 0.0
    end
    s = "scale_factor=" .. pyrepr(f)
  end
  return s .. ", mode=" .. self.mode
end

-- --- instance norm ------------------------------------------------------------------------

-- PyTorch's _InstanceNorm shares _NormBase with batch norm: the same
-- parameters and buffers, with affine and track_running_stats off by default.
local BatchNorm = layers._BatchNorm
local function instance_class(name, rank)
  local cls = BatchNorm:extend(name)
  function cls:__init(num_features, opts)
    opts = util.check_options(opts, name, {"eps", "momentum", "affine", "track_running_stats", "dtype", "device"})
    local o = {}
    for k, v in pairs(opts) do o[k] = v end
    o.affine = util.opt_bool(opts.affine, false, name, "affine")
    o.track_running_stats = util.opt_bool(opts.track_running_stats, false, name, "track_running_stats")
    BatchNorm.__init(self, num_features, o)
  end
  function cls:forward(x)
    if not dl.is_tensor(x) then fail("%s: input must be a tensor, got %s", name, type(x)) end
    local unbatched = x:dim() == rank - 1
    if unbatched then x = x:unsqueeze(1) end
    if x:dim() ~= rank then fail("%s: expected %dD or %dD input (got %dD input)", name, rank - 1, rank, x:dim()) end
    if x.shape[2] ~= self.num_features then
      fail("%s: input has %d channels, the layer expects %d", name, x.shape[2], self.num_features)
    end
    -- the running statistics (nil unless tracked) are updated in training
    -- and used instead of the input's in evaluation
    local y = F.instance_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
      self.training or not self.track_running_stats, self.momentum, self.eps)
    return unbatched and y:squeeze(1) or y
  end
  return cls
end
L.InstanceNorm1d = instance_class("InstanceNorm1d", 3)
L.InstanceNorm2d = instance_class("InstanceNorm2d", 4)
L.InstanceNorm3d = instance_class("InstanceNorm3d", 5)

return L
