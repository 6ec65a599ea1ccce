-- dl.train: the pieces of the training programs (scripts/train_resnet.lua,
-- scripts/eval.lua, scripts/predict.lua) that are worth reusing:
--   args        command-line options, --help text
--   progress    the live bar / plain log lines of an epoch
--   checkpoint  training checkpoints and weights files (safetensors)
--   plot        the loss / accuracy chart (PNG)
--   models      architectures by name (dl.models + tinycnn)
--   evaluate    top-1 / top-5 accuracy over a loader
--   json        JSON for checkpoint metadata
--   data        the image pipelines and folders the scripts share
--   guard       stops at the first non-finite loss
-- Submodules load on first access (dl.train.plot ...).
local T = {}

return setmetatable(T, {
  __index = function(t, k)
    if type(k) ~= "string" then return nil end
    local ok, m = pcall(require, "dl.train." .. k)
    if not ok then
      if tostring(m):find("module 'dl.train." .. k .. "' not found", 1, true) then return nil end
      error(m, 2)
    end
    rawset(t, k, m)
    return m
  end,
})
