-- dl.train.data: the image folders and transforms the training scripts
-- share, so training, evaluation and prediction see images the same way.
--
--   local tf = data.transform{image_size = 224, resize = 256, augment = false}
--   local ds = data.folder("--data", "./data/train", tf)     -- raises one line
--   local idx = data.spread(#ds, 1000)                        -- evenly spaced subset
--
-- Invariants: the evaluation pipeline is the seed's (Resize(resize) then
-- CenterCrop(image_size), ToTensor, Normalize with ImageNet's mean/std);
-- augment swaps the first two for RandomResizedCrop(image_size) +
-- RandomHorizontalFlip.  Images are loaded as RGB (a grayscale file gives 3
-- equal channels).  Errors are one line starting with the option's name.
local dl = require "dl"

local D = {}

D.MEAN = {0.485, 0.456, 0.406}
D.STD = {0.229, 0.224, 0.225}

-- The shorter side before the centre crop: the seed's 256/224 ratio.
function D.default_resize(image_size) return math.floor(image_size * 256 / 224 + 0.5) end

function D.transform(o)
  local T = dl.transforms
  local size = o.image_size
  local resize = o.resize or D.default_resize(size)
  local steps
  if o.augment then
    steps = {T.RandomResizedCrop(size), T.RandomHorizontalFlip()}
  else
    steps = {T.Resize(resize), T.CenterCrop(size)}
  end
  steps[#steps + 1] = T.ToTensor()
  steps[#steps + 1] = T.Normalize(o.mean or D.MEAN, o.std or D.STD)
  return T.Compose(steps)
end

-- An ImageFolder of `dir` for option `what`; a missing, empty or unreadable
-- folder raises "what dir: reason".
function D.folder(what, dir, transform)
  if type(dir) ~= "string" or dir == "" then error(what .. ": a folder is required", 0) end
  local ok, ds = pcall(dl.data.ImageFolder, {root = dir, transform = transform})
  if not ok then
    local msg = tostring(ds):gsub("^[^:]*:%d+: ", ""):gsub("\n.*", "")
    error(string.format("%s %s: %s", what, dir, msg), 0)
  end
  if #ds == 0 then error(string.format("%s %s: no images found", what, dir), 0) end
  return ds
end

-- k indices spread evenly over 1..n (all of them when k is nil, 0 or >= n);
-- the folder is sorted by class, so every class keeps its share.
function D.spread(n, k)
  local idx = {}
  if not k or k <= 0 or k >= n then
    for i = 1, n do idx[i] = i end
    return idx
  end
  for i = 1, k do idx[i] = (i - 1) * n // k + 1 end
  return idx
end

return D
