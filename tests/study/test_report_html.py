"""REPORT.html: one self-contained page (figures inlined, no script, no network, all text
escaped) with the claims table, each claim's figure and its run dirs; opened in a real
headless Chromium, it loads without errors and shows every image (naturalWidth > 0).
.ci/run installs Chromium from the system packages; without one the browser test skips."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from test_report import FINDING, run_report, write_run

from bertology.run import figures
from bertology.run.index import write_run_index

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
# No first-run, sync or background traffic: the CI machine's network is closed, and a page
# that needs none must not wait on it.
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars"]
# What the test adds to its copy of the page: errors of any resource or script, and after
# load, how many images there are and how many were decoded (naturalWidth > 0).
CHECK = """<script>
window.__errors = [];
window.addEventListener("error", e => window.__errors.push(
  String(e.message || (e.target && (e.target.src || e.target.href)) || e.type)), true);
window.addEventListener("load", () => {
  const images = Array.from(document.images);
  const out = document.createElement("pre");
  out.id = "__check";
  out.textContent = JSON.stringify({images: images.length,
    shown: images.filter(i => i.complete && i.naturalWidth > 0).length,
    errors: window.__errors});
  document.body.appendChild(out);
});
</script>"""


def find_browser() -> str | None:
    return next((path for name in BROWSERS if (path := shutil.which(name))), None)


@pytest.fixture
def html_report(tmp_path) -> Path:
    """A report over synthetic runs: one finding that holds, one whose claim carries markup."""
    tricky = {**FINDING, "id": "tricky", "claim": "<b>a</b> & b < c", "source": "\"quoted\""}
    for seed, (a, b) in enumerate([(0.8, 0.7), (0.81, 0.7), (0.79, 0.71)]):
        write_run(tmp_path / "runs" / f"demo{seed}", {"eval/a": a, "eval/b": b}, seed, FINDING)
        write_run(tmp_path / "runs" / f"tricky{seed}", {"eval/a": a, "eval/b": b}, seed, tricky)
    run_report(tmp_path / "runs", tmp_path / "report", FINDING, tricky)
    return tmp_path / "report" / "REPORT.html"


def test_the_page_is_self_contained_escaped_and_complete(html_report):
    page = html_report.read_text()
    assert page.startswith("<!DOCTYPE html>") and "<script" not in page.lower()
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)  # nothing fetched
    images = re.findall(r'<img src="([^"]+)"', page)
    assert len(images) == 2 and all(i.startswith("data:image/png;base64,") for i in images)
    assert "&lt;b&gt;a&lt;/b&gt; &amp; b &lt; c" in page and "<b>a</b>" not in page
    assert "&quot;quoted&quot;" in page
    for column in ("claim", "source", "test", "effect a − b", "95% interval", "raw", "Holm"):
        assert f"<th>{column}</th>" in page
    assert page.count('class="holds"') >= 4  # raw and Holm, in the table and each section
    for seed in range(3):  # the run dirs behind each claim
        assert str(html_report.parent.parent / "runs" / f"tricky{seed}") in page


def render(browser: str, page: Path, out: Path, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([browser, *FLAGS, f"--user-data-dir={out / 'profile'}",
                           "--virtual-time-budget=10000", *flags, page.as_uri()],
                          capture_output=True, text=True, timeout=120)


def browser_or_skip() -> str:
    browser = find_browser()
    if browser is None:
        reason = f"no browser ({', '.join(BROWSERS)}); .ci/run installs Chromium"
        if os.environ.get("BERTOLOGY_REQUIRE_BROWSER") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    return browser


def displayed(browser: str, page: Path, tmp_path: Path) -> dict:
    """Chromium's count of the page's images, those displayed, and any errors, read from a
    copy of the page (beside it, so relative paths hold) with the check script added."""
    checked = page.with_name(f".checked_{page.name}")
    checked.write_text(page.read_text().replace("</head>", CHECK + "\n</head>", 1))
    dom = render(browser, checked, tmp_path, "--dump-dom")
    checked.unlink()
    found = re.search(r'<pre id="__check">(.*?)</pre>', dom.stdout)
    assert found, f"the page never finished loading: {dom.stderr[-2000:]}"
    return json.loads(found.group(1).replace("&quot;", '"'))


def test_chromium_loads_the_page_and_shows_every_image(html_report, tmp_path):
    browser = browser_or_skip()
    assert displayed(browser, html_report, tmp_path) == {"images": 2, "shown": 2, "errors": []}
    shot = tmp_path / "report.png"
    render(browser, html_report, tmp_path, f"--screenshot={shot}", "--window-size=1280,1600")
    assert shot.read_bytes().startswith(b"\x89PNG") and shot.stat().st_size > 20_000


def test_a_run_index_shows_its_figures_by_relative_path(tmp_path):
    """A probe or prune run's index.html: every plots/*.png displayed from beside it."""
    run = tmp_path / "run"
    rows = [{"model": "model", "layer": n, "seed": 0, "accuracy": n / 4} for n in range(3)]
    for name in ("one", "two"):
        figures.plot_layer_curves(rows, ["accuracy"], name, run, name)
    page = write_run_index(run, "bertology probe: <demo>", {"probe/layer_00/accuracy": 0.5})
    text = page.read_text()
    assert 'src="plots/one.png"' in text and 'href="plots/two.pdf"' in text
    assert "&lt;demo&gt;" in text and "<script" not in text
    browser = browser_or_skip()
    assert displayed(browser, page, tmp_path) == {"images": 2, "shown": 2, "errors": []}


def test_a_claim_on_an_intervention_shows_the_figure_its_run_drew(tmp_path):
    """A finding that reads interchange/… metrics carries, beside its own figure, the
    per-layer figure the analysis drew in its first run's plots/ (effect beside the probe's
    curve); a finding on other metrics carries none."""
    import matplotlib.pyplot as plt

    used = {"id": "used", "claim": "used", "source": "a paper", "unit": "checkpoint",
            "compare": {"a": "interchange/best/effect", "b": 0.0, "expect": "greater"}}
    for seed, effect in enumerate([0.6, 0.62, 0.58]):
        run = write_run(tmp_path / "runs" / f"used{seed}", {"interchange/best/effect": effect},
                        seed, used)
        write_run(tmp_path / "runs" / f"demo{seed}", {"eval/a": 0.8, "eval/b": 0.7 - seed / 100},
                  seed, FINDING)
        figure, axis = plt.subplots()
        axis.plot([0, 1], [effect, 0])
        figures.save_figure(figure, run, "interchange_demo_task")
    run_report(tmp_path / "runs", tmp_path / "report", used, FINDING)
    page = (tmp_path / "report" / "REPORT.html").read_text()
    used_section = page.split('id="used"')[1].split("</section>")[0]
    demo_section = page.split('id="demo"')[1].split("</section>")[0]
    assert used_section.count("<img") == 2 and "interchange_demo_task" in used_section
    assert str(tmp_path / "runs" / "used0") in used_section.split("<figcaption>")[1]
    assert demo_section.count("<img") == 1
