-- test_dist_ddp_local.lua - tests/dist/ddp.lua in this one process on the
-- "local" backend (world size 1), so the normal and the sanitizer suites
-- cover it without mpirun (tests/sh/test_distributed.sh runs it under mpirun).
DL_TEST_BACKEND = "local"
dofile("../dist/ddp.lua")
