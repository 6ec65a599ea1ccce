-- dl-0.1.0-1.rockspec - the `dl` module for stock Lua 5.4 through LuaRocks.
--   luarocks --lua-version 5.4 make                  (in a checkout; CUDA off)
--   luarocks --lua-version 5.4 make DL_CUDA=AUTO     (CUDA when a toolkit is found; or ON)
-- LuaRocks' cmake build type runs the project's own CMake install rules with
-- the module's directories pointed at the rock: dl.so into $(LIBDIR) (deployed
-- to <tree>/lib/lua/5.4), the Lua library lua/dl into $(LUADIR) (deployed to
-- <tree>/share/lua/5.4, where dl.so also finds it), the dlua executable into
-- $(BINDIR); libdlua, dlua.h and dlua.pc are left to `cmake --install`.
rockspec_format = "3.0"
package = "dl"
version = "0.1.0-1"
source = {
   -- `luarocks make` builds the checkout it runs in and does not fetch this
   url = "git+https://example.invalid/dlua.git",
   tag = "v0.1.0",
}
description = {
   summary = "Deep learning in Lua: tensors, autograd, nn, optim, torchvision-style ResNets",
   detailed = [[
dlua is a deep-learning framework with a C11 core (tensors, reverse-mode
autograd; oneDNN and OpenMP on the CPU, an optional CUDA backend) and a
PyTorch-like Lua 5.4 API with 1-based indices: require "dl".
]],
   license = "MIT",
   labels = {"deep-learning", "tensor", "autograd"},
}
supported_platforms = {"linux"}
dependencies = {
   "lua >= 5.4, < 5.5",
}
external_dependencies = {
   DNNL = {header = "oneapi/dnnl/dnnl.h", library = "dnnl"},     -- Debian: libdnnl-dev
   PNG = {header = "png.h", library = "png"},                     -- libpng-dev
   TURBOJPEG = {header = "turbojpeg.h", library = "turbojpeg"},   -- libturbojpeg0-dev
   ZLIB = {header = "zlib.h", library = "z"},                     -- zlib1g-dev
}
build = {
   type = "cmake",
   variables = {
      CMAKE_BUILD_TYPE = "Release",
      CMAKE_INSTALL_PREFIX = "$(PREFIX)",
      CMAKE_PREFIX_PATH = "$(DNNL_DIR);$(PNG_DIR);$(TURBOJPEG_DIR);$(ZLIB_DIR)",
      DL_CUDA = "$(DL_CUDA)", -- empty (not given) means OFF
      DL_INSTALL_CMODDIR = "$(LIBDIR)",
      DL_INSTALL_LUADIR = "$(LUADIR)",
      DL_INSTALL_DEV = "OFF",
   },
}
