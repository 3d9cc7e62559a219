#include "contract/profiling.h"

namespace monarch {

const char* profilingTitle(c10d::OpType type) {
  switch (type) {
    case c10d::OpType::BROADCAST:
      return "monarch:broadcast";
    case c10d::OpType::ALLREDUCE:
      return "monarch:all_reduce";
    case c10d::OpType::ALLREDUCE_COALESCED:
      return "monarch:all_reduce_coalesced";
    case c10d::OpType::_ALLREDUCE_SPARSE:
      return "monarch:all_reduce_sparse";
    case c10d::OpType::REDUCE:
      return "monarch:reduce";
    case c10d::OpType::ALLGATHER:
      return "monarch:all_gather";
    case c10d::OpType::_ALLGATHER_BASE:
      return "monarch:_allgather_base";
    case c10d::OpType::ALLGATHER_COALESCED:
      return "monarch:all_gather_coalesced";
    case c10d::OpType::GATHER:
      return "monarch:gather";
    case c10d::OpType::SCATTER:
      return "monarch:scatter";
    case c10d::OpType::REDUCE_SCATTER:
      return "monarch:reduce_scatter";
    case c10d::OpType::_REDUCE_SCATTER_BASE:
      return "monarch:_reduce_scatter_base";
    case c10d::OpType::ALLTOALL:
      return "monarch:all_to_all";
    case c10d::OpType::ALLTOALL_BASE:
      return "monarch:all_to_all_base";
    case c10d::OpType::SEND:
      return "monarch:send";
    case c10d::OpType::RECV:
      return "monarch:recv";
    case c10d::OpType::RECVANYSOURCE:
      return "monarch:recv_anysource";
    case c10d::OpType::BARRIER:
      return "monarch:barrier";
    default:
      return "monarch:op";
  }
}

} // namespace monarch
