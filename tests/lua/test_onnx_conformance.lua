-- test_onnx_conformance.lua - runs scripts/onnx_conformance.lua over ONNX's
-- backend test data (Debian libonnx-testdata) and asserts a floor on the
-- passes of each suite.  The floors only ever rise: raise them when ops
-- land, never lower them.  Skips (77) without the test data or without ONNX
-- support in the build.
local T = require "testlib"

-- passes at least (node: 932 tests, pytorch-converted 82, pytorch-operator 35, simple 23)
local FLOORS = {node = 837, ["pytorch-converted"] = 82, ["pytorch-operator"] = 35, simple = 15}

T.skip_if(dl._onnx.missing())
T.skip_if(not io.open("/usr/share/libonnx-testdata/data/node/test_abs/model.onnx")
          and "no ONNX test data (Debian package libonnx-testdata)")

local here = T.dir
local exe = arg[-1] or "dlua"
local json = T.tmpdir() .. "/onnx_conformance.json"
local list = T.tmpdir() .. "/onnx_conformance.txt"

T.case("conformance floors", function()
  local cmd = string.format("'%s' '%s/../../scripts/onnx_conformance.lua' --jobs 2 --json '%s' --list '%s' 2>&1",
    exe, here, json, list)
  local p = assert(io.popen(cmd))
  local out = p:read("a")
  p:close()
  io.write(out)
  local f = assert(io.open(json), "no results written")
  local text = f:read("a")
  f:close()
  for suite, floor in pairs(FLOORS) do
    local pass = tonumber(text:match('"' .. suite:gsub("%-", "%%-") .. '": {[^}]*"pass": (%d+)'))
    T.truthy(pass, "no result for " .. suite)
    T.truthy(pass >= floor, string.format("%s: %d passes, the floor is %d (see %s)", suite, pass, floor, list))
  end
end)

T.done()
