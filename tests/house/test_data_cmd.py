"""`bertology data list | fetch | verify` against local mirrors of the real data sets: a folder
(file://) and an HTTP server on 127.0.0.1 that honours Range requests, so the real download
code runs and only its source differs. The mirrors are copied from the data root."""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import DATA_DIR
from omegaconf import OmegaConf

from bertology.cli.entry import main
from bertology.config.compose import CONF_DIR
from bertology.config.data_sets import DEFAULT_DATA_DIR, check_set, data_root, load_manifest
from bertology.data.cloze_suites import load_cprag
from bertology.errors import UserError

SMALL = ("ettinger_diagnostics", "glue_mrpc")

# the full sets (conftest.py skips these on the excerpts in tests/fixtures/data)
needs_data = pytest.mark.data(*SMALL)
needs_all_data = pytest.mark.data("--all")


@pytest.fixture
def mirror(tmp_path):
    """A folder holding a copy of the small sets, in the data root's layout."""
    for name in SMALL:
        shutil.copytree(DATA_DIR / name, tmp_path / "mirror" / name)
    return tmp_path / "mirror"


@pytest.fixture
def root(tmp_path, monkeypatch):
    monkeypatch.setenv("BERTOLOGY_DATA_DIR", str(tmp_path / "root"))
    return tmp_path / "root"


def data(*args: str) -> int:
    return main(["data", *args])


class RangeHandler(http.server.SimpleHTTPRequestHandler):
    """Serves files whole (200) or from a `Range: bytes=N-` offset (206); records the ranges
    asked for; `delay` seconds after each 64 KiB (to land a kill mid-file)."""

    def do_GET(self):  # noqa: N802 (http.server's name)
        path = Path(self.translate_path(self.path))
        if not path.is_file():
            self.send_error(404)
            return
        body = path.read_bytes()
        asked = self.headers.get("Range")
        start = int(asked.removeprefix("bytes=").split("-")[0]) if asked else 0
        self.server.ranges.append((path.name, asked))
        self.send_response(206 if asked else 200)
        if asked:
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        self.send_header("Content-Length", str(len(body) - start))
        self.end_headers()
        for offset in range(start, len(body), 1 << 16):
            self.wfile.write(body[offset: offset + (1 << 16)])
            time.sleep(self.server.delay)

    def log_message(self, *args):
        pass


@pytest.fixture
def server(mirror):
    """An HTTP mirror of `mirror` on 127.0.0.1; yields (base URL, the server)."""
    handler = functools.partial(RangeHandler, directory=str(mirror))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.ranges, httpd.delay = [], 0.0
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", httpd
    httpd.shutdown()
    httpd.server_close()


def same_files(root: Path, name: str) -> bool:
    return all((root / name / f.path).read_bytes() == (DATA_DIR / name / f.path).read_bytes()
               for f in load_manifest()[name].files)


@needs_all_data
def test_the_manifest_matches_the_data_root():
    for data_set in load_manifest().values():
        check = check_set(data_set, DATA_DIR)
        assert check.verified, (data_set.name, check)


@needs_data
def test_fetch_from_a_file_mirror_reproduces_the_files(mirror, root, monkeypatch, capsys):
    monkeypatch.setenv("BERTOLOGY_DATA_MIRROR", mirror.as_uri())
    assert data("fetch", *SMALL) == 0
    out = capsys.readouterr().out
    assert "glue_mrpc: license Microsoft Research Shared Source License" in out  # before fetching
    assert "NON-COMMERCIAL" in out and "ettinger_diagnostics: license" not in out
    assert all(same_files(root, name) for name in SMALL)
    assert not list(root.rglob("*.part"))
    assert data("verify", *SMALL) == 0
    assert data("list") == 0
    listed = capsys.readouterr().out
    status = {line.split()[0]: line.split("MB")[-1].strip() for line in listed.splitlines()
              if line.split()[0] in load_manifest()}
    assert status["glue_mrpc"] == status["ettinger_diagnostics"] == "verified"
    assert status["blimp"] == "missing"


@needs_data
def test_verify_names_a_flipped_byte(mirror, root, monkeypatch, capsys):
    monkeypatch.setenv("BERTOLOGY_DATA_MIRROR", str(mirror))  # a plain folder works too
    assert data("fetch", "glue_mrpc") == 0
    target = root / "glue_mrpc" / "dev.tsv"
    body = bytearray(target.read_bytes())
    body[1000] ^= 0x01
    target.write_bytes(bytes(body))
    assert data("verify") == 2
    captured = capsys.readouterr()
    assert "glue_mrpc/dev.tsv: sha256 differs from the manifest" in captured.out
    assert captured.err.count("\n") == 1 and "glue_mrpc/dev.tsv" in captured.err
    assert data("list") == 0
    assert "present, 1 differ" in capsys.readouterr().out
    assert data("fetch", "glue_mrpc") == 0  # fetch repairs it
    assert same_files(root, "glue_mrpc")


@needs_data
def test_a_partial_file_resumes_with_a_range_request(server, root, monkeypatch):
    url, httpd = server
    monkeypatch.setenv("BERTOLOGY_DATA_MIRROR", url)
    source = DATA_DIR / "glue_mrpc" / "train.tsv"
    part = root / "glue_mrpc" / "train.tsv.part"  # what a killed download leaves
    part.parent.mkdir(parents=True)
    part.write_bytes(source.read_bytes()[:300_000])
    assert data("fetch", "glue_mrpc") == 0
    assert ("train.tsv", "bytes=300000-") in httpd.ranges
    assert same_files(root, "glue_mrpc") and not part.exists()


@needs_data
def test_a_part_that_is_not_a_prefix_is_refused_then_refetched(server, root, monkeypatch):
    """A resumed file whose first bytes were wrong fails the checksum: not installed, the
    part removed, so the next fetch starts over."""
    url, _ = server
    monkeypatch.setenv("BERTOLOGY_DATA_MIRROR", url)
    part = root / "glue_mrpc" / "train.tsv.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(b"x" * 1000)
    with pytest.raises(UserError, match="glue_mrpc/train.tsv: sha256 .* not installed"):
        main_raising("fetch", "glue_mrpc")
    assert not part.exists() and not (root / "glue_mrpc" / "train.tsv").exists()
    assert data("fetch", "glue_mrpc") == 0 and same_files(root, "glue_mrpc")


def main_raising(*args: str) -> None:
    from bertology.cli.data_command import main as data_main

    data_main(list(args))


@needs_data
def test_a_mirror_file_with_a_wrong_checksum_is_not_installed(mirror, root, monkeypatch,
                                                              capsys):
    monkeypatch.setenv("BERTOLOGY_DATA_MIRROR", mirror.as_uri())
    bad = mirror / "ettinger_diagnostics" / "ROLE-88.tsv"
    os.chmod(bad, 0o644)
    bad.write_text(bad.read_text().replace("a", "b", 1))
    assert data("fetch", "ettinger_diagnostics") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "ettinger_diagnostics/ROLE-88.tsv: sha256" in err
    assert not (root / "ettinger_diagnostics" / "ROLE-88.tsv").exists()
    assert not list(root.rglob("*.part"))


def test_bad_names_and_an_unreachable_source_are_one_line(root, monkeypatch, capsys):
    assert data("fetch", "glue_mrcp") == 2
    assert data("verify", "nope") == 2
    assert data("fetch") == 2
    assert data("frob") == 2
    monkeypatch.setenv("BERTOLOGY_DATA_MIRROR", "http://127.0.0.1:9")  # discard port: refused
    assert data("fetch", "ettinger_diagnostics") == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 5 and all(line.startswith("bertology data: error: ") for line in lines)
    assert "no data set 'glue_mrcp'; valid: blimp," in lines[0]
    assert "ettinger_diagnostics: cannot fetch" in lines[4]
    assert "set BERTOLOGY_DATA_MIRROR" in lines[4] and str(root) in lines[4]


def test_the_data_root_has_one_default(monkeypatch):
    """conf/*.yaml's paths.data_dir and `bertology data` fall back to the same folder."""
    monkeypatch.delenv("BERTOLOGY_DATA_DIR")
    for primary in ("pretrain", "finetune", "probe", "prune", "distill"):
        assert OmegaConf.load(CONF_DIR / f"{primary}.yaml").paths.data_dir == DEFAULT_DATA_DIR
    assert data_root() == Path(DEFAULT_DATA_DIR).expanduser()


def test_a_missing_set_names_the_fetch_command(tmp_path):
    with pytest.raises(UserError, match="data set ettinger_diagnostics: .*CPRAG-102.tsv is "
                       "missing; run `bertology data fetch ettinger_diagnostics` or set "
                       "BERTOLOGY_DATA_DIR"):
        load_cprag(tmp_path)


# ---------------------------------------------------------------- slow: every set, a real kill


@pytest.mark.slow
@needs_all_data
def test_fetch_all_from_a_file_mirror_reproduces_the_data_root(root, monkeypatch):
    monkeypatch.setenv("BERTOLOGY_DATA_MIRROR", DATA_DIR.as_uri())
    assert data("fetch", "--all") == 0
    assert data("verify") == 0
    for data_set in load_manifest().values():
        assert check_set(data_set, root).verified, data_set.name


@pytest.mark.slow
@needs_data
def test_a_killed_fetch_resumes_and_verifies(server, root):
    url, httpd = server
    httpd.delay = 0.05  # 64 KiB per 50 ms: train.tsv (919 KB) takes about 0.7 s
    env = {**os.environ, "BERTOLOGY_DATA_MIRROR": url, "BERTOLOGY_DATA_DIR": str(root)}
    command = [sys.executable, "-m", "bertology", "data", "fetch", "glue_mrpc"]
    fetch = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    part = root / "glue_mrpc" / "train.tsv.part"
    deadline = time.monotonic() + 60
    while not (part.exists() and part.stat().st_size > 200_000) and time.monotonic() < deadline:
        time.sleep(0.01)
    fetch.send_signal(signal.SIGKILL)
    fetch.wait()
    assert 0 < part.stat().st_size < (DATA_DIR / "glue_mrpc" / "train.tsv").stat().st_size
    assert not (root / "glue_mrpc" / "train.tsv").exists()
    httpd.delay = 0.0
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert any(name == "train.tsv" and asked for name, asked in httpd.ranges)
    assert same_files(root, "glue_mrpc")
    verify = subprocess.run([*command[:4], "verify", "glue_mrpc"], env=env, capture_output=True,
                            text=True, timeout=60)
    assert verify.returncode == 0, verify.stdout
