-- test_transforms.lua - dl.transforms against torchvision on Pillow images
-- (uint8 results compared exactly, float results to float32 rounding), the
-- float (tensor) forms against torchvision's tensor functions, random
-- transforms' rules, fusion through Compose, batches, DCT-scaled decoding and
-- bad arguments.
local T = require "testlib"
local dl = require "dl"
local TF = dl.transforms
local F = TF.functional

local dir = T.fresh_dir("transforms")

local ref = T.torch(string.format([==[
import numpy as np, torch, warnings
warnings.filterwarnings("ignore")
from PIL import Image
import torchvision.transforms as T
import torchvision.transforms.functional as F
I = T.InterpolationMode
D = %q
rng = np.random.RandomState(5)
x = np.linspace(0, 1, 53)[None, :, None]; y = np.linspace(0, 1, 37)[:, None, None]
a = (127 + 70 * np.sin(9 * x + 5 * y + np.arange(3) * 2) + rng.randn(37, 53, 3) * 25).clip(0, 255).astype(np.uint8)
Image.fromarray(a).save(D + '/img.png')
im = Image.open(D + '/img.png').convert('RGB')

def u8(p):
    arr = np.array(p)
    if arr.ndim == 2: arr = arr[:, :, None]
    return torch.from_numpy(arr).permute(2, 0, 1).contiguous()

r = {}
r['resize20'] = u8(T.Resize(20)(im))
r['resize_hw'] = u8(T.Resize((31, 17))(im))
r['resize_near'] = u8(T.Resize((31, 17), interpolation=I.NEAREST)(im))
r['resize_bic'] = u8(T.Resize((31, 17), interpolation=I.BICUBIC)(im))
r['resize_up'] = u8(T.Resize((80, 90))(im))
r['resize_up_bic'] = u8(T.Resize((61, 70), interpolation=I.BICUBIC)(im))
r['resize_big_down'] = u8(T.Resize((5, 4))(im))
r['resize_max'] = u8(T.Resize(20, max_size=25)(im))
r['cc15'] = u8(T.CenterCrop(15)(im))
r['cc_wide'] = u8(T.CenterCrop((20, 60))(im))
r['cc_big'] = u8(T.CenterCrop(64)(im))
r['cc_odd'] = u8(T.CenterCrop((34, 50))(im))
r['crop'] = u8(F.crop(im, 3, 5, 10, 12))
r['crop_out'] = u8(F.crop(im, -2, -3, 20, 25))
r['rcrop'] = u8(F.resized_crop(im, 4, 6, 20, 30, [16, 16]))
r['rcrop_bic'] = u8(F.resized_crop(im, 4, 6, 20, 30, [19, 41], interpolation=I.BICUBIC))
r['pad_c'] = u8(F.pad(im, [1, 2, 3, 4], fill=7))
r['pad_e'] = u8(F.pad(im, [2, 3], padding_mode='edge'))
r['pad_r'] = u8(F.pad(im, [3, 1, 2, 4], padding_mode='reflect'))
r['pad_s'] = u8(F.pad(im, 4, padding_mode='symmetric'))
r['hflip'] = u8(F.hflip(im))
r['vflip'] = u8(F.vflip(im))
r['gray1'] = u8(T.Grayscale()(im))
r['gray3'] = u8(T.Grayscale(3)(im))
for f in (0.6, 1.7):
    r['bright%%g' %% f] = u8(F.adjust_brightness(im, f))
for f in (0.5, 1.8):
    r['contrast%%g' %% f] = u8(F.adjust_contrast(im, f))
for f in (0.3, 1.9):
    r['sat%%g' %% f] = u8(F.adjust_saturation(im, f))
for f in (-0.3, 0.2, 0.45):
    r['hue%%g' %% f] = u8(F.adjust_hue(im, f))
t = T.ToTensor()(im)
r['totensor'] = t
r['pipeline'] = T.Compose([T.Resize(24), T.CenterCrop(20), T.ToTensor(),
                           T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])(im)
r['pipe_flip'] = T.Compose([T.Resize((30, 40)), T.RandomHorizontalFlip(1.0), T.CenterCrop((20, 25)), T.RandomVerticalFlip(1.0), T.ToTensor()])(im)
r['norm_f'] = F.normalize(t, [0.5, 0.4, 0.3], [0.2, 0.25, 0.3])
r['f_bright'] = F.adjust_brightness(t, 1.4)
r['f_contrast'] = F.adjust_contrast(t, 0.6)
r['f_sat'] = F.adjust_saturation(t, 1.5)
r['f_hue'] = F.adjust_hue(t, 0.27)
r['f_gray'] = F.rgb_to_grayscale(t)
# a photo-sized JPEG for the DCT-scaled decode
xx = np.linspace(0, 1, 400)[None, :, None]; yy = np.linspace(0, 1, 300)[:, None, None]
big = (127 + 90 * np.sin(7 * xx + 3 * yy + np.arange(3))).clip(0, 255).astype(np.uint8)
Image.fromarray(big).save(D + '/big.jpg', quality=92)
bim = Image.open(D + '/big.jpg').convert('RGB')
r['big_resize'] = T.Compose([T.Resize(60), T.CenterCrop(56), T.ToTensor()])(bim)
small = big[100:190, 50:121]
Image.fromarray(small).save(D + '/s420.jpg', quality=90)
Image.fromarray(small).save(D + '/s422.jpg', quality=90, subsampling=1)
Image.fromarray(small).save(D + '/s444p.jpg', quality=90, subsampling=0, progressive=True)
Image.fromarray(small).convert('L').save(D + '/sgray.jpg', quality=90)
Image.fromarray(small).convert('CMYK').save(D + '/scmyk.jpg', quality=90)
emit(r)
]==], dir))

local img = dl.image.load(dir .. "/img.png")

local function exact(got, key)
  T.match_torch(got, ref[key], 0, 0, key)
end

local function mae(a, b) return (a:to(dl.float32) - b:to(dl.float32)):abs():mean():item() end

T.case("Resize agrees with torchvision on Pillow images (exactly)", function()
  exact(TF.Resize(20)(img), "resize20")
  exact(TF.Resize({31, 17})(img), "resize_hw")
  exact(TF.Resize({31, 17}, {interpolation = "nearest"})(img), "resize_near")
  exact(TF.Resize({31, 17}, {interpolation = "bicubic"})(img), "resize_bic")
  exact(TF.Resize({80, 90})(img), "resize_up")
  exact(TF.Resize({61, 70}, {interpolation = "bicubic"})(img), "resize_up_bic")
  exact(TF.Resize({5, 4})(img), "resize_big_down")
  exact(TF.Resize(20, {max_size = 25})(img), "resize_max")
  exact(F.resize(img, 20), "resize20")
  -- same size: the image itself (values)
  T.tensor_eq(TF.Resize({37, 53})(img), img, 0)
end)

T.case("crops and padding agree with torchvision", function()
  exact(TF.CenterCrop(15)(img), "cc15")
  exact(TF.CenterCrop({20, 60})(img), "cc_wide")
  exact(TF.CenterCrop(64)(img), "cc_big")
  exact(TF.CenterCrop({34, 50})(img), "cc_odd")
  exact(F.crop(img, 4, 6, 10, 12), "crop")           -- torchvision's (3, 5) 0-based
  exact(F.crop(img, -1, -2, 20, 25), "crop_out")     -- (-2, -3) 0-based, zero padded
  exact(F.resized_crop(img, 5, 7, 20, 30, 16), "rcrop")
  exact(F.resized_crop(img, 5, 7, 20, 30, {19, 41}, {interpolation = "bicubic"}), "rcrop_bic")
  exact(F.pad(img, {1, 2, 3, 4}, {fill = 7}), "pad_c")
  exact(F.pad(img, {2, 3}, {padding_mode = "edge"}), "pad_e")
  exact(F.pad(img, {3, 1, 2, 4}, {padding_mode = "reflect"}), "pad_r")
  exact(F.pad(img, 4, {padding_mode = "symmetric"}), "pad_s")
  exact(F.hflip(img), "hflip")
  exact(F.vflip(img), "vflip")
end)

T.case("colour transforms on uint8 images equal Pillow's", function()
  exact(TF.Grayscale()(img), "gray1")
  exact(TF.Grayscale(3)(img), "gray3")
  exact(F.rgb_to_grayscale(img), "gray1")
  exact(F.adjust_brightness(img, 0.6), "bright0.6")
  exact(F.adjust_brightness(img, 1.7), "bright1.7")
  exact(F.adjust_contrast(img, 0.5), "contrast0.5")
  exact(F.adjust_contrast(img, 1.8), "contrast1.8")
  exact(F.adjust_saturation(img, 0.3), "sat0.3")
  exact(F.adjust_saturation(img, 1.9), "sat1.9")
  for _, h in ipairs{-0.3, 0.2, 0.45} do
    local got, want = F.adjust_hue(img, h), T.from_torch(ref["hue" .. h])
    T.truthy(mae(got, want) <= 1 / 255, "hue " .. h .. " mae " .. mae(got, want))
    local d = (got:to(dl.int32) - want:to(dl.int32)):abs()
    T.truthy(d:gt(1):sum():item() <= 0.001 * d:numel(), "hue " .. h .. " off by more than 1")
  end
  -- ColorJitter with one fixed factor is that adjustment
  exact(TF.ColorJitter({brightness = {0.6, 0.6}})(img), "bright0.6")
  exact(TF.ColorJitter(nil, {1.8, 1.8})(img), "contrast1.8")
  -- the input is never modified
  local copy = img:clone()
  F.adjust_brightness(img, 0.5)
  TF.ColorJitter(0.5, 0.5, 0.5, 0.2)(img)
  T.tensor_eq(img, copy, 0)
end)

T.case("ToTensor, Normalize and the fused pipeline", function()
  T.match_torch(TF.ToTensor()(img), ref.totensor, 0, 0, "ToTensor")
  local tf = TF.Compose{TF.Resize(24), TF.CenterCrop(20), TF.ToTensor(),
    TF.Normalize({0.485, 0.456, 0.406}, {0.229, 0.224, 0.225})}
  T.match_torch(tf(img), ref.pipeline, 0, 1e-6, "Resize+CenterCrop+ToTensor+Normalize")
  T.match_torch(TF.Compose{TF.Resize({30, 40}), TF.RandomHorizontalFlip(1), TF.CenterCrop({20, 25}),
    TF.RandomVerticalFlip(1), TF.ToTensor()}(img), ref.pipe_flip, 0, 0, "flips between crops")
  local t = TF.ToTensor()(img)
  T.match_torch(F.normalize(t, {0.5, 0.4, 0.3}, {0.2, 0.25, 0.3}), ref.norm_f, 0, 1e-6, "normalize float")
  -- a Lua function between C transforms runs in the calling thread
  local seen
  local mixed = TF.Compose{TF.ToTensor(), function(x) seen = x.dtype; return x * 2 end,
    TF.Normalize({1}, {2})}
  local m = mixed(img)
  T.eq(seen, dl.float32)
  T.tensor_eq(m, (TF.ToTensor()(img) * 2 - 1) / 2, 1e-6)
  T.eq(#mixed, 3)
end)

T.case("float (tensor) colour forms follow torchvision's tensor functions", function()
  local t = TF.ToTensor()(img)
  T.match_torch(F.adjust_brightness(t, 1.4), ref.f_bright, 0, 1e-6, "brightness")
  T.match_torch(F.adjust_contrast(t, 0.6), ref.f_contrast, 0, 1e-5, "contrast")
  T.match_torch(F.adjust_saturation(t, 1.5), ref.f_sat, 0, 1e-5, "saturation")
  T.match_torch(F.adjust_hue(t, 0.27), ref.f_hue, 0, 1e-5, "hue")
  T.match_torch(F.rgb_to_grayscale(t), ref.f_gray, 0, 1e-6, "grayscale")
end)

T.case("JPEG decoding in the pipeline uses DCT scaling and stays close", function()
  local tf = TF.Compose{TF.Resize(60), TF.CenterCrop(56), TF.ToTensor()}
  local fused = tf._stages[1].pipe:apply_file(dir .. "/big.jpg")
  local plain = tf(dl.image.load(dir .. "/big.jpg"))
  local want = T.from_torch(ref.big_resize)
  T.shape_eq(fused, {3, 56, 56})
  T.truthy(mae(plain, want) == 0, "full decode path equals torchvision")
  local e = mae(fused, want)
  T.truthy(e <= 1.5 / 255, "DCT-scaled path mean error " .. e * 255 .. "/255")
  T.truthy(e > 0, "the scaled decoder was used")
end)

T.case("partial JPEG decoding gives the full decode's pixels", function()
  for _, f in ipairs{"s420.jpg", "s422.jpg", "s444p.jpg", "sgray.jpg", "scmyk.jpg", "big.jpg"} do
    local path = dir .. "/" .. f
    for _, mode in ipairs{"RGB", "L"} do
      local full = dl.image.load(path, {mode = mode})
      local H, W = full.shape[2], full.shape[3]
      for _, b in ipairs{{1, 1, H, W}, {2, 3, H - 3, W - 5}, {H // 3, W // 4, H // 2, W // 3}, {H, W, 1, 1},
        {9, 17, 7, 5}, {30, 33, 17, 21}} do
        local pipe = dl._transforms.pipeline({{kind = "crop", crop = b}})
        local got = pipe:apply_file(path, mode == "RGB" and 3 or 1)
        T.tensor_eq(got, F.crop(full, b[1], b[2], b[3], b[4]), 0, f .. " " .. mode .. " crop " .. table.concat(b, ","))
      end
      local rrc = TF.Compose{TF.RandomResizedCrop(20), TF.ToTensor()}
      dl.manual_seed(4)
      local a = rrc._stages[1].pipe:apply_file(path, mode == "RGB" and 3 or 1)
      dl.manual_seed(4)
      local b = rrc(full)
      if f == "big.jpg" then -- a large crop: decoded at 1/2 scale, close but not equal
        T.truthy(mae(a, b) <= 1.5 / 255, f .. " DCT-scaled RandomResizedCrop: " .. mae(a, b) * 255)
      else
        T.truthy(a:equal(b), f .. " " .. mode .. " RandomResizedCrop differs")
      end
    end
  end
end)

T.case("random transforms follow torchvision's rules", function()
  -- RandomResizedCrop = resized_crop with get_params' box, from the same stream
  for seed = 1, 5 do
    dl.manual_seed(seed)
    local t, l, h, w = TF.RandomResizedCrop.get_params(img, {0.08, 1}, {3 / 4, 4 / 3})
    T.truthy(t >= 1 and l >= 1 and t + h - 1 <= 37 and l + w - 1 <= 53, "box inside")
    dl.manual_seed(seed)
    local got = TF.RandomResizedCrop(24)(img)
    T.tensor_eq(got, F.resized_crop(img, t, l, h, w, 24), 0)
  end
  -- the fallback: impossible scale -> a centred crop of the widest allowed ratio
  T.eq(table.concat({TF.RandomResizedCrop.get_params(img, {2, 3})}, ","), "1,3,37,49")
  local sq = dl.zeros({3, 30, 35}, {dtype = dl.uint8})
  T.eq(table.concat({TF.RandomResizedCrop.get_params(sq, {2, 3})}, ","), "1,1,30,35")
  local tall = dl.zeros({3, 100, 10}, {dtype = dl.uint8})
  T.eq(table.concat({TF.RandomResizedCrop.get_params(tall, {2, 3})}, ","), "44,1,13,10")
  -- flips
  T.tensor_eq(TF.RandomHorizontalFlip(1)(img), F.hflip(img), 0)
  T.tensor_eq(TF.RandomHorizontalFlip(0)(img), img, 0)
  T.tensor_eq(TF.RandomVerticalFlip{p = 1}(img), F.vflip(img), 0)
  local flips = 0
  for _ = 1, 200 do
    if TF.RandomHorizontalFlip()(img):equal(F.hflip(img)) then flips = flips + 1 end
  end
  T.truthy(flips > 60 and flips < 140, "p=0.5 flips " .. flips .. "/200")
  -- RandomCrop with padding: some window of the padded image
  local small = img:narrow(2, 1, 10):narrow(3, 1, 12)
  local padded = F.pad(small, 4)
  for _ = 1, 3 do
    local c = TF.RandomCrop({10, 12}, {padding = 4})(small)
    T.shape_eq(c, {3, 10, 12})
    local found = false
    for i = 1, 9 do
      for j = 1, 9 do
        if not found and padded:narrow(2, i, 10):narrow(3, j, 12):equal(c) then found = true end
      end
    end
    T.truthy(found, "crop is a window of the padded image")
  end
  -- pad_if_needed pads both sides (torchvision's rule)
  T.shape_eq(TF.RandomCrop({40, 60}, {pad_if_needed = true})(img), {3, 40, 60})
  -- same seed, same result
  local aug = TF.Compose{TF.RandomResizedCrop(20), TF.RandomHorizontalFlip(), TF.ColorJitter(0.4, 0.4, 0.4, 0.1),
    TF.ToTensor()}
  dl.manual_seed(11)
  local a = aug(img)
  dl.manual_seed(11)
  T.tensor_eq(aug(img), a, 0)
  T.truthy(not aug(img):equal(a), "a new draw differs")
  T.truthy(a:min():item() >= 0 and a:max():item() <= 1, "jittered values stay in [0, 1]")
end)

T.case("batches share one draw of the random parameters", function()
  local batch = dl.stack({img, F.hflip(img), F.vflip(img)}, 1)
  local r = TF.Resize({31, 17})(batch)
  T.shape_eq(r, {3, 3, 31, 17})
  T.tensor_eq(r[1], TF.Resize({31, 17})(img), 0)
  T.tensor_eq(r[2], TF.Resize({31, 17})(F.hflip(img)), 0)
  dl.manual_seed(3)
  local c = TF.RandomResizedCrop(16)(batch)
  dl.manual_seed(3)
  local t, l, h, w = TF.RandomResizedCrop.get_params(img)
  for k = 1, 3 do T.tensor_eq(c[k], F.resized_crop(batch[k], t, l, h, w, 16), 0) end
  local f = TF.Compose{TF.ToTensor(), TF.Normalize({0.5}, {0.5})}(batch)
  T.eq(f.dtype, dl.float32)
  T.tensor_eq(f[3], TF.Compose{TF.ToTensor(), TF.Normalize({0.5}, {0.5})}(F.vflip(img)), 0)
  T.tensor_eq(F.adjust_brightness(batch, 0.5)[2], F.adjust_brightness(F.hflip(img), 0.5), 0)
end)

T.case("non-contiguous inputs and 1-channel images", function()
  local v = img:transpose(2, 3)          -- 3 x 53 x 37 view
  T.tensor_eq(TF.Resize({20, 10})(v), TF.Resize({20, 10})(v:contiguous()), 0)
  T.tensor_eq(TF.CenterCrop(9)(v), TF.CenterCrop(9)(v:contiguous()), 0)
  local g = TF.Grayscale()(img)
  T.shape_eq(TF.Resize(10)(g), {1, 10, 14})
  T.tensor_eq(TF.ColorJitter{saturation = 0.5, hue = 0.2}(g), g, 0)
  T.shape_eq(TF.Compose{TF.ToTensor(), TF.Normalize(0.5, 0.2)}(g), {1, 37, 53})
end)

T.case("options are checked as everywhere in dl: unknown names and wrong types", function()
  T.raises(function() TF.Resize(10, {mode = 1}) end,
    "Resize: unknown option 'mode' (expected: interpolation, max_size, antialias)")
  T.raises(function() TF.Resize(10, "bilinear") end, "Resize: options table expected, got string")
  T.raises(function() TF.Resize(10, {antialias = "no"}) end, "Resize: antialias must be a boolean, got string")
  T.raises(function() TF.RandomCrop(8, {pad_if_needed = 1}) end, "RandomCrop: pad_if_needed must be a boolean, got number")
  T.raises(function() TF.RandomCrop(8, {pading = 2}) end, "RandomCrop: unknown option 'pading'")
  T.raises(function() TF.RandomResizedCrop(8, {antialias = 0}) end,
    "RandomResizedCrop: antialias must be a boolean, got number")
  T.raises(function() TF.RandomResizedCrop(8, {scales = {0.5, 1}}) end, "RandomResizedCrop: unknown option 'scales'")
  T.raises(function() TF.RandomHorizontalFlip{prob = 0.5} end, "RandomHorizontalFlip: unknown option 'prob' (expected: p)")
  T.raises(function() TF.ColorJitter{bright = 0.5} end, "ColorJitter: unknown option 'bright'")
  T.raises(function() TF.Grayscale{channels = 3} end, "Grayscale: unknown option 'channels'")
  T.raises(function() TF.Normalize({0.5}, {0.5}, {in_place = true}) end, "Normalize: unknown option 'in_place'")
  T.raises(function() TF.Normalize({0.5}, {0.5}, {inplace = 1}) end, "Normalize: inplace must be a boolean, got number")
  T.raises(function() TF.Pad(2, {mode = "edge"}) end, "Pad: unknown option 'mode' (expected: fill, padding_mode)")
  T.raises(function() F.resized_crop(img, 1, 1, 4, 4, 3, {interp = "nearest"}) end, "resized_crop: unknown option 'interp'")
  T.raises(function() F.resized_crop(img, 1, 1, 4, 4, 3, {antialias = "x"}) end,
    "resized_crop: antialias must be a boolean, got string")
  -- valid options are taken as before
  T.shape_eq(TF.Resize(10, {antialias = true, interpolation = "nearest"})(img), {3, 10, 14})
  T.shape_eq(TF.RandomCrop(8, {pad_if_needed = false, padding = 1})(img), {3, 8, 8})
  T.shape_eq(TF.Normalize({0.5}, {0.5}, {inplace = false})(TF.ToTensor()(TF.Grayscale()(img))), {1, 37, 53})
  T.shape_eq(TF.RandomHorizontalFlip{p = 1}(img), img.shape)
end)

T.case("bad arguments give clear errors", function()
  T.raises(function() TF.Resize(0) end, "Resize: size must be a positive integer")
  T.raises(function() TF.Resize({1, 2, 3}) end, "Resize: size must be")
  T.raises(function() TF.Resize(10, {interpolation = "lanczos"}) end, "interpolation must be")
  T.raises(function() TF.Resize(10, {mode = 1}) end, "unknown option 'mode'")
  T.raises(function() TF.Resize({10, 12}, {max_size = 20}) end, "max_size")
  T.raises(function() TF.Resize(30, {max_size = 20}) end, "max_size (20) must be greater")
  T.raises(function() TF.CenterCrop("x") end, "CenterCrop: size must be")
  T.raises(function() TF.RandomResizedCrop(10, {scale = {0.9, 0.1}}) end, "scale must satisfy")
  T.raises(function() TF.RandomHorizontalFlip(2) end, "p must be a number in [0, 1]")
  T.raises(function() TF.ColorJitter(-1) end, "must be non negative")
  T.raises(function() TF.ColorJitter(0, 0, 0, 0.7) end, "hue values should be between")
  T.raises(function() TF.Normalize({0.5}, {0}) end, "std evaluated to zero")
  T.raises(function() TF.Normalize("a", {1}) end, "mean must be")
  T.raises(function() TF.Grayscale(2) end, "num_output_channels must be 1 or 3")
  T.raises(function() TF.Pad(-1) end, "non-negative")
  T.raises(function() TF.Compose{TF.ToTensor(), 42} end, "item 2 is not a transform")
  T.raises(function() TF.Normalize({0.5}, {0.5})(img) end, "put ToTensor before Normalize")
  T.raises(function() TF.Compose{TF.ToTensor(), TF.ToTensor()}(img) end, "ToTensor: expected a uint8 image")
  T.raises(function() TF.Compose{TF.ToTensor(), TF.Normalize({0.5, 0.5}, {1, 1})}(img) end,
    "2 means/stds for an image with 3 channels")
  T.raises(function() TF.RandomCrop(100)(img) end, "required crop size (100, 100) is larger")
  T.raises(function() TF.Resize(10)(dl.zeros({3, 4})) end, "expected an image")
  T.raises(function() TF.Resize(10)(dl.zeros({3, 4, 4}, {dtype = dl.int64})) end, "uint8 or float32")
  T.raises(function() TF.Resize(10)("img") end, "expected an image tensor")
  T.raises(function() F.adjust_hue(img, 0.8) end, "not in [-0.5, 0.5]")
  T.raises(function() F.adjust_brightness(img, -1) end, "non-negative")
  T.raises(function() F.crop(img, 1, 1, 0, 5) end, "must be positive")
end)

T.done()
