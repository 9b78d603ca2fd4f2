"""Tables generated into a Markdown doc between two markers, so the doc cannot drift from the code
it describes: `regenerate` writes the section, or with `--check` fails while it is stale."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class GeneratedSection:
    doc: Path
    name: str  # the markers are <!-- NAME:start --> and <!-- NAME:end -->
    command: str  # what regenerates it, for the stale message

    def filled(self, document: str, body: str) -> str:
        start, end = f"<!-- {self.name}:start -->", f"<!-- {self.name}:end -->"
        before, _, rest = document.partition(start)
        _, _, after = rest.partition(end)
        return f"{before}{start}\n{body}\n{end}{after}"

    def regenerate(self, body: str, argv: list[str]) -> int:
        current = self.doc.read_text()
        if argv == ["--check"]:
            if current != self.filled(current, body):
                print(f"{self.doc} is stale: run {self.command}", file=sys.stderr)
                return 1
            return 0
        self.doc.write_text(self.filled(current, body))
        return 0
