-- dl.train.json: JSON text for checkpoint metadata (options, optimizer
-- groups, class names).  encode() writes numbers so they read back as the
-- same Lua values (integers as integers, floats with 17 significant digits)
-- and object keys sorted, so the same table always gives the same text;
-- decode() is the strict C reader of src/io/json.c (null -> nil).
--
-- Invariants: only nil, booleans, finite numbers, strings and tables of
-- those are encodable; a table with keys 1..n (n >= 1) and nothing else is an
-- array, any other table an object whose keys must be strings or integers
-- (integers become strings).  Anything else raises "json: ..." errors.
local dl = require "dl"

local J = {}

local escapes = {['"'] = '\\"', ['\\'] = '\\\\', ['\b'] = '\\b', ['\f'] = '\\f', ['\n'] = '\\n',
  ['\r'] = '\\r', ['\t'] = '\\t'}

local function quote(s)
  return '"' .. s:gsub('[%c"\\]', function(c)
    return escapes[c] or string.format("\\u%04x", c:byte())
  end) .. '"'
end

local function is_array(t)
  local n = #t
  if n == 0 then return false end
  local count = 0
  for _ in pairs(t) do count = count + 1 end
  return count == n
end

local function encode(v, out, depth)
  if depth > 32 then error("json: nesting too deep", 0) end
  local tv = type(v)
  if v == nil then
    out[#out + 1] = "null"
  elseif tv == "boolean" then
    out[#out + 1] = tostring(v)
  elseif tv == "number" then
    if math.type(v) == "integer" then
      out[#out + 1] = string.format("%d", v)
    elseif v ~= v or v == math.huge or v == -math.huge then
      error("json: cannot encode the number " .. tostring(v), 0)
    elseif v == math.floor(v) and math.abs(v) < 2^53 then
      out[#out + 1] = string.format("%.1f", v) -- keeps it a float on the way back
    else
      out[#out + 1] = string.format("%.17g", v)
    end
  elseif tv == "string" then
    out[#out + 1] = quote(v)
  elseif tv == "table" and not dl.is_tensor(v) then
    if is_array(v) then
      out[#out + 1] = "["
      for i = 1, #v do
        if i > 1 then out[#out + 1] = "," end
        encode(v[i], out, depth + 1)
      end
      out[#out + 1] = "]"
    else
      local keys = {}
      for k in pairs(v) do
        if math.type(k) == "integer" then
          keys[#keys + 1] = tostring(k)
        elseif type(k) == "string" then
          keys[#keys + 1] = k
        else
          error("json: object keys must be strings or integers, got " .. type(k), 0)
        end
      end
      table.sort(keys)
      out[#out + 1] = "{"
      for i, k in ipairs(keys) do
        if i > 1 then out[#out + 1] = "," end
        local val = v[k]
        if val == nil then val = v[math.tointeger(tonumber(k))] end
        out[#out + 1] = quote(k) .. ":"
        encode(val, out, depth + 1)
      end
      out[#out + 1] = "}"
    end
  else
    error("json: cannot encode a " .. (dl.is_tensor(v) and "tensor" or tv), 0)
  end
end

function J.encode(v)
  local out = {}
  encode(v, out, 0)
  return table.concat(out)
end

function J.decode(s)
  if type(s) ~= "string" then error("json: a string is required, got " .. type(s), 0) end
  return dl._train.json_decode(s)
end

return J
