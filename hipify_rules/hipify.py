"""The ROCm build's source tree: csrc/ with the project rules of rules.json applied,
then torch's hipify tables (``torch.utils.hipify``).

``hipify_tree(csrc, out)`` writes the result under ``out`` and returns, for every
source file, the path it has there (torch renames the files it changes, e.g.
``gpu/communicator.cc`` becomes ``gpu/communicator_hip.cc``, and rewrites the
includes to match). Files are rewritten only when their text changes, so an
incremental build recompiles only what changed. setup.py calls it for
``GPU_PLATFORM=rocm`` and for ``python setup.py hipify``; test/test_hipify.py
checks its output.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional, Sequence

__all__ = ["RULES_FILE", "Rule", "apply_rules", "hipify_tree", "load_rules"]

RULES_FILE = Path(__file__).with_name("rules.json")
SOURCE_SUFFIXES = (".cc", ".h", ".cpp", ".hpp")
KINDS = ("include", "string", "identifier")

# A C string literal (no raw strings in this code base).
_STRING_LITERAL = re.compile(r'"((?:[^"\\\n]|\\.)*)"')


@dataclass(frozen=True)
class Rule:
    kind: str
    cuda: str
    rocm: str
    why: str


def load_rules(path: Path = RULES_FILE) -> list[Rule]:
    """The rules of ``path``; raises ValueError on a malformed rule."""
    data = json.loads(path.read_text())
    rules = []
    for index, entry in enumerate(data["rules"]):
        rule = Rule(kind=entry["kind"], cuda=entry["cuda"], rocm=entry["rocm"], why=entry.get("why", ""))
        if rule.kind not in KINDS:
            raise ValueError(f"{path}: rule {index} has kind {rule.kind!r}; expected one of {KINDS}")
        if not rule.cuda:
            raise ValueError(f"{path}: rule {index} has an empty 'cuda'")
        rules.append(rule)
    return rules


def apply_rules(text: str, rules: Iterable[Rule]) -> str:
    """``text`` with every rule applied, in order."""
    for rule in rules:
        if rule.kind == "include":
            pattern = re.compile(r'(#\s*include\s*[<"])' + re.escape(rule.cuda) + r'([>"])')
            text = pattern.sub(lambda m, r=rule: m.group(1) + r.rocm + m.group(2), text)
        elif rule.kind == "string":
            text = _STRING_LITERAL.sub(
                lambda m, r=rule: f'"{r.rocm}"' if m.group(1) == r.cuda else m.group(0), text
            )
        else:
            text = re.sub(r"\b" + re.escape(rule.cuda) + r"\b", rule.rocm, text)
    return text


def hipify_tree(source: Path, output: Path, rules: Optional[Sequence[Rule]] = None) -> dict[str, str]:
    """Writes the hipified copy of ``source`` to ``output``.

    Returns ``{path in source: path in output}`` (both relative) for every source
    file. ``output`` ends up holding exactly the hipified tree: stale files go.
    """
    from torch.utils.hipify import hipify_python

    rules = load_rules() if rules is None else rules
    source = Path(source).resolve()
    output = Path(output)
    sources = sorted(p.relative_to(source).as_posix() for p in source.rglob("*") if p.suffix in SOURCE_SUFFIXES)
    with tempfile.TemporaryDirectory(prefix="monarch-hipify-") as tmp:
        work = Path(tmp) / "src"
        for rel in sources:
            target = work / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(apply_rules((source / rel).read_text(), rules))
        # torch prints progress and a summary; keep the build log readable.
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            results = hipify_python.hipify(
                project_directory=str(work),
                output_directory=str(work),
                includes=[str(work / "*")],
                header_include_dirs=[""],
                extensions=SOURCE_SUFFIXES,
                header_extensions=(".h", ".hpp"),
                is_pytorch_extension=True,
                show_progress=False,
            )
        mapping: dict[str, str] = {}
        for rel in sources:
            result = results.get(str(work / rel))
            hipified = getattr(result, "hipified_path", None) if result is not None else None
            mapping[rel] = Path(hipified).relative_to(work).as_posix() if hipified else rel
        # The tree holds what the ROCm build compiles: renamed files replace their originals.
        keep = set(mapping.values())
        for rel in sources:
            if rel not in keep:
                (work / rel).unlink()
        _sync(work, output)
    return mapping


def _sync(tree: Path, output: Path) -> None:
    """Makes ``output`` a copy of ``tree``, touching only files that differ."""
    wanted = {p.relative_to(tree).as_posix() for p in tree.rglob("*") if p.is_file()}
    if output.exists():
        for path in sorted(output.rglob("*"), reverse=True):
            rel = path.relative_to(output).as_posix()
            if path.is_file() and rel not in wanted:
                path.unlink()
            elif path.is_dir() and not any(path.iterdir()):
                path.rmdir()
    for rel in sorted(wanted):
        text = (tree / rel).read_text()
        target = output / rel
        if target.exists() and target.read_text() == text:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    if not output.exists():
        output.mkdir(parents=True)


if __name__ == "__main__":
    import sys

    root = Path(__file__).resolve().parent.parent
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else root / "build" / "hipified" / "csrc"
    for src, dst in hipify_tree(root / "csrc", out).items():
        if src != dst:
            print(f"{src} -> {dst}")
    print(f"hipified tree: {out}")
