-- test_soak_loader.lua - soak: a DataLoader over an ImageFolder (PNG files,
-- the C pipeline, 2 worker threads) is created, iterated partially (1 to 3
-- batches, then `break`) and dropped, 400 times, with no close() and no
-- collectgarbage calls.  The process's threads (/proc/self/task), open file
-- descriptors (/proc/self/fd) and RSS must not grow: after warm-up (the
-- first 200 rounds: glibc's per-thread malloc arenas settle by then; on a
-- loaded machine RSS after a collection still rose 1.4 MB from round 100 to
-- 200, then 0.8, 0, 0.4 and 0 MB a hundred rounds) the thread and fd counts
-- never exceed their warm-up peak, the RSS peak of the last 100 rounds is
-- within 5% (and 6 MB) of the warm-up peak, and after a full collection at
-- rounds 200 and 400 (the only collectgarbage calls) RSS is within 3 MB: a
-- leak of 16 KB a loader would exceed it.  A loader that kept its threads or
-- files until Lua's collector got round to it would fail the thread or fd
-- bound within a few rounds.
-- Label: long.  Also run under the sanitizer pass (leaks at exit).
local T = require "testlib"
local D = dl.data

local status = T.proc_status
local pid
do
  local f <close> = assert(io.open("/proc/self/stat"))
  pid = f:read("l"):match("^(%d+)")
end
-- A joined thread can still be counted for a moment: the kernel releases an
-- exiting thread's task a little after pthread_join returns (and libgomp's
-- helper threads of a finished worker exit unjoined).  So the count is the
-- least of several reads within ~200 ms: a transient is gone by then, a
-- thread kept alive is not.
local function threads()
  local least = status("Threads")
  for _ = 1, 20 do
    if least <= 1 then break end
    local t0 = dl.clock()
    while dl.clock() - t0 < 0.01 do end
    least = math.min(least, status("Threads"))
  end
  return least
end
local function fds_now() -- the ls's own pipe is one of them, the same every time
  local p = io.popen("ls -1 /proc/" .. pid .. "/fd | wc -l")
  local n = tonumber(p:read("a"))
  p:close()
  return n
end
-- A count above `bound` is read again a few times within ~200 ms and the
-- least kept: a file a finishing worker still had open is closed by then (CI
-- saw one such transient in 200 rounds), a file kept open is not.
local function fds(bound)
  local least = fds_now()
  for _ = 1, 5 do
    if least <= bound then break end
    local t0 = dl.clock()
    while dl.clock() - t0 < 0.04 do end
    least = math.min(least, fds_now())
  end
  return least
end
local function rss_kb() return status("VmRSS") end

local root = T.tmpdir() .. "/soak_loader"
os.execute("rm -rf '" .. root .. "'")
dl.manual_seed(0)
for c = 1, 3 do
  os.execute("mkdir -p '" .. root .. "/class" .. c .. "'")
  for i = 1, 12 do
    dl.image.save(dl.randint(0, 256, {3, 20, 24}):to(dl.uint8), string.format("%s/class%d/%02d.png", root, c, i))
  end
end

T.case("400 partially iterated, dropped DataLoaders leave no threads, fds or memory behind", function()
  local tf = dl.transforms.Compose({dl.transforms.Resize(16), dl.transforms.CenterCrop(16), dl.transforms.ToTensor()})
  local warm = {threads = 0, fds = 0, rss = 0}
  local late_rss, max_threads, max_fds = 0, 0, 0
  local seen = 0
  for round = 1, 400 do
    local loader = D.DataLoader(D.ImageFolder({root = root, transform = tf}),
      {batch_size = 4, shuffle = true, num_workers = 2, seed = round})
    local want = round % 3 + 1
    for b, x in loader:iter(1) do
      seen = seen + x.shape[1]
      if b >= want then break end
    end
    loader = nil -- dropped, never closed
    local th, fd, r = threads(), fds(round <= 200 and math.huge or warm.fds), rss_kb()
    if round == 200 then
      collectgarbage("collect")
      warm.collected = rss_kb()
    end
    if round <= 200 then
      warm.threads, warm.fds, warm.rss = math.max(warm.threads, th), math.max(warm.fds, fd), math.max(warm.rss, r)
    else
      max_threads, max_fds = math.max(max_threads, th), math.max(max_fds, fd)
      if round > 300 then late_rss = math.max(late_rss, r) end
    end
  end
  collectgarbage("collect")
  local end_collected = rss_kb()
  print(string.format("after a full collection: RSS %.1f MB at round 200, %.1f MB at round 400",
    warm.collected / 1024, end_collected / 1024))
  print(string.format("threads: warm-up peak %d, later peak %d; fds: %d, %d; RSS peak %.1f MB -> %.1f MB; %d images",
    warm.threads, max_threads, warm.fds, max_fds, warm.rss / 1024, late_rss / 1024, seen))
  T.truthy(max_threads <= warm.threads, "threads grew: " .. warm.threads .. " -> " .. max_threads)
  T.truthy(max_fds <= warm.fds, "file descriptors grew: " .. warm.fds .. " -> " .. max_fds)
  T.truthy(late_rss <= math.max(warm.rss * 1.05, warm.rss + 6 * 1024), "RSS peak grew")
  T.truthy(end_collected <= warm.collected + 3072, "RSS after a full collection grew by more than 3 MB")
end)

os.execute("rm -rf '" .. root .. "'")
T.done()
