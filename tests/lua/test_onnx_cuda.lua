-- test_onnx_cuda.lua - imported ONNX models on CUDA: m:to("cuda") moves the
-- parameters and constants, the graph runs on the device (shape arithmetic
-- stays on the host), outputs match the CPU's, with and without the fused
-- inference plan, after optimize_for_inference, and an exported model
-- imports on CUDA.  Skips (77) without a GPU.
local T = require "testlib"
T.require_cuda()

T.skip_if(dl._onnx.missing())

local dir = T.fresh_dir("onnx_cuda")

T.case("an exported ResNet-18 imported on CUDA", function()
  dl.manual_seed(5)
  local m = dl.models.resnet18({num_classes = 10})
  m:eval()
  local x = dl.randn(2, 3, 64, 64)
  dl.onnx.export(m, x, dir .. "/r18.onnx")
  local cpu = dl.onnx.load(dir .. "/r18.onnx")
  local gpu = dl.onnx.load(dir .. "/r18.onnx"):to("cuda")
  local want = dl.no_grad(function() return cpu(x) end)
  T.compare_devices(want, dl.no_grad(function() return gpu(x:to("cuda")) end), 1e-3, 1e-3, "fused")
  T.compare_devices(want, gpu(x:to("cuda")):detach(), 1e-3, 1e-3, "autograd")
  gpu:optimize_for_inference()
  T.compare_devices(want, dl.no_grad(function() return gpu(x:to("cuda")) end), 1e-3, 1e-3, "folded")
end)

T.case("shape arithmetic, gathers and resampling on CUDA", function()
  local dirs = "/usr/share/libonnx-testdata/data/node/"
  for _, name in ipairs {"test_reshape_extended_dims", "test_gather_0", "test_resize_upsample_scales_linear",
    "test_slice", "test_expand_dim_changed", "test_lstm_defaults", "test_gridsample"} do
    local d = dirs .. name
    if io.open(d .. "/model.onnx") then
      local m = dl.onnx.load(d .. "/model.onnx")
      local ins = {}
      for i = 1, #m.input_names do ins[i] = dl.onnx.load_tensor(d .. "/test_data_set_0/input_" .. (i - 1) .. ".pb") end
      local want = dl.no_grad(function() return m(table.unpack(ins)) end)
      m:to("cuda")
      for i = 1, #ins do if ins[i]:is_floating_point() then ins[i] = ins[i]:to("cuda") end end
      T.compare_devices(want, dl.no_grad(function() return m(table.unpack(ins)) end), 1e-4, 1e-4, name)
    end
  end
end)

T.done()
