-- test_image.lua - dl.image codecs against Pillow: PNG in every colour type,
-- bit depth, palette/tRNS and interlacing (exact), JPEG in several
-- subsamplings, progressive, grayscale and CMYK (within 1 on >= 99.9% of the
-- pixels); encoding round trips; corrupt, truncated, empty, non-image and
-- over-limit files.
local T = require "testlib"
local dl = require "dl"

local dir = T.fresh_dir("image")

-- Python writes the files (Pillow, or a small PNG writer for what Pillow
-- cannot save) and emits Pillow's convert("RGB") / convert("L") of each.
local ref = T.torch(string.format([==[
import numpy as np, zlib, struct, io, torch, warnings
warnings.filterwarnings("ignore")
from PIL import Image
D = %q
rng = np.random.RandomState(3)

def chunk(t, d):
    return struct.pack('>I', len(d)) + t + d + struct.pack('>I', zlib.crc32(t + d) & 0xffffffff)

ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]

def rows(a, depth):
    out = b''
    for row in a:
        v = row.reshape(-1).astype(np.int64)
        if depth == 16: data = v.astype('>u2').tobytes()
        elif depth == 8: data = v.astype(np.uint8).tobytes()
        else:
            bits = ((v[:, None] >> np.arange(depth - 1, -1, -1)) & 1).reshape(-1).astype(np.uint8)
            data = np.packbits(bits).tobytes()
        out += b'\x00' + data
    return out

def png(name, a, depth, ctype, palette=None, trns=None, interlace=False, w=None, h=None):
    H, W = a.shape[:2]
    if interlace:
        raw = b''.join(rows(a[y0::dy, x0::dx], depth) for (x0, y0, dx, dy) in ADAM7
                       if a[y0::dy, x0::dx].size > 0)
    else:
        raw = rows(a, depth)
    ihdr = struct.pack('>IIBBBBB', w or W, h or H, depth, ctype, 0, 0, 1 if interlace else 0)
    data = b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', ihdr)
    if palette is not None: data += chunk(b'PLTE', bytes(palette.astype(np.uint8).reshape(-1)))
    if trns is not None: data += chunk(b'tRNS', trns)
    data += chunk(b'IDAT', zlib.compress(raw)) + chunk(b'IEND', b'')
    open(D + '/' + name, 'wb').write(data)
    return name

files = []
def add(name, kind):
    files.append((name, kind))

H, W = 13, 19
for depth in (1, 2, 4, 8, 16):
    a = rng.randint(0, 2 ** depth, size=(H, W, 1))
    add(png('gray%%d.png' %% depth, a, depth, 0), 'png')
a = rng.randint(0, 600, size=(H, W, 1)); a[0, :4, 0] = [0, 255, 256, 599]
add(png('gray16_big.png', a, 16, 0), 'png')
for depth in (8, 16):
    add(png('rgb%%d.png' %% depth, rng.randint(0, 2 ** depth, size=(H, W, 3)), depth, 2), 'png')
    add(png('ga%%d.png' %% depth, rng.randint(0, 2 ** depth, size=(H, W, 2)), depth, 4), 'png')
    add(png('rgba%%d.png' %% depth, rng.randint(0, 2 ** depth, size=(H, W, 4)), depth, 6), 'png')
for depth in (1, 2, 4, 8):
    n = 2 ** depth
    pal = rng.randint(0, 256, size=(n, 3))
    idx = rng.randint(0, n, size=(H, W, 1))
    add(png('pal%%d.png' %% depth, idx, depth, 3, palette=pal), 'png')
    add(png('pal%%d_trns.png' %% depth, idx, depth, 3, palette=pal, trns=bytes(rng.randint(0, 256, size=n).astype(np.uint8))), 'png')
add(png('gray8_trns.png', rng.randint(0, 256, size=(H, W, 1)), 8, 0, trns=b'\x00\x10'), 'png')
add(png('rgb8_i.png', rng.randint(0, 256, size=(H, W, 3)), 8, 2, interlace=True), 'png')
add(png('gray4_i.png', rng.randint(0, 16, size=(H, W, 1)), 4, 0, interlace=True), 'png')
add(png('pal8_i.png', rng.randint(0, 256, size=(H, W, 1)), 8, 3, palette=rng.randint(0, 256, size=(256, 3)), interlace=True), 'png')
add(png('rgba16_i.png', rng.randint(0, 65536, size=(5, 3, 4)), 16, 6, interlace=True), 'png')
add(png('one.png', rng.randint(0, 256, size=(1, 1, 3)), 8, 2), 'png')

# Pillow-written files
img = (rng.rand(27, 35, 3) * 255).astype(np.uint8)
x = np.linspace(0, 1, 35)[None, :, None]; y = np.linspace(0, 1, 27)[:, None, None]
smooth = (127 + 100 * np.sin(6 * x + 4 * y + np.arange(3))).astype(np.uint8)
Image.fromarray(img).save(D + '/pil_rgb.png'); add('pil_rgb.png', 'png')
Image.fromarray(img).convert('L').save(D + '/pil_l.png'); add('pil_l.png', 'png')
Image.fromarray(img).quantize(40).save(D + '/pil_p.png'); add('pil_p.png', 'png')
Image.fromarray(np.dstack([img, img[..., :1]])).save(D + '/pil_rgba.png'); add('pil_rgba.png', 'png')
Image.fromarray(img).convert('1').save(D + '/pil_1.png'); add('pil_1.png', 'png')
Image.fromarray(img).convert('LA').save(D + '/pil_la.png'); add('pil_la.png', 'png')
for ss in (0, 1, 2):
    Image.fromarray(smooth).save(D + '/ss%%d.jpg' %% ss, quality=90, subsampling=ss); add('ss%%d.jpg' %% ss, 'jpeg')
Image.fromarray(img).save(D + '/noisy.jpg', quality=50); add('noisy.jpg', 'jpeg')
Image.fromarray(smooth).save(D + '/prog.jpg', quality=85, progressive=True); add('prog.jpg', 'jpeg')
Image.fromarray(smooth).convert('L').save(D + '/gray.jpg', quality=85); add('gray.jpg', 'jpeg')
Image.fromarray(smooth).convert('CMYK').save(D + '/cmyk.jpg', quality=95); add('cmyk.jpg', 'jpeg')
Image.fromarray(smooth[:9, :17]).save(D + '/odd.jpg', quality=80); add('odd.jpg', 'jpeg')
Image.fromarray(smooth[:1, :1]).save(D + '/px.jpg'); add('px.jpg', 'jpeg')

out = []
for name, kind in files:
    im = Image.open(D + '/' + name)
    rgb = torch.from_numpy(np.array(im.convert('RGB'))).permute(2, 0, 1).contiguous()
    l = torch.from_numpy(np.array(im.convert('L')))[None]
    out.append({'name': name, 'kind': kind, 'rgb': rgb, 'l': l})

# broken files
good = open(D + '/ss2.jpg', 'rb').read()
open(D + '/trunc_head.jpg', 'wb').write(good[:len(good) // 2])
big = open(D + '/noisy.jpg', 'rb').read()
open(D + '/trunc.jpg', 'wb').write(big[:len(big) * 3 // 4])
open(D + '/garbage.jpg', 'wb').write(b'\xff\xd8\xff' + bytes(rng.randint(0, 256, size=200).astype(np.uint8)))
goodp = open(D + '/pil_rgb.png', 'rb').read()
open(D + '/trunc.png', 'wb').write(goodp[:len(goodp) // 2])
bad = bytearray(goodp); bad[60] ^= 0xFF
open(D + '/crc.png', 'wb').write(bytes(bad))
open(D + '/empty.png', 'wb').write(b'')
open(D + '/text.jpg', 'w').write('hello, I am not an image\n')
png('bomb.png', np.zeros((1, 1, 3), dtype=np.int64), 8, 2, w=60000, h=60000)
emit({'files': out, 'jpeg_bytes': len(good)})
]==], dir))

local function count_far(a, b)
  local d = (a:to(dl.int32) - b:to(dl.int32)):abs()
  return d:gt(1):sum():item(), d:max():item()
end

T.case("PNG decodes exactly as Pillow's convert('RGB') / convert('L')", function()
  local n = 0
  for _, f in ipairs(ref.files) do
    if f.kind == "png" then
      local path = dir .. "/" .. f.name
      T.match_torch(dl.image.load(path), f.rgb, 0, 0, f.name .. " RGB")
      T.match_torch(dl.image.load(path, {mode = "L"}), f.l, 0, 0, f.name .. " L")
      n = n + 1
    end
  end
  T.truthy(n >= 25, "png cases: " .. n)
end)

T.case("JPEG agrees with Pillow within 1 on 99.9% of pixels", function()
  local n = 0
  for _, f in ipairs(ref.files) do
    if f.kind == "jpeg" then
      local path = dir .. "/" .. f.name
      for _, mode in ipairs{"RGB", "L"} do
        local got = dl.image.load(path, {mode = mode})
        local want = T.from_torch(mode == "RGB" and f.rgb or f.l)
        T.shape_eq(got, want.shape, f.name)
        local far = count_far(got, want)
        T.truthy(far <= 0.001 * got:numel(), f.name .. " " .. mode .. ": " .. far .. " pixels differ by more than 1")
      end
      n = n + 1
    end
  end
  T.eq(n, 9, "jpeg cases")
end)

T.case("JPEG decoding is in fact exact with Pillow's settings", function()
  for _, f in ipairs(ref.files) do
    if f.kind == "jpeg" then
      T.match_torch(dl.image.load(dir .. "/" .. f.name), f.rgb, 0, 0, f.name)
    end
  end
end)

T.case("decode from a Lua string equals load", function()
  local fh = assert(io.open(dir .. "/ss1.jpg", "rb"))
  local bytes = fh:read("a")
  fh:close()
  local a, b = dl.image.decode(bytes), dl.image.load(dir .. "/ss1.jpg")
  T.tensor_eq(a, b, 0)
  T.eq(a.dtype, dl.uint8)
  local g = dl.image.decode(bytes, {mode = "L"})
  T.shape_eq(g, {1, 27, 35})
  local info = dl.image.info(dir .. "/ss1.jpg")
  T.eq(info.format, "jpeg"); T.eq(info.width, 35); T.eq(info.height, 27); T.eq(info.channels, 3)
  T.eq(dl.image.info(dir .. "/rgba8.png").channels, 4)
end)

T.case("PNG save/load round trip is exact; float images scale from [0, 1]", function()
  local img = dl.randint(0, 256, {3, 11, 7}):to(dl.uint8)
  local p = dir .. "/rt.png"
  dl.image.save(img, p)
  T.tensor_eq(dl.image.load(p), img, 0)
  local g = img[1]
  dl.image.save(g, dir .. "/rt_gray.png")
  T.tensor_eq(dl.image.load(dir .. "/rt_gray.png", {mode = "L"}), g:unsqueeze(1), 0)
  -- a non-contiguous view
  local v = img:transpose(2, 3)
  dl.image.save(v, dir .. "/rt_t.png")
  T.tensor_eq(dl.image.load(dir .. "/rt_t.png"), v, 0)
  -- float: x * 255 + 0.5, clamped (torchvision's save_image)
  local f = dl.tensor({{{0, 0.5, 1, 1.5, -0.2, 0.1}}})
  dl.image.save(f, dir .. "/rt_f.png")
  T.tensor_eq(dl.image.load(dir .. "/rt_f.png", {mode = "L"}), {{{0, 128, 255, 255, 0, 26}}}, 0)
  -- RGBA PNG keeps 4 channels in the file; loading drops alpha
  local rgba = dl.randint(0, 256, {4, 5, 6}):to(dl.uint8)
  local bytes = dl.image.encode(rgba, "png")
  T.tensor_eq(dl.image.decode(bytes), rgba:narrow(1, 1, 3), 0)
end)

T.case("JPEG save writes something Pillow and we read back closely", function()
  local x = dl.arange(0, 48 * 64):reshape(1, 48, 64):to(dl.float32) / (48 * 64)
  local img = dl.cat({x, 1 - x, x * 0 + 0.5}, 1)
  local p = dir .. "/rt.jpg"
  dl.image.save(img, p, {quality = 95})
  local back = dl.image.load(p):to(dl.float32) / 255
  T.truthy((back - img):abs():mean():item() < 0.01, "jpeg round trip error")
  local r = T.torch(string.format([[
from PIL import Image
import numpy as np, torch
im = Image.open(%q)
emit({'mode': im.mode, 'size': list(im.size), 'rgb': torch.from_numpy(np.array(im.convert('RGB'))).permute(2, 0, 1).contiguous()})
]], p))
  T.eq(r.mode, "RGB"); T.eq(r.size[1], 64); T.eq(r.size[2], 48)
  T.match_torch(dl.image.load(p), r.rgb, 0, 0, "our JPEG decoded by Pillow")
  local g = dl.image.encode((img[1] * 255):to(dl.uint8), "jpeg", {quality = 90})
  T.shape_eq(dl.image.decode(g), {3, 48, 64})
end)

T.case("bad files give clear errors naming the file", function()
  local function bad(name, frag)
    local e = T.raises(function() dl.image.load(dir .. "/" .. name) end, frag, name)
    T.truthy(e:find(name, 1, true), "message names the file: " .. e)
  end
  bad("trunc.jpg", "truncated JPEG")
  bad("trunc_head.jpg", "truncated JPEG")
  bad("garbage.jpg", "corrupt JPEG")
  bad("trunc.png", "PNG")
  bad("crc.png", "corrupt PNG")
  bad("empty.png", "empty file")
  bad("text.jpg", "not a JPEG or PNG image")
  bad("missing.png", "No such file")
  T.raises(function() dl.image.load(dir) end, "not a regular file")
  T.raises(function() dl.image.decode("") end, "empty")
  T.raises(function() dl.image.decode("\137PNG\r\n\26\n") end, "truncated PNG file (unexpected end of data)")
end)

T.case("decompression bombs are refused before decoding", function()
  T.raises(function() dl.image.load(dir .. "/bomb.png") end, "exceeds the limit of 178956970 pixels")
  local old = dl.image.get_max_pixels()
  dl.image.set_max_pixels(100)
  local e = T.raises(function() dl.image.load(dir .. "/ss0.jpg") end, "35x27 (945 pixels) exceeds the limit of 100")
  T.truthy(e:find("ss0.jpg", 1, true))
  T.raises(function() dl.image.load(dir .. "/pil_rgb.png") end, "exceeds the limit")
  dl.image.set_max_pixels(old)
  T.shape_eq(dl.image.load(dir .. "/ss0.jpg"), {3, 27, 35})
end)

T.case("bad arguments", function()
  local img = dl.zeros({3, 4, 4}, {dtype = dl.uint8})
  T.raises(function() dl.image.save(img, dir .. "/x.bmp") end, "cannot tell the format")
  T.raises(function() dl.image.save(dl.zeros({2, 4, 4}, {dtype = dl.uint8}), dir .. "/x.png") end, "1, 3 or 4 channels")
  T.raises(function() dl.image.save(dl.zeros({4, 4, 4}, {dtype = dl.uint8}), dir .. "/x.jpg") end, "JPEG cannot store 4 channels")
  T.raises(function() dl.image.save(dl.zeros({3, 4, 4}, {dtype = dl.int64}), dir .. "/x.png") end, "uint8 or float")
  T.raises(function() dl.image.save(dl.zeros({1, 3, 4, 4}), dir .. "/x.png") end, "(C, H, W)")
  T.raises(function() dl.image.save(img, dir .. "/x.jpg", {quality = 0}) end, "quality must be in 1..100")
  T.raises(function() dl.image.save(img, dir .. "/x.jpg", {qual = 5}) end, "unknown option 'qual'")
  T.raises(function() dl.image.save(img, "/nonexistent-dir/x.png") end, "cannot write")
  T.raises(function() dl.image.load(dir .. "/ss0.jpg", {mode = "CMYK"}) end, "mode must be")
  T.raises(function() dl.image.encode(img, "gif") end, "format must be")
  T.raises(function() dl.image.load() end, "string expected")
  T.raises(function() dl.image.set_max_pixels(-5) end, "must be positive")
end)

T.done()
