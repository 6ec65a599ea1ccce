-- prepare_fashion_mnist.lua - writes Fashion-MNIST (or MNIST) as an
-- ImageFolder tree of grayscale PNGs: <dest>/train/<class>/<n>.png from the
-- training IDX files and <dest>/val/<class>/<n>.png from the t10k files, one
-- folder per class name ("/" in a name becomes "_": "T-shirt_top").
-- dl.data.ImageFolder{root = dest .. "/train"} then reads it back; its class
-- indices follow the sorted folder names, so map them through `classes`.
--
-- Usage: dlua scripts/prepare_fashion_mnist.lua [src] [dest] [--limit N]
--   src   folder with {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]
--         (default /usr/share/datasets/fashion-mnist, Debian's
--         dataset-fashion-mnist package)
--   dest  output folder (default ./data/fashion-mnist)
--   --limit N  only the first N images of each split (for quick checks)
local dl = require "dl"

local pos, limit = {}, nil
local i = 1
while arg and arg[i] do
  if arg[i] == "--limit" then
    limit = tonumber(arg[i + 1])
    if not limit or limit < 1 then error("prepare_fashion_mnist: --limit needs a positive number") end
    i = i + 1
  elseif arg[i]:sub(1, 2) == "--" then
    error("prepare_fashion_mnist: unknown option " .. arg[i] .. " (expected --limit N)")
  else
    pos[#pos + 1] = arg[i]
  end
  i = i + 1
end
local src = pos[1] or "/usr/share/datasets/fashion-mnist"
local dest = pos[2] or "./data/fashion-mnist"

local function sh_quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

local t0 = dl.clock()
for _, split in ipairs{{"train", true}, {"val", false}} do
  local name, train = split[1], split[2]
  local ds = dl.data.mnist(src, {train = train})
  local folders = {}
  for k, c in ipairs(ds.classes) do folders[k] = c:gsub("/", "_") end
  local n = #ds
  if limit and limit < n then n = limit end
  local labels = ds.targets:tolist()
  local counts = {}
  for k = 1, n do
    local c = labels[k]
    if not counts[c] then -- a class folder is made when its first image comes
      local d = dest .. "/" .. name .. "/" .. folders[c]
      assert(os.execute("mkdir -p " .. sh_quote(d)), "prepare_fashion_mnist: cannot create " .. d)
    end
    dl.image.save(ds.data[k], string.format("%s/%s/%s/%05d.png", dest, name, folders[c], k))
    counts[c] = (counts[c] or 0) + 1
  end
  local parts = {}
  for k = 1, #folders do parts[k] = folders[k] .. "=" .. (counts[k] or 0) end
  print(string.format("%s: %d images in %d classes (%s)", name, n, #folders, table.concat(parts, ", ")))
end
print(string.format("wrote %s in %.1f s", dest, dl.clock() - t0))
