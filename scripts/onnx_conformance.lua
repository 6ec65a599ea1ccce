-- onnx_conformance.lua - runs ONNX's own backend test data (Debian
-- libonnx-testdata: node/, pytorch-converted/, pytorch-operator/, simple/;
-- each test a model.onnx and test_data_set_*/{input,output}_*.pb) through
-- dl.onnx.load on the CPU and compares with the stored outputs the way
-- onnx's backend test runner does: same dtype and shape, then
-- |out - ref| <= atol + rtol * |ref| (rtol 1e-3, atol 1e-7, or a test's
-- data.json values), NaN matching NaN.
--
--   dlua scripts/onnx_conformance.lua [--data DIR] [--suites node,simple,...]
--        [--filter LUA_PATTERN] [--jobs N] [--timeout S] [--mem MB]
--        [--list FILE] [--verbose] [--json FILE]
--
-- Each test runs in its own child process (this script with --one DIR)
-- under `timeout` and `ulimit -v` (not with --mem 0 or under ASan), so a crash, a hang or a runaway
-- allocation is that test's "fail" and nothing more.  A test is
-- "unsupported" when dl.onnx.load refuses it for something dlua lacks (an op,
-- an attribute, a dtype, sequence values), "fail" when it loads but errs
-- or differs, "pass" otherwise.  Prints one line per suite and the total;
-- --list writes every test's result and reason; --json the counts.
local dl = require "dl"

local DEFAULT_DATA = "/usr/share/libonnx-testdata/data"
local SUITES = {"node", "pytorch-converted", "pytorch-operator", "simple"}

local function sh_quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

local function read_file(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

local function list_dir(dir)
  local out = {}
  local p = io.popen("ls -1 " .. sh_quote(dir) .. " 2>/dev/null")
  for line in p:lines() do out[#out + 1] = line end
  p:close()
  table.sort(out)
  return out
end

-- --- one test (the child) -----------------------------------------------------------------

-- Whether a load error means "dlua lacks this" rather than a bug.
local function is_unsupported(msg)
  return msg:find("not supported", 1, true) or msg:find("dlua has no", 1, true) or
    msg:find("dlua does not", 1, true) or msg:find("which dlua", 1, true) or
    msg:find("dlua tensors have at most", 1, true)
end

local function compare(out, ref, rtol, atol)
  if type(ref) == "table" and not dl.is_tensor(ref) then -- a sequence
    if type(out) ~= "table" or dl.is_tensor(out) then return false, "output is not a sequence" end
    if #out ~= #ref then return false, string.format("%d sequence elements, expected %d", #out, #ref) end
    for i = 1, #ref do
      local ok, why = compare(out[i], ref[i], rtol, atol)
      if not ok then return false, string.format("sequence element %d: %s", i, why) end
    end
    return true
  end
  if not dl.is_tensor(out) then return false, "output is not a tensor" end
  if out.dtype ~= ref.dtype then
    return false, string.format("dtype %s, expected %s", tostring(out.dtype), tostring(ref.dtype))
  end
  local so, sr = out.shape, ref.shape
  local same = #so == #sr
  for i = 1, #sr do same = same and so[i] == sr[i] end
  if not same then
    return false, string.format("shape {%s}, expected {%s}", table.concat(so, ","), table.concat(sr, ","))
  end
  if ref:numel() == 0 then return true end
  out = out:detach():cpu()
  if out.dtype == dl.bool or not out:is_floating_point() then
    if out:eq(ref):all():item() then return true end
    local bad = out:ne(ref):to(dl.int64):sum():item()
    return false, string.format("%d of %d values differ", bad, ref:numel())
  end
  local o, r = out:to(dl.float64), ref:to(dl.float64)
  local ok = dl.logical_or(o:eq(r), dl.logical_and(o:isnan(), r:isnan()))
  ok = dl.logical_or(ok, (o - r):abs():le(r:abs() * rtol + atol))
  if ok:all():item() then return true end
  local err = ((o - r):abs() - r:abs() * rtol - atol)
  err = dl.where(err:isnan(), dl.full({}, math.huge, {dtype = dl.float64}), err)
  return false, string.format("%d of %d values differ (worst by %.3g beyond the tolerance)",
    ok:logical_not():to(dl.int64):sum():item(), ref:numel(), err:max():item())
end

local function run_one(dir)
  dl.set_num_threads(1)
  local rtol, atol = 1e-3, 1e-7
  local meta = read_file(dir .. "/data.json")
  if meta then
    rtol = tonumber(meta:match('"rtol"%s*:%s*([-%d.eE+]+)')) or rtol
    atol = tonumber(meta:match('"atol"%s*:%s*([-%d.eE+]+)')) or atol
  end
  if not read_file(dir .. "/model.onnx") then return "absent", "no model.onnx (downloaded by onnx's runner)" end
  local ok, m = pcall(dl.onnx.load, dir .. "/model.onnx")
  if not ok then
    local msg = tostring(m)
    return is_unsupported(msg) and "unsupported" or "fail", "load: " .. msg
  end
  m:eval()
  local sets = {}
  for _, d in ipairs(list_dir(dir)) do
    if d:match("^test_data_set_%d+$") then sets[#sets + 1] = d end
  end
  if #sets == 0 then return "fail", "no test_data_set_*" end
  for _, set in ipairs(sets) do
    local inputs, refs = {}, {}
    local kinds = {input = {}, output = {}}
    local mt = dl._onnx.load_model(dir .. "/model.onnx").graph
    local real = {}
    for _, v in ipairs(mt.input) do real[#real + 1] = v end
    for i, v in ipairs(m.input_names) do
      for _, r in ipairs(real) do if r.name == v then kinds.input[i] = r.kind end end
    end
    for i, v in ipairs(mt.output) do kinds.output[i] = v.kind end
    for _, f in ipairs(list_dir(dir .. "/" .. set)) do
      local kind, i = f:match("^(%a+)_(%d+)%.pb$")
      if kind == "input" or kind == "output" then
        local load = kinds[kind][tonumber(i) + 1] == "sequence" and dl.onnx.load_sequence or dl.onnx.load_tensor
        local t, why = load(dir .. "/" .. set .. "/" .. f)
        if not t then return "unsupported", set .. "/" .. f .. ": " .. tostring(why) end
        if kind == "input" then inputs[tonumber(i) + 1] = t else refs[tonumber(i) + 1] = t end
      end
    end
    local names = m.input_names
    if #inputs ~= #names then
      return "fail", string.format("%s: %d inputs stored, the model takes %d", set, #inputs, #names)
    end
    local okr, outs = pcall(function()
      return table.pack(dl.no_grad(function()
        if #names == 1 and kinds.input[1] == "sequence" then return m({[names[1]] = inputs[1]}) end
        return m(table.unpack(inputs, 1, #names))
      end))
    end)
    if not okr then
      local msg = tostring(outs)
      return is_unsupported(msg) and "unsupported" or "fail", "run: " .. msg
    end
    if outs.n ~= #refs then
      return "fail", string.format("%s: %d outputs, expected %d", set, outs.n, #refs)
    end
    for i = 1, #refs do
      local good, why = compare(outs[i], refs[i], rtol, atol)
      if not good then return "fail", string.format("%s: output %d (%s): %s", set, i, m.output_names[i], why) end
    end
  end
  return "pass", ""
end

-- --- the driver --------------------------------------------------------------------------------

local function parse(argv)
  local o = {data = DEFAULT_DATA, suites = table.concat(SUITES, ","), jobs = 2, timeout = 60, mem = 8192}
  local i = 1
  while argv[i] do
    local a = argv[i]
    local k = a:match("^%-%-(.+)$")
    if k == "verbose" then o.verbose = true; i = i + 1
    elseif k and (k == "data" or k == "suites" or k == "filter" or k == "list" or k == "json" or k == "one") then
      if not argv[i + 1] then error("--" .. k .. " needs a value", 0) end
      o[k] = argv[i + 1]
      i = i + 2
    elseif k and (k == "jobs" or k == "timeout" or k == "mem") then
      o[k] = math.tointeger(tonumber(argv[i + 1] or ""))
      if not o[k] or o[k] < 1 then error("--" .. k .. " wants a positive integer", 0) end
      i = i + 2
    elseif a == "-h" or a == "--help" then
      print("usage: dlua scripts/onnx_conformance.lua [--data DIR] [--suites a,b] [--filter PATTERN]\n" ..
        "       [--jobs N] [--timeout SECONDS] [--mem MB] [--list FILE] [--json FILE] [--verbose]")
      os.exit(0)
    else
      error("unknown argument '" .. a .. "' (see --help)", 0)
    end
  end
  return o
end

local function interpreter()
  local i = -1
  while arg[i - 1] do i = i - 1 end
  return arg[i] or "dlua"
end

local function main(argv)
  local o = parse(argv)
  if o.one then
    local ok, status, why = pcall(run_one, o.one)
    if not ok then status, why = "fail", tostring(status) end
    io.write("RESULT ", status, " ", (why or ""):gsub("\n", " "), "\n")
    io.stdout:flush()
    return 0
  end
  local missing = dl._onnx.missing()
  if missing then
    io.stderr:write("onnx_conformance: ", missing, "\n")
    return 77
  end
  local f = io.open(o.data .. "/node", "r")
  if not f then
    io.stderr:write("onnx_conformance: no test data under ", o.data, " (Debian package libonnx-testdata)\n")
    return 77
  end
  f:close()
  local exe, script = interpreter(), arg[0]
  local tests = {}
  for suite in o.suites:gmatch("[^,]+") do
    for _, t in ipairs(list_dir(o.data .. "/" .. suite)) do
      if t:match("^test_") and (not o.filter or t:find(o.filter)) then
        tests[#tests + 1] = {suite = suite, name = t, dir = o.data .. "/" .. suite .. "/" .. t}
      end
    end
  end
  -- the memory cap (ulimit -v) is left off with --mem 0 and under AddressSanitizer,
  -- whose shadow memory reserves terabytes of address space at start-up
  local cap = (o.mem > 0 and not os.getenv("ASAN_OPTIONS")) and string.format("ulimit -v %d 2>/dev/null; ", o.mem * 1024) or ""
  local function command(t)
    return string.format("%sOMP_NUM_THREADS=1 timeout -k 5 %d %s %s --one %s 2>&1",
      cap, o.timeout, sh_quote(exe), sh_quote(script), sh_quote(t.dir))
  end
  local function finish(t, p)
    local out = p:read("a")
    local _, _, code = p:close()
    local status, why = out:match("RESULT (%S+) ?([^\n]*)")
    if not status then
      if code == 124 or code == 137 then status, why = "fail", "timed out (" .. o.timeout .. " s)"
      else status, why = "fail", string.format("crashed (exit %s): %s", tostring(code), out:sub(-300):gsub("\n", " ")) end
    end
    t.status, t.why = status, why
    if o.verbose then io.write(string.format("%-11s %s/%s %s\n", status, t.suite, t.name, why)) end
  end
  local t0 = dl.clock()
  local i = 1
  while i <= #tests do
    local running = {}
    for j = i, math.min(#tests, i + o.jobs - 1) do running[#running + 1] = {tests[j], io.popen(command(tests[j]))} end
    for _, r in ipairs(running) do finish(r[1], r[2]) end
    i = i + o.jobs
  end
  local counts, order = {}, {}
  for _, t in ipairs(tests) do
    if not counts[t.suite] then
      counts[t.suite] = {pass = 0, fail = 0, unsupported = 0, absent = 0, total = 0}
      order[#order + 1] = t.suite
    end
    local c = counts[t.suite]
    c[t.status] = (c[t.status] or 0) + 1
    c.total = c.total + 1
  end
  local all = {pass = 0, fail = 0, unsupported = 0, absent = 0, total = 0}
  print(string.format("%-18s %6s %6s %6s %12s %7s", "suite", "tests", "pass", "fail", "unsupported", "pass%"))
  for _, s in ipairs(order) do
    local c = counts[s]
    for k in pairs(all) do all[k] = all[k] + (c[k] or 0) end
    print(string.format("%-18s %6d %6d %6d %12d %6.1f%%", s, c.total, c.pass, c.fail, c.unsupported,
      c.total > 0 and 100 * c.pass / c.total or 0))
  end
  print(string.format("%-18s %6d %6d %6d %12d %6.1f%%", "all", all.total, all.pass, all.fail, all.unsupported,
    all.total > 0 and 100 * all.pass / all.total or 0))
  print(string.format("(%.0f s, %d jobs)", dl.clock() - t0, o.jobs))
  if o.list then
    local lf = assert(io.open(o.list, "w"))
    for _, t in ipairs(tests) do lf:write(t.status, "\t", t.suite, "/", t.name, "\t", t.why or "", "\n") end
    lf:close()
  end
  if o.json then
    local jf = assert(io.open(o.json, "w"))
    local parts = {}
    for _, s in ipairs(order) do
      local c = counts[s]
      parts[#parts + 1] = string.format('"%s": {"total": %d, "pass": %d, "fail": %d, "unsupported": %d}', s,
        c.total, c.pass, c.fail, c.unsupported)
    end
    jf:write("{", table.concat(parts, ", "), "}\n")
    jf:close()
  end
  return 0
end

local ok, rc = pcall(main, arg)
if not ok then
  io.stderr:write("onnx_conformance: ", tostring(rc), "\n")
  os.exit(2)
end
os.exit(rc)
