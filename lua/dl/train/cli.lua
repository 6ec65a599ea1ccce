-- dl.train.cli: the error and exit conventions of the training programs
-- (scripts/train_text.lua, scripts/train_gpt.lua, scripts/train_resnet.lua).
--
--   local cli = require "dl.train.cli"
--   cli.die("--data %s: no such file", path)        -- a user error
--   local v = cli.checked("--resume " .. p, f, ...)  -- f's error becomes a user error
--   local o = cli.options(argv, SPEC, HELP)          -- nil after printing --help
--   cli.run("train_gpt", main, arg)                  -- never returns
--   cli.run(PROG, main, arg, fail)                   -- fail(msg, status) reports, exits
--
-- Invariants: a user error (die, checked, a bad option from dl.train.args)
-- prints one line "PROG: message" on stderr and exits with status 2;
-- anything else prints "PROG: error: message" and a traceback and exits
-- with status 1; main's return value (a number, default 0) is the exit status.
local args = require "dl.train.args"

local cli = {}

local UserError = {}

-- Raises a user error (one line, exit status 2).
function cli.die(fmt, ...)
  error(setmetatable({msg = string.format(fmt, ...)}, UserError), 0)
end

function cli.is_user_error(e) return getmetatable(e) == UserError or args.is_error(e) end

-- Runs f(...) and turns a raised message into a user error prefixed by what
-- (first line only).
function cli.checked(what, f, ...)
  local res = table.pack(pcall(f, ...))
  if not res[1] then
    local e = res[2]
    if cli.is_user_error(e) then error(e, 0) end
    local msg = tostring(e):gsub("\n.*", "")
    if what then msg = what .. ": " .. msg end
    cli.die("%s", msg)
  end
  return table.unpack(res, 2, res.n)
end

-- Parses argv by SPEC (dl.train.args): nil after printing the help for
-- --help / -h, else the options table (and the given-set); a positional
-- argument is a user error.
function cli.options(argv, spec, help)
  if args.wants_help(argv) then
    print(args.help(spec, help))
    return nil
  end
  local o, given, positional = args.parse(argv, spec)
  if #positional > 0 then cli.die("unexpected argument '%s' (options start with --; see --help)", positional[1]) end
  return o, given
end

local function handler(e)
  if cli.is_user_error(e) then return e end
  return debug.traceback(tostring(e), 2)
end

-- Runs main(argv) and exits with its status (see the invariants).  A
-- failure goes to fail(msg, status) when given (msg: the user error's line,
-- or "error: " and the message and traceback; status 2 or 1), which must
-- exit; by default "PROG: msg" is written on stderr and the process exits
-- with status.
function cli.run(prog, main, argv, fail)
  local ok, res = xpcall(main, handler, argv or {})
  if not ok then
    fail = fail or function(msg, status)
      io.stderr:write(prog .. ": " .. msg .. "\n")
      os.exit(status, true)
    end
    if getmetatable(res) == UserError then fail(res.msg, 2) end
    if args.is_error(res) then fail(res.message, 2) end
    fail("error: " .. tostring(res), 1)
  end
  io.stdout:flush()
  os.exit(res or 0, true)
end

return cli
