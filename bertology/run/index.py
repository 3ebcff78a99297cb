"""index.html: a run dir on one page a browser opens from disk (probe and prune runs): every
figure in plots/ by its relative path with its PDF linked, every table in tables/ linked, and
the final metrics. No script, nothing fetched; all text escaped."""

from __future__ import annotations

from html import escape
from pathlib import Path

from bertology.run.atomic import write_text_atomic

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; max-width: 1400px; margin: 2em auto;
       padding: 0 1em; color: #1a1a1a; }
figure { margin: 1.5em 0; } figure img { max-width: 100%; height: auto; }
table { border-collapse: collapse; font-size: 13px; }
td { border: 1px solid #ccc; padding: 2px 8px; } td.num { text-align: right; }
"""


def write_run_index(out_dir: Path, title: str, metrics: dict[str, float]) -> Path:
    """<run dir>/index.html, written last (after the figures and tables it lists)."""
    body = [f"<h1>{escape(title)}</h1>", f"<p><code>{escape(str(out_dir))}</code></p>",
            "<h2>Figures</h2>"]
    for png in sorted((out_dir / "plots").glob("*.png")):
        name = escape(png.stem)
        pdf = f' (<a href="plots/{name}.pdf">PDF</a>)' if png.with_suffix(".pdf").exists() else ""
        body.append(f'<figure><img src="plots/{name}.png" alt="{name}">'
                    f"<figcaption><code>plots/{name}.png</code>{pdf}</figcaption></figure>")
    tables = sorted((out_dir / "tables").glob("*.csv"))
    body += ["<h2>Tables</h2>", "<ul>", *(f'<li><a href="tables/{escape(t.name)}">'
                                          f"{escape(t.name)}</a></li>" for t in tables), "</ul>"]
    body += ["<h2>Metrics</h2>", "<details><summary>metrics.json</summary><table>",
             *(f'<tr><td>{escape(k)}</td><td class="num">{v:.4g}</td></tr>'
               for k, v in sorted(metrics.items())), "</table></details>"]
    page = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
            f"<title>{escape(title)}</title>", f"<style>{STYLE}</style>", "</head>", "<body>",
            *body, "</body>", "</html>"]
    path = out_dir / "index.html"
    write_text_atomic(path, "\n".join(page) + "\n")
    return path
