-- test_dist_syncbn_local.lua - tests/dist/syncbn.lua in this one process on
-- the "local" backend (world size 1), so the normal and the sanitizer suites
-- cover it without mpirun (tests/sh/test_distributed.sh runs it under mpirun).
DL_TEST_BACKEND = "local"
dofile("../dist/syncbn.lua")
