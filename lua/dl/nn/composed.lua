-- dl.nn.composed: the functions of dl.nn.functional that are exact
-- compositions of dlua's C kernels (so they record autograd and run on
-- every device the kernels do), in PyTorch's names and semantics:
--
--   conv1d(x, w, b, {stride, padding, dilation, groups})      conv2d on (N, C, 1, L)
--   conv3d(x, w, b, {...})              a sum over the kernel's depth taps of conv2d
--   conv_transpose2d(x, w, b, {stride, padding, output_padding, groups, dilation})
--                                       conv2d's input gradient kernel (one autograd node)
--   conv_transpose1d(x, w, b, {...})    conv_transpose2d on (N, C, 1, L)
--   max_pool1d / avg_pool1d (x, kernel_size, {...})           the 2-D pools on (N, C, 1, L)
--   max_pool3d / avg_pool3d (x, kernel_size, {...})           separable: H, W then D
--   prelu(x, weight)                    max(0, x) + weight * min(0, x), per channel
--   pixel_shuffle(x, r), pixel_unshuffle(x, r)                reshapes and a permute
--   instance_norm(x, running_mean, running_var, weight, bias, use_input_stats, momentum, eps)
--                                       batch_norm over (1, N*C, *)
--   interpolate(x, {size=, scale_factor=, mode="nearest", align_corners=})
--                                       nearest, nearest-exact, linear, bilinear, bicubic,
--                                       trilinear: per dim, gathers of source rows and weights
--
-- Sizes are a number or a table of one per spatial dim, as PyTorch's.
-- Invariants: every function checks its arguments and names itself in
-- errors; results equal PyTorch's to float rounding (tests/lua/test_composed*.lua).
local dl = require "dl"
local util = require "dl.util"

local fail = util.fail
local M = {}

local function F() return dl._F end

local function check_tensor(x, op, what)
  if not dl.is_tensor(x) then fail("%s: %s must be a tensor, got %s", op, what, type(x)) end
  return x
end

-- v as a list of n integers >= min (a number is repeated)
local function ints(v, n, op, what, min, def)
  if v == nil then v = def end
  if math.type(v) == "integer" then
    local r = {}
    for i = 1, n do r[i] = v end
    v = r
  end
  if type(v) ~= "table" or #v ~= n then
    fail("%s: %s must be an integer or %d integers", op, what, n)
  end
  for i = 1, n do
    if math.type(v[i]) ~= "integer" or v[i] < min then
      fail("%s: %s must be integers >= %d, got %s", op, what, min, util.pyrepr(v))
    end
  end
  return {table.unpack(v, 1, n)}
end

local function conv_opts(opts, op, n, transposed)
  local keys = {"stride", "padding", "dilation", "groups"}
  if transposed then keys[#keys + 1] = "output_padding" end
  opts = util.check_options(opts, op, keys)
  local o = {stride = ints(opts.stride, n, op, "stride", 1, 1), padding = ints(opts.padding, n, op, "padding", 0, 0),
    dilation = ints(opts.dilation, n, op, "dilation", 1, 1), groups = opts.groups or 1}
  if transposed then o.output_padding = ints(opts.output_padding, n, op, "output_padding", 0, 0) end
  if math.type(o.groups) ~= "integer" or o.groups < 1 then fail("%s: groups must be a positive integer", op) end
  return o
end

-- Adds a leading batch dim to an unbatched input of rank `batched - 1`.
local function batched(x, rank, op)
  if x:dim() == rank - 1 then return x:unsqueeze(1), true end
  if x:dim() ~= rank then
    fail("%s: expected a %d-D or %d-D input, got %d-D", op, rank - 1, rank, x:dim())
  end
  return x, false
end

-- --- convolutions -------------------------------------------------------------------------

-- What every convolution checks first: x and w are tensors, the options
-- (n spatial dims; transposed: with output_padding), x of rank n + 2 or an
-- unbatched n + 1, w of rank n + 2 (wshape names its dims in the error).
-- Returns the options, x batched, and whether it was unbatched.
local function conv_args(op, x, w, opts, n, wshape, transposed)
  check_tensor(x, op, "input")
  check_tensor(w, op, "weight")
  local o = conv_opts(opts, op, n, transposed)
  local xb, unb = batched(x, n + 2, op)
  if w:dim() ~= n + 2 then fail("%s: weight must be %d-D (%s), got %d-D", op, n + 2, wshape, w:dim()) end
  return o, xb, unb
end

function M.conv1d(x, w, b, opts)
  local o, xb, unb = conv_args("conv1d", x, w, opts, 1, "O, C/groups, K")
  local y = F().conv2d(xb:unsqueeze(3), w:unsqueeze(3), b, {stride = {1, o.stride[1]}, padding = {0, o.padding[1]},
    dilation = {1, o.dilation[1]}, groups = o.groups}):squeeze(3)
  return unb and y:squeeze(1) or y
end

function M.conv3d(x, w, b, opts)
  local o, xb, unb = conv_args("conv3d", x, w, opts, 3, "O, C/groups, kD, kH, kW")
  if xb.shape[2] ~= w.shape[2] * o.groups then
    fail("conv3d: input has %d channels, weight expects %d", xb.shape[2], w.shape[2] * o.groups)
  end
  local s, p, d = o.stride, o.padding, o.dilation
  if p[1] > 0 then xb = F().pad(xb, {0, 0, 0, 0, p[1], p[1]}) end
  local N, C, D, H, W = table.unpack(xb.shape)
  local O, KD = w.shape[1], w.shape[3]
  local OD = (D - ((KD - 1) * d[1] + 1)) // s[1] + 1
  if OD <= 0 then fail("conv3d: the input's depth (%d, padded) is smaller than the kernel's extent", D) end
  -- depth tap kd reads input depths kd*d + od*s for every output depth od
  local y
  for kd = 0, KD - 1 do
    local idx = {}
    for od = 0, OD - 1 do idx[od + 1] = kd * d[1] + od * s[1] + 1 end
    local xs = xb:index_select(3, dl.tensor(idx, {dtype = dl.int64, device = xb.device}))
    xs = xs:permute(1, 3, 2, 4, 5):reshape(N * OD, C, H, W)
    local part = F().conv2d(xs, w:select(3, kd + 1), nil, {stride = {s[2], s[3]}, padding = {p[2], p[3]},
      dilation = {d[2], d[3]}, groups = o.groups})
    y = y and y + part or part
  end
  y = y:reshape(N, OD, O, y.shape[3], y.shape[4]):permute(1, 3, 2, 4, 5)
  if b ~= nil then y = y + check_tensor(b, "conv3d", "bias"):reshape(O, 1, 1, 1) end
  y = y:contiguous()
  return unb and y:squeeze(1) or y
end

local ConvTranspose -- the autograd Function, made on first use
local function conv_transpose_fn()
  if ConvTranspose then return ConvTranspose end
  local nnk = dl._nn
  ConvTranspose = require("dl.autograd").Function{
    name = "ConvTranspose2DBackward",
    forward = function(ctx, x, w, o)
      ctx.o = o
      ctx:save_for_backward(x, w)
      local out = dl.empty(o.out_shape, {dtype = x.dtype, device = x.device})
      return (nnk.conv2d_backward(x, out, w, {stride = o.stride, padding = o.padding, dilation = o.dilation,
        groups = o.groups, need = {true, false, false}}))
    end,
    backward = function(ctx, g)
      local x, w = ctx.saved_tensors[1], ctx.saved_tensors[2]
      local o = ctx.o
      local gx, gw
      if ctx.needs_input_grad[1] then
        gx = nnk.conv2d_forward(g, w, nil, {stride = o.stride, padding = o.padding, dilation = o.dilation,
          groups = o.groups})
      end
      if ctx.needs_input_grad[2] then
        local _
        _, gw = nnk.conv2d_backward(x, g, w, {stride = o.stride, padding = o.padding, dilation = o.dilation,
          groups = o.groups, need = {false, true, false}})
      end
      return gx, gw
    end,
  }
  return ConvTranspose
end

-- x (N, Cin, H, W) or (Cin, H, W); w (Cin, Cout/groups, kH, kW).  conv2d's
-- input gradient is the transposed convolution, so its kernels (oneDNN on
-- the CPU, cuDNN on CUDA) run it; its backward is conv2d (for x) and
-- conv2d's weight gradient (for w), one autograd node.
function M.conv_transpose2d(x, w, b, opts)
  local o, xb, unb = conv_args("conv_transpose2d", x, w, opts, 2, "Cin, Cout/groups, kH, kW", true)
  local N, C, H, W = table.unpack(xb.shape)
  if w.shape[1] ~= C then fail("conv_transpose2d: input has %d channels, weight expects %d", C, w.shape[1]) end
  if C % o.groups ~= 0 then
    fail("conv_transpose2d: %d input channels are not divisible by groups=%d", C, o.groups)
  end
  local out = {N, w.shape[2] * o.groups}
  for i = 1, 2 do
    if o.output_padding[i] >= o.stride[i] then
      fail("conv_transpose2d: output_padding (%d) must be smaller than stride (%d)", o.output_padding[i], o.stride[i])
    end
    out[i + 2] = (({H, W})[i] - 1) * o.stride[i] - 2 * o.padding[i] + o.dilation[i] * (w.shape[i + 2] - 1) +
      o.output_padding[i] + 1
    if out[i + 2] <= 0 then fail("conv_transpose2d: the output would be empty along spatial dim %d", i) end
  end
  local y = conv_transpose_fn()(xb, w, {stride = o.stride, padding = o.padding, dilation = o.dilation,
    groups = o.groups, out_shape = out})
  if b ~= nil then y = y + check_tensor(b, "conv_transpose2d", "bias"):reshape(1, -1, 1, 1) end
  return unb and y:squeeze(1) or y
end

function M.conv_transpose1d(x, w, b, opts)
  local o, xb, unb = conv_args("conv_transpose1d", x, w, opts, 1, "Cin, Cout/groups, K", true)
  local y = M.conv_transpose2d(xb:unsqueeze(3), w:unsqueeze(3), b, {stride = {1, o.stride[1]},
    padding = {0, o.padding[1]}, dilation = {1, o.dilation[1]}, groups = o.groups,
    output_padding = {0, o.output_padding[1]}}):squeeze(3)
  return unb and y:squeeze(1) or y
end

-- --- pooling ------------------------------------------------------------------------------

-- What both pooling paths check first: the input, the options, and
-- kernel_size (n ints); gives the options and the kernel size.
local function pool_args(x, k, opts, op, n, avg)
  check_tensor(x, op, "input")
  local keys = avg and {"stride", "padding", "ceil_mode", "count_include_pad"} or
    {"stride", "padding", "dilation", "ceil_mode"}
  return util.check_options(opts, op, keys), ints(k, n, op, "kernel_size", 1)
end

local function pool1d(kind)
  local op = kind .. "_pool1d"
  return function(x, k, opts)
    local kk
    opts, kk = pool_args(x, k, opts, op, 1, kind == "avg")
    local o = {stride = {1, ints(opts.stride, 1, op, "stride", 1, kk[1])[1]},
      padding = {0, ints(opts.padding, 1, op, "padding", 0, 0)[1]}, ceil_mode = opts.ceil_mode}
    if kind == "max" then o.dilation = {1, ints(opts.dilation, 1, op, "dilation", 1, 1)[1]}
    else o.count_include_pad = opts.count_include_pad end
    local xb, unb = batched(x, 3, op)
    local y = F()[kind .. "_pool2d"](xb:unsqueeze(3), {1, kk[1]}, o):squeeze(3)
    return unb and y:squeeze(1) or y
  end
end
M.max_pool1d = pool1d("max")
M.avg_pool1d = pool1d("avg")

-- A box pool is separable: pool H, W within every depth slice, then D.
local function pool3d(kind)
  local op = kind .. "_pool3d"
  return function(x, k, opts)
    local kk
    opts, kk = pool_args(x, k, opts, op, 3, kind == "avg")
    local s = ints(opts.stride, 3, op, "stride", 1, kk)
    local p = ints(opts.padding, 3, op, "padding", 0, 0)
    local d = kind == "max" and ints(opts.dilation, 3, op, "dilation", 1, 1) or {1, 1, 1}
    local xb, unb = batched(x, 5, op)
    local N, C, D, H, W = table.unpack(xb.shape)
    local function o(i, j)
      local r = {stride = {s[i], s[j]}, padding = {p[i], p[j]}, ceil_mode = opts.ceil_mode}
      if kind == "max" then r.dilation = {d[i], d[j]} else r.count_include_pad = opts.count_include_pad end
      return r
    end
    local pool = F()[kind .. "_pool2d"]
    local y = pool(xb:reshape(N, C * D, H, W), {kk[2], kk[3]}, o(2, 3))
    local OH, OW = y.shape[3], y.shape[4]
    local oz = o(1, 1)
    oz.stride[2], oz.padding[2] = 1, 0
    if oz.dilation then oz.dilation[2] = 1 end
    y = pool(y:reshape(N, C, D, OH * OW), {kk[1], 1}, oz)
    y = y:reshape(N, C, y.shape[3], OH, OW)
    return unb and y:squeeze(1) or y
  end
end
M.max_pool3d = pool3d("max")
M.avg_pool3d = pool3d("avg")

-- --- activations, shuffles, normalization -------------------------------------------------

-- prelu(x, weight): weight has 1 or C (= x.shape[2]) entries
function M.prelu(x, w)
  check_tensor(x, "prelu", "input")
  check_tensor(w, "prelu", "weight")
  local n = w:numel()
  if n ~= 1 then
    if x:dim() < 2 or x.shape[2] ~= n then
      fail("prelu: weight has %d entries, the input's channel dim (2) has %s", n,
        x:dim() >= 2 and tostring(x.shape[2]) or "none")
    end
    local s = {n}
    for _ = 3, x:dim() do s[#s + 1] = 1 end
    w = w:reshape(s)
  else
    w = w:reshape({})
  end
  return x:clamp_min(0) + x:clamp_max(0) * w
end

-- pixel_shuffle / pixel_unshuffle: x (*, C, H, W) is taken as (B, C, H, W),
-- B the product of the leading dims; rearrange(B, C, H, W) checks the sizes
-- and gives the (B, C', H', W') result, returned with the leading dims back.
local function pixel_rearrange(x, r, op, factor, rearrange)
  check_tensor(x, op, "input")
  if math.type(r) ~= "integer" or r < 1 then fail("%s: %s must be a positive integer", op, factor) end
  if x:dim() < 3 then fail("%s: expected at least 3 dims (*, C, H, W), got %d", op, x:dim()) end
  local s = x.shape
  local n = #s
  local out, B = {}, 1
  for i = 1, n - 3 do
    out[i] = s[i]
    B = B * s[i]
  end
  local y = rearrange(B, s[n - 2], s[n - 1], s[n])
  for d = 2, 4 do out[#out + 1] = y.shape[d] end
  return y:reshape(out)
end

function M.pixel_shuffle(x, r)
  return pixel_rearrange(x, r, "pixel_shuffle", "upscale_factor", function(B, C, H, W)
    if C % (r * r) ~= 0 then fail("pixel_shuffle: %d channels are not divisible by upscale_factor^2 = %d", C, r * r) end
    local c = C // (r * r)
    return x:reshape(B, c, r, r, H, W):permute(1, 2, 5, 3, 6, 4):reshape(B, c, H * r, W * r)
  end)
end

function M.pixel_unshuffle(x, r)
  return pixel_rearrange(x, r, "pixel_unshuffle", "downscale_factor", function(B, C, H, W)
    if H % r ~= 0 or W % r ~= 0 then
      fail("pixel_unshuffle: H=%d and W=%d must be divisible by downscale_factor=%d", H, W, r)
    end
    return x:reshape(B, C, H // r, r, W // r, r):permute(1, 2, 4, 6, 3, 5):reshape(B, C * r * r, H // r, W // r)
  end)
end

-- instance_norm(x, running_mean, running_var, weight, bias,
-- use_input_stats=true, momentum=0.1, eps=1e-5): x (N, C, *)
function M.instance_norm(x, rm, rv, w, b, use_input_stats, momentum, eps)
  check_tensor(x, "instance_norm", "input")
  if x:dim() < 3 then fail("instance_norm: expected an input of at least 3 dims (N, C, *), got %d", x:dim()) end
  if use_input_stats == nil then use_input_stats = true end
  momentum, eps = momentum or 0.1, eps or 1e-5
  local s = {}
  for i, v in ipairs(x.shape) do s[i] = v end
  local N, C = s[1], s[2]
  local y
  if use_input_stats then
    -- batch norm of (1, N*C, *) is instance norm; its statistics, started
    -- at zero, come back as momentum * (mean, unbiased var) of each instance
    local m, v
    if rm ~= nil then
      m = dl.zeros({N * C}, {dtype = rm.dtype, device = rm.device})
      v = dl.zeros({N * C}, {dtype = rm.dtype, device = rm.device})
    end
    y = F().batch_norm(x:reshape(1, N * C, -1), m, v, nil, nil, true, momentum, eps):reshape(s)
    if rm ~= nil then
      dl.no_grad(function()
        rm:mul_(1 - momentum):add_(m:reshape(N, C):mean(1))
        if rv ~= nil then rv:mul_(1 - momentum):add_(v:reshape(N, C):mean(1)) end
      end)
    end
  else
    if rm == nil or rv == nil then fail("instance_norm: use_input_stats=false needs running_mean and running_var") end
    local shape = {1, C}
    for _ = 3, #s do shape[#shape + 1] = 1 end
    y = (x - rm:reshape(shape)) / (rv:reshape(shape) + eps):sqrt()
  end
  if w ~= nil or b ~= nil then
    local shape = {1, C}
    for _ = 3, #s do shape[#shape + 1] = 1 end
    if w ~= nil then y = y * w:reshape(shape) end
    if b ~= nil then y = y + b:reshape(shape) end
  end
  return y
end

-- --- interpolation ---------------------------------------------------------------------------

-- Resamples dim d of x to #taps positions: output position o is the sum
-- over taps[o] = {{i (0-based source index), weight}, ...}; an index of -1
-- contributes `fill` instead (extrapolation).  Every tap is a gather along
-- d (index_select) and a multiply by a weight column: autograd flows through.
function M._resample_axis(x, d, taps, fill)
  local out = #taps
  local ntap = 0
  for o = 1, out do ntap = math.max(ntap, #taps[o]) end
  local wshape = {}
  for i = 1, x:dim() do wshape[i] = 1 end
  wshape[d] = out
  local y
  local extra = false
  for j = 1, ntap do
    local idx, wts, ones = {}, {}, true
    for o = 1, out do
      local t = taps[o][j]
      if t and t[1] >= 0 then
        idx[o], wts[o] = t[1] + 1, t[2]
      else
        idx[o], wts[o] = 1, 0
        if t then extra = true end
      end
      if wts[o] ~= 1 then ones = false end
    end
    local g = x:index_select(d, dl.tensor(idx, {dtype = dl.int64, device = x.device}))
    local term = ones and g or g * dl.tensor(wts, {dtype = x.dtype, device = x.device}):reshape(wshape)
    y = y and y + term or term
  end
  if extra then
    local m = {}
    for o = 1, out do m[o] = (taps[o][1] and taps[o][1][1] < 0) and fill or 0 end
    y = y + dl.tensor(m, {dtype = x.dtype, device = x.device}):reshape(wshape)
  end
  return y
end

-- Keys' cubic convolution weights of the 4 taps around a point at
-- fraction t past a sample (a = -0.75 in PyTorch, ONNX's cubic_coeff_a).
local function cubic(t, a)
  local function w(s)
    s = math.abs(s)
    if s <= 1 then return ((a + 2) * s - (a + 3)) * s * s + 1 end
    if s < 2 then return ((a * s - 5 * a) * s + 8 * a) * s - 4 * a end
    return 0
  end
  return {w(1 + t), w(t), w(1 - t), w(2 - t)}
end
M._cubic = cubic

-- PyTorch's source positions and taps for one dim of size n -> out
local function torch_taps(mode, n, out, scale, align)
  local taps = {}
  local clamp = function(i) return math.max(0, math.min(n - 1, i)) end
  for o = 0, out - 1 do
    local t
    if mode == "nearest" then
      t = {{math.min(math.floor(o * scale), n - 1), 1}}
    elseif mode == "nearest-exact" then
      t = {{math.min(math.floor((o + 0.5) * scale), n - 1), 1}}
    else
      local src
      if align then src = out > 1 and o * (n - 1) / (out - 1) or 0
      else src = (o + 0.5) * scale - 0.5 end
      if mode == "cubic" then
        local i0 = math.floor(src)
        local ws = cubic(src - i0, -0.75)
        t = {}
        for j = 1, 4 do t[j] = {clamp(i0 - 2 + j), ws[j]} end
      else
        if not align and src < 0 then src = 0 end
        local i0 = math.min(math.floor(src), n - 1)
        local i1 = math.min(i0 + 1, n - 1)
        local l = src - i0
        t = {{i0, 1 - l}, {i1, l}}
      end
    end
    taps[o + 1] = t
  end
  return taps
end

local MODES = {nearest = 0, ["nearest-exact"] = 0, linear = 1, bilinear = 2, bicubic = 2, trilinear = 3}

function M.interpolate(x, opts)
  check_tensor(x, "interpolate", "input")
  opts = util.check_options(opts, "interpolate", {"size", "scale_factor", "mode", "align_corners",
    "recompute_scale_factor"})
  local mode = opts.mode or "nearest"
  if MODES[mode] == nil then
    fail("interpolate: mode must be one of nearest, nearest-exact, linear, bilinear, bicubic, trilinear; got '%s'",
      tostring(mode))
  end
  local nsp = x:dim() - 2
  if nsp < 1 or nsp > 3 then fail("interpolate: expected a 3-D, 4-D or 5-D input (N, C, ...), got %d-D", x:dim()) end
  if MODES[mode] > 0 and MODES[mode] ~= nsp then
    fail("interpolate: mode '%s' expects a %d-D input, got %d-D", mode, MODES[mode] + 2, x:dim())
  end
  local align = opts.align_corners
  if align ~= nil and MODES[mode] == 0 then
    fail("interpolate: align_corners is only for the linear, bilinear, bicubic and trilinear modes")
  end
  if (opts.size == nil) == (opts.scale_factor == nil) then
    fail("interpolate: exactly one of size and scale_factor must be given")
  end
  local sizes, scales = {}, {}
  for i = 1, nsp do
    local n = x.shape[i + 2]
    if opts.size ~= nil then
      local v = type(opts.size) == "table" and opts.size[i] or opts.size
      if math.type(v) ~= "integer" or v < 1 then fail("interpolate: size must be positive integers") end
      sizes[i], scales[i] = v, n / v
    else
      local f = type(opts.scale_factor) == "table" and opts.scale_factor[i] or opts.scale_factor
      if type(f) ~= "number" or f <= 0 then fail("interpolate: scale_factor must be positive numbers") end
      sizes[i] = math.floor(n * f)
      if sizes[i] < 1 then fail("interpolate: the output would be empty") end
      scales[i] = opts.recompute_scale_factor and n / sizes[i] or 1 / f
    end
  end
  local m = mode == "bicubic" and "cubic" or ((mode == "nearest" or mode == "nearest-exact") and mode or "linear")
  local y = x
  for i = 1, nsp do
    local n = x.shape[i + 2]
    if sizes[i] ~= n or scales[i] ~= 1 or m == "cubic" then
      y = M._resample_axis(y, i + 2, torch_taps(m, n, sizes[i], scales[i], align))
    end
  end
  return y
end

return M
