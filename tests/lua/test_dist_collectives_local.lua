-- test_dist_collectives_local.lua - tests/dist/collectives.lua in this one process on the
-- "local" backend (world size 1), so the normal and the sanitizer suites
-- cover it without mpirun (tests/sh/test_distributed.sh runs it under mpirun).
DL_TEST_BACKEND = "local"
dofile("../dist/collectives.lua")
