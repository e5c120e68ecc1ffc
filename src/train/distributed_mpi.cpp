// The MPI communicator (docs/training.md, "Data parallel (MPI)"). Only the `looplm` binary
// compiles this file, and only with LOOPLM_HAVE_MPI (CMake found MPI) does it define anything: its
// start_distributed / end_distributed replace the library's weak ones (distributed.cpp: a launch
// of several ranks refused), so the library, its tests and the Python module never link MPI.
#include <climits>
#include <cstdlib>
#include <string>

#include "looplm/error.h"
#include "looplm/util.h"
#include "train/distributed.h"

#if LOOPLM_HAVE_MPI
// The C API only: OpenMPI's and MPICH's mpi.h otherwise pull in their deprecated C++ bindings,
// which need a library looplm does not link.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

#if LOOPLM_HAVE_MPI
namespace looplm {

namespace {

bool started = false;

int count_of(size_t bytes) {
  if (bytes > (size_t)INT_MAX) throw Error("MPI message of " + std::to_string(bytes) + " bytes: above MPI's int count");
  return (int)bytes;
}

void check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) throw Error(std::string("MPI ") + what + " failed (error " + std::to_string(rc) + ")");
}

class MpiWorld final : public Communicator {
 public:
  MpiWorld() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void sendrecv(const void* send, void* recv, size_t bytes, int peer) override {
    check(MPI_Sendrecv(send, count_of(bytes), MPI_BYTE, peer, 0, recv, count_of(bytes), MPI_BYTE, peer, 0, MPI_COMM_WORLD,
                       MPI_STATUS_IGNORE),
          "Sendrecv");
  }
  void allgather(const void* send, size_t bytes, void* recv) override {
    check(MPI_Allgather(send, count_of(bytes), MPI_BYTE, recv, count_of(bytes), MPI_BYTE, MPI_COMM_WORLD), "Allgather");
  }
  void broadcast(void* data, size_t bytes) override {
    check(MPI_Bcast(data, count_of(bytes), MPI_BYTE, 0, MPI_COMM_WORLD), "Bcast");
  }

 private:
  int rank_ = 0, size_ = 1;
};

}  // namespace

void start_distributed() {
  if (launcher_ranks() < 0 || started) return;
  // Funneled: only the main thread calls MPI; the OpenMP pool never does.
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  started = true;
  set_world(std::make_unique<MpiWorld>());
}

int end_distributed(int code) {
  if (!started) return code;
  started = false;
  if (failed_alone() && world().size() > 1) MPI_Abort(MPI_COMM_WORLD, code);
  MPI_Finalize();
  return code;
}

}  // namespace looplm
#endif
