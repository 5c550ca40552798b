"""Issue 16, secrets and the environment: no credential in any output, log, error or file.

Redaction by variable name (TOKEN, SECRET, KEY, PASSWORD, CREDENTIAL, AUTH, PASS, PWD,
COOKIE, SESSION, PRIVATE...) and by value shape (GitHub, Hugging Face, AWS, Slack, GitLab
tokens; user:password@ in URLs, an unencoded '@' included); an index URL with
credentials in ACCELGRID_TORCH_INDEX: `accelgrid plan`, the index check, the cell session
and its install commands; environment variables accelgrid reads, checked."""

from __future__ import annotations

import base64
import http.server
import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import cast

import nox
import pytest

from accelgrid import cli, results
from accelgrid.base import contract, errors, redact
from accelgrid.commands import sessions
from accelgrid.config.matrix import load_matrix
from accelgrid.host import install, pipconfig
from accelgrid.results import provenance

ROOT = Path(__file__).resolve().parents[2]
MATRIX = load_matrix(ROOT / "matrix.yaml")
R = redact.REDACTED
GH = "ghp_" + "A1b2C3d4E5" * 4
TOKENS = {
    "github-classic": GH,
    "github-oauth": "gho_" + "x" * 36,
    "github-app": "ghs_" + "Z9" * 18,
    "github-fine-grained": "github_pat_11ABCDEFG0" + "a" * 60,
    "hugging-face": "hf_" + "abcdefghij" * 3 + "ABCD",
    "aws-access-key": "AKIAIOSFODNN7EXAMPLE",
    "aws-temporary-key": "ASIA" + "ABCDEFGHIJKLMNOP",
    "slack-bot": "xoxb-123456789012-1234567890123-abcdefghijklmnopqrstuvwx",
    "slack-user": "xoxp-1234567890-abcdefghij",
    "gitlab": "glpat-" + "abcDEF123_" * 2,
    "openai-style": "sk-" + "proj" + "A" * 40,
    "private-key": "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk=\n"
                   "-----END OPENSSH PRIVATE KEY-----",
}
SECRET_NAMES = ["TORCH_HUB_AUTH", "HF_AUTH", "PIP_PASSWORD", "DB_PASS", "MYSQL_PWD",
                "UV_HTTP_COOKIE", "HF_SESSION", "PYTORCH_PRIVATE_MIRROR", "HF_TOKEN",
                "ACCELGRID_API_KEY", "TORCH_SECRET", "AWS_CREDENTIALS", "my_passwd",
                "ACCELGRID_BASIC_AUTH_HEADER"]


@pytest.mark.parametrize("name", SECRET_NAMES)
def test_secret_names_are_redacted_whatever_the_value(name: str) -> None:
    assert redact.is_secret(name)
    assert redact.redact({name: "plain"}) == {name: R}


@pytest.mark.parametrize("name", ["ACCELGRID_PASS", "PYTORCH_ENABLE_XPU_FALLBACK",
                                  "ZE_AFFINITY_MASK", "ACCELGRID_CELL", "OMP_NUM_THREADS"])
def test_ordinary_names_keep_their_value(name: str) -> None:
    assert redact.redact({name: "1"}) == {name: "1"}


@pytest.mark.parametrize("kind", list(TOKENS))
def test_token_shaped_values_are_redacted_under_any_name(kind: str) -> None:
    token = TOKENS[kind]
    for text in (token, f"prefix {token} suffix", f"Authorization: token {token}"):
        out = redact.redact({"ACCELGRID_NOTE": text})["ACCELGRID_NOTE"]
        assert token not in out and R in out, (kind, out)
        assert redact.redact_text(text) == out


@pytest.mark.parametrize("url,shown", [
    ("https://user:pw@host/whl", f"https://{R}@host/whl"),
    ("https://user:p@ss@host/whl", f"https://{R}@host/whl"),         # unencoded '@'
    ("https://user:p@s@s:w@host:8443/x?y=1", f"https://{R}@host:8443/x?y=1"),
    ("https://tok@host/simple", f"https://{R}@host/simple"),
    ("pkg @ https://u:p@h/pkg.whl", f"pkg @ https://{R}@h/pkg.whl"),
    ("a https://u:1@a/ and http://v:2@b/", f"a https://{R}@a/ and http://{R}@b/"),
    ("HTTPS://U:P@H/", f"HTTPS://{R}@H/"),
    ("git+https://u:p@github.com/o/r.git", f"git+https://{R}@github.com/o/r.git"),
])
def test_url_credentials_are_removed_entirely(url: str, shown: str) -> None:
    assert redact.redact_text(url) == shown


@pytest.mark.parametrize("text", ["https://download.pytorch.org/whl/xpu",
                                  "https://host/path@v1", "user@example.com",
                                  "suites/hf_examples/test_x.py::test_hf_models[bert]",
                                  "task-1234567890abcdefghijklmnop", "AKIA-not-a-key"])
def test_ordinary_text_is_kept(text: str) -> None:
    assert redact.redact_text(text) == text


def test_recorded_env_and_the_grid_never_hold_them(tmp_path) -> None:
    env = {"TORCH_HUB_AUTH": "s3cret", "HF_HOME": "/x", "PIP_INDEX_URL": "https://u:p@ss@m/s",
           "ACCELGRID_NOTE": GH, "PYTORCH_DEBUG_XPU_FALLBACK": "1",
           contract.TORCH_INDEX: "https://u:p@ss@m/s", "OMP_NUM_THREADS": "4"}
    out = provenance.recorded_env(env)
    assert out == {"ACCELGRID_NOTE": R, "HF_HOME": R, "PIP_INDEX_URL": R,
                   "PYTORCH_DEBUG_XPU_FALLBACK": "1", "TORCH_HUB_AUTH": R,
                   contract.TORCH_INDEX: f"https://{R}@m/s", "OMP_NUM_THREADS": "4"}
    # What the cell set keeps its value; a secret by name or shape goes all the same.
    cell = {**env, contract.SET_VARS: "HF_HOME,PIP_INDEX_URL,TORCH_HUB_AUTH,ACCELGRID_NOTE"}
    assert provenance.recorded_env(cell) == {**out, "HF_HOME": "/x",
                                              "PIP_INDEX_URL": f"https://{R}@m/s"}


# Credentials under names no rule knows, in values of no known shape (issue 36, item 5).
UNUSUAL = {"HF_HUB_BEARER": "bearer-9f8e7d6c5b4a", "TORCH_HUB_TKN": "tkn.4242.zz",
           "PYTORCH_NOTIFY": "https://hooks.example/T000/B000/XXXX",
           "ACCELGRID_X_PASS": "hunter2-horse", "CUDA_MIRROR_CREDS": "alice:wonderland",
           "ZEBRA_HF_SHOULD_NOT_MATTER": "unrecorded-prefix"}


def test_a_variable_the_cell_did_not_set_is_recorded_by_name_only() -> None:
    recorded = {k: v for k, v in UNUSUAL.items() if k.startswith(provenance.RECORDED_PREFIXES)}
    out = provenance.recorded_env(UNUSUAL)
    assert out == dict.fromkeys(sorted(recorded), R)
    for value in UNUSUAL.values():
        assert value not in json.dumps(out)


@pytest.mark.parametrize("name,value", [
    ("CUDA_VISIBLE_DEVICES", "0,1"), ("ZE_AFFINITY_MASK", "0.1"),
    ("ONEAPI_DEVICE_SELECTOR", "!level_zero:gpu"), ("PYTORCH_ENABLE_XPU_FALLBACK", "1"),
    ("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"),  # a cuda flag (its pattern)
    ("SYCL_CACHE_PERSISTENT", "1"), ("OMP_NUM_THREADS", "2"),
    (contract.CELL, "cpu-2.13"), (contract.SHARD, "1/2")])
def test_allowlisted_device_and_own_variables_keep_their_value(name: str, value: str) -> None:
    assert provenance.value_recorded(name)
    assert provenance.recorded_env({name: value}) == {name: value}


@pytest.mark.parametrize("name", ["ACCELGRID_X_PASS", "ACCELGRID_NOTE", "HF_HUB_BEARER",
                                  "TORCH_HUB_TKN", "PYTORCH_NOTIFY", "UV_PUBLISH_USERNAME"])
def test_other_names_are_not_allowlisted(name: str) -> None:
    assert not provenance.value_recorded(name)
    assert provenance.value_recorded(name, frozenset({name}))


def test_the_list_of_what_the_cell_set_is_not_itself_recorded() -> None:
    env = {contract.SET_VARS: " TORCH_A , ,HF_B", "TORCH_A": "1", "HF_B": "2", "HF_C": "3",
           contract.RECORDER_PID: "123"}
    assert provenance.set_by_cell(env) == {"TORCH_A", "HF_B"}
    assert provenance.recorded_env(env) == {"HF_B": "2", "HF_C": R, "TORCH_A": "1"}


def test_record_messages_lose_tokens_when_written_and_when_read(tmp_path) -> None:
    cell = tmp_path / "cpu-2.13"
    cell.mkdir()
    results.append_record(cell / contract.TESTS_FILE, {
        "nodeid": "t.py::a", "outcome": "failed", "message": f"401 for https://u:pw@h/ {GH}",
        "longrepr": f"E   token={GH}"})
    text = (cell / contract.TESTS_FILE).read_text()
    assert GH not in text and "u:pw" not in text
    # An artifact written by a version that did not redact: the grid does.
    (cell / contract.TESTS_FILE).write_text(json.dumps({
        "nodeid": "t.py::a", "outcome": "failed", "message": f"x {GH}"}) + "\n")
    assert cli.main(["grid", str(cell), "--out", str(tmp_path / "g")]) == 0
    for name in ("grid.json", "grid.md", "grid.html"):
        assert GH not in (tmp_path / "g" / name).read_text()


# --- ACCELGRID_TORCH_INDEX with credentials -----------------------------------------------
INDEX = "https://user:p@ss@mirror.example/whl"


def test_plan_never_prints_the_password(monkeypatch, capsys) -> None:
    monkeypatch.setenv(contract.TORCH_INDEX, INDEX)
    for args in (["plan", "xpu-2.13"], ["plan", "cpu-2.13", "--json"]):
        assert cli.main(args) == 0
        out = capsys.readouterr().out
        assert "p@ss" not in out and "user" not in out and "mirror.example/whl" in out
    plan = install.plan(MATRIX.cell("xpu-2.13"), torch_index=INDEX, uv_env={})
    first = plan.steps[0]
    assert first.args == (MATRIX.cell("xpu-2.13").torch_requirement,)  # no URL on the line
    assert first.env["UV_EXTRA_INDEX_URL"] == INDEX == first.env["PIP_EXTRA_INDEX_URL"]
    assert plan.as_dict()["steps"][0]["env"]["UV_EXTRA_INDEX_URL"] == f"https://{R}@mirror" \
                                                                      ".example/whl"


def test_an_index_without_credentials_stays_on_the_command_line() -> None:
    plan = install.plan(MATRIX.cell("xpu-2.13"), uv_env={})
    assert plan.steps[0].args[:2] == ("--extra-index-url", "https://download.pytorch.org/whl/xpu")
    assert plan.steps[0].env == {}


def test_credentialed_index_is_added_to_pips_extra_indexes() -> None:
    plan = install.plan(MATRIX.cell("cpu-2.13"), torch_index=INDEX,
                        uv_env={"UV_EXTRA_INDEX_URL": "https://other/simple"})
    assert plan.steps[0].env["UV_EXTRA_INDEX_URL"] == f"{INDEX} https://other/simple"


@pytest.mark.parametrize("value,says", [
    ("http:///", "'http:///' has no host"),
    ("https://:1/x", "has no host"),
    ("https://u:pw@[::1/x", "is not a valid URL"),
    ("ftp://host/x", "is not an http(s):// or file:// URL"),
    ("https://host/ x", "holds spaces or control characters"),
    ("file://", "names no folder"),
])
def test_a_bad_torch_index_is_one_line(monkeypatch, capsys, value: str, says: str) -> None:
    monkeypatch.setenv(contract.TORCH_INDEX, value)
    assert cli.main(["plan", "cpu-2.13"]) == errors.EXIT_INVALID
    err = capsys.readouterr().err.strip()
    assert err.startswith("accelgrid plan: ACCELGRID_TORCH_INDEX: ") and says in err, err
    assert "pw" not in err and len(err.splitlines()) == 1


class _AuthIndex(http.server.BaseHTTPRequestHandler):
    expected = "Basic " + base64.b64encode(b"user:p@ss").decode()

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        ok = self.headers.get("Authorization") == self.expected
        self.send_response(200 if ok else 401)
        self.end_headers()
        self.wfile.write(b"<a href='torch-2.13.0.whl'>torch</a>" if ok else b"no")

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def auth_index():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _AuthIndex)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()


def test_index_check_sends_credentials_as_basic_auth(auth_index) -> None:
    port = auth_index
    assert install.index_problem(f"http://user:p@ss@127.0.0.1:{port}/whl") is None
    wrong = install.index_problem(f"http://user:nope@127.0.0.1:{port}/whl")
    assert wrong == (f"package index http://{R}@127.0.0.1:{port}/whl answered HTTP 401 for "
                     f"http://{R}@127.0.0.1:{port}/whl/torch/")
    assert "nope" not in wrong


def test_an_unreachable_credentialed_index_is_one_line_without_the_password() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # `https://user:pw@host/whl` used to raise http.client.InvalidURL (nonnumeric port)
    # showing the password three times.
    for url in (f"http://user:p@ss@127.0.0.1:{port}/whl", "https://user:pw@[::1/whl"):
        msg = install.index_problem(url, timeout=5)
        assert msg and "\n" not in msg and "p@ss" not in msg and ":pw" not in msg, msg


class _Session:
    """What run_cell_session uses of a nox session, recording what nox would log."""

    def __init__(self, tmp_path: Path):
        from nox.virtualenv import VirtualEnv

        self.virtualenv = VirtualEnv.__new__(VirtualEnv)
        self.bin = str(tmp_path / "bin")
        self.env: dict[str, str] = {}
        self.posargs: list[str] = []
        self.logged: list[str] = []
        self.installs: list[tuple[tuple[str, ...], dict | None]] = []

    def log(self, text: str) -> None:
        self.logged.append(text)

    def install(self, *args: str, env=None, **output) -> None:
        self.logged.append("uv pip install " + " ".join(args))  # what nox prints
        self.installs.append((args, env))

    def run(self, *args, **kwargs):
        return None  # as under --install-only

    def error(self, text: str):
        self.logged.append(text)
        raise SystemExit(text)


def test_the_cell_session_installs_without_logging_the_password(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(contract.TORCH_INDEX, INDEX)
    monkeypatch.setattr(install, "index_problem", lambda index, timeout=15.0: None)
    monkeypatch.setattr(pipconfig, "pip_settings", lambda python=None: {})
    # The session's env: a real one (after installing, the session links it to src/).
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path)], check=True)
    session = _Session(tmp_path)
    # The stand-in's installs install nothing: the check after them refuses the env.
    with pytest.raises(SystemExit, match="torch: wanted torch==2.13.0.*found nothing"):
        sessions.run_cell_session(cast(nox.Session, session), MATRIX, MATRIX.cell("cpu-2.13"))
    assert "p@ss" not in "\n".join(session.logged)
    (args, env), _ = session.installs
    assert args == (install.torch_requirement(MATRIX.cell("cpu-2.13")),)
    assert env is not None
    assert env["UV_EXTRA_INDEX_URL"] == INDEX


def test_the_cell_session_fails_in_one_line_on_an_unreachable_credentialed_index(
        tmp_path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, contract.TORCH_INDEX: f"http://user:p@ss@127.0.0.1:{port}/whl",
           contract.RESULTS_DIR: str(tmp_path / "results")}
    proc = subprocess.run([sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"),
                           "--envdir", str(tmp_path / "envs"), "-s", "cpu-2.13"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "p@ss" not in out and "Traceback" not in out and "InvalidURL" not in out
    assert f"cpu-2.13: package index http://{R}@127.0.0.1:{port}/whl cannot be reached" in out
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("value", ["abc", "0", "10000", "-1", "2.0", "1e3"])
def test_a_bad_workers_override_is_one_line(tmp_path, monkeypatch, value: str) -> None:
    monkeypatch.setenv(contract.WORKERS, value)
    monkeypatch.setenv(contract.TORCH_INDEX, "")
    monkeypatch.setattr(install, "index_problem", lambda index, timeout=15.0: None)
    monkeypatch.setattr(pipconfig, "pip_settings", lambda python=None: {})
    session = _Session(tmp_path)
    with pytest.raises(SystemExit) as info:
        sessions.run_cell_session(cast(nox.Session, session), MATRIX, MATRIX.cell("cpu-2.13"))
    assert str(info.value) == (f"cpu-2.13: ACCELGRID_WORKERS={value!r}: expected a whole "
                               "number of workers from 1 to 256")
    assert session.installs == []  # refused before anything was installed


def test_a_container_build_refuses_a_credentialed_index() -> None:
    from accelgrid.commands import containers

    with pytest.raises(containers.ContainerError) as info:
        containers.render(MATRIX, MATRIX.cell("cpu-2.13"), torch_index=INDEX)
    assert "carries credentials" in str(info.value) and "p@ss" not in str(info.value)


# --- a real cell run with credentials under unusual names --------------------------------
PRINTS_ENV = '''
import os

def test_sees_the_environment():
    # A test that prints what it sees: its output is the cell's and lands in pytest.log.
    print(sorted(k for k in os.environ if k.startswith(("HF_", "TORCH_", "PYTORCH_"))))

def test_fails_naming_a_variable():
    # Not os.environ in the assert: pytest's rewriting would print the values itself.
    configured = "PYTORCH_NOTIFY" in os.environ
    assert not configured, "a webhook is configured"
'''


def _project_with_flag(mini_project) -> Path:
    """The mini project whose default profile sets a variable under a recorded prefix."""
    proj = mini_project(noxfile=True)
    matrix = proj / "matrix.yaml"
    matrix.write_text(matrix.read_text().replace(
        "  default: {env: {}}", "  default: {env: {TORCH_PROBE_LEVEL: \"3\"}}"))
    return proj


def test_cell_env_lists_what_the_cell_set(mini_project, tmp_path) -> None:
    from accelgrid.run import preflight
    from accelgrid.run.cellenv import cell_env

    proj = _project_with_flag(mini_project)
    cell = load_matrix(proj / "matrix.yaml").cell("cpu-2.13")
    host = {"PATH": "/usr/bin:/bin", **UNUSUAL, "TORCH_PROBE_LEVEL": "host's"}
    env = cell_env(cell, proj, tmp_path / "r", base=host,
                   checked=preflight.check(cell, proj, host))
    listed = provenance.set_by_cell(env)
    assert {"TORCH_PROBE_LEVEL", contract.CELL, contract.RESULTS, contract.COMMIT} <= listed
    assert not listed & set(UNUSUAL)
    out = provenance.recorded_env(env)
    assert out["TORCH_PROBE_LEVEL"] == "3" and out[contract.CELL] == "cpu-2.13"
    assert {k: out[k] for k in UNUSUAL if k in out} == {
        k: R for k in UNUSUAL if k.startswith(provenance.RECORDED_PREFIXES)}


def _run_grid_publish(python: str, proj: Path, extra: dict[str, str], tmp_path: Path
                      ) -> tuple[list[str], dict[Path, bytes]]:
    """``accelgrid run cpu-2.13 --no-venv`` of ``proj`` with ``extra`` in the environment,
    then its grid and its site: (each command's console, every file they wrote)."""
    results_dir, grid, site = proj / "results", tmp_path / "grid", tmp_path / "site"
    env = {**os.environ, **extra, contract.RESULTS_DIR: str(results_dir)}
    console = []
    for args in (["--matrix", str(proj / "matrix.yaml"), "run", "cpu-2.13", "--no-venv"],
                 ["grid", str(results_dir / "cpu-2.13"), "--out", str(grid)],
                 ["publish", str(results_dir / "cpu-2.13"), "--out", str(site)]):
        done = subprocess.run([python, "-m", "accelgrid", *args], cwd=proj, env=env,
                              capture_output=True, text=True, timeout=600)
        console.append(done.stdout + done.stderr)
        assert "Traceback" not in console[-1], console[-1][-3000:]
    written = {p: p.read_bytes() for base in (results_dir, grid, site)
               for p in base.rglob("*") if p.is_file()}
    return console, written


def test_a_credential_under_any_name_appears_nowhere(mini_project, python, tmp_path) -> None:
    """A real run (``accelgrid run --no-venv``), its grid and its published site, with
    credentials under names and in shapes no redaction rule knows: the values are in no
    file and not on the console; the variable the cell set is recorded with its value."""
    proj = _project_with_flag(mini_project)
    (proj / "suites" / "payload" / "test_env.py").write_text(PRINTS_ENV)
    results_dir = proj / "results"
    console, written = _run_grid_publish(python, proj, UNUSUAL, tmp_path)
    assert "test_fails_naming_a_variable" in console[0], console[0][-3000:]
    names = {p.name for p in written}
    assert {"env.json", contract.TESTS_FILE, "summary.json", "junit.xml", "pytest.log",
            "grid.json", "grid.md", "grid.html", "index.html"} <= names, sorted(names)
    for value in UNUSUAL.values():
        assert not [p for p, data in written.items() if value.encode() in data], value
        assert not [text for text in console if value in text], value
    recorded = json.loads((results_dir / "cpu-2.13" / "env.json").read_text())["env"]
    assert recorded["TORCH_PROBE_LEVEL"] == "3" and recorded["HF_HUB_BEARER"] == R
    # The test saw the values: what it printed of them is in pytest.log, names only.
    log = (results_dir / "cpu-2.13" / "pytest.log").read_text()
    assert "HF_HUB_BEARER" in log


# Credentials under names and in shapes no recorded-prefix rule knows, and an ordinary
# value (a path) beside them: a test prints them all and fails with them in its message.
PRINTED = {"HF_HUB_BEARER": "bearer-9f8e7d6c5b4a", "TORCH_HUB_TKN": "tkn.4242.zz",
           "PYTORCH_NOTIFY": "https://hooks.example/T000/B000/XXXX",
           "ACCELGRID_X_PASS": "hunter2-horse", "CUDA_MIRROR_CREDS": "alice:wonderland",
           "MY_THING": GH, "SOME_AUTH_HEADER": "Zm9vOmJhcjEyMw",
           "MIRROR_URL": "https://bob:s3cr3t-pw@mirror.example/simple"}
# The part of each that is the credential (a webhook's host and a URL's are no secret).
SECRET_PART = {**PRINTED, "PYTORCH_NOTIFY": "T000/B000/XXXX", "MIRROR_URL": "s3cr3t-pw"}
PRINTS_VALUES = '''
import os

NAMES = {names!r}

def test_prints_the_values():
    for name in NAMES + ["PLAIN_DATA_DIR"]:
        print(name, "=", os.environ[name])

def test_fails_with_the_values_in_its_message():
    seen = " ".join(os.environ[name] for name in NAMES + ["PLAIN_DATA_DIR"])
    print("stdout:", seen)
    import sys
    print("stderr:", seen, file=sys.stderr)
    assert not seen, "saw " + seen
'''


def test_values_a_test_prints_or_asserts_with_are_nowhere(mini_project, python,
                                                          tmp_path) -> None:
    """A real run whose test prints credentials (any name, any shape) and fails with
    them in its assert message: no file of the results, the grid or the site holds them
    (tests.jsonl's message and traceback, junit.xml's system-out, pytest.log), nor the
    console; the ordinary value printed beside them (a path) is kept."""
    proj = mini_project(noxfile=True)
    (proj / "suites" / "payload" / "test_env.py").write_text(
        PRINTS_VALUES.format(names=sorted(PRINTED)))
    plain = str(tmp_path / "plain-data-dir")
    results_dir = proj / "results"
    console, written = _run_grid_publish(python, proj, {**PRINTED, "PLAIN_DATA_DIR": plain},
                                         tmp_path)
    assert "test_fails_with_the_values_in_its_message" in console[0], console[0][-3000:]
    names = {p.name for p in written}
    assert {contract.TESTS_FILE, "junit.xml", "pytest.log", "grid.json"} <= names, names
    for name, secret in SECRET_PART.items():
        # The whole credential, and what a repr cut short leaves of it ('ghp_A1b2...').
        for part in {secret, secret[:10], secret[-10:]}:
            leaked = sorted(str(p) for p, data in written.items() if part.encode() in data)
            assert not leaked, (name, part, leaked)
            assert not [text for text in console if part in text], (name, part)
    # What the test printed is there, the credentials replaced; the path is as it was.
    for name in (contract.TESTS_FILE, "junit.xml", "pytest.log"):
        data = (results_dir / "cpu-2.13" / name).read_text()
        assert plain in data and "saw " + redact.REDACTED in data, name
    assert "HF_HUB_BEARER = " + redact.REDACTED in (
        results_dir / "cpu-2.13" / "pytest.log").read_text()


def test_secret_values_of_the_environment(monkeypatch) -> None:
    """Which values of an environment are credentials: any name that looks secret (not a
    path, a number or a short value), any value shaped like one; and redact_text of this
    process replaces them, also where a repr cut them short."""
    env = {**PRINTED, "PWD": "/home/me/work", "XDG_SESSION_ID": "12345678",
           "HF_TOKEN_SET": "1", "PLAIN": "/srv/data", "NOTE": "hello world",
           "SOME_KEY": "short", "MY_KEY": "sixsix"}
    found = redact.secret_values(env)
    assert set(found) == {*SECRET_PART.values(), "bob:s3cr3t-pw", "sixsix"} - {"s3cr3t-pw"}
    assert [len(v) for v in found] == sorted((len(v) for v in found), reverse=True)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    text = " ".join(f"{k}={v}" for k, v in env.items())
    out = redact.redact_text(text)
    for name, secret in SECRET_PART.items():
        assert secret not in out, name
    for kept in ("/home/me/work", "12345678", "HF_TOKEN_SET=1", "/srv/data", "hello world",
                 "SOME_KEY=short", "https://hooks.example/", "@mirror.example/simple"):
        assert kept in out, kept
    # What pytest's repr leaves of a long one: its start or end beside '...' goes, down
    # to MIN_SECRET_VALUE characters; a shorter piece, or one with no '...', stays.
    n = redact.MIN_SECRET_VALUE
    assert redact.redact_text(f"'a {GH[:14]}...' == 'b'") == f"'a {R}...' == 'b'"
    assert redact.redact_text(f"'...{GH[-n:]} c'") == f"'...{R} c'"
    assert redact.redact_text(f"'...{GH[-n + 1:]} c'") == f"'...{GH[-n + 1:]} c'"
    assert redact.redact_text(f"'{GH[:14]} d'") == f"'{GH[:14]} d'"
    monkeypatch.delenv("MY_KEY")
    assert redact.redact_text("MY_KEY=sixsix") == "MY_KEY=sixsix"
