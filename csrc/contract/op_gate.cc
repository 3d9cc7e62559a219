#include "contract/op_gate.h"

#include <utility>

namespace monarch {

namespace {
thread_local OpGate pendingGate;
} // namespace

ScopedOpGate::ScopedOpGate(OpGate gate) {
  pendingGate = std::move(gate);
}

ScopedOpGate::~ScopedOpGate() {
  pendingGate = nullptr; // not taken: the call failed before it enqueued
}

OpGate ScopedOpGate::take() {
  OpGate gate = std::move(pendingGate);
  pendingGate = nullptr;
  return gate;
}

} // namespace monarch
