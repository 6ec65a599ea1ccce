-- dl.train.checkpoint: training checkpoints and weights files.
--
--   checkpoint.save(path, {model =, optimizer =, meta = {...}, tensors = {...}})
--   local ck = checkpoint.load(path)   -- {model =, optimizer =, meta =, tensors =, rng_state =}
--   local sd, meta = checkpoint.read_weights(path)  -- a plain state dict or a checkpoint's model
--   checkpoint.load_weights(model, sd, {classifier = "fc", path =, arch =}) -> replaced_head
--
-- File layout (one safetensors file, written by dl.save: to a temporary name
-- and renamed, so an interrupted write never leaves a broken file):
--   model.<name>                  the model's state dict
--   optimizer.state.<i>.<key>     optimizer state tensors (parameters numbered
--                                 1, 2, ... as Optimizer:state_dict does)
--   rng_state                     dl.get_rng_state() at save time
--   <extra>                       caller tensors (the loss history ...)
-- and metadata (strings): format = "dlua-train-checkpoint-1",
-- train = JSON of meta (epoch, step, loader position, options, classes...),
-- optimizer = JSON {name, param_groups, scalars} (scalars: non-tensor state).
--
-- Invariants: save never changes the model or optimizer and writes CPU
-- copies of tensors on other devices (a checkpoint written on a GPU loads on
-- the CPU and the other way round); load returns what save was given
-- (tensors on the CPU, JSON values back as Lua values);
-- errors are one line naming the file.
local dl = require "dl"
local json = require "dl.train.json"

local C = {}
C.FORMAT = "dlua-train-checkpoint-1"

local function fail(fmt, ...) error(string.format(fmt, ...), 0) end

local function cpu(t)
  if t:is_cuda() then return t:cpu() end
  return t
end

function C.save(path, st)
  local tensors = {}
  for k, v in pairs(st.model:state_dict()) do tensors["model." .. k] = cpu(v) end
  local osd = st.optimizer:state_dict()
  local scalars = {}
  for i, s in pairs(osd.state) do
    for k, v in pairs(s) do
      if dl.is_tensor(v) then
        tensors["optimizer.state." .. i .. "." .. k] = cpu(v)
      else
        scalars[tostring(i)] = scalars[tostring(i)] or {}
        scalars[tostring(i)][k] = v
      end
    end
  end
  tensors.rng_state = dl.get_rng_state()
  for k, v in pairs(st.tensors or {}) do tensors[k] = cpu(v) end
  local metadata = {
    format = C.FORMAT,
    train = json.encode(st.meta or {}),
    optimizer = json.encode({name = st.optimizer.__name, param_groups = osd.param_groups, scalars = scalars}),
  }
  -- one line naming the file ("save: <path>: ... (the previous '<path>' is
  -- intact)"), without this file's position in front of it
  local ok, err = pcall(dl.save, path, tensors, metadata)
  if not ok then error((tostring(err):gsub("^[^\n]-%.lua:%d+: ", "")), 0) end
end

local function read(path)
  local f = io.open(path, "rb")
  if not f then fail("%s: no such file", path) end
  f:close()
  local ok, tensors, metadata = pcall(dl.load, path)
  if not ok then fail("%s", tostring(tensors):gsub("\n.*", "")) end
  return tensors, metadata or {}
end

-- load(path) -> {model = sd, optimizer = {state, param_groups}, optimizer_name,
-- meta = table, tensors = {other tensors}, rng_state = tensor}
function C.load(path)
  local tensors, metadata = read(path)
  if metadata.format ~= C.FORMAT then
    fail("%s is not a training checkpoint (no '%s' metadata; a weights file goes to --weights)", path, C.FORMAT)
  end
  local ok, meta = pcall(json.decode, metadata.train or "{}")
  if not ok then fail("%s: bad checkpoint metadata: %s", path, meta) end
  local ok2, opt = pcall(json.decode, metadata.optimizer or "{}")
  if not ok2 or type(opt) ~= "table" then fail("%s: bad optimizer metadata", path) end
  local out = {model = {}, meta = meta, tensors = {}, rng_state = tensors.rng_state, optimizer_name = opt.name}
  local state = {}
  for k, v in pairs(tensors) do
    local name = k:match("^model%.(.+)$")
    if name then
      out.model[name] = v
    else
      local i, key = k:match("^optimizer%.state%.(%d+)%.(.+)$")
      if i then
        i = math.tointeger(tonumber(i))
        state[i] = state[i] or {}
        state[i][key] = v
      elseif k ~= "rng_state" then
        out.tensors[k] = v
      end
    end
  end
  for i, s in pairs(opt.scalars or {}) do
    i = math.tointeger(tonumber(i))
    if i then
      state[i] = state[i] or {}
      for k, v in pairs(s) do state[i][k] = v end
    end
  end
  out.optimizer = {state = state, param_groups = opt.param_groups or {}}
  return out
end

-- read_weights(path) -> state dict, checkpoint meta (nil for a plain state dict)
function C.read_weights(path)
  local tensors, metadata = read(path)
  if metadata.format == C.FORMAT then
    local sd = {}
    for k, v in pairs(tensors) do
      local name = k:match("^model%.(.+)$")
      if name then sd[name] = v end
    end
    local ok, meta = pcall(json.decode, metadata.train or "{}")
    return sd, ok and meta or {}
  end
  return tensors, nil
end

local function same_shape(a, b)
  if #a ~= #b then return false end
  for i = 1, #a do
    if a[i] ~= b[i] then return false end
  end
  return true
end

local function shape_str(s)
  local p = {}
  for i, v in ipairs(s) do p[i] = tostring(v) end
  return "[" .. table.concat(p, ", ") .. "]"
end

local function sample(list, n)
  table.sort(list)
  local out = {}
  for i = 1, math.min(n, #list) do out[i] = list[i] end
  if #list > n then out[#out + 1] = "..." end
  return table.concat(out, ", ")
end

-- Loads a state dict into model.  When only the classifier (names under
-- opts.classifier .. ".") differs in shape, it keeps the model's fresh
-- classifier and loads the rest (fine-tuning to another class count) and
-- returns true.  Anything else that does not fit raises one line naming
-- opts.path and opts.arch with the first few offending keys.
function C.load_weights(model, sd, opts)
  opts = opts or {}
  local own = model:state_dict()
  local missing, unexpected, mismatch, mismatch_text = {}, {}, {}, {}
  for k, t in pairs(own) do
    local v = sd[k]
    if v == nil then
      missing[#missing + 1] = k
    elseif not dl.is_tensor(v) then
      unexpected[#unexpected + 1] = k
    elseif not same_shape(v.shape, t.shape) then
      mismatch[#mismatch + 1] = k
      mismatch_text[#mismatch_text + 1] = string.format("%s %s vs %s", k, shape_str(v.shape), shape_str(t.shape))
    end
  end
  for k in pairs(sd) do
    if own[k] == nil then unexpected[#unexpected + 1] = k end
  end
  local prefix = (opts.classifier or "fc") .. "."
  local head_only = #mismatch > 0
  for _, k in ipairs(mismatch) do
    if k:sub(1, #prefix) ~= prefix then head_only = false end
  end
  if #missing > 0 or #unexpected > 0 or (#mismatch > 0 and not (head_only and opts.allow_new_classifier ~= false)) then
    local parts = {}
    if #missing > 0 then parts[#parts + 1] = string.format("%d missing (%s)", #missing, sample(missing, 3)) end
    if #unexpected > 0 then
      parts[#parts + 1] = string.format("%d unexpected (%s)", #unexpected, sample(unexpected, 3))
    end
    if #mismatch > 0 then
      parts[#parts + 1] = string.format("%d of another shape (%s)", #mismatch, sample(mismatch_text, 2))
    end
    fail("%s does not fit %s: %s", opts.path or "weights", opts.arch or "the model", table.concat(parts, "; "))
  end
  local use = {}
  local skip = {}
  for _, k in ipairs(mismatch) do skip[k] = true end
  for k, v in pairs(sd) do
    if not skip[k] then use[k] = v end
  end
  local ok, err = pcall(model.load_state_dict, model, use, {strict = #mismatch == 0})
  if not ok then
    fail("%s does not fit %s: %s", opts.path or "weights", opts.arch or "the model",
      (tostring(err):gsub("\n%s*", " ")))
  end
  return #mismatch > 0
end

return C
