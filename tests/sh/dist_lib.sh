# shellcheck shell=bash
# dist_lib.sh - what the distributed shell tests share (sourced after
# lib.sh): skips the test (status 77) when mpirun is absent, and defines
#   mpi NP CMD...   CMD under `mpirun --oversubscribe -np NP`, one OpenMP
#                   thread per rank, Open MPI allowed to run as root, output
#                   collected by lib.sh's run (RUN_TIMEOUT bounds it)
if ! command -v mpirun >/dev/null; then
    echo "mpirun not found: skipped (setup.sh installs openmpi-bin)"
    exit 77
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
# no network interfaces to probe on a CI box: shared memory and loopback
export OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
# the launcher's own help texts after an abort are noise in the logs
export OMPI_MCA_orte_base_help_aggregate=0

mpi() {
    local np=$1
    shift
    run mpirun --oversubscribe -np "$np" "$@"
}
