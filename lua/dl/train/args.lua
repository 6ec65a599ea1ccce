-- dl.train.args: command-line options for the training scripts.
--
--   local spec = {
--     {name = "epochs", type = "int", default = 10, min = 1, help = "passes over the data"},
--     {name = "arch", type = "string", default = "resnet50", metavar = "NAME", help = "..."},
--     {name = "lr-schedule", type = "choice", choices = {"none", "step", "cosine"}, default = "none"},
--     {name = "augment", type = "flag", help = "..."},          -- --augment / --no-augment
--     {name = "resume", type = "string", optional_value = "",   -- --resume [FILE]
--      default = nil},
--   }
--   local opts, given, positional = args.parse(arg, spec)     -- raises args.Error on bad input
--   print(args.help(spec, {usage = "...", description = "..."}))
--
-- Invariants: opts keys are the option names with '-' turned into '_';
-- `given[key]` is true for options on the command line (presets only fill
-- the others); values are checked against type, min/max and choices, and a
-- bad one raises an error table {message = "..."} (args.Error) naming the
-- option, never a half-parsed result.  "--" ends the options.
local A = {}

local Error = {}
Error.__index = Error
Error.__tostring = function(e) return e.message end
A.Error = Error

local function fail(fmt, ...)
  error(setmetatable({message = string.format(fmt, ...)}, Error), 0)
end

function A.is_error(e) return getmetatable(e) == Error end

local function key_of(name) return (name:gsub("-", "_")) end

local function fmt_default(o)
  local d = o.default
  if o.type == "flag" then return d and "on" or "off" end
  if d == nil then return o.default_text or "none" end
  return o.default_text or tostring(d)
end

-- Converts a string value for option o; raises on a bad one.
local function convert(o, s)
  local t = o.type or "string"
  if t == "string" then
    return s
  elseif t == "int" then
    local v = math.tointeger(tonumber(s))
    if v == nil then fail("--%s: expected an integer, got '%s'", o.name, s) end
    if o.min and v < o.min then fail("--%s: must be at least %d, got %d", o.name, o.min, v) end
    if o.max and v > o.max then fail("--%s: must be at most %d, got %d", o.name, o.max, v) end
    return v
  elseif t == "number" then
    local v = tonumber(s)
    if v == nil or v ~= v then fail("--%s: expected a number, got '%s'", o.name, s) end
    v = v + 0.0
    if o.min and v < o.min then fail("--%s: must be at least %s, got %s", o.name, o.min, s) end
    if o.max and v > o.max then fail("--%s: must be at most %s, got %s", o.name, o.max, s) end
    return v
  elseif t == "choice" then
    for _, c in ipairs(o.choices) do
      if c == s then return s end
    end
    fail("--%s: expected one of %s, got '%s'", o.name, table.concat(o.choices, ", "), s)
  end
  error("args: unknown option type " .. tostring(t))
end
A.convert = convert

-- parse(argv, spec) -> opts, given, positional
function A.parse(argv, spec)
  local byname = {}
  local opts, given, positional = {}, {}, {}
  for _, o in ipairs(spec) do
    byname[o.name] = o
    opts[key_of(o.name)] = o.default
  end
  local i = 1
  local n = argv.n or #argv
  while i <= n do
    local a = argv[i]
    if type(a) ~= "string" then fail("argument %d is not a string", i) end
    if a == "--" then
      for j = i + 1, n do positional[#positional + 1] = argv[j] end
      break
    elseif a:sub(1, 2) == "--" and #a > 2 then
      local name, value = a:match("^%-%-([^=]+)=(.*)$")
      name = name or a:sub(3)
      local o = byname[name]
      local negated = false
      if not o and name:sub(1, 3) == "no-" and byname[name:sub(4)] and byname[name:sub(4)].type == "flag" then
        o, negated = byname[name:sub(4)], true
      end
      if not o then
        -- a near miss is the common case: suggest the closest names
        local near = {}
        for _, s in ipairs(spec) do
          if s.name:find(name, 1, true) or name:find(s.name, 1, true) then near[#near + 1] = "--" .. s.name end
        end
        if #near > 0 then
          fail("unknown option --%s (did you mean %s?)", name, table.concat(near, " or "))
        end
        fail("unknown option --%s (see --help)", name)
      end
      local k = key_of(o.name)
      if o.type == "flag" then
        if value ~= nil then
          if value == "1" or value == "true" or value == "on" then opts[k] = not negated
          elseif value == "0" or value == "false" or value == "off" then opts[k] = negated
          else fail("--%s: expected on/off, got '%s'", o.name, value) end
        else
          opts[k] = not negated
        end
      else
        if value == nil then
          local nxt = argv[i + 1]
          if nxt ~= nil and not (type(nxt) == "string" and nxt:sub(1, 2) == "--" and #nxt > 2) then
            value = nxt
            i = i + 1
          elseif o.optional_value ~= nil then
            value = o.optional_value
          else
            fail("--%s needs a value (%s)", o.name, o.metavar or o.type or "string")
          end
        end
        opts[k] = convert(o, value)
      end
      given[k] = true
    else
      positional[#positional + 1] = a
    end
    i = i + 1
  end
  return opts, given, positional
end

-- The --help text: usage line, description, then one line per option with
-- its default (long help wraps under the option).
function A.help(spec, info)
  info = info or {}
  local lines = {}
  if info.usage then lines[#lines + 1] = "usage: " .. info.usage end
  if info.description then
    lines[#lines + 1] = ""
    lines[#lines + 1] = info.description
  end
  lines[#lines + 1] = ""
  lines[#lines + 1] = "options:"
  local width = 0
  local heads = {}
  for i, o in ipairs(spec) do
    local head = "--" .. o.name
    if o.type == "flag" then
      head = "--[no-]" .. o.name
    elseif o.type == "choice" then
      head = head .. " " .. table.concat(o.choices, "|")
    elseif o.optional_value ~= nil then
      head = head .. " [" .. (o.metavar or "VALUE") .. "]"
    else
      head = head .. " " .. (o.metavar or (o.type == "int" and "N" or o.type == "number" and "X" or "VALUE"))
    end
    heads[i] = head
    if #head > width then width = #head end
  end
  if width > 30 then width = 30 end
  local avail = math.max(30, (info.width or 100) - width - 4)
  local function wrap(text)
    local out, line = {}, ""
    for word in text:gmatch("%S+") do
      if line ~= "" and #line + 1 + #word > avail then
        out[#out + 1] = line
        line = word
      else
        line = line == "" and word or line .. " " .. word
      end
    end
    out[#out + 1] = line
    return out
  end
  local pad = string.rep(" ", width + 4)
  for i, o in ipairs(spec) do
    local text = wrap((o.help or "") .. " (default: " .. fmt_default(o) .. ")")
    local head = heads[i]
    local first = 1
    if #head > width then
      lines[#lines + 1] = "  " .. head
      first = 1
      lines[#lines + 1] = pad .. text[1]
    else
      lines[#lines + 1] = "  " .. head .. string.rep(" ", width - #head + 2) .. text[1]
    end
    for j = first + 1, #text do lines[#lines + 1] = pad .. text[j] end
  end
  lines[#lines + 1] = "  --help" .. string.rep(" ", width - 4) .. "show this text and exit"
  if info.epilog then
    lines[#lines + 1] = ""
    lines[#lines + 1] = info.epilog
  end
  return table.concat(lines, "\n")
end

-- run(prog, spec, info, main): a script's entry point.  Prints
-- args.help(spec, info) for --help/-h, else calls main(opts, positional)
-- with args.parse(arg, spec)'s results, and exits with the number main
-- returns.  An args.Error or a one-line string error is written as
-- "prog: message" on stderr with status 2 (bad input), anything else with
-- its traceback and status 1 (a bug).  Never returns.
function A.run(prog, spec, info, main)
  local function entry(argv)
    if A.wants_help(argv) then
      print(A.help(spec, info))
      return 0
    end
    local o, _, positional = A.parse(argv, spec)
    return main(o, positional)
  end
  local function handler(e)
    if A.is_error(e) then return e.message end
    if type(e) == "string" and not e:find("\n") then return e end
    return debug.traceback(tostring(e), 2)
  end
  local ok, res = xpcall(entry, handler, arg or {})
  if not ok then
    io.stderr:write(prog .. ": " .. tostring(res) .. "\n")
    os.exit(tostring(res):find("stack traceback", 1, true) and 1 or 2, true)
  end
  os.exit(res, true)
end

-- true when argv holds --help or -h (before any "--")
function A.wants_help(argv)
  for i = 1, argv.n or #argv do
    if argv[i] == "--" then return false end
    if argv[i] == "--help" or argv[i] == "-h" then return true end
  end
  return false
end

return A
