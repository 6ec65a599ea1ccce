-- dl.nn layers: Linear, Conv2d, BatchNorm1d/2d, LayerNorm, RMSNorm, ReLU, GELU, SiLU,
-- MaxPool2d, AvgPool2d, AdaptiveAvgPool2d, Dropout, Flatten, Identity, Softmax, LogSoftmax.
--
-- Constructors take PyTorch's positional arguments and a trailing options
-- table (dl.nn.Conv2d(3, 64, 7, {stride=2, padding=3, bias=false})); unknown
-- options are errors.  Initialisation is PyTorch's: kaiming_uniform_(a =
-- sqrt(5)) for conv/linear weights, bias U(-1/sqrt(fan_in), 1/sqrt(fan_in)),
-- batch norm weight 1, bias 0, running_mean 0, running_var 1,
-- num_batches_tracked 0 (int64, 0-dim); layer/RMS norm weight 1, bias 0.  extra_repr() prints what PyTorch
-- prints, so tostring(model) matches print(model) in Python.  Dims given to
-- Flatten/Softmax/LogSoftmax are 1-based (the Lua view).
local dl = require "dl"
local util = require "dl.util"
local Module = require "dl.nn.module"
local F = require "dl.nn.functional"
local init = require "dl.nn.initializers"

local fail, pyrepr = util.fail, util.pyrepr
local Parameter = Module.Parameter

local L = {}

local factory = Module.factory_kwargs

local function check_input(x, name)
  if not dl.is_tensor(x) then fail("%s: input must be a tensor, got %s", name, type(x)) end
  return x
end

-- Linear's and the convolutions' parameters: the bias option checked, weight
-- (weight_shape) and bias (n entries; registered as None with bias=false)
-- allocated, then self:reset_parameters().  dl.nn.layers_composed uses it too.
local function weight_bias(self, op, weight_shape, n, opts)
  if opts.bias ~= nil then util.check_bool(opts.bias, op, "bias") end
  self.weight = Parameter(dl.empty(weight_shape, factory(opts)))
  if opts.bias == false then
    self:register_parameter("bias", nil)
  else
    self.bias = Parameter(dl.empty({n}, factory(opts)))
  end
  self:reset_parameters()
end
L._weight_bias = weight_bias

-- --- Identity ---------------------------------------------------------------

L.Identity = Module:extend("Identity")
function L.Identity:__init() end
function L.Identity:forward(x) return x end

-- --- Linear -----------------------------------------------------------------

L.Linear = Module:extend("Linear")

function L.Linear:__init(in_features, out_features, opts)
  opts = util.check_options(opts, "Linear", {"bias", "dtype", "device"})
  self.in_features = util.check_int(in_features, "Linear", "in_features", 0)
  self.out_features = util.check_int(out_features, "Linear", "out_features", 0)
  weight_bias(self, "Linear", {self.out_features, self.in_features}, self.out_features, opts)
end

-- kaiming_uniform_(a=sqrt(5)) weight, U(-1/sqrt(fan_in), 1/sqrt(fan_in)) bias
local function reset_weight_bias(self)
  init.kaiming_uniform_(self.weight, {a = math.sqrt(5)})
  if self.bias ~= nil then
    local fan_in = init._calculate_fan_in_and_fan_out(self.weight)
    local bound = fan_in > 0 and 1 / math.sqrt(fan_in) or 0
    init.uniform_(self.bias, -bound, bound)
  end
end
L.Linear.reset_parameters = reset_weight_bias

function L.Linear:forward(x)
  check_input(x, "Linear")
  local n = x:dim() > 0 and x.shape[x:dim()] or -1
  if n ~= self.in_features then
    fail("Linear: input has %d features in its last dimension (shape %s), expected %d", n,
      util.shape_str(x.shape), self.in_features)
  end
  return F.linear(x, self.weight, self.bias)
end

function L.Linear:extra_repr()
  return string.format("in_features=%d, out_features=%d, bias=%s", self.in_features, self.out_features,
    pyrepr(self.bias ~= nil))
end

-- --- Conv2d -----------------------------------------------------------------

L.Conv2d = Module:extend("Conv2d")

local PADDING_MODES = {"zeros", "reflect", "replicate", "circular"}

function L.Conv2d:__init(in_channels, out_channels, kernel_size, opts)
  local op = "Conv2d"
  opts = util.check_options(opts, op,
    {"stride", "padding", "dilation", "groups", "bias", "padding_mode", "dtype", "device"})
  self.in_channels = util.check_int(in_channels, op, "in_channels", 1)
  self.out_channels = util.check_int(out_channels, op, "out_channels", 1)
  self.kernel_size = util.check_tuple(kernel_size, 2, op, "kernel_size", 1)
  self.stride = util.check_tuple(opts.stride or 1, 2, op, "stride", 1)
  local padding = opts.padding or 0
  if type(padding) == "string" then
    util.check_string(padding, op, "padding", {"valid", "same"})
    if padding == "same" and (self.stride[1] ~= 1 or self.stride[2] ~= 1) then
      fail("Conv2d: padding='same' is not supported for strided convolutions")
    end
    self.padding = padding
  else
    self.padding = util.check_tuple(padding, 2, op, "padding", 0)
  end
  self.dilation = util.check_tuple(opts.dilation or 1, 2, op, "dilation", 1)
  self.output_padding = {0, 0}
  self.groups = util.check_int(opts.groups or 1, op, "groups", 1)
  if self.in_channels % self.groups ~= 0 then
    fail("Conv2d: in_channels (%d) must be divisible by groups (%d)", self.in_channels, self.groups)
  end
  if self.out_channels % self.groups ~= 0 then
    fail("Conv2d: out_channels (%d) must be divisible by groups (%d)", self.out_channels, self.groups)
  end
  self.padding_mode = util.check_string(opts.padding_mode or "zeros", op, "padding_mode", PADDING_MODES)
  local k = self.kernel_size
  weight_bias(self, op, {self.out_channels, self.in_channels // self.groups, k[1], k[2]}, self.out_channels, opts)
end

L.Conv2d.reset_parameters = reset_weight_bias

-- Explicit (top, bottom, left, right) padding of 'same'/'valid'/numbers.
local function conv_pads(self)
  local p = self.padding
  if p == "valid" then return 0, 0, 0, 0 end
  if p == "same" then
    local out = {}
    for i = 1, 2 do
      local total = self.dilation[i] * (self.kernel_size[i] - 1)
      out[2 * i - 1] = total // 2
      out[2 * i] = total - total // 2
    end
    return out[1], out[2], out[3], out[4]
  end
  return p[1], p[1], p[2], p[2]
end

function L.Conv2d:forward(x)
  check_input(x, "Conv2d")
  if x:dim() ~= 3 and x:dim() ~= 4 then
    fail("Conv2d: expected a 3-D (C, H, W) or 4-D (N, C, H, W) input, got %d-D", x:dim())
  end
  local c = x.shape[x:dim() - 2]
  if c ~= self.in_channels then
    fail("Conv2d: input has %d channels, the layer expects %d (shape %s)", c, self.in_channels,
      util.shape_str(x.shape))
  end
  local top, bottom, left, right = conv_pads(self)
  local conv_opts = {stride = self.stride, dilation = self.dilation, groups = self.groups}
  if self.padding_mode ~= "zeros" or top ~= bottom or left ~= right then
    if top + bottom + left + right > 0 then
      local mode = self.padding_mode == "zeros" and "constant" or self.padding_mode
      x = F.pad(x, {left, right, top, bottom}, {mode = mode})
    end
    conv_opts.padding = {0, 0}
  else
    conv_opts.padding = {top, left}
  end
  return F.conv2d(x, self.weight, self.bias, conv_opts)
end

function L.Conv2d:extra_repr()
  local s = string.format("%d, %d, kernel_size=%s, stride=%s", self.in_channels, self.out_channels,
    pyrepr(self.kernel_size), pyrepr(self.stride))
  local p = self.padding
  if type(p) == "string" or p[1] ~= 0 or p[2] ~= 0 then s = s .. ", padding=" .. pyrepr(p) end
  if self.dilation[1] ~= 1 or self.dilation[2] ~= 1 then s = s .. ", dilation=" .. pyrepr(self.dilation) end
  if self.groups ~= 1 then s = s .. ", groups=" .. self.groups end
  if self.bias == nil then s = s .. ", bias=False" end
  if self.padding_mode ~= "zeros" then s = s .. ", padding_mode=" .. self.padding_mode end
  return s
end

-- --- BatchNorm --------------------------------------------------------------

local BatchNorm = Module:extend("_BatchNorm")
L._BatchNorm = BatchNorm

-- momentum = false means PyTorch's None (a cumulative moving average).
function BatchNorm:__init(num_features, opts)
  local op = self:_get_name()
  opts = util.check_options(opts, op, {"eps", "momentum", "affine", "track_running_stats", "dtype", "device"})
  self.num_features = util.check_int(num_features, op, "num_features", 1)
  self.eps = opts.eps == nil and 1e-5 or util.check_number(opts.eps, op, "eps")
  if opts.momentum == false then
    self.momentum = false
  else
    self.momentum = opts.momentum == nil and 0.1 or util.check_number(opts.momentum, op, "momentum")
  end
  self.affine = util.opt_bool(opts.affine, true, op, "affine")
  self.track_running_stats = util.opt_bool(opts.track_running_stats, true, op, "track_running_stats")
  local fk = factory(opts)
  if self.affine then
    self.weight = Parameter(dl.empty({self.num_features}, fk))
    self.bias = Parameter(dl.empty({self.num_features}, fk))
  else
    self:register_parameter("weight", nil)
    self:register_parameter("bias", nil)
  end
  if self.track_running_stats then
    self:register_buffer("running_mean", dl.zeros({self.num_features}, fk))
    self:register_buffer("running_var", dl.ones({self.num_features}, fk))
    self:register_buffer("num_batches_tracked", dl.tensor(0, {dtype = dl.int64, device = opts.device}))
  else
    self:register_buffer("running_mean", nil)
    self:register_buffer("running_var", nil)
    self:register_buffer("num_batches_tracked", nil)
  end
  self:reset_parameters()
end

function BatchNorm:reset_running_stats()
  if self.track_running_stats then
    dl.no_grad(function()
      self.running_mean:zero_()
      self.running_var:fill_(1)
      self.num_batches_tracked:zero_()
    end)
  end
end

function BatchNorm:reset_parameters()
  self:reset_running_stats()
  if self.affine then
    init.ones_(self.weight)
    init.zeros_(self.bias)
  end
end

function BatchNorm:_check_input_dim(x)
  check_input(x, self:_get_name())
end

-- F.batch_norm's arguments after x for this module (its statistics, affine
-- parameters, mode, momentum and eps), counting a training step in
-- num_batches_tracked.
function BatchNorm:_bn_args(x)
  self:_check_input_dim(x)
  local c = x.shape[2]
  if c ~= self.num_features then
    fail("%s: input has %d channels, the layer expects %d (shape %s)", self:_get_name(), c,
      self.num_features, util.shape_str(x.shape))
  end
  local factor = self.momentum or 0.0
  if self.training and self.track_running_stats and self.num_batches_tracked ~= nil then
    dl.no_grad(function() self.num_batches_tracked:add_(1) end)
    if self.momentum == false then
      factor = 1.0 / self.num_batches_tracked:item()
    end
  end
  local bn_training = self.training or (self.running_mean == nil and self.running_var == nil)
  local use_stats = not self.training or self.track_running_stats
  return use_stats and self.running_mean or nil, use_stats and self.running_var or nil,
    self.weight, self.bias, bn_training, factor, self.eps
end

function BatchNorm:forward(x)
  return F.batch_norm(x, self:_bn_args(x))
end

-- relu(self(x)), or relu(self(x) + residual), in one op
-- (F.batch_norm_relu / F.batch_norm_add_relu: one pass, one autograd node,
-- the ReLU's mask kept as bits): what the ResNet blocks call.
function BatchNorm:forward_relu(x, residual)
  if residual == nil then return F.batch_norm_relu(x, self:_bn_args(x)) end
  return F.batch_norm_add_relu(x, residual, self:_bn_args(x))
end

function BatchNorm:extra_repr()
  local m = self.momentum == false and "None" or pyrepr(self.momentum)
  return string.format("%d, eps=%s, momentum=%s, affine=%s, track_running_stats=%s", self.num_features,
    pyrepr(self.eps), m, pyrepr(self.affine), pyrepr(self.track_running_stats))
end

L.BatchNorm2d = BatchNorm:extend("BatchNorm2d")
function L.BatchNorm2d:_check_input_dim(x)
  check_input(x, "BatchNorm2d")
  if x:dim() ~= 4 then fail("BatchNorm2d: expected 4D input (got %dD input)", x:dim()) end
end

L.BatchNorm1d = BatchNorm:extend("BatchNorm1d")
function L.BatchNorm1d:_check_input_dim(x)
  check_input(x, "BatchNorm1d")
  if x:dim() ~= 2 and x:dim() ~= 3 then
    fail("BatchNorm1d: expected 2D or 3D input (got %dD input)", x:dim())
  end
end

-- --- LayerNorm, RMSNorm ----------------------------------------------------

-- normalized_shape: an integer or a table of integers -> a table of integers
local function norm_shape(v, op)
  if type(v) == "number" then v = {v} end
  if type(v) ~= "table" or dl.is_tensor(v) or #v < 1 then
    fail("%s: normalized_shape must be an integer or a non-empty table of integers, got %s", op,
      dl.is_tensor(v) and "tensor" or type(v))
  end
  local t = {}
  for i = 1, #v do t[i] = util.check_int(v[i], op, "normalized_shape", 0) end
  return t
end

-- LayerNorm(normalized_shape, {eps=1e-5, elementwise_affine=true, bias=true,
-- dtype=, device=}): weight 1 and bias 0 of shape normalized_shape.
L.LayerNorm = Module:extend("LayerNorm")
function L.LayerNorm:__init(normalized_shape, opts)
  local op = "LayerNorm"
  opts = util.check_options(opts, op, {"eps", "elementwise_affine", "bias", "dtype", "device"})
  self.normalized_shape = norm_shape(normalized_shape, op)
  self.eps = opts.eps == nil and 1e-5 or util.check_number(opts.eps, op, "eps")
  self.elementwise_affine = util.opt_bool(opts.elementwise_affine, true, op, "elementwise_affine")
  local bias = util.opt_bool(opts.bias, true, op, "bias")
  if self.elementwise_affine then
    self.weight = Parameter(dl.empty(self.normalized_shape, factory(opts)))
    if bias then
      self.bias = Parameter(dl.empty(self.normalized_shape, factory(opts)))
    else
      self:register_parameter("bias", nil)
    end
  else
    self:register_parameter("weight", nil)
    self:register_parameter("bias", nil)
  end
  self:reset_parameters()
end
function L.LayerNorm:reset_parameters()
  if self.weight ~= nil then init.ones_(self.weight) end
  if self.bias ~= nil then init.zeros_(self.bias) end
end
function L.LayerNorm:forward(x)
  return F.layer_norm(check_input(x, "LayerNorm"), self.normalized_shape, self.weight, self.bias, self.eps)
end
function L.LayerNorm:extra_repr()
  return string.format("%s, eps=%s, elementwise_affine=%s", pyrepr(self.normalized_shape), pyrepr(self.eps),
    pyrepr(self.elementwise_affine))
end

-- RMSNorm(normalized_shape, {eps=nil, elementwise_affine=true, dtype=, device=}):
-- y = x / sqrt(mean(x^2) + eps) * weight; eps nil is the machine epsilon of
-- the dtype the input computes in (PyTorch's torch.finfo default).
L.RMSNorm = Module:extend("RMSNorm")
function L.RMSNorm:__init(normalized_shape, opts)
  local op = "RMSNorm"
  opts = util.check_options(opts, op, {"eps", "elementwise_affine", "dtype", "device"})
  self.normalized_shape = norm_shape(normalized_shape, op)
  if opts.eps ~= nil then self.eps = util.check_number(opts.eps, op, "eps") end
  self.elementwise_affine = util.opt_bool(opts.elementwise_affine, true, op, "elementwise_affine")
  if self.elementwise_affine then
    self.weight = Parameter(dl.empty(self.normalized_shape, factory(opts)))
  else
    self:register_parameter("weight", nil)
  end
  self:reset_parameters()
end
function L.RMSNorm:reset_parameters()
  if self.weight ~= nil then init.ones_(self.weight) end
end
function L.RMSNorm:forward(x)
  return F.rms_norm(check_input(x, "RMSNorm"), self.normalized_shape, self.weight, self.eps)
end
L.RMSNorm.extra_repr = L.LayerNorm.extra_repr

-- --- activations ------------------------------------------------------------

-- An activation class name({inplace=false}) or name(true) running F[fn].
local function inplace_layer(name, fn)
  local cls = Module:extend(name)
  function cls:__init(opts)
    if type(opts) == "boolean" then opts = {inplace = opts} end
    opts = util.check_options(opts, name, {"inplace"})
    self.inplace = util.opt_bool(opts.inplace, false, name, "inplace")
  end
  function cls:forward(x)
    return F[fn](check_input(x, name), {inplace = self.inplace})
  end
  function cls:extra_repr()
    return self.inplace and "inplace=True" or ""
  end
  return cls
end

L.ReLU = inplace_layer("ReLU", "relu")

-- GELU({approximate="none"}): x * Phi(x); approximate="tanh" is the tanh form
L.GELU = Module:extend("GELU")
function L.GELU:__init(opts)
  opts = util.check_options(opts, "GELU", {"approximate"})
  local a = opts.approximate
  if a == nil then a = "none" end
  if a ~= "none" and a ~= "tanh" then
    fail("GELU: approximate must be 'none' or 'tanh', got %s", type(a) == "string" and ("'" .. a .. "'") or type(a))
  end
  self.approximate = a
end
function L.GELU:forward(x)
  return F.gelu(check_input(x, "GELU"), {approximate = self.approximate})
end
function L.GELU:extra_repr()
  return "approximate='" .. self.approximate .. "'"
end

-- SiLU: x * sigmoid(x)
L.SiLU = inplace_layer("SiLU", "silu")

local function dim_layer(name, fn)
  local cls = Module:extend(name)
  function cls:__init(dim)
    if dim == nil then fail("%s: dim is required", name) end
    self.dim = util.check_int(dim, name, "dim")
    if self.dim == 0 then fail("%s: dims are 1-based; dim 0 is invalid", name) end
  end
  function cls:forward(x)
    return F[fn](check_input(x, name), self.dim)
  end
  function cls:extra_repr()
    return "dim=" .. self.dim
  end
  return cls
end
L.Softmax = dim_layer("Softmax", "softmax")
L.LogSoftmax = dim_layer("LogSoftmax", "log_softmax")

-- --- pooling ----------------------------------------------------------------

-- an int or a table of 2 ints, kept as given (PyTorch prints what it got)
local function pool_arg(v, op, what, min)
  util.check_tuple(v, 2, op, what, min)
  if type(v) == "table" then return {v[1], v[2]} end
  return math.tointeger(v)
end

L.MaxPool2d = Module:extend("MaxPool2d")
function L.MaxPool2d:__init(kernel_size, opts)
  local op = "MaxPool2d"
  opts = util.check_options(opts, op, {"stride", "padding", "dilation", "ceil_mode"})
  self.kernel_size = pool_arg(kernel_size, op, "kernel_size", 1)
  self.stride = opts.stride == nil and self.kernel_size or pool_arg(opts.stride, op, "stride", 1)
  self.padding = pool_arg(opts.padding or 0, op, "padding", 0)
  self.dilation = pool_arg(opts.dilation or 1, op, "dilation", 1)
  self.ceil_mode = util.opt_bool(opts.ceil_mode, false, op, "ceil_mode")
end
function L.MaxPool2d:forward(x)
  return F.max_pool2d(check_input(x, "MaxPool2d"), self.kernel_size,
    {stride = self.stride, padding = self.padding, dilation = self.dilation, ceil_mode = self.ceil_mode})
end
function L.MaxPool2d:extra_repr()
  return string.format("kernel_size=%s, stride=%s, padding=%s, dilation=%s, ceil_mode=%s", pyrepr(self.kernel_size),
    pyrepr(self.stride), pyrepr(self.padding), pyrepr(self.dilation), pyrepr(self.ceil_mode))
end

L.AvgPool2d = Module:extend("AvgPool2d")
function L.AvgPool2d:__init(kernel_size, opts)
  local op = "AvgPool2d"
  opts = util.check_options(opts, op, {"stride", "padding", "ceil_mode", "count_include_pad", "divisor_override"})
  self.kernel_size = pool_arg(kernel_size, op, "kernel_size", 1)
  self.stride = opts.stride == nil and self.kernel_size or pool_arg(opts.stride, op, "stride", 1)
  self.padding = pool_arg(opts.padding or 0, op, "padding", 0)
  self.ceil_mode = util.opt_bool(opts.ceil_mode, false, op, "ceil_mode")
  self.count_include_pad = util.opt_bool(opts.count_include_pad, true, op, "count_include_pad")
  if opts.divisor_override ~= nil then
    self.divisor_override = util.check_int(opts.divisor_override, op, "divisor_override", 1)
  end
end
function L.AvgPool2d:forward(x)
  return F.avg_pool2d(check_input(x, "AvgPool2d"), self.kernel_size,
    {stride = self.stride, padding = self.padding, ceil_mode = self.ceil_mode,
     count_include_pad = self.count_include_pad, divisor_override = self.divisor_override})
end
function L.AvgPool2d:extra_repr()
  return string.format("kernel_size=%s, stride=%s, padding=%s", pyrepr(self.kernel_size), pyrepr(self.stride),
    pyrepr(self.padding))
end

L.AdaptiveAvgPool2d = Module:extend("AdaptiveAvgPool2d")
function L.AdaptiveAvgPool2d:__init(output_size)
  if output_size == nil then fail("AdaptiveAvgPool2d: output_size is required") end
  self.output_size = pool_arg(output_size, "AdaptiveAvgPool2d", "output_size", 1)
end
function L.AdaptiveAvgPool2d:forward(x)
  return F.adaptive_avg_pool2d(check_input(x, "AdaptiveAvgPool2d"), self.output_size)
end
function L.AdaptiveAvgPool2d:extra_repr()
  return "output_size=" .. pyrepr(self.output_size)
end

-- --- Dropout, Flatten -------------------------------------------------------

-- Dropout(p=0.5, {inplace=false}) (also Dropout{p=, inplace=})
L.Dropout = Module:extend("Dropout")
function L.Dropout:__init(p, opts)
  if type(p) == "table" and opts == nil then p, opts = p.p, p end
  opts = util.check_options(opts, "Dropout", {"p", "inplace"})
  if p == nil then p = 0.5 end
  util.check_number(p, "Dropout", "p")
  if p < 0 or p > 1 then
    fail("Dropout: dropout probability has to be between 0 and 1, but got %s", pyrepr(p))
  end
  self.p = p
  self.inplace = util.opt_bool(opts.inplace, false, "Dropout", "inplace")
end
function L.Dropout:forward(x)
  local y = F.dropout(check_input(x, "Dropout"), self.p, self.training)
  if self.inplace and y ~= x then return x:copy_(y) end
  return y
end
function L.Dropout:extra_repr()
  return string.format("p=%s, inplace=%s", pyrepr(self.p), pyrepr(self.inplace))
end

-- Flatten(start_dim=2, end_dim=-1): 1-based dims; the default keeps the batch.
L.Flatten = Module:extend("Flatten")
function L.Flatten:__init(start_dim, end_dim)
  self.start_dim = util.check_int(start_dim or 2, "Flatten", "start_dim")
  self.end_dim = util.check_int(end_dim or -1, "Flatten", "end_dim")
  if self.start_dim == 0 or self.end_dim == 0 then fail("Flatten: dims are 1-based; dim 0 is invalid") end
end
function L.Flatten:forward(x)
  return F.flatten(check_input(x, "Flatten"), self.start_dim, self.end_dim)
end
function L.Flatten:extra_repr()
  return string.format("start_dim=%d, end_dim=%d", self.start_dim, self.end_dim)
end

return L
