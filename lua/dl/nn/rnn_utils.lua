-- dl.nn.utils.rnn: variable-length batches for the recurrent layers,
-- PyTorch's torch.nn.utils.rnn.
--
--   local packed = rnn.pack_padded_sequence(x, lengths, {batch_first=, enforce_sorted=true})
--   local out, h = gru(packed)                       -- a PackedSequence in, one out
--   local padded, lens = rnn.pad_packed_sequence(out, {batch_first=, padding_value=, total_length=})
--   rnn.pad_sequence({a, b, c}, {batch_first=, padding_value=})
--   rnn.pack_sequence({a, b, c}, {enforce_sorted=true})
--
-- A PackedSequence holds data (the rows of every time step, the sequences
-- active at step t being its batch_sizes[t] rows, longest first), batch_sizes
-- (an int64 CPU tensor), and for batches packed with enforce_sorted=false the
-- permutations sorted_indices (sequence order -> given order) and
-- unsorted_indices (its inverse).  Indices are 1-based, as everywhere in Lua.
--
-- Invariants: packing and unpacking are one index_select each (plus a
-- padding row for unpacking), so gradients flow through both; lengths are
-- checked (positive, at most the padded length, nonincreasing when
-- enforce_sorted) before any tensor is made; ties in lengths keep their
-- given order.
local dl = require "dl"
local util = require "dl.util"

local fail = util.fail

local R = {}

-- --- PackedSequence ----------------------------------------------------------

local PackedSequence = {}
PackedSequence.__index = PackedSequence
PackedSequence.__name = "PackedSequence"
R.PackedSequence = setmetatable(PackedSequence, {
  -- PackedSequence(data, batch_sizes, sorted_indices, unsorted_indices):
  -- unsorted_indices defaults to the inverse of sorted_indices
  __call = function(_, data, batch_sizes, sorted_indices, unsorted_indices)
    if not dl.is_tensor(data) then fail("PackedSequence: data must be a tensor, got %s", type(data)) end
    if not dl.is_tensor(batch_sizes) then
      fail("PackedSequence: batch_sizes must be a tensor, got %s", type(batch_sizes))
    end
    if sorted_indices ~= nil and unsorted_indices == nil then
      unsorted_indices = dl.empty_like(sorted_indices)
      unsorted_indices:scatter_(1, sorted_indices, dl.arange(1, sorted_indices:numel() + 1):to(
        sorted_indices.dtype):to(sorted_indices.device))
    end
    return setmetatable({data = data, batch_sizes = batch_sizes, sorted_indices = sorted_indices,
      unsorted_indices = unsorted_indices}, PackedSequence)
  end,
})

function R.is_packed(v) return getmetatable(v) == PackedSequence end

function PackedSequence:__tostring()
  local function s(v) return v == nil and "None" or tostring(v) end
  return string.format("PackedSequence(data=%s, batch_sizes=%s, sorted_indices=%s, unsorted_indices=%s)",
    s(self.data), s(self.batch_sizes), s(self.sorted_indices), s(self.unsorted_indices))
end

-- A PackedSequence whose data (and indices) went through data:to(...);
-- batch_sizes stays on the CPU, as PyTorch's.
function PackedSequence:to(...)
  local data = self.data:to(...)
  if data == self.data then return self end
  local dev = data.device
  local function move(t) return t and t:to(dev) end
  return R.PackedSequence(data, self.batch_sizes, move(self.sorted_indices), move(self.unsorted_indices))
end
function PackedSequence:cuda() return self:to("cuda") end
function PackedSequence:cpu() return self:to("cpu") end
function PackedSequence:is_cuda() return self.data.device.type == "cuda" end

-- --- helpers -----------------------------------------------------------------

local function int64(list, device)
  if #list == 0 then return dl.empty({0}, {dtype = dl.int64, device = device}) end
  return dl.tensor(list, {dtype = dl.int64, device = device})
end

-- lengths (a table of integers or a 1-D tensor) as a Lua array.
local function lengths_list(lengths, op)
  if dl.is_tensor(lengths) then
    if lengths:dim() ~= 1 then fail("%s: lengths must be 1-D, got %d-D", op, lengths:dim()) end
    local l = lengths:cpu():to(dl.int64):tolist()
    return l
  end
  if type(lengths) ~= "table" then
    fail("%s: lengths must be a table of integers or a tensor, got %s", op, type(lengths))
  end
  local l = {}
  for i, v in ipairs(lengths) do l[i] = util.check_int(v, op, "lengths[" .. i .. "]") end
  return l
end

-- The batch sizes of sorted (nonincreasing) lengths: count of lengths >= t.
local function batch_sizes_of(sorted)
  local bs, b = {}, #sorted
  for t = 1, sorted[1] or 0 do
    while b > 0 and sorted[b] < t do b = b - 1 end
    bs[t] = b
  end
  return bs
end

-- The shape of x with the first `drop` dims replaced by the sizes in head.
local function with_head(x, drop, head)
  local s = {}
  for i, v in ipairs(head) do s[i] = v end
  for d = drop + 1, x:dim() do s[#s + 1] = x.shape[d] end
  return s
end

-- --- packing -----------------------------------------------------------------

-- pack_padded_sequence(input, lengths, {batch_first=false, enforce_sorted=true})
-- input (T, B, *) or, batch_first, (B, T, *); lengths of the B sequences.
function R.pack_padded_sequence(input, lengths, opts)
  local op = "pack_padded_sequence"
  opts = util.check_options(opts, op, {"batch_first", "enforce_sorted"})
  local batch_first = util.opt_bool(opts.batch_first, false, op, "batch_first")
  local enforce_sorted = util.opt_bool(opts.enforce_sorted, true, op, "enforce_sorted")
  if not dl.is_tensor(input) then fail("%s: input must be a tensor, got %s", op, type(input)) end
  if input:dim() < 2 then fail("%s: input must have at least 2 dimensions, got %d", op, input:dim()) end
  local lens = lengths_list(lengths, op)
  local T, B = input.shape[1], input.shape[2]
  if batch_first then T, B = B, T end
  if #lens ~= B then
    fail("%s: expected len(lengths) to be equal to batch_size, but got %d (batch_size=%d)", op, #lens, B)
  end
  for i, l in ipairs(lens) do
    if l <= 0 then
      fail("%s: length of all samples has to be greater than 0, but lengths[%d] is %d", op, i, l)
    end
    if l > T then
      fail("%s: lengths[%d] is %d, longer than the padded sequence length %d", op, i, l, T)
    end
  end
  local order = {}
  for i = 1, B do order[i] = i end
  if enforce_sorted then
    for i = 2, B do
      if lens[i] > lens[i - 1] then
        fail("%s: `lengths` array must be sorted in decreasing order when `enforce_sorted` is true "
          .. "(lengths[%d] = %d > lengths[%d] = %d); pass {enforce_sorted=false} to sidestep this "
          .. "requirement", op, i, lens[i], i - 1, lens[i - 1])
      end
    end
  else
    table.sort(order, function(a, b)
      if lens[a] ~= lens[b] then return lens[a] > lens[b] end
      return a < b
    end)
  end
  local sorted = {}
  for j, b in ipairs(order) do sorted[j] = lens[b] end
  local bs = batch_sizes_of(sorted)
  -- packed row (t, j) reads sequence order[j] at step t of input viewed as rows
  local idx = {}
  for t, n in ipairs(bs) do
    for j = 1, n do
      local b = order[j]
      idx[#idx + 1] = batch_first and (b - 1) * T + t or (t - 1) * B + b
    end
  end
  local rows = input:reshape(with_head(input, 2, {T * B}))
  local data = rows:index_select(1, int64(idx, input.device))
  local sorted_indices = nil
  if not enforce_sorted then sorted_indices = int64(order, input.device) end
  return R.PackedSequence(data, int64(bs), sorted_indices)
end

-- pad_sequence(sequences, {batch_first=false, padding_value=0}): the tensors
-- (L_i, *) stacked into (T, B, *) (batch_first: (B, T, *)), T = max L_i,
-- padded with padding_value.
function R.pad_sequence(sequences, opts)
  local op = "pad_sequence"
  opts = util.check_options(opts, op, {"batch_first", "padding_value"})
  local batch_first = util.opt_bool(opts.batch_first, false, op, "batch_first")
  local value = opts.padding_value or 0
  util.check_number(value, op, "padding_value")
  if type(sequences) ~= "table" or dl.is_tensor(sequences) or #sequences == 0 then
    fail("%s: sequences must be a non-empty table of tensors", op)
  end
  local first = sequences[1]
  local offs, T, N = {}, 0, 0
  for i, s in ipairs(sequences) do
    if not dl.is_tensor(s) then fail("%s: sequences[%d] is a %s, not a tensor", op, i, type(s)) end
    if s:dim() < 1 or s:dim() ~= first:dim() then
      fail("%s: sequences[%d] has %d dimensions, sequences[1] %d", op, i, s:dim(), first:dim())
    end
    for d = 2, s:dim() do
      if s.shape[d] ~= first.shape[d] then
        fail("%s: sequences[%d] has shape %s, not matching sequences[1]'s %s beyond the first dimension",
          op, i, util.shape_str(s.shape), util.shape_str(first.shape))
      end
    end
    offs[i] = N
    N = N + s.shape[1]
    if s.shape[1] > T then T = s.shape[1] end
  end
  local B = #sequences
  local pad = dl.full(with_head(first, 1, {1}), value, {dtype = first.dtype, device = first.device})
  local parts = {}
  for i, s in ipairs(sequences) do parts[i] = s end
  parts[B + 1] = pad
  local rows = dl.cat(parts, 1) -- (N + 1, *): every sequence's rows, then the padding row
  local idx = {}
  for k = 1, T * B do
    local t, b
    if batch_first then b, t = (k - 1) // T + 1, (k - 1) % T + 1
    else t, b = (k - 1) // B + 1, (k - 1) % B + 1 end
    idx[k] = t <= sequences[b].shape[1] and offs[b] + t or N + 1
  end
  local out = rows:index_select(1, int64(idx, first.device))
  return out:view(with_head(first, 1, batch_first and {B, T} or {T, B}))
end

-- pack_sequence(sequences, {enforce_sorted=true}): pad_sequence, then
-- pack_padded_sequence with the sequences' lengths.
function R.pack_sequence(sequences, opts)
  local op = "pack_sequence"
  opts = util.check_options(opts, op, {"enforce_sorted"})
  local enforce_sorted = util.opt_bool(opts.enforce_sorted, true, op, "enforce_sorted")
  local padded = R.pad_sequence(sequences)
  local lens = {}
  for i, s in ipairs(sequences) do lens[i] = s.shape[1] end
  return R.pack_padded_sequence(padded, lens, {enforce_sorted = enforce_sorted})
end

-- pad_packed_sequence(sequence, {batch_first=false, padding_value=0, total_length=})
-- -> padded (T, B, *) (batch_first: (B, T, *)), lengths (int64, in the
-- original order).  T is total_length when given (at least the longest).
function R.pad_packed_sequence(sequence, opts)
  local op = "pad_packed_sequence"
  opts = util.check_options(opts, op, {"batch_first", "padding_value", "total_length"})
  local batch_first = util.opt_bool(opts.batch_first, false, op, "batch_first")
  local value = opts.padding_value or 0
  util.check_number(value, op, "padding_value")
  if not R.is_packed(sequence) then fail("%s: a PackedSequence is required, got %s", op, type(sequence)) end
  local data = sequence.data
  local bs = sequence.batch_sizes:tolist()
  local maxT, B = #bs, bs[1] or 0
  local T = maxT
  if opts.total_length ~= nil then
    T = util.check_int(opts.total_length, op, "total_length")
    if T < maxT then
      fail("%s: expected total_length to be at least the length of the longest sequence in input, "
        .. "but got total_length=%d and max sequence length being %d", op, T, maxT)
    end
  end
  -- the sorted position of each sequence, and its length
  local pos, len = {}, {}
  local unsorted = sequence.unsorted_indices and sequence.unsorted_indices:cpu():tolist()
  for b = 1, B do pos[b] = unsorted and unsorted[b] or b end
  local off, starts = 0, {}
  for t = 1, maxT do
    starts[t] = off
    off = off + bs[t]
  end
  for j = 1, B do
    local l = 0
    while l < maxT and bs[l + 1] >= j do l = l + 1 end
    len[j] = l
  end
  local N = data.shape[1]
  local pad = dl.full(with_head(data, 1, {1}), value, {dtype = data.dtype, device = data.device})
  local rows = dl.cat({data, pad}, 1)
  local idx, lengths = {}, {}
  for k = 1, T * B do
    local t, b
    if batch_first then b, t = (k - 1) // T + 1, (k - 1) % T + 1
    else t, b = (k - 1) // B + 1, (k - 1) % B + 1 end
    local j = pos[b]
    idx[k] = t <= len[j] and starts[t] + j or N + 1
  end
  for b = 1, B do lengths[b] = len[pos[b]] end
  local out = rows:index_select(1, int64(idx, data.device))
  return out:view(with_head(data, 1, batch_first and {B, T} or {T, B})), int64(lengths)
end

return R
