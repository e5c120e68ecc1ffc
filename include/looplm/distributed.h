// Data-parallel training under mpirun (docs/training.md, "Data parallel (MPI)"): what a front end
// (the CLI) calls around train(). The ranks, collectives and the gradient sum: src/train/distributed.h.
#pragma once

namespace looplm {

// When a launcher started this process (mpirun: OMPI_COMM_WORLD_SIZE; PMIx or PMI: PMIX_RANK,
// PMI_RANK), MPI_Init, and train() runs as one rank of the job; a plain `looplm train` never
// starts MPI. The communicator is the `looplm` binary's (built with MPI when CMake finds it,
// src/train/distributed_mpi.cpp); the library alone (a program of yours, the Python module) and a
// binary built without MPI refuse a launch of several ranks with a UsageError (each rank would
// train alone) and otherwise do nothing.
void start_distributed();
// The process's exit code after MPI: MPI_Finalize when the command returned (whatever its code:
// e.g. 130 after a stop every rank agreed on) or failed with an error every rank found
// (error_was_agreed); MPI_Abort after an error on this rank alone (note_error_here: the others may
// wait on it forever), which ends the whole job with `code`.
int end_distributed(int code);

// This process's rank in the job (0 without mpirun).
int rank_in_job();

// An error every rank found at the same point (ranks that disagree on the config, a grad_accum
// N does not divide): every rank throws it, rank 0 alone prints it, and the job ends with its exit
// code without MPI_Abort.
void note_agreed_error();
bool error_was_agreed();
// An error this rank met (the CLI notes every error it prints); unless agreed, it ends the job.
void note_error_here();
bool failed_alone();

}  // namespace looplm
