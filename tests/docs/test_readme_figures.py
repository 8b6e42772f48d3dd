"""The README's results table holds only what its files hold: every figure of a row appears in a file the
row links, every command of the row is named in that file, and the file states the commit, the date and
the machine it was measured on. The product's text speaks of the product: no narrative of how the work
was done, no paths of one machine."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
NUMBER = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?")
FILE_LINK = re.compile(r"\[file\]\(([^)#]+)(?:#[^)]*)?\)")
COMMIT = re.compile(r"\bcommits? ([0-9a-f]{7,40})\b", re.IGNORECASE)


def _rows() -> list[list[str]]:
    text = README.read_text()
    section = text.split("## Results", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| [")]
    return [[c.strip() for c in line.strip().strip("|").split("|")] for line in rows]


ROWS = _rows()


def _linked(row: list[str]) -> list[Path]:
    return [ROOT / p for p in FILE_LINK.findall(row[0])]


def _numbers(text: str) -> list[str]:
    return [n.replace(",", "").rstrip(".") for n in NUMBER.findall(text)]


def test_the_results_table_has_rows_with_the_columns_it_names():
    assert len(ROWS) >= 10
    header = README.read_text().split("## Results", 1)[1]
    assert "| measure | figure | target | met | command | date |" in header
    assert all(len(r) == 6 for r in ROWS), [r[0] for r in ROWS if len(r) != 6]


@pytest.mark.parametrize("row", ROWS, ids=[re.sub(r"\W+", "-", r[0].split("]")[0].strip("[")) for r in ROWS])
def test_every_row_is_backed_by_the_files_it_links(row):
    measure, figure, _target, _met, command, date = row
    files = _linked(row)
    assert files, f"{measure}: links no results file"
    missing = [f for f in files if not f.is_file()]
    assert not missing, f"{measure}: links files that do not exist: {missing}"
    body = "\n".join(f.read_text() for f in files)
    plain = body.replace(",", "")
    absent = [n for n in _numbers(figure) if n not in plain]
    assert not absent, f"{measure}: figures not in {[f.name for f in files]}: {absent}"
    commands = re.findall(r"`([^`]+)`", command)
    assert commands, f"{measure}: names no command"
    unnamed = [c for c in commands if c not in body]
    assert not unnamed, f"{measure}: commands not named in its file: {unnamed}"
    for day in re.findall(r"\d{4}-\d{2}-\d{2}", date):
        assert day in body, f"{measure}: the date {day} is not in its file"
    for f in files:
        text = f.read_text()
        assert COMMIT.search(text), f"{f.name}: states no commit it was measured at"


WORDS = re.compile(r"\blent\b|\b(?:this|last|previous|earlier|other|first|second|the) sessions?\b|session's|"
                   r"session time|/work/|/home/\w|/tmp/lay|/root/", re.IGNORECASE)


def _product_text() -> list[Path]:
    files = [README, *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "results/bench").rglob("*.md")),
             *sorted((ROOT / "results/bench").glob("*.jsonl")), ROOT / "trainer/README.md"]
    return [f for f in files if f.is_file()]


@pytest.mark.parametrize("path", _product_text(), ids=lambda p: str(p.relative_to(ROOT)))
def test_the_text_speaks_of_the_product_alone(path):
    hits = [f"{i}: {line.strip()[:120]}" for i, line in enumerate(path.read_text().splitlines(), 1)
            if WORDS.search(line)]
    assert not hits, f"{path.relative_to(ROOT)}: {hits[:5]}"
