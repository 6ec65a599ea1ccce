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
  local collected = false
  setmetatable({}, {__gc = function() collected = true end}) -- garbage at once
  for _ = 1, 100 do
    local t <close> = dl.empty(1024, 1024) -- 400 MB made, none alive for long
  end
  T.truthy(not collected, "a loop of closed tensors ran a full collection")
  for _ = 1, 100 do
    local t = dl.empty(1024, 1024) -- garbage: the bytes alive grow
  end
  T.truthy(collected, "400 MB of garbage tensors ran no collection")
  collectgarbage("restart")
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
