"""The documents that messages, docstrings and the README cite are in the project (docs/), and nothing a user sees
points to a document they do not have."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
USER_FACING = sorted((ROOT / "strata_kernels").glob("*.py")) + [ROOT / "strata_kernels" / "csrc" / "strata_plugin.h",
                                                               ROOT / "README.md"]
# Template text that reaches users: the string literals of the dispatchers (what which() returns).
DISPATCH = sorted((ROOT / "templates").glob("*/dispatch*.j2")) + sorted((ROOT / "templates").glob("common/dispatch*.j2"))
MISSING_DOCS = re.compile(r"QSA_SPEC|ARCHITECTURE|shared/")


def _cited(text: str) -> set[str]:
    return set(re.findall(r"docs/[A-Za-z0-9_./-]+\.md", text))


def test_no_reference_to_documents_users_lack():
    bad = [f"{p.relative_to(ROOT)}:{i}: {line.strip()}" for p in USER_FACING
           for i, line in enumerate(p.read_text().splitlines(), 1) if MISSING_DOCS.search(line)]
    for p in DISPATCH:
        for i, line in enumerate(p.read_text().splitlines(), 1):
            if any(MISSING_DOCS.search(s) for s in re.findall(r'"([^"]*)"', line)):
                bad.append(f"{p.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not bad, "cite docs/… instead:\n" + "\n".join(bad)


def test_cited_documents_exist():
    cited: dict[str, list[str]] = {}
    for p in USER_FACING + DISPATCH + sorted((ROOT / "docs").glob("*.md")):
        for doc in _cited(p.read_text()):
            cited.setdefault(doc.split("#")[0], []).append(str(p.relative_to(ROOT)))
    assert cited, "nothing cites docs/ (the scan is broken)"
    missing = {d: by for d, by in cited.items() if not (ROOT / d).is_file()}
    assert not missing, f"cited but absent: {missing}"


def test_operation_doc_states_the_contract():
    text = (ROOT / "docs" / "operation.md").read_text()
    for fact in ("1/√head_dim", "h // G", "-1", "exactly 0", "ValueError", "STRATA_KERNELS_CHECK_IDS"):
        assert fact in text, f"docs/operation.md does not say {fact!r}"
