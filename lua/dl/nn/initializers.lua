-- dl.nn.init: PyTorch's torch.nn.init.  Each function fills a tensor in
-- place (under no_grad) and returns it.
--
--   dl.nn.init.kaiming_normal_(w, {mode="fan_out", nonlinearity="relu"})
--   dl.nn.init.xavier_uniform_(w, {gain=dl.nn.init.calculate_gain("tanh")})
--
-- Fans follow PyTorch: for a weight of shape (out, in, k1, k2, ...), fan_in =
-- in * k1 * k2 * ..., fan_out = out * k1 * k2 * ....  Tensors with a zero
-- dimension are left as they are (PyTorch warns and does the same).
local dl = require "dl"
local util = require "dl.util"

local fail = util.fail
local init = {}

local LINEAR = {
  linear = true, conv1d = true, conv2d = true, conv3d = true, conv_transpose1d = true,
  conv_transpose2d = true, conv_transpose3d = true, sigmoid = true,
}

-- The recommended gain for a nonlinearity (param: leaky_relu's negative slope).
function init.calculate_gain(nonlinearity, param)
  if type(nonlinearity) ~= "string" then
    fail("calculate_gain: nonlinearity must be a string, got %s", type(nonlinearity))
  end
  if LINEAR[nonlinearity] then return 1 end
  if nonlinearity == "tanh" then return 5.0 / 3 end
  if nonlinearity == "relu" then return math.sqrt(2.0) end
  if nonlinearity == "leaky_relu" then
    local slope
    if param == nil then
      slope = 0.01
    elseif type(param) == "number" then
      slope = param
    else
      fail("calculate_gain: negative_slope %s not a valid number", tostring(param))
    end
    return math.sqrt(2.0 / (1 + slope * slope))
  end
  if nonlinearity == "selu" then return 3.0 / 4 end
  fail("calculate_gain: unsupported nonlinearity '%s'", nonlinearity)
end

local function check(t, op)
  if not dl.is_tensor(t) then fail("%s: a tensor is required, got %s", op, type(t)) end
  return t
end

local function empty(t)
  for _, s in ipairs(t.shape) do
    if s == 0 then return true end
  end
  return false
end

-- fan_in, fan_out of a weight tensor (at least 2-D).
function init._calculate_fan_in_and_fan_out(t, op)
  local shape = t.shape
  if #shape < 2 then
    fail("%s: fan in and fan out can not be computed for tensor with fewer than 2 dimensions",
      op or "calculate_fan")
  end
  local receptive = 1
  for i = 3, #shape do receptive = receptive * shape[i] end
  return shape[2] * receptive, shape[1] * receptive
end

local function correct_fan(t, mode, op)
  if type(mode) ~= "string" or (mode ~= "fan_in" and mode ~= "fan_out") then
    fail("%s: mode %s not supported, please use one of fan_in, fan_out", op, tostring(mode))
  end
  local fan_in, fan_out = init._calculate_fan_in_and_fan_out(t, op)
  return mode == "fan_in" and fan_in or fan_out
end

local function fill(t, fn)
  dl.no_grad(fn)
  return t
end

-- uniform_(t, a=0, b=1)
function init.uniform_(t, a, b)
  check(t, "uniform_")
  a, b = a or 0.0, b or 1.0
  return fill(t, function() t:uniform_(a, b) end)
end

-- normal_(t, mean=0, std=1)
function init.normal_(t, mean, std)
  check(t, "normal_")
  mean, std = mean or 0.0, std or 1.0
  return fill(t, function() t:normal_(mean, std) end)
end

function init.constant_(t, val)
  check(t, "constant_")
  util.check_number(val, "constant_", "val")
  return fill(t, function() t:fill_(val) end)
end

function init.zeros_(t)
  check(t, "zeros_")
  return fill(t, function() t:zero_() end)
end

function init.ones_(t)
  check(t, "ones_")
  return fill(t, function() t:fill_(1) end)
end

-- A number given where options are expected is the first option (a or gain).
local function opts_of(opts, op, keys, first)
  if type(opts) == "number" then return {[first] = opts} end
  return util.check_options(opts, op, keys)
end

-- Both xavier initialisers' std: gain * sqrt(2 / (fan_in + fan_out)), after
-- checking t and the options ({gain=1} or the gain as a number).
local function xavier_std(t, opts, op)
  check(t, op)
  opts = opts_of(opts, op, {"gain"}, "gain")
  local fan_in, fan_out = init._calculate_fan_in_and_fan_out(t, op)
  return (opts.gain or 1.0) * math.sqrt(2.0 / (fan_in + fan_out))
end

-- xavier_uniform_(t, {gain=1}): U(-b, b), b = gain * sqrt(6 / (fan_in + fan_out))
function init.xavier_uniform_(t, opts)
  local a = math.sqrt(3.0) * xavier_std(t, opts, "xavier_uniform_")
  if empty(t) then return t end
  return fill(t, function() t:uniform_(-a, a) end)
end

-- xavier_normal_(t, {gain=1}): N(0, gain^2 * 2 / (fan_in + fan_out))
function init.xavier_normal_(t, opts)
  local std = xavier_std(t, opts, "xavier_normal_")
  if empty(t) then return t end
  return fill(t, function() t:normal_(0.0, std) end)
end

local function kaiming_std(t, opts, op)
  opts = opts_of(opts, op, {"a", "mode", "nonlinearity"}, "a")
  local fan = correct_fan(t, opts.mode or "fan_in", op)
  local ok, gain = pcall(init.calculate_gain, opts.nonlinearity or "leaky_relu", opts.a or 0)
  if not ok then fail("%s: %s", op, (tostring(gain):gsub("^calculate_gain: ", ""))) end
  return gain / math.sqrt(fan)
end

-- kaiming_uniform_(t, {a=0, mode="fan_in", nonlinearity="leaky_relu"}):
-- U(-b, b), b = gain * sqrt(3 / fan)
function init.kaiming_uniform_(t, opts)
  check(t, "kaiming_uniform_")
  if empty(t) then return t end
  local bound = math.sqrt(3.0) * kaiming_std(t, opts, "kaiming_uniform_")
  return fill(t, function() t:uniform_(-bound, bound) end)
end

-- kaiming_normal_(t, {a=0, mode="fan_in", nonlinearity="leaky_relu"}):
-- N(0, gain^2 / fan)
function init.kaiming_normal_(t, opts)
  check(t, "kaiming_normal_")
  if empty(t) then return t end
  local std = kaiming_std(t, opts, "kaiming_normal_")
  return fill(t, function() t:normal_(0.0, std) end)
end

return init
