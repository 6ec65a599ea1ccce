-- dl.train.device: the --device and --amp options the training programs
-- share (train_resnet.lua, eval.lua, predict.lua).
--
--   local dev, note = device.resolve("auto")   -- "cuda:0", "device: cuda:0 (NVIDIA H200)"
--   local dev, note = device.resolve("cuda")   -- nil, "--device cuda: no GPU on this machine"
--   local dtype, err = device.amp_dtype("bf16", dev)
--
-- Invariants: resolve never touches the GPU beyond asking for its count and
-- name, so a program can refuse before doing any work; a refusal is one line
-- naming the option and the reason.
local dl = require "dl"

local D = {}

D.CHOICES = "auto, cpu, cuda or cuda:N"

-- Why CUDA cannot be used here, or nil when it can.
function D.cuda_unavailable_reason()
  if not dl.cuda.compiled then return "this dlua is not built with CUDA" end
  if not dl.cuda.is_available() then return "no GPU on this machine" end
  return nil
end

-- resolve(spec) -> device string ("cpu", "cuda:N"), line to print; or nil,
-- error line.  spec: "auto" (a GPU when there is one, else the CPU), "cpu",
-- "cuda" (the current GPU) or "cuda:N".
function D.resolve(spec)
  spec = spec or "auto"
  if spec == "cpu" then return "cpu", "device: cpu" end
  if spec == "auto" then
    local why = D.cuda_unavailable_reason()
    if why then
      return "cpu", string.format("device: cpu (%s)", why == "no GPU on this machine" and "no GPU found" or why)
    end
    local d = dl.cuda.current_device()
    return "cuda:" .. d, string.format("device: cuda:%d (%s)", d, dl.cuda.get_device_name(d))
  end
  local n = spec == "cuda" and "" or spec:match("^cuda:(%d+)$")
  if not n then return nil, string.format("--device %s: expected %s", spec, D.CHOICES) end
  local why = D.cuda_unavailable_reason()
  if why then return nil, string.format("--device %s: %s", spec, why) end
  local d = n == "" and dl.cuda.current_device() or math.tointeger(tonumber(n))
  local count = dl.cuda.device_count()
  if d >= count then
    return nil, string.format("--device %s: this machine has %d GPU%s (cuda:0 to cuda:%d)", spec, count,
      count == 1 and "" or "s", count - 1)
  end
  return "cuda:" .. d, string.format("device: cuda:%d (%s)", d, dl.cuda.get_device_name(d))
end

-- setup(spec [, threads]) -> device string: resolve(spec), raising its
-- one-line refusal, and dl.set_num_threads(threads) when threads is given
-- (the --device and --threads options of eval.lua and predict.lua).
function D.setup(spec, threads)
  local device, note = D.resolve(spec)
  if not device then error(note, 0) end
  if threads then dl.set_num_threads(threads) end
  return device
end

-- The half dtype of --amp on device, nil for "off"; or nil, error line.
function D.amp_dtype(amp, device)
  if amp == nil or amp == "off" then return nil end
  if not device:match("^cuda") then
    return nil, string.format("--amp %s: mixed precision runs on CUDA only, and this run is on the CPU " ..
      "(use --device cuda, or --amp off)", amp)
  end
  if amp == "bf16" then return dl.bfloat16 end
  if amp == "fp16" then return dl.float16 end
  return nil, string.format("--amp %s: expected off, bf16 or fp16", amp)
end

return D
