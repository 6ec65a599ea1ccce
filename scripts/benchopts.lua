-- benchopts.lua - the command-line options of the benchmark scripts, loaded
-- with dofile from the script's folder:
--
--   local opts = dofile(dir .. "/benchopts.lua")("bench_x", arg, defaults, switches)
--
-- `--key value` sets defaults[key] (a number when the default is one), and
-- `--name` sets opts[name] = true for each name in switches (their default:
-- false).  Anything else prints "NAME: unknown argument ..." and exits 2.
return function(name, args, defaults, switches)
  local opts, is_switch = {}, {}
  for k, v in pairs(defaults) do opts[k] = v end
  for _, s in ipairs(switches or {}) do
    is_switch[s] = true
    opts[s] = false
  end
  local function bad(msg)
    io.stderr:write(name .. ": " .. msg .. "\n")
    os.exit(2)
  end
  local i = 1
  while args[i] do
    local k = args[i]:match("^%-%-(.+)$")
    if k and is_switch[k] then
      opts[k] = true
      i = i + 1
    elseif k and defaults[k] ~= nil and args[i + 1] then
      local v = args[i + 1]
      if type(defaults[k]) == "number" then
        v = tonumber(v) or bad("--" .. k .. " wants a number, got " .. v)
      end
      opts[k] = v
      i = i + 2
    else
      bad("unknown argument " .. args[i])
    end
  end
  return opts
end
