"""The decision by which a group's GPU communicators follow a native
reconfigure (csrc/contract/member_change.h): shrink when the new members are
the old ones less some, in the same order; otherwise make them anew. A pure
function, compiled here with a small driver and the host compiler, so that it
is checked without a GPU (the NCCL calls it leads to are compile-checked only,
test/test_native_gpu_compile.py)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Iterator, Optional

import pytest

from cuda_compile import CSRC

pytestmark = pytest.mark.timeout(120)

# Reads cases from stdin ("before | after", endpoint ids) and prints, per
# case, the ranks that left, or "rebuild".
DRIVER = r"""
#include <iostream>
#include <sstream>
#include <string>

#include "contract/member_change.h"

int main() {
  std::string line;
  while (std::getline(std::cin, line)) {
    auto bar = line.find('|');
    std::vector<uint64_t> sides[2];
    for (int side = 0; side < 2; ++side) {
      std::istringstream words(side == 0 ? line.substr(0, bar) : line.substr(bar + 1));
      for (uint64_t id; words >> id;) sides[side].push_back(id);
    }
    auto left = monarch::gpu::membersThatLeft(sides[0], sides[1]);
    if (!left) {
      std::cout << "rebuild\n";
      continue;
    }
    for (size_t i = 0; i < left->size(); ++i) std::cout << (i ? " " : "") << (*left)[i];
    std::cout << "\n";
  }
}
"""

CASES: list[tuple[list[int], list[int], Optional[list[int]]]] = [
    # the last, a middle and the first member leave
    ([11, 22, 33], [11, 22], [2]),
    ([11, 22, 33], [11, 33], [1]),
    ([11, 22, 33], [22, 33], [0]),
    # down to one, and several at once
    ([11, 22, 33, 44], [33], [0, 1, 3]),
    ([11, 22, 33, 44, 55], [11, 44], [1, 2, 4]),
    # nobody left: the same group (made anew after a reconfigure)
    ([11, 22, 33], [11, 22, 33], None),
    # the survivors in another order: a shrink would give them the wrong ranks
    ([11, 22, 33], [22, 11], None),
    # a new member, with or without others leaving
    ([11, 22], [11, 22, 33], None),
    ([11, 22, 33], [11, 44], None),
    # a group of one (before the first reconfigure) joining others
    ([11], [11, 22], None),
]


@pytest.fixture(scope="module")
def driver() -> Iterator[Path]:
    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        pytest.skip("no C++ compiler")
    scratch = Path(tempfile.mkdtemp(prefix="member-change-"))
    (scratch / "driver.cc").write_text(DRIVER)
    binary = scratch / "driver"
    subprocess.run(
        [compiler, "-std=c++17", "-Wall", "-Werror", f"-I{CSRC}", str(scratch / "driver.cc"),
         str(CSRC / "contract" / "member_change.cc"), "-o", str(binary)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    yield binary
    shutil.rmtree(scratch, ignore_errors=True)


def test_communicators_shrink_exactly_when_the_survivors_keep_their_order(driver: Path) -> None:
    stdin = "".join(f"{' '.join(map(str, before))} | {' '.join(map(str, after))}\n" for before, after, _ in CASES)
    lines = subprocess.run([str(driver)], input=stdin, capture_output=True, text=True, check=True).stdout.splitlines()
    got = [None if line == "rebuild" else [int(rank) for rank in line.split()] for line in lines]
    assert got == [left for _, _, left in CASES]
