-- test_onnx_torch.lua - models exported by PyTorch's own torch.onnx.export
-- (Debian torch 1.13, opset 13, a dynamic batch axis) load with
-- dl.onnx.load and give PyTorch's outputs: torchvision's ResNet-18 (logits),
-- an MLP whose view reads the batch size from the input (Shape, Gather,
-- Concat, Reshape), LayerNorm (as torch 1.13 decomposes it), GELU and
-- softmax, and a net with Conv1d, ConvTranspose2d, PReLU, PixelShuffle and
-- nearest upsampling, and recurrent layers (ONNX's LSTM, GRU and RNN ops).
-- Also: a larger batch than the exported one, and a fine-tuning step on the imported ResNet (gradients reach every weight).
local T = require "testlib"

T.skip_if(dl._onnx.missing())

local here = T.dir
local dir = T.fresh_dir("onnx_torch")

local function export(kind)
  local out = dir .. "/" .. kind
  local p = assert(io.popen(string.format("'%s' '%s/onnx_helper.py' torch_export %s '%s' 2>&1", T.python(), here,
    kind, out)))
  local text = p:read("a")
  local ok = p:close()
  if not ok then error("torch.onnx.export failed:\n" .. text, 2) end
  local m = dl.onnx.load(out .. "/model.onnx")
  local x = dl.onnx.load_tensor(out .. "/test_data_set_0/input_0.pb")
  local y = dl.onnx.load_tensor(out .. "/test_data_set_0/output_0.pb")
  return m, x, y
end

local function check(kind, tol)
  local m, x, y = export(kind)
  m:eval()
  T.close(m(x):detach(), y, tol, tol, kind)
  -- three copies of the batch: each copy gives torch's outputs
  local z = m(dl.cat({x, x, x}, 1)):detach()
  for i = 0, 2 do T.close(z:narrow(1, i * x.shape[1] + 1, x.shape[1]), y, tol, tol, kind .. " (larger batch)") end
  return m, x, y
end

T.case("torchvision ResNet-18 logits", function()
  local m, x = check("resnet18", 1e-4)
  -- fine-tuning the imported model: one SGD step lowers a loss and every
  -- floating initializer gets a gradient (torch's export folds batch norm
  -- into the convolutions: 20 convolutions and fc, weights and biases)
  local target = dl.tensor({1, 3}, {dtype = dl.int64})
  local loss0 = dl.nn.functional.cross_entropy(m(x), target)
  loss0:backward()
  local params = m:parameters()
  T.eq(#params, 42)
  T.truthy(m:state_dict()["fc.weight"] ~= nil, "fc.weight keeps its name")
  for _, p in ipairs(params) do T.truthy(p.grad ~= nil, "a parameter without gradient") end
  local opt = dl.optim.SGD(params, {lr = 0.01})
  opt:step()
  local loss1 = dl.no_grad(function() return dl.nn.functional.cross_entropy(m(x), target) end)
  T.truthy(loss1:item() < loss0:item(), "the loss went down")
end)

T.case("an MLP with a dynamic view, LayerNorm, GELU, softmax", function() check("mlp", 1e-5) end)

T.case("Conv1d, ConvTranspose2d, PReLU, PixelShuffle, upsampling", function() check("convnet", 1e-5) end)

T.case("LSTM (2 layers, bidirectional, batch first), GRU, RNN", function() check("rnn", 1e-5) end)

T.done()
