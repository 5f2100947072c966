"""The README is a map and docs/ holds a page a topic (issues 43 and 45).

The flag reference (docs/flags.md) is checked both ways against the parsers the commands use,
so a flag added to the parser without a line in the reference, or a line left for a flag that is
gone, fails here. The README stays short, its tables narrow, and every link in it and in docs/
leads to a file (and, with a `#fragment`, to a heading or anchor) that exists.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

# The checkout: the first folder above this file with the project file (the tests may move into
# folders of their own).
ROOT = next(folder for folder in Path(__file__).resolve().parents
            if (folder / "pyproject.toml").is_file())
README = ROOT / "README.md"
DOCS = ROOT / "docs"
FLAGS = DOCS / "flags.md"

MAX_README_LINES = 300
MAX_TABLE_ROW = 300          # characters: a wider row scrolls sideways or wraps into a wall

FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
CODE_SPAN = re.compile(r"`([^`]+)`")
FLAG = re.compile(r"(?<![\w\-./])(--?[A-Za-z][\w-]*)")
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)\)")


def _prose(text: str) -> str:
    """The text without its fenced code blocks (commands and pasted output)."""
    return FENCE.sub("", text)


def _sections(text: str) -> dict[str, str]:
    """Level-2 sections of a page by heading (the text before the first is under '')."""
    parts, heading = {"": []}, ""
    for line in text.splitlines():
        if line.startswith("## "):
            heading = line[3:].strip()
            parts[heading] = []
        else:
            parts[heading].append(line)
    return {name: "\n".join(lines) for name, lines in parts.items()}


def _flags_in(text: str) -> set[str]:
    """Flags named in code spans: `--batch-size N`, `--ab "--nhwc"`, `-m`."""
    return {flag for span in CODE_SPAN.findall(_prose(text)) for flag in FLAG.findall(span)}


def _options(parser) -> set[str]:
    return {option for action in parser._actions for option in action.option_strings}


def _section(heading_start: str) -> str:
    sections = _sections(FLAGS.read_text())
    found = [text for name, text in sections.items() if name.startswith(heading_start)]
    assert len(found) == 1, f"docs/flags.md needs one '## {heading_start}...' section"
    return found[0]


@pytest.fixture(scope="module")
def benchmark_flags() -> set[str]:
    from microbench.plan.cli import build_parser
    return _options(build_parser())


def test_every_flag_of_the_benchmark_is_in_the_reference(benchmark_flags):
    documented = _flags_in(_section("microbench ("))
    missing = sorted(benchmark_flags - documented)
    assert not missing, f"flags of --help without a line in docs/flags.md: {missing}"


def test_every_flag_in_the_reference_is_one_of_the_benchmark(benchmark_flags):
    from microbench.plan.cli import TIMM_SPELLINGS       # read as ours, with a Note: line
    documented = _flags_in(_section("microbench ("))
    unknown = sorted(documented - benchmark_flags - set(TIMM_SPELLINGS))
    assert not unknown, f"docs/flags.md names flags the parser does not have: {unknown}"


def test_the_report_flags_match_the_reference_both_ways():
    from microbench.report.command import build_parser
    parser_flags = _options(build_parser())
    documented = _flags_in(_section("microbench-report"))
    assert sorted(parser_flags - documented) == [], "report flags missing from docs/flags.md"
    assert sorted(documented - parser_flags) == [], "docs/flags.md names report flags not parsed"


def test_the_node_check_flags_match_the_reference_both_ways():
    from microbench.node.arguments import build_parser
    parser_flags = _options(build_parser())
    documented = _flags_in(_section("microbench-node"))
    assert sorted(parser_flags - documented) == [], "node flags missing from docs/flags.md"
    assert sorted(documented - parser_flags) == [], "docs/flags.md names node flags not parsed"


def test_flags_once_only_in_prose_have_a_row_in_the_reference():
    """Issue 45: these were explained only in running text; a reference row each."""
    rows = "\n".join(line for line in FLAGS.read_text().splitlines() if line.startswith("| `"))
    first_cells = {flag for row in rows.splitlines()
                   for flag in FLAG.findall(row.split(" | ")[0])}
    for flag in ("--data", "--workers", "--decode", "--transforms", "--pin-memory",
                 "--prefetch-factor", "--activation-checkpointing", "--reshard-after-forward",
                 "--trials"):
        assert flag in first_cells, f"{flag} has no row of its own in docs/flags.md"


def test_readme_is_a_map():
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines"


def _pages() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


@pytest.mark.parametrize("page", _pages(), ids=lambda page: page.name)
def test_table_rows_are_narrow(page):
    wide = [(number, len(line)) for number, line in enumerate(page.read_text().splitlines(), 1)
            if line.startswith("|") and len(line) > MAX_TABLE_ROW]
    if page.parent == DOCS and page.name in ("results.md", "architecture.md"):
        pytest.skip("pages of measured results and of the code: their own owners' tables")
    assert not wide, f"{page.name}: table rows wider than {MAX_TABLE_ROW} characters: {wide}"


def _install_blocks() -> list[list[str]]:
    """The README Install section's code blocks, each as its commands (comments dropped)."""
    install = _sections(README.read_text())["Install"]
    return [[line for line in block.splitlines()
             if line.strip() and not line.lstrip().startswith("#")]
            for block in re.findall(r"^```bash\n(.*?)^```", install, re.M | re.S)]


def test_readme_install_has_one_command_per_block():
    """Issue 45: pasting a block runs one platform's line, never all of them. Issue 64: the
    first install line works everywhere, PyTorch's index unreachable included: it names no
    index (the pair comes from the package index or its mirror); PyTorch's index is the
    alternative, for ROCm and the small CPU build."""
    blocks = _install_blocks()
    assert len(blocks) >= 4, "a venv, the tool's own line, ROCm and the CPU"
    for commands in blocks:
        assert len(commands) == 1, f"one command per block, got {commands}"
    installs = [command for [command] in blocks if command.startswith("pip install")]
    assert installs[0] == 'pip install ".[dev]"', installs
    platforms = [command for command in installs if "--index-url" in command]
    assert len(platforms) == 2, "one block each for ROCm and the CPU"
    assert all(command.startswith("pip install torch torchvision ") for command in platforms)


def test_ci_runs_the_readmes_first_install_line():
    """.ci/run is what a new user does: the README's first install line, as written there."""
    first = next(command for [command] in _install_blocks() if command.startswith("pip"))
    ci = (ROOT / ".ci" / "run").read_text()
    assert f"python3 -m {first.replace('pip install', 'pip install -q')}\n" in ci


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: markup dropped, lower case, punctuation but '-' and '_'
    removed, spaces as hyphens."""
    text = re.sub(r"<[^>]+>", "", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = _prose(page.read_text())
    anchors, seen = set(), {}
    for heading in re.findall(r"^#{1,6} +(.+?) *#*$", text, re.M):
        slug = _slug(heading)
        count = seen.get(slug, 0)
        anchors.add(slug if count == 0 else f"{slug}-{count}")
        seen[slug] = count + 1
    anchors |= set(re.findall(r"<a (?:id|name)=\"([^\"]+)\"", text))
    return anchors


def _links(page: Path) -> list[str]:
    return [target for target in LINK.findall(_prose(page.read_text()))
            if not re.match(r"[a-z]+:", target)]


def test_every_docs_link_of_the_readme_names_a_file():
    targets = [target for target in _links(README) if target.startswith("docs/")]
    assert targets, "the README's table of contents links into docs/"
    missing = [target for target in targets
               if not (ROOT / target.partition("#")[0]).is_file()]
    assert not missing, f"README.md links to missing files: {missing}"
    pages = {path.name for path in DOCS.glob("*.md")}
    linked = {Path(target.partition("#")[0]).name for target in targets}
    assert pages <= linked, f"docs/ pages the README does not list: {sorted(pages - linked)}"


@pytest.mark.parametrize("page", _pages(), ids=lambda page: page.name)
def test_links_lead_to_a_file_and_an_anchor(page):
    broken = []
    for target in _links(page):
        path, _, fragment = target.partition("#")
        destination = (page.parent / path).resolve() if path else page
        if not destination.exists():
            broken.append(target)
        elif fragment and destination.suffix == ".md" and fragment not in _anchors(destination):
            broken.append(target)
    assert not broken, f"{page.name}: links to nothing: {broken}"


def test_the_version_line_in_the_reference_is_what_version_prints(capsys):
    """Issue 56: the reference showed a line --version never printed."""
    from microbench.plan.cli import build_parser
    parser = build_parser()
    parser.prog = "micro_benchmarking_pytorch.py"
    with pytest.raises(SystemExit):
        parser.parse_args(["--version"])
    printed = capsys.readouterr().out.strip()
    [row] = [line for line in FLAGS.read_text().splitlines() if line.startswith("| `--version`")]
    assert f"`{printed}`" in row


GLOSSARY = DOCS / "glossary.md"


def test_every_term_the_help_names_is_explained_in_the_glossary():
    """Issue 56: MFU, TTFT, gloo... before any word of what they are; --help's epilog names
    the glossary, and the glossary has a bold entry for each term it lists."""
    from microbench.plan.cli import EPILOG, GLOSSARY_TERMS
    assert "docs/glossary.md" in EPILOG
    entries = " ".join(re.findall(r"\*\*(.+?)\*\*", GLOSSARY.read_text()))
    missing = [term for term in GLOSSARY_TERMS if term not in entries]
    assert not missing, f"terms without a glossary entry: {missing}"


def test_the_readme_links_each_glossary_term_where_it_first_appears():
    from microbench.plan.cli import GLOSSARY_TERMS
    prose = _prose(README.read_text())
    for term in GLOSSARY_TERMS:
        first = re.search(rf"(?<![\w-]){re.escape(term)}(?![\w-])", prose)
        if first is None:
            continue
        link = re.match(r"[^\]\n]*\]\(docs/glossary\.md#", prose[first.end():])
        assert link, f"README: the first {term!r} is not a link to docs/glossary.md"
