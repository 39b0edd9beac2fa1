"""fallow's configuration: defaults < TOML file < FALLOW_* environment < command-line flags, --help, --version,
and rejected configuration (fallow only)."""
import os
import subprocess
import time

import pytest

from helpers import HOST, Err, RawConn, ServerProc, fallow_bin, free_port

pytestmark = [pytest.mark.resp, pytest.mark.fallow_only]


def _start(tmp_path, args, env_extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("FALLOW_")}
    env.update(env_extra)
    log = open(tmp_path / "fallow.log", "wb")
    return subprocess.Popen([str(fallow_bin()), "--log-level", "warn", *args], env=env,
                            stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)


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


# ----------------------------------------------------------------- CONFIG SET checks every value (Redis texts)
def _config_error(name, message):
    return f"ERR CONFIG SET failed (possibly related to argument '{name}') - {message}"


@pytest.mark.parametrize("name,value,message", [
    ("maxclients", "0", "argument must be between 1 and 4294967295 inclusive"),
    ("proto-max-bulk-len", "0", "argument must be between 1048576 and 9223372036854775807 inclusive"),
])
def test_values_that_break_the_server_are_refused(server_factory, name, value, message):
    import redis
    s = server_factory()
    r = redis.Redis(host="127.0.0.1", port=s.port, decode_responses=True)
    before = r.config_get(name)
    with pytest.raises(redis.ResponseError) as refused:
        r.config_set(name, value)
    assert "ERR " + str(refused.value) == _config_error(name, message)  # redis-py drops the "ERR "
    assert r.config_get(name) == before
    fresh = redis.Redis(host="127.0.0.1", port=s.port, decode_responses=True)
    assert fresh.set("k", "v") and fresh.get("k") == "v"


# The same bad values redis-server 7.0.15 refuses, with its exact texts.
@pytest.mark.parametrize("args,reply", [
    (("maxclients", "abc"), _config_error("maxclients", "argument couldn't be parsed into an integer")),
    (("timeout", "-1"), _config_error("timeout", "argument must be between 0 and 2147483647 inclusive")),
    (("client-query-buffer-limit", "1000"),
     _config_error("client-query-buffer-limit",
                   "argument must be between 1048576 and 9223372036854775807 inclusive")),
    (("maxmemory", "10xb"), _config_error("maxmemory", "argument must be a memory value")),
    (("maxmemory", "-1"), _config_error("maxmemory", "argument must be a memory value")),
    (("maxmemory-policy", "foo"),
     _config_error("maxmemory-policy", "argument(s) must be one of the following: volatile-lru, volatile-lfu, "
                   "volatile-random, volatile-ttl, allkeys-lru, allkeys-lfu, allkeys-random, noeviction")),
    (("appendonly", "maybe"), _config_error("appendonly", "argument must be 'yes' or 'no'")),
    (("port", "1"), _config_error("port", "can't set immutable config")),
    (("nosuch", "1"), "ERR Unknown option or number of arguments for CONFIG SET - 'nosuch'"),
    (("maxclients", "5", "maxclients", "6"), _config_error("maxclients", "duplicate parameter")),
    (("maxclients", "5", "hz", "abc"), _config_error("hz", "argument couldn't be parsed into an integer")),
])
def test_bad_values_get_redis_texts_and_change_nothing(server_factory, args, reply):
    s = server_factory()
    with RawConn(port=s.port) as c:
        before = c.cmd("CONFIG", "GET", "*")
        assert c.cmd("CONFIG", "SET", *args) == reply
        assert c.cmd("CONFIG", "GET", "*") == before, "CONFIG SET is all or nothing"
        assert c.cmd("CONFIG", "SET", "maxclients", "5", "hz", "20") == "OK"
        assert c.cmd("CONFIG", "GET", "maxclients") == [b"maxclients", b"5"]


def test_out_of_range_values_are_refused_at_start_too(tmp_path):
    out = subprocess.run([str(fallow_bin()), "--port", str(free_port()), "--maxclients", "0"],
                         capture_output=True, text=True, timeout=10)
    assert out.returncode == 2
    assert "maxclients '0': argument must be between 1 and 4294967295 inclusive" in out.stderr


def test_config_rewrite_writes_the_running_settings_into_the_toml_file(tmp_path):
    config_path = tmp_path / "fallow.toml"
    config_path.write_text("# kept comment\nslowlog-max-len = 9\n")
    server = ServerProc("fallow", {"config": str(config_path), "dir": str(tmp_path / "data")}).start()
    try:
        conn = RawConn(HOST, server.port)
        assert conn.cmd("CONFIG", "SET", "slowlog-max-len", "64", "busy-reply-threshold", "250") == "OK"
        assert conn.cmd("CONFIG", "REWRITE") == "OK"
        text = config_path.read_text()
        assert text.startswith("# kept comment\nslowlog-max-len = 64\n")
        assert "busy-reply-threshold = 250\n" in text
        conn.close()
        assert server.stop() == 0
        server.start()
        conn = RawConn(HOST, server.port)
        assert conn.cmd("CONFIG", "GET", "busy-reply-threshold") == [b"busy-reply-threshold", b"250"]
        conn.close()
    finally:
        server.cleanup()


def test_config_rewrite_needs_a_config_file(c):
    assert c.cmd("CONFIG", "REWRITE") == Err("ERR The server is running without a config file")
