-- dl.nn recurrent layers: LSTM, GRU, LSTMCell, GRUCell (PyTorch's names,
-- parameter names and layouts, gate orders i,f,g,o and r,z,n).
--
--   local lstm = dl.nn.LSTM(10, 20, {num_layers=2, batch_first=true, bidirectional=true})
--   local out, state = lstm(x)          -- state = {h_n, c_n}
--   out, state = lstm(x, state)         -- continue from a state
--   local gru = dl.nn.GRU(10, 20)
--   local out, h_n = gru(packed, h0)    -- a PackedSequence in, one out
--   local h, c = dl.nn.LSTMCell(10, 20)(x, {h, c})
--
-- Inputs are (T, B, input_size) ((B, T, input_size) with batch_first), an
-- unbatched (T, input_size), or a PackedSequence (dl.nn.utils.rnn).  States
-- are (num_layers * num_directions, B, hidden_size) (without B for unbatched
-- input), nil meaning zeros.  Each layer and direction is one autograd node
-- (dl._F.rnn_layer, src/ops/rnn.c); dropout applies between layers in
-- training mode only.  Parameters: weight_ih_l<k> (G*H, in), weight_hh_l<k>
-- (G*H, H), bias_ih_l<k>, bias_hh_l<k> (G*H), with a _reverse twin for the
-- backward direction, all initialised U(-1/sqrt(H), 1/sqrt(H)) as PyTorch's.
-- proj_size (LSTM projections) is not supported and says so.
local dl = require "dl"
local util = require "dl.util"
local Module = require "dl.nn.module"
local F = require "dl.nn.functional"
local init = require "dl.nn.initializers"
local rnn_utils = require "dl.nn.rnn_utils"

local fail, pyrepr = util.fail, util.pyrepr
local Parameter = Module.Parameter

local L = {}

local factory = Module.factory_kwargs

-- every parameter U(-1/sqrt(H), 1/sqrt(H))
local function reset_uniform(self)
  local stdv = 1 / math.sqrt(self.hidden_size)
  for _, p in ipairs(self:parameters()) do init.uniform_(p, -stdv, stdv) end
end

-- A class of base whose constructor passes mode on: LSTM, GRU and the cells.
local function variant(base, name, mode)
  local cls = base:extend(name)
  function cls:__init(input_size, hidden_size, opts)
    base.__init(self, mode, input_size, hidden_size, opts)
  end
  return cls
end

-- --- LSTM, GRU -----------------------------------------------------------------

local RNNBase = Module:extend("RNNBase")
L.RNNBase = RNNBase

-- RNNBase(mode, input_size, hidden_size, opts): mode "LSTM" or "GRU" (either case)
function RNNBase:__init(mode, input_size, hidden_size, opts)
  local m = type(mode) == "string" and mode:lower() or nil
  if m ~= "lstm" and m ~= "gru" then
    fail("RNNBase: mode must be 'LSTM' or 'GRU', got %s", pyrepr(mode))
  end
  mode = m
  local name = mode == "lstm" and "LSTM" or "GRU"
  opts = util.check_options(opts, name, {"num_layers", "bias", "batch_first", "dropout",
    "bidirectional", "proj_size", "dtype", "device"})
  self.mode = mode
  self.input_size = util.check_int(input_size, name, "input_size", 1)
  self.hidden_size = util.check_int(hidden_size, name, "hidden_size", 1)
  self.num_layers = util.check_int(opts.num_layers or 1, name, "num_layers", 1)
  self.bias = util.opt_bool(opts.bias, true, name, "bias")
  self.batch_first = util.opt_bool(opts.batch_first, false, name, "batch_first")
  self.bidirectional = util.opt_bool(opts.bidirectional, false, name, "bidirectional")
  local p = opts.dropout or 0
  if type(p) ~= "number" or p < 0 or p > 1 then
    fail("%s: dropout should be a number in range [0, 1] representing the probability of an "
      .. "element being zeroed, got %s", name, pyrepr(p))
  end
  self.dropout = p
  self.proj_size = util.check_int(opts.proj_size or 0, name, "proj_size", 0)
  if self.proj_size ~= 0 then
    if mode ~= "lstm" then fail("%s: proj_size argument is only supported for LSTM, not GRU", name) end
    fail("LSTM: proj_size is not supported (projected LSTMs are not implemented); use proj_size=0")
  end
  local G = mode == "lstm" and 4 or 3
  local H, D = self.hidden_size, self.bidirectional and 2 or 1
  local f = factory(opts)
  for layer = 0, self.num_layers - 1 do
    local in_size = layer == 0 and self.input_size or H * D
    for d = 0, D - 1 do
      local sfx = "_l" .. layer .. (d == 1 and "_reverse" or "")
      self["weight_ih" .. sfx] = Parameter(dl.empty({G * H, in_size}, f))
      self["weight_hh" .. sfx] = Parameter(dl.empty({G * H, H}, f))
      if self.bias then
        self["bias_ih" .. sfx] = Parameter(dl.empty({G * H}, f))
        self["bias_hh" .. sfx] = Parameter(dl.empty({G * H}, f))
      end
    end
  end
  self:reset_parameters()
end

RNNBase.reset_parameters = reset_uniform

-- PyTorch compacts cuDNN's weight buffer here; nothing to do in dlua.
function RNNBase:flatten_parameters() end

-- The initial states (L*D, B, H) for the layers as given (nil: zeros),
-- checked, with the batch dim added for unbatched input and the sequences
-- put in sorted order for a packed one.
local function initial_states(self, hx, B, unbatched, sorted_indices)
  if hx == nil then return nil, nil end
  local name, lstm = self:_get_name(), self.mode == "lstm"
  local states
  if lstm then
    if type(hx) ~= "table" or dl.is_tensor(hx) or not dl.is_tensor(hx[1]) or not dl.is_tensor(hx[2]) then
      fail("LSTM: the state must be a table {h_0, c_0} of two tensors, got %s",
        dl.is_tensor(hx) and "a tensor" or type(hx))
    end
    states = {hx[1], hx[2]}
  else
    if not dl.is_tensor(hx) then fail("GRU: the state h_0 must be a tensor, got %s", type(hx)) end
    states = {hx}
  end
  local want = unbatched and 2 or 3
  for _, s in ipairs(states) do
    if s:dim() ~= want then
      local dims = {}
      for i, t in ipairs(states) do dims[i] = t:dim() .. "-D" end
      fail("%s: for %s input, %s should also be %d-D but got (%s) %s", name,
        unbatched and "unbatched 2-D" or "batched 3-D", lstm and "hx and cx" or "hx", want,
        table.concat(dims, ", "), #states > 1 and "tensors" or "tensor")
    end
  end
  local expect = {self.num_layers * (self.bidirectional and 2 or 1), B, self.hidden_size}
  for i, s in ipairs(states) do
    if unbatched then s = s:unsqueeze(2) end
    local ok = true
    for d = 1, 3 do ok = ok and s.shape[d] == expect[d] end
    if not ok then
      local what = lstm and string.format("hidden[%d]", i - 1) or "hidden"
      fail("%s: Expected %s size %s, got %s", name, what, pyrepr(expect), util.shape_str(s.shape))
    end
    if sorted_indices then s = s:index_select(2, sorted_indices) end
    states[i] = s
  end
  return states[1], states[2]
end

function RNNBase:forward(input, hx)
  local name, lstm = self:_get_name(), self.mode == "lstm"
  local packed = rnn_utils.is_packed(input)
  local x, batch_sizes, sorted_indices, unbatched
  if packed then
    x, batch_sizes, sorted_indices = input.data, input.batch_sizes, input.sorted_indices
    if x:dim() ~= 2 then fail("%s: packed input data must be 2-D, got %d-D", name, x:dim()) end
  else
    if not dl.is_tensor(input) then fail("%s: input must be a tensor or a PackedSequence, got %s", name, type(input)) end
    if input:dim() ~= 2 and input:dim() ~= 3 then
      fail("%s: Expected input to be 2-D or 3-D but received %d-D tensor", name, input:dim())
    end
    unbatched = input:dim() == 2
    x = input
    if unbatched then x = x:unsqueeze(2)
    elseif self.batch_first then x = x:transpose(1, 2) end
  end
  local n_in = x.shape[x:dim()]
  if n_in ~= self.input_size then
    fail("%s: input.size(-1) must be equal to input_size. Expected %d, got %d", name, self.input_size, n_in)
  end
  local B = packed and batch_sizes[1]:item() or x.shape[2]
  local h0, c0 = initial_states(self, hx, B, unbatched, sorted_indices)
  local D = self.bidirectional and 2 or 1
  local layer_in, hs, cs = x, {}, {}
  for layer = 0, self.num_layers - 1 do
    local outs = {}
    for d = 0, D - 1 do
      local k = layer * D + d + 1
      local sfx = "_l" .. layer .. (d == 1 and "_reverse" or "")
      outs[d + 1], hs[k], cs[k] = F.rnn_layer(self.mode, layer_in, batch_sizes, h0 and h0[k],
        c0 and c0[k], self["weight_ih" .. sfx], self["weight_hh" .. sfx], self["bias_ih" .. sfx],
        self["bias_hh" .. sfx], d == 1)
    end
    layer_in = D == 2 and dl.cat(outs, -1) or outs[1]
    if self.dropout > 0 and self.training and layer < self.num_layers - 1 then
      layer_in = F.dropout(layer_in, self.dropout, true)
    end
  end
  local h_n = dl.stack(hs, 1)
  local c_n = lstm and dl.stack(cs, 1) or nil
  local out
  if packed then
    local unsorted = input.unsorted_indices
    if unsorted then
      h_n = h_n:index_select(2, unsorted)
      if c_n then c_n = c_n:index_select(2, unsorted) end
    end
    out = rnn_utils.PackedSequence(layer_in, batch_sizes, sorted_indices, unsorted)
  elseif unbatched then
    out, h_n = layer_in:squeeze(2), h_n:squeeze(2)
    if c_n then c_n = c_n:squeeze(2) end
  else
    out = self.batch_first and layer_in:transpose(1, 2) or layer_in
  end
  if lstm then return out, {h_n, c_n} end
  return out, h_n
end

function RNNBase:extra_repr()
  local s = string.format("%d, %d", self.input_size, self.hidden_size)
  if self.num_layers ~= 1 then s = s .. ", num_layers=" .. self.num_layers end
  if not self.bias then s = s .. ", bias=False" end
  if self.batch_first then s = s .. ", batch_first=True" end
  if self.dropout ~= 0 then s = s .. ", dropout=" .. pyrepr(self.dropout) end
  if self.bidirectional then s = s .. ", bidirectional=True" end
  return s
end

-- LSTM(input_size, hidden_size, {num_layers=1, bias=true, batch_first=false,
-- dropout=0, bidirectional=false, proj_size=0, dtype=, device=})
L.LSTM = variant(RNNBase, "LSTM", "lstm")

-- GRU(input_size, hidden_size, {...}): LSTM's options but proj_size
L.GRU = variant(RNNBase, "GRU", "gru")

-- --- LSTMCell, GRUCell -----------------------------------------------------------
-- One step: the layer kernel over a sequence of length 1.

local RNNCellBase = Module:extend("RNNCellBase")

function RNNCellBase:__init(mode, input_size, hidden_size, opts)
  local name = mode == "lstm" and "LSTMCell" or "GRUCell"
  opts = util.check_options(opts, name, {"bias", "dtype", "device"})
  self.mode = mode
  self.input_size = util.check_int(input_size, name, "input_size", 1)
  self.hidden_size = util.check_int(hidden_size, name, "hidden_size", 1)
  self.bias = util.opt_bool(opts.bias, true, name, "bias")
  local GH, f = (mode == "lstm" and 4 or 3) * self.hidden_size, factory(opts)
  self.weight_ih = Parameter(dl.empty({GH, self.input_size}, f))
  self.weight_hh = Parameter(dl.empty({GH, self.hidden_size}, f))
  if self.bias then
    self.bias_ih = Parameter(dl.empty({GH}, f))
    self.bias_hh = Parameter(dl.empty({GH}, f))
  end
  self:reset_parameters()
end

RNNCellBase.reset_parameters = reset_uniform

-- A state tensor of the cell, checked ((B, H), or (H) unbatched).
local function cell_state(name, what, s, B, H, unbatched)
  if not dl.is_tensor(s) then fail("%s: %s must be a tensor, got %s", name, what, type(s)) end
  if unbatched then
    if s:dim() ~= 1 then fail("%s: for unbatched 1-D input, %s should also be 1-D, got %d-D", name, what, s:dim()) end
    s = s:unsqueeze(1)
  end
  if s:dim() ~= 2 or s.shape[1] ~= B or s.shape[2] ~= H then
    fail("%s: %s has shape %s, expected %s", name, what, util.shape_str(s.shape), pyrepr({B, H}))
  end
  return s
end

function RNNCellBase:forward(input, hx)
  local name, lstm = self:_get_name(), self.mode == "lstm"
  if not dl.is_tensor(input) then fail("%s: input must be a tensor, got %s", name, type(input)) end
  if input:dim() ~= 1 and input:dim() ~= 2 then
    fail("%s: Expected input to be 1-D or 2-D but received %d-D tensor", name, input:dim())
  end
  local unbatched = input:dim() == 1
  local x = unbatched and input:unsqueeze(1) or input
  if x.shape[2] ~= self.input_size then
    fail("%s: input has inconsistent input_size: got %d expected %d", name, x.shape[2], self.input_size)
  end
  local B, H = x.shape[1], self.hidden_size
  local h0, c0
  if hx ~= nil then
    if lstm then
      if type(hx) ~= "table" or dl.is_tensor(hx) then
        fail("LSTMCell: the state must be a table {h, c} of two tensors, got %s", dl.is_tensor(hx) and "a tensor" or type(hx))
      end
      h0, c0 = cell_state(name, "h", hx[1], B, H, unbatched), cell_state(name, "c", hx[2], B, H, unbatched)
    else
      h0 = cell_state(name, "hx", hx, B, H, unbatched)
    end
  end
  local _, h, c = F.rnn_layer(self.mode, x:unsqueeze(1), nil, h0, c0, self.weight_ih, self.weight_hh,
    self.bias_ih, self.bias_hh, false)
  if unbatched then
    h = h:squeeze(1)
    if c then c = c:squeeze(1) end
  end
  if lstm then return h, c end
  return h
end

function RNNCellBase:extra_repr()
  local s = string.format("%d, %d", self.input_size, self.hidden_size)
  if not self.bias then s = s .. ", bias=False" end
  return s
end

-- LSTMCell(input_size, hidden_size, {bias=true}): h, c = cell(x, {h, c})
L.LSTMCell = variant(RNNCellBase, "LSTMCell", "lstm")

-- GRUCell(input_size, hidden_size, {bias=true}): h = cell(x, h)
L.GRUCell = variant(RNNCellBase, "GRUCell", "gru")

return L
