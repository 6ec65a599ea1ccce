-- testlib.lua - a small test harness for dlua's Lua tests.
-- Each test file: local T = require "testlib"; T.case("name", function() ... end); T.done()
-- T.done() prints "N passed, N failed" and exits non-zero on any failure.
local dl = require "dl"
local T = {passed = 0, failed = 0}

local function fmt(v)
  if dl.is_tensor(v) then return tostring(v) end
  if type(v) == "table" then
    local parts = {}
    for i, x in ipairs(v) do parts[i] = fmt(x) end
    return "{" .. table.concat(parts, ", ") .. "}"
  end
  return tostring(v)
end
T.fmt = fmt

function T.case(name, fn)
  local ok, err = xpcall(fn, debug.traceback)
  if ok then
    T.passed = T.passed + 1
  else
    T.failed = T.failed + 1
    io.stderr:write("FAIL ", name, "\n", tostring(err), "\n")
  end
end

function T.fail(msg) error(msg, 2) end

function T.eq(a, b, msg)
  if a ~= b then error((msg or "values differ") .. ": got " .. fmt(a) .. ", expected " .. fmt(b), 2) end
end

function T.truthy(v, msg) if not v then error(msg or "expected a true value", 2) end end

function T.near(a, b, tol, msg)
  tol = tol or 1e-6
  local ok = (a == b) or (a ~= a and b ~= b) or math.abs(a - b) <= tol * math.max(1, math.abs(b))
  if not ok then error((msg or "numbers differ") .. ": got " .. fmt(a) .. ", expected " .. fmt(b), 2) end
end

-- Flattens a nested Lua table (or a tensor) into a flat array of values.
local function flatten(v, out)
  out = out or {}
  if dl.is_tensor(v) then return flatten(v:tolist(), out) end
  if type(v) == "table" then for _, x in ipairs(v) do flatten(x, out) end
  else out[#out + 1] = v end
  return out
end
T.flatten = flatten

-- The same values laid out channels-last: (N,C,*) shape, channels fastest in
-- memory (4-D: PyTorch's channels_last; 3-D: (N,L,C) in memory).
function T.channels_last(t)
  if t:dim() == 4 then return t:contiguous({memory_format = "channels_last"}) end
  return t:transpose(2, 3):contiguous():transpose(2, 3)
end

-- Whether t (N,C,*) is dense with channels fastest, then the trailing
-- dimensions last to first, then N: (C*H*W, 1, W*C, C) for 4-D.
function T.is_channels_last(t)
  local st, sh = t:stride(), t.shape
  if st[2] ~= 1 then return false end
  local expect = sh[2]
  for d = #sh, 3, -1 do
    if st[d] ~= expect then return false end
    expect = expect * sh[d]
  end
  return st[1] == expect
end

-- Three non-contiguous (2, 3, 6, 5) tensors of dtype dt: an expanded one
-- (zero strides), a transposed one and one narrowed in every dimension
-- (an offset and strided rows).  For kernels' layout handling.
function T.strided_inputs(dt)
  local xe = dl.randn(2, 3, 1, 1, {dtype = dt}):expand(2, 3, 6, 5)
  local xt = dl.randn(2, 3, 5, 6, {dtype = dt}):transpose(3, 4)
  local xn = dl.randn(2, 5, 8, 9, {dtype = dt}):narrow(2, 2, 3):narrow(4, 3, 5):narrow(3, 2, 6)
  for _, x in ipairs({xe, xt, xn}) do T.truthy(not x:is_contiguous(), "strided_inputs: contiguous") end
  return {xe, xt, xn}
end

-- Bit-equal tensors: same shape and dtype, equal numbers with the same sign
-- of zero, NaN where the other has NaN.
function T.same_bits(a, b, msg)
  msg = msg or "tensors differ"
  T.shape_eq(a, b.shape, msg .. " (shape)")
  T.eq(tostring(a.dtype), tostring(b.dtype), msg .. " (dtype)")
  local x, y = flatten(a), flatten(b)
  for i = 1, #x do
    local u, v = x[i], y[i]
    local ok = (u ~= u and v ~= v) or (u == v and (u ~= 0 or 1 / u == 1 / v))
    if not ok then error(msg .. ": element " .. i .. " is " .. fmt(u) .. ", expected " .. fmt(v), 2) end
  end
end

-- Compares a tensor with expected values (nested table or tensor) and, when
-- given, an expected shape; floats within tol (relative), others exactly.
function T.tensor_eq(t, expected, tol, msg)
  if not dl.is_tensor(t) then error((msg or "tensor_eq") .. ": not a tensor: " .. fmt(t), 2) end
  local got, want = flatten(t), flatten(expected)
  if dl.is_tensor(expected) then
    local s1, s2 = t.shape, expected.shape
    if #s1 ~= #s2 then error((msg or "tensor_eq") .. ": shape " .. fmt(s1) .. " vs " .. fmt(s2), 2) end
    for i = 1, #s1 do
      if s1[i] ~= s2[i] then error((msg or "tensor_eq") .. ": shape " .. fmt(s1) .. " vs " .. fmt(s2), 2) end
    end
  end
  if #got ~= #want then
    error((msg or "tensor_eq") .. ": " .. #got .. " elements, expected " .. #want, 2)
  end
  tol = tol or 1e-6
  for i = 1, #got do
    local a, b = got[i], want[i]
    local ok
    if type(a) == "number" and type(b) == "number" then
      ok = (a == b) or (a ~= a and b ~= b) or math.abs(a - b) <= tol * math.max(1, math.abs(b))
    else
      ok = a == b
    end
    if not ok then
      error((msg or "tensor_eq") .. ": element " .. i .. " is " .. fmt(a) .. ", expected " .. fmt(b) ..
        "\n got " .. fmt(got) .. "\nwant " .. fmt(want), 2)
    end
  end
end

function T.shape_eq(t, shape, msg)
  local s = t.shape
  local same = #s == #shape
  for i = 1, #shape do same = same and s[i] == shape[i] end
  if not same then error((msg or "shape") .. ": got " .. fmt(s) .. ", expected " .. fmt(shape), 2) end
end

-- Asserts fn raises an error whose message contains `pattern` (plain text).
function T.raises(fn, pattern, msg)
  local ok, err = pcall(fn)
  if ok then error((msg or "expected an error") .. (pattern and (" matching '" .. pattern .. "'") or ""), 2) end
  err = tostring(err)
  if pattern and not err:find(pattern, 1, true) then
    error((msg or "wrong error") .. ": '" .. err .. "' does not contain '" .. pattern .. "'", 2)
  end
  return err
end

-- This folder (tests/lua): the Python oracles and helpers beside testlib.
T.dir = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."

-- The Python with torch (Debian's), or nil when absent.
function T.python()
  local p = os.getenv("DL_TEST_PYTHON")
  if p and p ~= "" then return p end
  return "/usr/bin/python3"
end

-- Runs a Python snippet against PyTorch (Debian's python3-torch) and returns
-- what it emit()s, as a Lua value (see torch_oracle.py).  Errors if Python or
-- torch is missing: oracle tests never pass without the oracle.
function T.torch(code)
  local tmp = os.tmpname()
  local f = assert(io.open(tmp, "w"))
  f:write("import sys; sys.path.insert(0, ", string.format("%q", T.dir), ")\n")
  f:write("from torch_oracle import *\n", code, "\n")
  f:close()
  local p = assert(io.popen(T.python() .. " " .. tmp .. " 2>&1"))
  local out = p:read("a")
  local ok = p:close()
  os.remove(tmp)
  if not ok then error("python/torch oracle failed:\n" .. out, 2) end
  local chunk, err = load(out, "=torch", "t")
  if not chunk then error("bad oracle output: " .. err .. "\n" .. out:sub(1, 500), 2) end
  return chunk()
end

-- A dl tensor from an oracle tensor record {shape=, dtype=, data=}.
function T.from_torch(rec)
  local n = 1
  for _, s in ipairs(rec.shape) do n = n * s end
  local flat
  if rec.dtype == "bool" or rec.dtype:match("int") then
    flat = dl.tensor(#rec.data > 0 and rec.data or {0}, {dtype = rec.dtype})
  else
    flat = dl.tensor(#rec.data > 0 and rec.data or {0}, {dtype = dl.float64}):to(rec.dtype)
  end
  if n == 0 then return dl.zeros(rec.shape, {dtype = rec.dtype}) end
  return flat:reshape(rec.shape)
end

-- The view torch_oracle.view(b, v) takes of a tensor b: "T" the first and
-- last dims swapped, "t" the last two, "narrow" the last dim without its
-- ends, "perm" a 3-D b's dims permuted (3, 1, 2), "expand" the first dim
-- expanded to 3, anything else b itself.
function T.torch_view(b, v)
  if v == "T" then return b:transpose(1, -1) end
  if v == "t" then return b:transpose(-1, -2) end
  if v == "narrow" then return b:narrow(-1, 2, b.shape[#b.shape] - 2) end
  if v == "perm" then return b:permute(3, 1, 2) end
  if v == "expand" then
    local s = b.shape
    s[1] = 3
    return b:expand(s)
  end
  return b
end

-- An oracle record holding the contiguous base, rebuilt as the
-- non-contiguous view (T.torch_view) with the values torch saw.
function T.from_torch_view(rec, v) return T.torch_view(T.from_torch(rec), v) end

-- Compares a dl tensor with an oracle record: shape, dtype and values
-- (floats within rtol relative + atol absolute).
function T.match_torch(t, rec, rtol, atol, msg)
  msg = msg or "vs torch"
  if not dl.is_tensor(t) then error(msg .. ": not a tensor: " .. fmt(t), 2) end
  local s = t.shape
  local same = #s == #rec.shape
  for i = 1, #rec.shape do same = same and s[i] == rec.shape[i] end
  if not same then error(msg .. ": shape " .. fmt(s) .. ", torch has " .. fmt(rec.shape), 2) end
  if t.dtype.name ~= rec.dtype then
    error(msg .. ": dtype " .. t.dtype.name .. ", torch has " .. rec.dtype, 2)
  end
  rtol, atol = rtol or 1e-5, atol or 1e-6
  local got = flatten(t)
  for i = 1, #rec.data do
    local a, b = got[i], rec.data[i]
    local ok
    if type(b) == "number" and type(a) == "number" then
      ok = a == b or (a ~= a and b ~= b) or math.abs(a - b) <= atol + rtol * math.abs(b)
    else
      ok = a == b
    end
    if not ok then
      error(string.format("%s: element %d is %s, torch has %s", msg, i, fmt(a), fmt(b)), 2)
    end
  end
end

-- Gradients against an oracle's, input by input: wants[i] is a record, or
-- "none" where torch gave input i no gradient (got[i] must then be nil).
function T.match_grads(got, wants, rtol, atol, what)
  for i, want in ipairs(wants) do
    if want == "none" then
      T.eq(got[i], nil, what .. ": input " .. i .. " gets no gradient")
    else
      T.match_torch(got[i], want, rtol, atol, what .. ": gradient of input " .. i)
    end
  end
end

-- 1..n as a tensor of the given shape and dtype: T.seq(dl.float64, 2, 3).
function T.seq(dtype, ...)
  local n = 1
  for _, s in ipairs({...}) do n = n * s end
  return dl.arange(1, n + 1):to(dtype):reshape(...)
end

-- --- numbers and gradients ---------------------------------------------------------

-- A float32 standard-normal tensor drawn on the CPU, then converted and moved:
-- T.randn(2, 3) or T.randn({2, 3}), with a trailing {seed=, dtype=, device=}.
-- seed reseeds dl's default generator first (the same values on every
-- device and, up to rounding, in every dtype); dtype and device apply after
-- the draw.
function T.randn(...)
  local args = table.pack(...)
  local opts = {}
  if args.n > 0 and type(args[args.n]) == "table" and not dl.is_tensor(args[args.n])
      and args[args.n][1] == nil then
    opts = args[args.n]
    args.n = args.n - 1
  end
  local shape = args[1]
  if type(shape) ~= "table" then shape = {table.unpack(args, 1, args.n)} end
  if opts.seed then dl.manual_seed(opts.seed) end
  local t = dl.randn(shape)
  if opts.dtype then t = t:to(opts.dtype) end
  if opts.device then t = t:to(opts.device) end
  return t
end

-- Float64 draws for the kernels' finite-difference checks, taken in float64
-- from dl's default generator: T.randn64(2, 3), and T.grad_like(out), a
-- gradient shaped like a forward output (0-dim for a 0-dim out).
function T.randn64(...) return dl.randn({...}, {dtype = dl.float64}) end
function T.grad_like(out) return dl.randn(out.shape, {dtype = dl.float64}) end

-- The norm of a tensor as float64 on the CPU: ord 2 (default) or "max".
local function norm(t, ord)
  t = t:cpu():to(dl.float64)
  if t:numel() == 0 then return 0 end
  if ord == "max" then return t:abs():max():item() end
  return t:norm():item()
end

-- Norm-wise closeness: ||a - b|| <= atol + rtol * ||b|| (b the reference),
-- in float64 on the CPU, 2-norm unless ord is "max"; same shapes.  Tables of
-- tensors are compared entry by entry.  Returns ||a - b||, ||b||; a failure
-- reports both norms.
function T.close(a, b, rtol, atol, msg, ord)
  msg = msg or "not close"
  rtol, atol = rtol or 1e-5, atol or 1e-8
  if not dl.is_tensor(a) and type(a) == "table" then
    for k, v in pairs(a) do T.close(v, b[k], rtol, atol, msg .. "." .. tostring(k), ord) end
    return
  end
  if not dl.is_tensor(a) or not dl.is_tensor(b) then
    error(msg .. ": expected two tensors, got " .. type(a) .. " and " .. type(b), 2)
  end
  if fmt(a.shape) ~= fmt(b.shape) then
    error(msg .. ": shape " .. fmt(a.shape) .. ", expected " .. fmt(b.shape), 2)
  end
  local d = norm(a:cpu():to(dl.float64) - b:cpu():to(dl.float64), ord)
  local n = norm(b, ord)
  if not (d <= atol + rtol * n) then
    error(string.format("%s: ||a - b|| = %.6g, ||b|| = %.6g (%s norm): %.3g of ||b||, allowed %g + %g * ||b||",
      msg, d, n, ord == "max" and "max" or "2", n > 0 and d / n or d, atol, rtol), 2)
  end
  return d, n
end

-- x's gradient from out:backward(g) (g nil for a one-element out), with
-- x.grad cleared first.
function T.grad_of(x, out, g)
  x.grad = nil
  out:backward(g)
  return x.grad
end

-- Float64 finite differences through autograd: dl.autograd.gradcheck(fn,
-- inputs, opts) (central differences, eps 1e-6; each element within
-- atol + rtol * |numeric|, dl's defaults atol 1e-5, rtol 1e-3 unless opts
-- say).  Also checks that fn's output records and that every input that
-- requires grad gets a gradient of its shape and dtype (opts.allow_unused:
-- none is fine).  Fails naming `what`.
function T.gradcheck(fn, inputs, opts, what)
  if type(opts) == "string" then opts, what = nil, opts end
  what = what or "gradcheck"
  inputs = dl.is_tensor(inputs) and {inputs} or inputs
  local o, allow_unused = {raise = false}, false
  for k, v in pairs(opts or {}) do
    if k == "allow_unused" then allow_unused = v else o[k] = v end
  end
  local out = fn(table.unpack(inputs))
  if not (dl.is_tensor(out) and out.requires_grad) then
    error(what .. ": the output does not require grad", 2)
  end
  local wanted = {}
  for _, x in ipairs(inputs) do if dl.is_tensor(x) and x.requires_grad then wanted[#wanted + 1] = x end end
  local g = dl.autograd.grad(out:sum(), wanted, {allow_unused = true})
  for k, x in ipairs(wanted) do
    if g[k] == nil then
      if not allow_unused then error(what .. ": no gradient for input " .. k, 2) end
    else
      if fmt(g[k].shape) ~= fmt(x.shape) then
        error(what .. ": gradient of input " .. k .. " has shape " .. fmt(g[k].shape) .. ", input " .. fmt(x.shape), 2)
      end
      if g[k].dtype ~= x.dtype then
        error(what .. ": gradient of input " .. k .. " is " .. tostring(g[k].dtype) .. ", input " .. tostring(x.dtype), 2)
      end
    end
  end
  local ok, err = dl.autograd.gradcheck(fn, inputs, o)
  if not ok then error(what .. ": " .. err, 2) end
  return true
end

-- Finite differences of a kernel pair without autograd: d/dinput of
-- sum(fwd() * gy) by central differences (eps 1e-6) against the given
-- analytic gradients (a nil entry is skipped).  inputs are the float64
-- tensors fwd reads (any strides), perturbed in place and restored.  Every
-- element is probed, or opts.probes random ones per input; each must be
-- within tol * max(1, min(|numeric|, |analytic|)) (opts.tol, default 1e-6).
local function element(x, k) -- x's k-th element (row-major) as a 0-dim view
  local idx, r, e = {}, k - 1, x
  for d = x:dim(), 1, -1 do
    idx[d] = r % x.shape[d] + 1
    r = r // x.shape[d]
  end
  for d = 1, #idx do e = e[idx[d]] end
  return e
end

function T.kernel_gradcheck(what, fwd, inputs, analytic, gy, opts)
  opts = opts or {}
  local eps, tol = opts.eps or 1e-6, opts.tol or 1e-6
  local function loss() return dl.mul(fwd(), gy):sum():item() end
  for i, x in ipairs(inputs) do
    local g = analytic[i]
    if g then
      if fmt(g.shape) ~= fmt(x.shape) then
        error(what .. ": gradient " .. i .. " has shape " .. fmt(g.shape) .. ", input " .. fmt(x.shape), 2)
      end
      local gflat = g:contiguous():view(-1)
      local n = opts.probes or x:numel()
      for p = 1, n do
        local k = opts.probes and math.random(x:numel()) or p
        local e = element(x, k)
        local v = e:item()
        e:fill_(v + eps)
        local fp = loss()
        e:fill_(v - eps)
        local fm = loss()
        e:fill_(v)
        local num, ana = (fp - fm) / (2 * eps), gflat[k]:item()
        if not (math.abs(num - ana) <= tol * math.max(1, math.min(math.abs(num), math.abs(ana)))) then
          error(string.format("%s: input %d element %d: analytic %.10g, numeric %.10g", what, i, k, ana, num), 2)
        end
      end
    end
  end
end

-- Tolerances (rtol, atol) of a dl result against PyTorch's in a dtype: one
-- op's rounding ("op", the default; float16 and integers as float32) or a
-- long sum through oneDNN ("sum": convolution, batch norm, pooling).
local TORCH_TOL = {
  op = {float32 = {2e-5, 2e-6}, float64 = {1e-10, 1e-12}, bfloat16 = {2e-2, 2e-2}},
  sum = {float32 = {1e-4, 1e-4}, float64 = {1e-10, 1e-10}, bfloat16 = {2e-2, 2e-2}, float16 = {2e-3, 2e-3}},
}
function T.torch_tol(dtype, kind)
  local t = TORCH_TOL[kind or "op"]
  local r = t[dtype] or t.float32
  return r[1], r[2]
end

-- One case per oracle record c, named "<op> #i": run(c, rtol, atol, msg) with
-- rtol, atol = tol(dtype of c.y, float32 without one; tol defaults to
-- T.torch_tol); then one case that
-- every op in ops had records, so an oracle that emits none cannot pass.
function T.oracle_cases(data, tol, ops, run)
  local counts = {}
  for i, c in ipairs(data) do
    counts[c.op] = (counts[c.op] or 0) + 1
    T.case(string.format("%s #%d", c.op, i), function()
      local dt = c.y and c.y.dtype or "float32"
      local rtol, atol = (tol or T.torch_tol)(dt)
      run(c, rtol, atol, string.format("%s #%d (%s)", c.op, i, dt))
    end)
  end
  T.case("the oracle covered every op: " .. table.concat(ops, ", "), function()
    for _, op in ipairs(ops) do T.truthy((counts[op] or 0) > 0, "no cases for " .. op) end
  end)
end

-- Runs a shell command; returns whether it succeeded and its output
-- (stdout and stderr).
function T.sh(cmd)
  local p = assert(io.popen(cmd .. " 2>&1"))
  local out = p:read("a")
  local ok = p:close()
  return ok, out
end

-- The python of a venv under the build directory that can `import check`
-- (e.g. "onnxruntime"), made once with pip install <packages> into a
-- temporary name and then renamed, so a failed or concurrent attempt never
-- leaves a half venv.  nil and pip's last words when it cannot be made
-- (no python3-venv, PyPI unreachable).
function T.venv(name, check, packages)
  local build = os.getenv("DL_BUILD_DIR") or T.tmpdir()
  local venv = build .. "/" .. name
  local py = venv .. "/bin/python"
  if T.sh("'" .. py .. "' -c 'import " .. check .. "' ") then return py end
  local tmp = string.format("%s.tmp.%d", venv, math.random(1, 1 << 30))
  local ok, out = T.sh(string.format(
    "rm -rf '%s' && '%s' -m venv '%s' && '%s/bin/python' -m pip install -q --disable-pip-version-check %s",
    tmp, T.python(), tmp, tmp, packages))
  if not ok then
    T.sh("rm -rf '" .. tmp .. "'")
    return nil, out:sub(-1500)
  end
  T.sh(string.format("[ -e '%s' ] && rm -rf '%s' || mv '%s' '%s'", venv, tmp, tmp, venv))
  return py
end

function T.tmpdir()
  local d = os.getenv("DL_TEST_TMP") or "/tmp/dlua-test"
  os.execute("mkdir -p '" .. d .. "'")
  return d
end

-- A number field of /proc/self/status ("VmRSS", "VmHWM" in kB, "Threads").
function T.proc_status(field)
  for line in io.lines("/proc/self/status") do
    local v = line:match("^" .. field .. ":%s+(%d+)")
    if v then return tonumber(v) end
  end
end

-- A file's whole content as a string (its bytes); an error if it cannot be opened.
function T.read_file(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("a")
  f:close()
  return s
end

-- T.tmpdir()/name, emptied (a test file's own scratch folder).
function T.fresh_dir(name)
  local d = T.tmpdir() .. "/" .. name
  os.execute("rm -rf '" .. d .. "' && mkdir -p '" .. d .. "'")
  return d
end

-- Devices.  T.cuda is true when a GPU is usable.  A CUDA test file calls
-- T.require_cuda() first: without a GPU it prints why and exits with 77,
-- which ctest reports as skipped (never as passed).
T.cuda = dl.cuda.is_available()

function T.devices()
  if T.cuda then return {"cpu", "cuda"} end
  return {"cpu"}
end

-- T.skip_if(reason): given a reason (a string; nil or false: carry on), print
-- "SKIP: reason" and exit with 77, which ctest reports as skipped.
function T.skip_if(reason)
  if reason then
    print("SKIP: " .. reason)
    os.exit(77)
  end
end

function T.require_cuda()
  T.skip_if(not T.cuda and "no GPU on this machine" ..
            (dl.cuda.compiled and " (CUDA build)" or " (built without CUDA)"))
end

-- The tensors moved to dev, in order: a, b = T.to("cuda", a, b).
function T.to(dev, ...)
  local r = table.pack(...)
  for i = 1, r.n do r[i] = r[i]:to(dev) end
  return table.unpack(r, 1, r.n)
end

-- Runs fn("cpu") and fn("cuda") and compares what they return: a tensor, a
-- number or a (nested) table of them, element by element with
-- |cuda - cpu| <= atol + rtol * |cpu| (defaults 1e-5, 1e-5), and equal shapes
-- and dtypes.  fn builds its inputs on the CPU (deterministically) and moves
-- them with :to(dev).  Returned CUDA tensors are brought back with :cpu().
local function compare(a, b, rtol, atol, path, ord)
  if dl.is_tensor(a) then
    T.truthy(dl.is_tensor(b), path .. ": cuda gave " .. type(b) .. ", not a tensor")
    T.truthy(tostring(b.device):match("^cuda"), path .. ": result not on cuda (" .. tostring(b.device) .. ")")
    local bc = b:cpu()
    T.eq(tostring(a.dtype), tostring(bc.dtype), path .. ": dtype")
    T.eq(fmt(a:size()), fmt(bc:size()), path .. ": shape")
    if a:numel() == 0 then return end
    if ord then return T.close(bc, a, rtol, atol, path, ord) end
    local af, bf = a:to("float64"):reshape(-1), bc:to("float64"):reshape(-1)
    local bad = (af - bf):abs():gt(af:abs() * rtol + atol)
    bad = bad:logical_or(af:isnan():ne(bf:isnan()))
    if bad:any():item() then
      local i = bad:nonzero()[1][1]:item()
      error(string.format("%s: %d of %d elements differ; first at %d: cpu %.9g, cuda %.9g",
        path, bad:sum():item(), a:numel(), i, af[i]:item(), bf[i]:item()))
    end
  elseif type(a) == "table" then
    for k, v in pairs(a) do compare(v, b[k], rtol, atol, path .. "." .. tostring(k), ord) end
  elseif type(a) == "number" then
    local y = b
    if not ((a ~= a and y ~= y) or a == y or math.abs(a - y) <= atol + rtol * math.abs(a)) then
      error(string.format("%s: cpu %.9g, cuda %.9g", path, a, y))
    end
  else
    T.eq(a, b, path)
  end
end

-- compare(cpu, cuda, rtol, atol, path, ord) for results computed outside
-- T.same_on_devices.
T.compare_devices = compare

-- With ord (2 or "max") each tensor is compared norm-wise instead, as
-- T.close(cuda, cpu, rtol, atol, path, ord): the natural measure of long sums.
function T.same_on_devices(fn, rtol, atol, ord)
  local cpu = fn("cpu")
  local gpu = fn("cuda")
  compare(cpu, gpu, rtol or 1e-5, atol or 1e-5, "result", ord)
end

-- fn() run with a switch set to value and restored afterwards (also on
-- error): set(v) sets it and returns the previous value, as
-- dl._nn.batch_norm_impl and dl._nn.max_pool2d_nhwc do.  Returns fn's result.
function T.with_setting(set, value, fn)
  local before = set(value)
  local ok, r = pcall(fn)
  set(before)
  if not ok then error(r, 0) end
  return r
end

-- fn(n) run under dl.set_num_threads(n) for each n of counts, the thread
-- count restored afterwards (also on error).  Returns {fn(counts[1]), ...}.
function T.at_threads(counts, fn)
  local saved = dl.get_num_threads()
  local ok, r = pcall(function()
    local out = {}
    for i, n in ipairs(counts) do
      dl.set_num_threads(n)
      out[i] = fn(n)
    end
    return out
  end)
  dl.set_num_threads(saved)
  if not ok then error(r, 0) end
  return r
end

-- fn() (a tensor or a nested list of tensors) the same to the bit at each
-- thread count of counts (default {1, 2, 3}) as at the first.
function T.same_across_threads(fn, counts, what)
  counts = counts or {1, 2, 3}
  local runs = T.at_threads(counts, fn)
  local function same(a, b, path)
    if dl.is_tensor(b) then return T.same_bits(a, b, path) end
    for i = 1, #b do same(a[i], b[i], path .. "." .. i) end
  end
  for k = 2, #counts do
    same(runs[k], runs[1], string.format("%s: %d vs %d threads, result", what or "threads", counts[k], counts[1]))
  end
  return runs
end

-- A case comparing fn("cuda") with fn("cpu"); a no-op without a GPU.
function T.cuda_case(name, fn, rtol, atol, ord)
  if not T.cuda then return end
  T.case(name, function() T.same_on_devices(fn, rtol, atol, ord) end)
end

-- A training step of model: step(x, y) runs the forward (under autocast
-- when amp names a half dtype), crit, the backward (scaled when a GradScaler
-- is given) and the optimizer step, and returns the detached loss.  What a
-- CUDA graph captures in the graph and synchronisation tests.
function T.train_step(model, opt, crit, amp, scaler)
  return function(x, y)
    local loss
    if amp then
      loss = dl.autocast({dtype = amp}, function() return crit(model(x), y) end)
    else
      loss = crit(model(x), y)
    end
    opt:zero_grad()
    if scaler then
      scaler:scale(loss):backward()
      scaler:step(opt)
      scaler:update()
    else
      loss:backward()
      opt:step()
    end
    return loss:detach()
  end
end

function T.done()
  print(string.format("%d passed, %d failed", T.passed, T.failed))
  os.exit(T.failed == 0 and 0 or 1)
end

return T
