-- test_memory.lua - tensors are freed without explicit collectgarbage calls:
-- the bindings drive the collector from the growth of the bytes alive, and
-- <close> frees at once.
local T = require "testlib"

local status_kb = T.proc_status

T.case("10,000 temporary 4 MB tensors stay under 1 GB", function()
  local base = dl.memory_allocated()
  for i = 1, 10000 do
    local t = dl.empty(1024, 1024):fill_(i) -- 4 MB, written
    if i % 1000 == 0 then T.truthy(dl.memory_allocated() - base < 1024 * 1024 * 1024) end
  end
  local peak = status_kb("VmHWM")
  T.truthy(peak < 1024 * 1024, "peak RSS " .. peak .. " kB exceeds 1 GB")
  T.truthy(dl.memory_allocated() - base < 600 * 1024 * 1024, "live tensor bytes "
    .. dl.memory_allocated() - base)
end)

T.case("<close> frees immediately", function()
  collectgarbage() -- settle what the previous case left for the collector
  local base = dl.memory_allocated()
  for _ = 1, 100 do
    local t <close> = dl.empty(1024, 1024)
    T.eq(dl.memory_allocated() - base, 4 * 1024 * 1024)
  end
  T.eq(dl.memory_allocated(), base)
end)

T.case("full collections come from garbage tensors, not from tensors closed at once", function()
  collectgarbage()
  collectgarbage("stop") -- only the bindings' pacing collects now
  local ok, err = pcall(function()
    -- start just after a collection the pacing ran (its counters fresh)
    local fresh = false
    setmetatable({}, {__gc = function() fresh = true end})
    while not fresh do
      local t = dl.empty(1024, 1024) -- garbage
    end
    local collected = false
    setmetatable({}, {__gc = function() collected = true end}) -- garbage at once
    for _ = 1, 100 do
      local t <close> = dl.empty(1024, 1024) -- 400 MB made, 4 MB alive at a time
    end
    T.truthy(not collected, "a loop of closed tensors ran a full collection")
    for _ = 1, 100 do
      local t = dl.empty(1024, 1024) -- garbage: the bytes alive grow
    end
    T.truthy(collected, "400 MB of garbage tensors ran no collection")
    -- the backstop: 8 x 64 MB allocated, even with nothing left alive
    collected = false
    setmetatable({}, {__gc = function() collected = true end})
    for _ = 1, 200 do
      local t <close> = dl.empty(1024, 1024) -- 800 MB made
    end
    T.truthy(collected, "800 MB allocated ran no collection")
  end)
  collectgarbage("restart")
  if not ok then error(err, 0) end
end)

T.case("using a closed tensor is an error, not a crash", function()
  local keep
  do
    local t <close> = dl.ones(3)
    keep = t
  end
  T.raises(function() return keep:numel() end, "closed")
  T.raises(function() return keep:clone() end, "closed")
end)

T.done()
