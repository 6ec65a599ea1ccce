-- test_cpu_cache.lua - freed host buffers of 64 KiB and more are kept and
-- handed out again (src/core/cpu_cache.c): a repeated size is served from the
-- cache, the cache stays within its bound, dl.empty_cache() returns it, and
-- DLUA_CPU_CACHE=0 turns it off.  AddressSanitizer builds run without it.
local T = require "testlib"

local MB = 1024 * 1024
local function cached() return dl.memory_reserved() - dl.memory_allocated() end

-- Is the cache on in this build?  (Off under AddressSanitizer.)
dl.empty_cache()
do
  local t <close> = dl.empty(MB // 4)
end
local on = cached() > 0
print("block cache " .. (on and "on" or "off (sanitizer build or DLUA_CPU_CACHE=0)"))

T.case("a freed block serves the next request of its size", function()
  dl.empty_cache()
  T.eq(cached(), 0)
  do
    local t <close> = dl.empty(MB) -- 4 MB
  end
  if not on then return T.eq(cached(), 0) end
  T.eq(cached(), 4 * MB)
  local t <close> = dl.empty(MB)
  T.eq(cached(), 0, "the 4 MB request took the cached block")
  -- a request up to an eighth smaller than a cached block takes it; a
  -- smaller one gets a new block and leaves the cached one alone
  do
    local u <close> = dl.empty(2 * MB) -- 8 MB
  end
  T.eq(cached(), 8 * MB)
  do
    local near <close> = dl.empty(2 * MB - MB // 8) -- 7.5 MB
    T.eq(cached(), 0, "7.5 MB took the 8 MB block")
  end
  -- (the block is filed again under the 7.5 MB it last served)
  T.eq(cached(), 4 * (2 * MB - MB // 8))
  local reserved = dl.memory_reserved()
  local small <close> = dl.empty(MB) -- 4 MB: 7.5 MB is more than 4.5
  T.eq(cached(), 4 * (2 * MB - MB // 8), "a 4 MB request left the larger block alone")
  T.eq(dl.memory_reserved(), reserved + 4 * MB)
end)

T.case("small tensors bypass the cache", function()
  dl.empty_cache()
  for _ = 1, 100 do
    local t <close> = dl.empty(1000) -- 4000 bytes
  end
  T.eq(cached(), 0)
end)

T.case("reused blocks hold what the new tensor is given, not the old values", function()
  dl.empty_cache()
  do
    local t <close> = dl.full({512, 512}, 7.5)
  end
  local z <close> = dl.zeros(512, 512)
  T.eq(z:abs():sum():item(), 0)
  do
    local t <close> = dl.full({512, 512}, -3)
  end
  local o <close> = dl.ones(512, 512)
  T.eq(o:sum():item(), 512 * 512)
  -- an op writing into a reused block: the result is the op's, every element
  local a = dl.arange(0, 512 * 512):reshape(512, 512):float()
  do
    local t <close> = dl.full({512, 512}, 99)
  end
  local b <close> = a * 2
  T.eq(b:sum():item(), 2 * (512 * 512 - 1) * 512 * 512 / 2)
end)

T.case("a stream of ever-new sizes keeps the cache within its bound", function()
  dl.empty_cache()
  collectgarbage()
  -- 400 sizes from 1 MB to 26 MB, each freed at once: none fits a cached
  -- block and 5 GB pass through.  The cache may keep the larger of 256 MB
  -- and the most bytes ever live at once (under 64 MB in this file); it
  -- frees its oldest blocks beyond that.
  local worst = 0
  for i = 1, 400 do
    local t <close> = dl.empty((MB + i * 64 * 1024) // 4)
    worst = math.max(worst, cached())
  end
  local peak_live = 64 * MB -- generous: the largest live set of this file
  T.truthy(worst <= math.max(256 * MB, peak_live) + 27 * MB,
    "cache grew to " .. worst // MB .. " MB")
  if on then T.truthy(worst >= 200 * MB, "cache held only " .. worst // MB .. " MB") end
  local held = cached()
  T.eq(dl.empty_cache(), held)
  T.eq(cached(), 0)
end)

T.case("dl.empty_cache returns every cached byte", function()
  for _ = 1, 4 do
    local t <close> = dl.empty(3 * MB)
  end
  local before = cached()
  T.eq(dl.empty_cache(), before)
  T.eq(cached(), 0)
  T.eq(dl.empty_cache(), 0)
end)

T.case("training twice gives the same losses with the cache on and off", function()
  local function train(env)
    local script = os.tmpname()
    local f = assert(io.open(script, "w"))
    f:write([[
      dl.manual_seed(3)
      local nn = dl.nn
      local m = nn.Sequential(nn.Conv2d(3, 32, 3, {padding = 1}), nn.BatchNorm2d(32), nn.ReLU(),
        nn.Conv2d(32, 32, 3, {padding = 1}), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 4))
      local opt = dl.optim.SGD(m:parameters(), {lr = 0.1, momentum = 0.9})
      local x, y = dl.randn(16, 3, 32, 32), dl.randint(1, 5, {16})
      for _ = 1, 4 do
        opt:zero_grad()
        local loss = dl.nn.functional.cross_entropy(m(x), y)
        loss:backward()
        opt:step()
        io.write(string.format("%.9g\n", loss:item()))
      end
      io.write(string.format("cached %d\n", dl.memory_reserved() - dl.memory_allocated()))
    ]])
    f:close()
    local p = assert(io.popen(env .. " " .. arg[-1] .. " " .. script .. " 2>&1"))
    local out = p:read("a")
    p:close()
    os.remove(script)
    return out
  end
  local with, without = train("DLUA_CPU_CACHE=1"), train("DLUA_CPU_CACHE=0")
  local losses_on, cached_on = with:match("^(.-)cached (%d+)")
  local losses_off, cached_off = without:match("^(.-)cached (%d+)")
  T.truthy(losses_on and losses_off, "unexpected output:\n" .. with .. "\n" .. without)
  T.eq(losses_on, losses_off)
  T.eq(tonumber(cached_off), 0, "DLUA_CPU_CACHE=0 keeps nothing")
  if on then T.truthy(tonumber(cached_on) > 0, "the cache kept the step's buffers") end
end)

T.done()
