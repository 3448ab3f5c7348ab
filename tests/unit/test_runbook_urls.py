"""Every alert of the shipped rules (deploy/monitoring/prometheusrules.yaml, and the chart's
copy) links a runbook that exists: a section of a page under docs/, by the anchor GitHub
gives its heading."""

from __future__ import annotations

import pathlib
import re
import urllib.parse

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
RULES = ROOT / "deploy" / "monitoring" / "prometheusrules.yaml"
CHART_RULES = ROOT / "charts" / "etcd-operator" / "files" / "prometheusrules.yaml"
DOCS_URL = "https://github.com/etcd-operator/etcd-operator/blob/main/docs/"


def alerts(path: pathlib.Path) -> dict[str, dict]:
    groups = yaml.safe_load(path.read_text())["spec"]["groups"]
    return {r["alert"]: r for g in groups for r in g["rules"] if "alert" in r}


def anchors(page: pathlib.Path) -> set[str]:
    """GitHub's anchors of a Markdown page's headings: lower case, punctuation dropped,
    spaces to hyphens, a repeated one numbered."""
    found: set[str] = set()
    in_code = False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        heading = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if in_code or not heading:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-")
        anchor, n = slug, 0
        while anchor in found:
            n += 1
            anchor = f"{slug}-{n}"
        found.add(anchor)
    return found


def target(url: str) -> tuple[pathlib.Path, str]:
    if not url.startswith(DOCS_URL):
        raise AssertionError(f"{url} is not a page of {DOCS_URL}")
    parsed = urllib.parse.urlsplit(url[len(DOCS_URL) :])
    return DOCS / parsed.path, parsed.fragment


def test_the_anchors_of_a_page_are_githubs():
    page = DOCS / "monitoring.md"
    assert {"members-own-metrics", "prometheus-operator-objects-and-alerts"} <= anchors(page)


@pytest.mark.parametrize("name, rule", sorted(alerts(RULES).items()))
def test_every_alert_links_a_runbook_section_that_exists(name, rule):
    url = (rule.get("annotations") or {}).get("runbook_url")
    assert url, f"{name} has no runbook_url"
    page, anchor = target(url)
    assert page.is_file(), f"{name}: {page.relative_to(ROOT)} does not exist"
    assert anchor in anchors(page), f"{name}: no section #{anchor} in {page.relative_to(ROOT)}"


def test_the_runbook_check_catches_a_missing_section():
    assert "etcdnosuchalert" not in anchors(DOCS / "monitoring.md")
    with pytest.raises(AssertionError):
        target("https://example.com/docs/monitoring.md#etcdnoleader")


def test_the_chart_ships_the_same_rules():
    chart = yaml.safe_load(CHART_RULES.read_text())
    ours = yaml.safe_load(RULES.read_text())
    assert chart == ours, "charts/etcd-operator/files/prometheusrules.yaml differs: run `make chart-crds`"
