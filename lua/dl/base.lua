-- dl.base: Lua-side additions to the dl module, run once by luaopen_dl with
-- the module table.  Everything heavy lives in C; this holds conveniences.
return function(dl)
  -- dl.no_grad and friends arrive with autograd; keep this file small.
  dl._lua_loaded = true
end
