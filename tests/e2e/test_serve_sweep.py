"""`sweep --serve` and `run --serve` over the real llama-server: each configuration launched, measured,
stopped; failed starts reported with their log's tail; no process group left behind after a normal end,
a failed start, a readiness timeout or Ctrl-C (SIGINT to servescope)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

from servescope.run.command import run_command
from servescope.sweep.command import sweep_command
from servescope.target.launch import ServerProcess, ServerStartError, free_port
from tests.support.tiny_model import TinyModel


def load(path: Path) -> Any:
    return orjson.loads(path.read_bytes())


def group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def llama_cmd(binary: Path, gguf: Path | str, parallel: str = "{p}") -> str:
    return (
        f"{binary} -m {gguf} --host {{host}} --port {{port}} --alias tiny-llama --parallel {parallel} "
        "-c 4096 --metrics -t 2"
    )


LOAD = ["--concurrency", "1,4", "--input-len", "32", "--output-len", "16", "--num-requests", "16", "--no-probe"]


def sweep(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(sweep_command, list(args), catch_exceptions=False)
    return res.exit_code, res.output


def test_serve_sweep_launches_measures_and_stops_each_configuration(
    llama_server_bin: Path, tiny_model: TinyModel, tmp_path: Path
) -> None:
    out = tmp_path / "served"
    code, text = sweep(
        "--serve", llama_cmd(llama_server_bin, tiny_model.gguf_path), "--serve-param", "p=2,4", *LOAD, "--out", str(out)
    )
    assert code == 0, text
    doc = load(out / "serve.json")
    assert doc["schema"] == "servescope.sweep.serve/1" and doc["status"] == "complete"
    assert [c["name"] for c in doc["configurations"]] == ["p2", "p4"]
    for conf, p in zip(doc["configurations"], ("2", "4")):
        assert conf["status"] == "complete" and conf["params"] == {"p": p}
        sub = out / conf["dir"]
        server = load(sub / "server.json")
        # the command line as run: the placeholders filled, the port the one servescope targeted
        assert f"--parallel {p} " in server["command"] and f"--port {server['port']} " in server["command"]
        assert server["url"] == f"http://127.0.0.1:{server['port']}/v1"
        assert server["version"]  # llama.cpp's /props build_info
        assert server["stopped"]["signal"] == "SIGTERM" and server["stopped"]["left_behind"] is False
        assert group_gone(server["pgid"])
        assert "llama" in (sub / "server.log").read_text()  # the server's own output
        sw = load(sub / "sweep.json")
        assert sw["status"] == "complete" and sw["target"]["serve"]["params"] == {"p": p}
        assert sorted(pt["concurrency"] for pt in sw["points"]) == [1, 4]
        for pt in sw["points"]:
            summary = load(sub / pt["dir"] / "summary.json")
            assert summary["requests"]["completed"] == 16
            assert summary["target"]["url"] == server["url"]
            assert summary["energy"]["available"] is False  # no GPU here: it says why
    # llama-server's slots: --parallel 2 queues the 4 concurrent requests, --parallel 4 does not
    p2 = load(out / "p2" / "sweep.json")["points"]
    assert all(pt["status"] == "complete" for pt in p2)
    html = (out / "report.html").read_text()
    assert "Server configurations" in html and ">p2<" in html and ">p4<" in html
    svgs = "".join(f.read_text() for f in (out / "charts").glob("*.svg"))
    assert "p2" in svgs and "p4" in svgs  # one curve each, on shared axes

    # --resume: both configurations are complete: nothing is started again
    code, text = sweep(
        "--serve",
        llama_cmd(llama_server_bin, tiny_model.gguf_path),
        "--serve-param",
        "p=2,4",
        *LOAD,
        "--out",
        str(out),
        "--resume",
    )
    assert code == 0, text
    assert all(c.get("skipped") for c in load(out / "serve.json")["configurations"])


def test_a_configuration_that_fails_to_start_is_reported_and_the_sweep_goes_on(
    llama_server_bin: Path, tiny_model: TinyModel, tmp_path: Path
) -> None:
    out = tmp_path / "served"
    cmd = f"{llama_server_bin} -m {{m}} --host 127.0.0.1 --port {{port}} --parallel {{p}} -c 4096 -t 2"
    code, text = sweep(
        "--serve",
        cmd,
        "--serve-param",
        f"p,m=(2,{tmp_path}/missing.gguf),(2,{tiny_model.gguf_path})",
        *LOAD,
        "--no-report",
        "--out",
        str(out),
    )
    assert code == 1, text  # one configuration measured nothing
    bad, good = load(out / "serve.json")["configurations"]
    assert bad["status"] == "failed" and "exited with status" in bad["error"]
    assert "missing.gguf" in bad["log_tail"]  # the server's own words
    assert "server failed" in text
    assert group_gone(load(out / bad["dir"] / "server.json")["pgid"])
    assert good["status"] == "complete"
    assert load(out / good["dir"] / "sweep.json")["status"] == "complete"


def test_a_server_not_ready_in_time_is_stopped(tmp_path: Path) -> None:
    # listens nowhere: the readiness wait times out, the group is stopped
    cmd = f"{sys.executable} -c 'import time, sys; time.sleep(300)' {{port}}"
    code, text = sweep("--serve", cmd, "--serve-timeout", "1", *LOAD, "--no-report", "--out", str(tmp_path / "o"))
    assert code == 1, text
    conf = load(tmp_path / "o" / "serve.json")["configurations"][0]
    assert conf["status"] == "failed" and "not ready within 1 s" in conf["error"]
    assert group_gone(load(tmp_path / "o" / conf["dir"] / "server.json")["pgid"])


def _http_server_cmd(root: Path, port: int) -> str:
    """A static HTTP server of `root` that ignores SIGTERM (only SIGKILL ends it)."""
    code = (
        "import functools, signal, http.server as h; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        f"handler = functools.partial(h.SimpleHTTPRequestHandler, directory='{root}'); "
        f"h.ThreadingHTTPServer(('127.0.0.1', {port}), handler).serve_forever()"
    )
    return f'{sys.executable} -c "{code}"'


def test_readiness_and_a_server_that_ignores_sigterm(tmp_path: Path) -> None:
    # /health is a 404 there: not ready until /v1/models answers 200
    port = free_port()
    srv = ServerProcess(
        _http_server_cmd(tmp_path, port), log_path=tmp_path / "s.log", port=port, grace_s=0.5, ready_timeout_s=1.5
    )
    with pytest.raises(ServerStartError, match=r"not ready within 1\.5 s"):
        srv.start()
    assert srv.pgid is not None and group_gone(srv.pgid)

    (tmp_path / "v1").mkdir()
    (tmp_path / "v1" / "models").write_text('{"data": [{"id": "m"}]}')
    port = free_port()
    srv = ServerProcess(
        _http_server_cmd(tmp_path, port), log_path=tmp_path / "s2.log", port=port, grace_s=0.5, ready_timeout_s=20
    )
    srv.start()
    pgid = srv.pgid
    assert pgid is not None and not group_gone(pgid)
    stopped = srv.stop()
    assert stopped["signal"] == "SIGKILL" and stopped["left_behind"] is False  # SIGTERM was ignored
    assert group_gone(pgid)


def test_a_start_that_exits_at_once_says_why(tmp_path: Path) -> None:
    srv = ServerProcess(
        f"{sys.executable} -c 'import sys; print(\"no GPU here\"); sys.exit(3)'",
        log_path=tmp_path / "s.log",
        port=free_port(),
    )
    with pytest.raises(ServerStartError) as e:
        srv.start()
    assert "status 3" in e.value.reason and "no GPU here" in e.value.log_tail
    assert srv.pgid is not None and group_gone(srv.pgid)


def _wait_for(path: Path, status: str, timeout_s: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.is_file():
            try:
                doc = load(path)
            except orjson.JSONDecodeError:
                doc = {}
            if doc.get("status") == status:
                return dict(doc)
        time.sleep(0.05)
    raise AssertionError(f"{path} never reached status {status}")


def _sweep_process(args: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "servescope.cli", "sweep", *args, "--no-report", "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_ctrl_c_during_a_run_stops_the_server(llama_server_bin: Path, tiny_model: TinyModel, tmp_path: Path) -> None:
    out = tmp_path / "o"
    proc = _sweep_process(
        [
            "--serve",
            llama_cmd(llama_server_bin, tiny_model.gguf_path, "2"),
            "--concurrency",
            "2",
            "--input-len",
            "32",
            "--output-len",
            "16",
            "--duration",
            "60",
            "--no-probe",
            "--out",
            str(out),
        ]
    )
    try:
        server = _wait_for(out / "server" / "server.json", "running")
        time.sleep(1.0)  # inside the measured window
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert group_gone(server["pgid"])
    assert load(out / "server" / "server.json")["status"] == "interrupted"
    assert load(out / "serve.json")["status"] == "interrupted"


def test_ctrl_c_while_waiting_for_readiness_stops_the_server(tmp_path: Path) -> None:
    out = tmp_path / "o"
    proc = _sweep_process(
        ["--serve", f"{sys.executable} -c 'import time; time.sleep(300)' {{port}}", *LOAD, "--out", str(out)]
    )
    try:
        server = _wait_for(out / "server" / "server.json", "starting")
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert group_gone(server["pgid"])


def test_run_serve_one_configuration(llama_server_bin: Path, tiny_model: TinyModel, tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = CliRunner().invoke(
        run_command,
        [
            "--serve",
            llama_cmd(llama_server_bin, tiny_model.gguf_path),
            "--serve-param",
            "p=3",
            "--concurrency",
            "3",
            "--input-len",
            "32",
            "--output-len",
            "16",
            "--num-requests",
            "12",
            "--no-probe",
            "--quiet",
            "--out",
            str(out),
        ],
        catch_exceptions=False,
    )
    assert res.exit_code == 0, res.output
    server = load(out / "server.json")
    assert "--parallel 3 " in server["command"] and server["status"] == "complete"
    assert group_gone(server["pgid"])
    assert load(out / "summary.json")["requests"]["completed"] == 12


def test_serve_params_cross_product_tied_lists_and_names() -> None:
    from servescope.errors import ConfigError
    from servescope.sweep.configs import expand
    from servescope.target.launch import render, split_command

    configs = expand(["tp,dp=(1,4),(2,2)", "q=fp8,bf16"])
    assert [c.name for c in configs] == ["tp1-dp4-qfp8", "tp1-dp4-qbf16", "tp2-dp2-qfp8", "tp2-dp2-qbf16"]
    assert configs[2].as_dict() == {"tp": "2", "dp": "2", "q": "fp8"}
    assert [c.name for c in expand([])] == ["server"]
    for bad in ("p", "p=", "tp,dp=(1,4),(2)", "port=1,2", "tp,dp=1,2"):
        with pytest.raises(ConfigError):
            expand([bad])
    with pytest.raises(ConfigError):
        expand(["p=1", "p=2"])
    cmd = render("""vllm serve m --port {port} -tp {tp} --override '{"a": 1}'""", {"port": 8000, "tp": 2})
    assert cmd == """vllm serve m --port 8000 -tp 2 --override '{"a": 1}'"""
    with pytest.raises(ConfigError):
        render("x {nope}", {})
    assert split_command("A=1 B='x y' srv --p 1") == (["srv", "--p", "1"], {"A": "1", "B": "x y"})
    assert split_command("cd /x && srv")[0] == ["/bin/sh", "-c", "cd /x && srv"]
