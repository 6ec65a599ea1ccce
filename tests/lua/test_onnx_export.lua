-- test_onnx_export.lua - dl.onnx.export: models built from dl.nn layers and
-- tensor ops (convolutions, batch norm, pools, linear, activations, views,
-- reductions, in-place adds; ResNet-18 and ResNet-50) export to files that
-- onnx.checker accepts (Debian python3-onnx, full check with shape
-- inference), that ONNX Runtime (PyPI onnxruntime in a venv made once under
-- the build directory; skipped with a message when PyPI is unreachable) runs
-- to dlua's outputs within float32 rounding, for the traced batch size and
-- another one (dynamic batch), and that dl.onnx.load runs to the same
-- outputs (round trip), also after the imported model's optimize_for_inference
-- folds its batch norms.  What cannot be exported -- a traced value read back
-- into Lua, an op without an ONNX form, training-mode batch norm -- is
-- refused with an error naming the function.
local T = require "testlib"

T.skip_if(dl._onnx.missing())

local nn = dl.nn
local here = T.dir
local dir = T.fresh_dir("onnx_export")

local sh = T.sh

-- The venv's python with onnxruntime, or nil and the reason.
local function ort_python()
  local py, out = T.venv("onnxruntime-venv", "onnxruntime", "onnxruntime")
  if not py then return nil, "cannot install onnxruntime from PyPI into a venv: " .. out:sub(-300) end
  return py
end

local ORT, ORT_WHY = ort_python()
if not ORT then print("NOTE: ONNX Runtime checks skipped: " .. ORT_WHY) end
local HAVE_ONNX = sh("'" .. T.python() .. "' -c 'import onnx'")
if not HAVE_ONNX then print("NOTE: onnx.checker skipped: no python3-onnx") end

local function helper(py, ...)
  local args = {}
  for i, a in ipairs {...} do args[i] = "'" .. a .. "'" end
  return sh(string.format("'%s' '%s/onnx_helper.py' %s", py, here, table.concat(args, " ")))
end

-- Exports model on x, checks the file, runs it in ONNX Runtime and dlua on
-- x and on a batch of another size, compares all with the model itself.
local function check_export(name, model, x, x2, tol)
  tol = tol or 1e-4
  model:eval()
  local path = dir .. "/" .. name .. ".onnx"
  dl.onnx.export(model, {x}, path, {opset = 17, dynamic_batch = true})
  if HAVE_ONNX then
    local ok, out = helper(T.python(), "check", path)
    T.truthy(ok and out:find("ok"), name .. ": onnx.checker: " .. out)
  end
  local back = dl.onnx.load(path)
  for _, input in ipairs {x, x2} do
    local want = dl.no_grad(function() return model(input) end)
    T.close(back(input):detach(), want, tol, tol, name .. ": round trip")
    if ORT then
      local ip = dir .. "/" .. name .. "_in.pb"
      dl.onnx.save_tensor(ip, input)
      local ok, out = helper(ORT, "ort", path, dir, ip)
      T.truthy(ok, name .. ": onnxruntime: " .. out)
      local y = dl.onnx.load_tensor(dir .. "/output_0.pb")
      T.close(y, want, tol, tol, name .. ": onnxruntime")
    end
  end
end

T.case("a small convolutional net: conv, batch norm, pools, linear, activations", function()
  dl.manual_seed(1)
  local m = nn.Sequential(
    nn.Conv2d(3, 8, 3, {padding = 1}), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
    nn.Conv2d(8, 8, 3, {stride = 2, padding = 1, groups = 2, bias = false}),
    nn.GELU(), nn.AvgPool2d(2), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.5), nn.Linear(8, 4),
    nn.SiLU(), nn.Softmax(2))
  -- non-trivial running statistics
  dl.no_grad(function()
    m[2].running_mean:uniform_(-0.5, 0.5)
    m[2].running_var:uniform_(0.5, 2)
  end)
  check_export("convnet", m, dl.randn(2, 3, 16, 16), dl.randn(5, 3, 16, 16))
end)

T.case("tensor ops in a custom forward: views, reductions, in-place, concatenation", function()
  local Net = nn.Module:extend("Net")
  function Net:__init() self.fc = nn.Linear(6, 6) end
  function Net:forward(x)
    local b = x.shape[1]
    local h = self.fc(x:reshape(b, 6))                  -- Reshape with a dynamic batch
    local a = h:sigmoid() * 2 - h:tanh():abs()
    a:add_(h:exp():clamp(0, 3))                        -- in place
    local s = a:sum(2, true) / a:amax(2, true):clamp_min(1e-3)
    local c = dl.cat({a, s, a:mean(2, true)}, 2)       -- (b, 8)
    return c:transpose(1, 2):unsqueeze(1):permute(3, 1, 2):squeeze(2):abs():sqrt()
  end
  check_export("tensorops", Net(), dl.randn(3, 2, 3), dl.randn(7, 2, 3))
end)

T.case("1-D, 3-D and transposed convolutions, PReLU, shuffles, upsampling, instance and layer norm", function()
  dl.manual_seed(4)
  local Net = nn.Module:extend("Net")
  function Net:__init()
    self.c1 = nn.Conv1d(3, 4, 3, {padding = 1})
    self.c3 = nn.Conv3d(1, 2, 3, {padding = 1})
    self.p3 = nn.MaxPool3d(2)
    self.up = nn.ConvTranspose2d(4, 4, 3, {stride = 2, padding = 1, output_padding = 1})
    self.act = nn.PReLU(4)
    self.shuffle = nn.PixelShuffle(2)
    self.unshuffle = nn.PixelUnshuffle(2)
    self.inorm = nn.InstanceNorm2d(4, {affine = true})
    self.interp = nn.Upsample({scale_factor = 2, mode = "bilinear"})
    self.norm = nn.LayerNorm(8)
    self.pool1 = nn.AvgPool1d(2)
  end
  function Net:forward(x) -- x (N, 3, 16)
    local n = x.shape[1]
    local a = self.pool1(self.c1(x))                         -- (N, 4, 8)
    local v = self.p3(self.c3(a:reshape(n, 1, 4, 8, 1):expand(n, 1, 4, 8, 2))) -- (N, 2, 2, 4, 1)
    local img = a:reshape(n, 4, 4, 2)
    local u = self.act(self.up(img))                         -- (N, 4, 8, 4)
    u = self.inorm(self.unshuffle(self.shuffle(u)))          -- (N, 4, 8, 4)
    u = self.interp(u)                                       -- (N, 4, 16, 8)
    return self.norm(u) , v
  end
  local m = Net()
  m:eval()
  local x = dl.randn(2, 3, 16)
  local path = dir .. "/composed.onnx"
  dl.onnx.export(m, {x}, path)
  if HAVE_ONNX then
    local ok, out = helper(T.python(), "check", path)
    T.truthy(ok and out:find("ok"), "onnx.checker: " .. out)
  end
  local back = dl.onnx.load(path)
  local w1, w2 = dl.no_grad(function() return m(x) end)
  local b1, b2 = back(x)
  T.close(b1:detach(), w1, 1e-4, 1e-4, "round trip 1")
  T.close(b2:detach(), w2, 1e-4, 1e-4, "round trip 2")
  if ORT then
    local ip = dir .. "/composed_in.pb"
    dl.onnx.save_tensor(ip, x)
    local ok, out = helper(ORT, "ort", path, dir, ip)
    T.truthy(ok, "onnxruntime: " .. out)
    T.close(dl.onnx.load_tensor(dir .. "/output_0.pb"), w1, 1e-4, 1e-4, "onnxruntime 1")
    T.close(dl.onnx.load_tensor(dir .. "/output_1.pb"), w2, 1e-4, 1e-4, "onnxruntime 2")
  end
end)

T.case("LayerNorm and RMSNorm at opset 17 and decomposed at opset 13", function()
  local Net = nn.Module:extend("NormNet")
  function Net:__init()
    self.body = nn.Sequential(nn.Linear(6, 6), nn.RMSNorm(6))
    self.norm = nn.LayerNorm({2, 3})
  end
  function Net:forward(x) return self.norm(self.body(x):reshape(x.shape[1], 2, 3)) end
  local net = Net()
  net:eval()
  local x = dl.randn(4, 6)
  for _, opset in ipairs {13, 17} do
    local path = dir .. "/norms" .. opset .. ".onnx"
    local t = dl.onnx.export(net, {x}, path, {opset = opset})
    local has_ln = false
    for _, node in ipairs(t.graph.node) do if node.op_type == "LayerNormalization" then has_ln = true end end
    T.eq(has_ln, opset == 17, "LayerNormalization node at opset " .. opset)
    local want = dl.no_grad(function() return net(x) end)
    T.close(dl.onnx.load(path)(x):detach(), want, 1e-5, 1e-5, "round trip opset " .. opset)
    if ORT then
      local ip = dir .. "/norms_in.pb"
      dl.onnx.save_tensor(ip, x)
      local ok, out = helper(ORT, "ort", path, dir, ip)
      T.truthy(ok, out)
      T.close(dl.onnx.load_tensor(dir .. "/output_0.pb"), want, 1e-5, 1e-5, "onnxruntime opset " .. opset)
    end
  end
end)

T.case("text models: embedding, Transformer encoder (causal and not), an LSTM-free classifier", function()
  dl.manual_seed(6)
  local Text = nn.Module:extend("TextNet")
  function Text:__init(causal)
    self.causal = causal
    self.emb = nn.Embedding(50, 16)
    self.enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 4, {dim_feedforward = 32, dropout = 0,
      batch_first = true, activation = causal and "gelu" or "relu", norm_first = causal}), 2)
    self.head = nn.Linear(16, 3)
  end
  function Text:forward(ids) -- (N, T) 1-based token ids
    local x = self.emb(ids)
    local opts
    if self.causal then opts = {mask = nn.Transformer.generate_square_subsequent_mask(ids.shape[2])} end
    local h = self.enc(x, opts)
    return self.head(h:mean(2))
  end
  for _, causal in ipairs {false, true} do
    local m = Text(causal)
    m:eval()
    local ids = dl.randint(1, 51, {3, 7})
    local name = causal and "text_causal" or "text"
    local path = dir .. "/" .. name .. ".onnx"
    dl.onnx.export(m, {ids}, path)
    if HAVE_ONNX then
      local ok, out = helper(T.python(), "check", path)
      T.truthy(ok and out:find("ok"), name .. ": onnx.checker: " .. out)
    end
    local back = dl.onnx.load(path)
    for _, x in ipairs {ids, dl.randint(1, 51, {5, 7})} do
      local want = dl.no_grad(function() return m(x) end)
      T.close(back(x):detach(), want, 1e-4, 1e-4, name .. ": round trip")
      if ORT then
        local ip = dir .. "/" .. name .. "_in.pb"
        dl.onnx.save_tensor(ip, x)
        local ok, out = helper(ORT, "ort", path, dir, ip)
        T.truthy(ok, name .. ": onnxruntime: " .. out)
        T.close(dl.onnx.load_tensor(dir .. "/output_0.pb"), want, 1e-4, 1e-4, name .. ": onnxruntime")
      end
    end
  end
end)

T.case("a dynamic batch that the trace cannot represent is refused", function()
  -- a reshape whose target mixes the batch with another dim of the same size
  local Mix = nn.Module:extend("Mix")
  function Mix:forward(x) return x:reshape(x.shape[2], x.shape[1]):t() * 2 end
  T.raises(function() dl.onnx.export(Mix(), dl.randn(3, 3), dir .. "/mix.onnx") end,
    "the graph does not generalize to a batch of 4")
  local t = dl.onnx.export(Mix(), dl.randn(3, 3), dir .. "/mix.onnx", {dynamic_batch = false})
  T.eq(t.graph.input[1].shape[1], 3)
end)

T.case("ResNet-18 and ResNet-50", function()
  dl.manual_seed(2)
  for _, arch in ipairs {"resnet18", "resnet50"} do
    local m = dl.models[arch]({num_classes = 10})
    dl.no_grad(function()
      for _, mod in ipairs(m:modules()) do
        if mod.running_var then
          mod.running_mean:uniform_(-0.1, 0.1)
          mod.running_var:uniform_(0.5, 1.5)
        end
      end
    end)
    local x = dl.randn(2, 3, 64, 64)
    check_export(arch, m, x, dl.randn(1, 3, 64, 64), 1e-3)
    -- the imported model folds its batch norms into the convolutions
    local back = dl.onnx.load(dir .. "/" .. arch .. ".onnx")
    local steps = #back._plan.steps
    local _, folded = back:optimize_for_inference()
    T.eq(folded, arch == "resnet18" and 20 or 53, arch .. ": batch norms folded")
    T.eq(#back._plan.steps, steps - folded)
    T.truthy(dl.models.optimize_for_inference(back) == back)
    T.close(dl.no_grad(function() return back(x) end), dl.no_grad(function() return m(x) end), 1e-3, 1e-3,
      arch .. ": folded")
  end
end)

T.case("an exported file names initializers and nodes as the model does", function()
  local m = nn.Sequential(nn.Linear(3, 2))
  local t = dl.onnx.export(m, dl.randn(4, 3), dir .. "/names.onnx")
  local inits = {}
  for _, it in ipairs(t.graph.initializer) do inits[it.name] = true end
  T.truthy(inits["0.weight"] and inits["0.bias"], "initializers named by state_dict keys")
  T.eq(t.graph.node[1].op_type, "Gemm")
  T.eq(t.graph.node[1].name, "0/Gemm")
  T.eq(t.graph.input[1].name, "input")
  T.eq(t.graph.input[1].shape[1], "batch")
  T.eq(t.graph.output[1].name, "output")
  -- without dynamic_batch every dim is fixed; names can be chosen
  t = dl.onnx.export(m, dl.randn(4, 3), dir .. "/names.onnx", {dynamic_batch = false, input_names = {"x"},
    output_names = {"logits"}})
  T.eq(t.graph.input[1].shape[1], 4)
  T.eq(t.graph.input[1].name, "x")
  T.eq(t.graph.output[1].name, "logits")
end)

T.case("scripts/export_onnx.lua writes a checkpoint's model", function()
  local m = dl.models.resnet18({num_classes = 5})
  local w = dir .. "/r18.safetensors"
  dl.save(w, m:state_dict())
  local exe = arg[-1] or "dlua"
  local script = here .. "/../../scripts/export_onnx.lua"
  local ok, out = sh(string.format("'%s' '%s' '%s' '%s/r18.onnx' --arch resnet18 --image-size 32 --batch 2", exe,
    script, w, dir, dir))
  T.truthy(ok, out)
  T.truthy(out:find("input:  input (batch, 3, 32, 32)", 1, true), out)
  T.truthy(out:find("output: logits (batch, 5)", 1, true), out)
  local back = dl.onnx.load(dir .. "/r18.onnx")
  m:eval()
  local x = dl.randn(3, 3, 32, 32)
  T.close(back(x):detach(), dl.no_grad(function() return m(x) end), 1e-4, 1e-4)
  -- a plain state dict without --arch: one line, status 2
  local bad, msg = sh(string.format("'%s' '%s' '%s' '%s/x.onnx'", exe, script, w, dir))
  T.truthy(not bad and msg:find("say which model it is with %-%-arch"), msg)
end)

T.case("what cannot be exported is refused, naming the function", function()
  local Branch = nn.Module:extend("Branch")
  function Branch:forward(x)
    if x:sum():item() > 0 then return x end
    return -x
  end
  T.raises(function() dl.onnx.export(Branch(), dl.randn(2), dir .. "/bad.onnx") end,
    "Tensor:item reads a traced tensor back into Lua (data-dependent control flow cannot be exported)")
  local Sorts = nn.Module:extend("Sorts")
  function Sorts:forward(x) return (x:sort()) end
  T.raises(function() dl.onnx.export(Sorts(), dl.randn(3), dir .. "/bad.onnx") end,
    "Tensor:sort has no ONNX export")
  -- a dl function held in a local from before the export is not seen by
  -- the trace: its result would be a constant, so export refuses it
  local relu = dl._F.relu
  local Hidden = nn.Module:extend("Hidden")
  function Hidden:__init() self.fc = nn.Linear(3, 3) end
  function Hidden:forward(x) return self.fc(relu(self.fc(x))) end
  T.raises(function() dl.onnx.export(Hidden(), dl.randn(2, 3), dir .. "/bad.onnx") end,
    "a function the trace does not see")
  local bn = nn.BatchNorm2d(3, {track_running_stats = false})
  T.raises(function() dl.onnx.export(bn, dl.randn(2, 3, 4, 4), dir .. "/bad.onnx") end,
    "batch_norm in training mode has no export")
  T.raises(function() dl.onnx.export(nn.Linear(2, 2), "x", dir .. "/bad.onnx") end, "example_inputs")
  T.raises(function() dl.onnx.export(nn.Linear(2, 2), dl.randn(1, 2), dir .. "/bad.onnx", {opset = 9}) end,
    "opset must be an integer from 13 to 17")
  -- the wrappers are gone after a failed export: tensors work as before
  local x = dl.tensor({3.0, 1.0, 2.0})
  T.tensor_eq((x:sort()), {1, 2, 3})
  T.eq(x:sum():item(), 6)
end)

T.done()
