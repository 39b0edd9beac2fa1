"""fallow's configuration: defaults < TOML file < FALLOW_* environment < command-line flags, --help, --version,
and rejected configuration (fallow only)."""
import os
import subprocess
import time

import pytest

from helpers import RawConn, fallow_bin, free_port

pytestmark = [pytest.mark.resp, pytest.mark.fallow_only]


def _start(tmp_path, args, env_extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("FALLOW_")}
    env.update(env_extra)
    log = open(tmp_path / "fallow.log", "wb")
    return subprocess.Popen([str(fallow_bin()), "--log-level", "warn", *args], env=env,
                            stdout=log, stderr=subprocess.STDOUT)


def _answers_on(port, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with RawConn(port=port, timeout=1) as c:
                return c.cmd("CONFIG", "GET", "maxmemory-policy")
        except OSError:
            time.sleep(0.05)
    return None


def _stop(proc):
    proc.terminate()
    try:
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


def test_precedence_file_env_flags(tmp_path):
    file_port, env_port, flag_port = free_port(), free_port(), free_port()
    config = tmp_path / "fallow.toml"
    config.write_text(f'port = {file_port}\nmemcache-port = 0\nunixsocket = ""\n'
                      f'maxmemory-policy = "allkeys-lru"\n')
    # file only
    proc = _start(tmp_path, ["--config", str(config)], {})
    try:
        assert _answers_on(file_port) == [b"maxmemory-policy", b"allkeys-lru"]
    finally:
        _stop(proc)
    # environment beats the file
    proc = _start(tmp_path, ["--config", str(config)],
                  {"FALLOW_PORT": str(env_port), "FALLOW_MAXMEMORY_POLICY": "allkeys-lfu"})
    try:
        assert _answers_on(env_port) == [b"maxmemory-policy", b"allkeys-lfu"]
    finally:
        _stop(proc)
    # a flag beats the environment
    proc = _start(tmp_path, ["--config", str(config), "--port", str(flag_port)],
                  {"FALLOW_PORT": str(env_port)})
    try:
        assert _answers_on(flag_port) == [b"maxmemory-policy", b"allkeys-lru"]
    finally:
        _stop(proc)


def test_bad_configuration_is_refused(tmp_path):
    config = tmp_path / "bad.toml"
    config.write_text("prot = 7000\n")
    out = subprocess.run([str(fallow_bin()), "--config", str(config)], capture_output=True, text=True,
                         timeout=10)
    assert out.returncode == 2
    assert "unknown field `prot`" in out.stderr
    out = subprocess.run([str(fallow_bin()), "--maxmemory-policy", "sometimes"], capture_output=True,
                         text=True, timeout=10)
    assert out.returncode == 2
    assert "unknown maxmemory-policy 'sometimes'" in out.stderr


def test_help_and_version():
    out = subprocess.run([str(fallow_bin()), "--help"], capture_output=True, text=True, timeout=10)
    assert out.returncode == 0
    for option in ("--config", "--port", "--memcache-port", "--unixsocket", "--maxmemory",
                   "--maxmemory-policy", "--requirepass", "--threads", "[env: FALLOW_PORT="):
        assert option in out.stdout, option
    out = subprocess.run([str(fallow_bin()), "--version"], capture_output=True, text=True, timeout=10)
    assert out.returncode == 0
    assert out.stdout.startswith("fallow 0.")
