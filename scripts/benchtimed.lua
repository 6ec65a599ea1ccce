-- benchtimed.lua - the timing rule of the benchmark scripts, loaded with
-- dofile from the script's folder:
--
--   local timed = dofile(dir .. "/benchtimed.lua")
--   local best_ms, median_ms = timed(f, runs)
--
-- f runs once as a warm-up, then `runs` times; the times are wall-clock
-- (dl.clock) in milliseconds.
local function median(xs)
  local s = {table.unpack(xs)}
  table.sort(s)
  local n = #s
  return n % 2 == 1 and s[(n + 1) // 2] or (s[n // 2] + s[n // 2 + 1]) / 2
end

return function(f, runs)
  f() -- warm-up
  local ts = {}
  for r = 1, runs do
    local t0 = dl.clock()
    f()
    ts[r] = (dl.clock() - t0) * 1e3
  end
  return math.min(table.unpack(ts)), median(ts)
end
