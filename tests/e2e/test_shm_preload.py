"""The preload library (crates/fallow-preload): unmodified programs under
LD_PRELOAD=libfallow_preload.so FALLOW_PRELOAD_TARGETS=127.0.0.1:PORT talk to fallow over shared-memory
channels instead of TCP. Each test runs the same client work with and without the preload and checks the
results agree, and that the server's INFO shows the traffic went over channels (shm_channels_opened,
commandstats). Also: fallback to TCP when no channel can be opened, the socket calls Python makes
(poll/select/epoll, MSG_PEEK, FIONREAD, dup, non-blocking EAGAIN, shutdown, options), fork, and a server
that dies under a blocked reader.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
import redis

from helpers import HOST, ServerProc, fallow_bin

pytestmark = [pytest.mark.fallow_only]


def preload_lib() -> Path:
    """libfallow_preload.so beside the fallow binary under test (the same cargo target directory)."""
    return fallow_bin().parent / "libfallow_preload.so"


@pytest.fixture(scope="module", autouse=True)
def _needs_preload():
    if not preload_lib().exists():
        pytest.skip(f"{preload_lib()} not built: cargo build --release -p fallow-preload")


class ChannelServer(ServerProc):
    """fallow with its Unix sockets at their default paths under a private XDG_RUNTIME_DIR, so the RESP
    port's socket and the memcached port's control socket are where the preload looks for them."""

    def __init__(self, extra: dict | None = None):
        super().__init__("fallow", extra)
        self.runtime = Path(tempfile.mkdtemp(prefix="fallow-shm-run-"))

    def argv(self):
        argv = super().argv()
        at = argv.index("--unixsocket")
        del argv[at:at + 2]
        return ["env", f"XDG_RUNTIME_DIR={self.runtime}", *argv, "--dir", str(self.tmp)]

    def cleanup(self):
        super().cleanup()
        shutil.rmtree(self.runtime, ignore_errors=True)

    def env(self, preload: bool = True, **more) -> dict:
        env = dict(os.environ, XDG_RUNTIME_DIR=str(self.runtime))
        env.pop("FALLOW_SOCKET", None)
        env.update(more)
        if preload:
            env["LD_PRELOAD"] = str(preload_lib())
            env["FALLOW_PRELOAD_TARGETS"] = f"{HOST}:{self.port},{HOST}:{self.mc_port}"
            env["FALLOW_PRELOAD_DEBUG"] = "1"
        return env

    def info(self, section: str) -> dict:
        return redis.Redis(host=HOST, port=self.port, decode_responses=True).info(section)

    def channels_opened(self) -> int:
        return int(self.info("shm")["shm_channels_opened"])

    def calls(self, command: str) -> int:
        stats = self.info("commandstats").get(f"cmdstat_{command}")
        return int(stats["calls"]) if stats else 0


@pytest.fixture
def server():
    s = ChannelServer().start()
    yield s
    s.cleanup()


def run(argv, env, timeout=60, check=True):
    done = subprocess.run(argv, env=env, capture_output=True, timeout=timeout)
    if check and done.returncode != 0:
        raise AssertionError(f"{argv} exited {done.returncode}\nstdout: {done.stdout[-2000:]!r}\n"
                             f"stderr: {done.stderr[-2000:]!r}")
    return done


def redirected(stderr: bytes) -> int:
    """How many connections the preload's debug log says it moved onto channels."""
    return len(re.findall(rb"is a shared-memory channel", stderr))


def python(server: ChannelServer, body: str, preload: bool = True, timeout=60):
    """Runs a Python snippet (which prints one JSON line last) in a fresh interpreter; returns its result
    and the preload's log."""
    script = textwrap.dedent(f"""
        import json, os, socket, select, sys, time, fcntl, termios, threading
        PORT, MC_PORT, HOST = {server.port}, {server.mc_port}, {HOST!r}
    """) + textwrap.dedent(body)
    done = run([sys.executable, "-c", script], server.env(preload), timeout=timeout)
    return json.loads(done.stdout.decode().strip().splitlines()[-1]), done.stderr


# ------------------------------------------------------------------------------------------ redis-cli

def test_redis_cli_commands_go_over_channels_and_answer_as_over_tcp(server):
    commands = [["SET", "k", "v1"], ["GET", "k"], ["INCRBY", "n", "5"], ["LPUSH", "l", "a", "b"],
                ["LRANGE", "l", "0", "-1"], ["GET", "missing"], ["HSET", "h", "f", "x"], ["HGETALL", "h"]]
    answers = {}
    for preload in (False, True):
        redis.Redis(host=HOST, port=server.port).flushall()
        opened = server.channels_opened()
        out, log = [], b""
        for command in commands:
            done = run(["redis-cli", "-p", str(server.port), *command], server.env(preload))
            out.append(done.stdout)
            log += done.stderr
        answers[preload] = out
        if preload:
            assert redirected(log) == len(commands), log
            assert server.channels_opened() - opened == len(commands)
        else:
            assert server.channels_opened() == opened
    assert answers[True] == answers[False]
    assert answers[True][1] == b"v1\n"


# ------------------------------------------------------------------------------------------ redis-benchmark

@pytest.mark.parametrize("clients,pipeline", [(1, 1), (50, 1), (1, 16), (50, 16)])
def test_redis_benchmark_runs_its_requests_on_channels(server, clients, pipeline):
    requests = 20000
    gets, sets, opened = server.calls("get"), server.calls("set"), server.channels_opened()
    done = run(["redis-benchmark", "-p", str(server.port), "-t", "get,set", "-n", str(requests),
                "-c", str(clients), "-P", str(pipeline), "-q"], server.env(), timeout=120)
    out = done.stdout.decode().replace("\r", "\n")
    assert re.search(r"SET: [0-9.]+ requests per second", out), out
    assert re.search(r"GET: [0-9.]+ requests per second", out), out
    # Every request reached the server, and on channels: one per benchmark client and test, plus the
    # benchmark's CONFIG GET connection.
    assert server.calls("get") - gets == requests
    assert server.calls("set") - sets == requests
    assert server.channels_opened() - opened >= 2 * clients
    assert redirected(done.stderr) == server.channels_opened() - opened


# ------------------------------------------------------------------------------------------ redis-py

REDIS_PY_WORK = """
    import redis
    r = redis.Redis(host=HOST, port=PORT)
    r.flushall()
    out = {}
    r.set("a", "1")
    out["get"] = r.get("a").decode()
    out["incr"] = r.incr("n", 41)
    pipe = r.pipeline()
    for i in range(500):
        pipe.set(f"k{i}", i)
    pipe.execute()
    out["mget_sum"] = sum(int(x) for x in r.mget([f"k{i}" for i in range(500)]))
    value = os.urandom(1 << 20).hex()  # 2 MiB: larger than a ring
    r.set("big", value)
    out["big_ok"] = r.get("big").decode() == value
    # BLPOP woken by another connection's RPUSH.
    def push_later():
        time.sleep(0.3)
        redis.Redis(host=HOST, port=PORT).rpush("q", "x")
    threading.Thread(target=push_later).start()
    started = time.monotonic()
    out["blpop"] = [v.decode() for v in r.blpop("q", timeout=5)]
    out["blpop_waited"] = time.monotonic() - started >= 0.25
    out["blpop_timeout"] = r.blpop("q", timeout=1)
    # Pub/sub: a subscriber waits (Python's poll with a timeout), a publisher on another connection.
    p = r.pubsub()
    p.subscribe("ch")
    out["subscribed"] = p.get_message(timeout=2)["type"]
    redis.Redis(host=HOST, port=PORT).publish("ch", "hello")
    message = p.get_message(timeout=2)
    out["message"] = message and message["data"].decode()
    out["quiet"] = p.get_message(timeout=0.2)
    p.close()
    # A socket timeout fires while the server holds the reply back.
    slow = redis.Redis(host=HOST, port=PORT, socket_timeout=0.3)
    try:
        slow.blpop("empty", timeout=2)
        out["socket_timeout"] = "no timeout"
    except redis.exceptions.TimeoutError:
        out["socket_timeout"] = "timed out"
    print(json.dumps(out))
"""


def test_redis_py_with_pubsub_blocking_pop_and_timeouts(server):
    opened = server.channels_opened()
    with_preload, log = python(server, REDIS_PY_WORK)
    assert redirected(log) >= 4, log
    assert server.channels_opened() - opened == redirected(log)
    without, log = python(server, REDIS_PY_WORK, preload=False)
    assert redirected(log) == 0
    assert with_preload == without
    assert with_preload["get"] == "1" and with_preload["mget_sum"] == sum(range(500))
    assert with_preload["big_ok"] and with_preload["blpop"] == ["q", "x"] and with_preload["blpop_waited"]
    assert with_preload["message"] == "hello" and with_preload["quiet"] is None
    assert with_preload["socket_timeout"] == "timed out"


# ------------------------------------------------------------------------------------------ memcached clients

PYMEMCACHE_WORK = """
    from pymemcache.client.base import Client
    m = Client((HOST, MC_PORT))
    m.flush_all()
    out = {}
    m.set("a", "1")
    out["get"] = m.get("a").decode()
    out["incr"] = m.incr("a", 9)
    out["many"] = {k: v.decode() for k, v in m.get_many(["a", "nope"]).items()}
    value = os.urandom(300 << 10)
    m.set("big", value)
    out["big_ok"] = m.get("big") == value
    out["deleted"] = m.delete("a", noreply=False)
    out["gone"] = m.get("a")
    m.close()
    print(json.dumps(out))
"""


def test_pymemcache_on_a_memcached_channel(server):
    opened = server.channels_opened()
    with_preload, log = python(server, PYMEMCACHE_WORK)
    assert b"(Memcache," in log, log
    assert server.channels_opened() - opened == 1
    without, _ = python(server, PYMEMCACHE_WORK, preload=False)
    assert with_preload == without
    assert with_preload["incr"] == 10 and with_preload["big_ok"] and with_preload["gone"] is None


def test_one_fallow_socket_serves_both_ports_by_port(server):
    """With $FALLOW_SOCKET naming the RESP socket for every target, SHM.OPEN's PORT picks the protocol."""
    resp_socket = server.runtime / "fallow" / f"fallow-{server.port}.sock"
    assert resp_socket.exists()
    env = server.env(FALLOW_SOCKET=str(resp_socket))
    done = run([sys.executable, "-c", textwrap.dedent(f"""
        from pymemcache.client.base import Client
        m = Client(({HOST!r}, {server.mc_port}))
        m.set("viaport", "yes")
        print(m.get("viaport").decode())
    """)], env)
    assert done.stdout == b"yes\n"
    assert b"(Memcache," in done.stderr and redirected(done.stderr) == 1


def test_memcslap_on_memcached_channels(server):
    opened = server.channels_opened()
    done = run(["memcslap", f"--servers={HOST}:{server.mc_port}", "--concurrency=4",
                "--execute-number=2000"], server.env(), timeout=120)
    assert b"Time to set" in done.stdout, done.stdout
    assert redirected(done.stderr) >= 4, done.stderr
    assert server.channels_opened() - opened == redirected(done.stderr)
    stats = redis.Redis(host=HOST, port=server.port, decode_responses=True).info("shm")
    assert int(stats["shm_channels_closed_corrupt"]) == 0


# ------------------------------------------------------------------------------------------ fallback

def test_no_unix_socket_means_plain_tcp(server):
    env = server.env(FALLOW_SOCKET="/nonexistent/fallow.sock")
    opened = server.channels_opened()
    done = run(["redis-cli", "-p", str(server.port), "PING"], env)
    assert done.stdout == b"PONG\n"
    assert b"stays on TCP" in done.stderr and redirected(done.stderr) == 0
    assert server.channels_opened() == opened


def test_a_refused_channel_falls_back_to_tcp():
    s = ChannelServer({"shm-channels": "no"}).start()
    try:
        done = run(["redis-cli", "-p", str(s.port), "SET", "k", "over-tcp"], s.env())
        assert done.stdout == b"OK\n"
        assert b"refused" in done.stderr and redirected(done.stderr) == 0
        assert redis.Redis(host=HOST, port=s.port).get("k") == b"over-tcp"
    finally:
        s.cleanup()


def test_without_targets_the_library_does_nothing(server):
    env = server.env()
    del env["FALLOW_PRELOAD_TARGETS"]
    opened = server.channels_opened()
    done = run(["redis-benchmark", "-p", str(server.port), "-t", "get", "-n", "2000", "-c", "2", "-q"], env)
    assert b"requests per second" in done.stdout.replace(b"\r", b"\n")
    assert redirected(done.stderr) == 0 and server.channels_opened() == opened


def test_other_destinations_are_untouched(server):
    other = ServerProc("fallow").start()
    try:
        done = run(["redis-cli", "-p", str(other.port), "PING"], server.env())
        assert done.stdout == b"PONG\n" and redirected(done.stderr) == 0
    finally:
        other.cleanup()


# ------------------------------------------------------------------------------------------ socket calls

SOCKET_CALLS = """
    out = {}
    s = socket.create_connection((HOST, PORT))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    out["nodelay"] = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    out["so_error"] = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    out["so_type"] = s.getsockopt(socket.SOL_SOCKET, socket.SO_TYPE) == socket.SOCK_STREAM
    out["peer"] = list(s.getpeername())
    out["local_host"] = s.getsockname()[0]
    try:
        s.setsockopt(socket.SOL_SOCKET, 12345, 1)
        out["bad_option"] = "accepted"
    except OSError:
        out["bad_option"] = "refused"
    # Readiness: nothing to read yet, always writable.
    p = select.poll()
    p.register(s, select.POLLIN | select.POLLOUT)
    out["poll_idle"] = [e for _, e in p.poll(50)]
    s.sendall(b"PING\\r\\n")
    ep = select.epoll()
    ep.register(s.fileno(), select.EPOLLIN)
    out["epoll"] = [e for _, e in ep.poll(2)]
    r, w, _ = select.select([s], [s], [], 1)
    out["select"] = [len(r), len(w)]
    n = fcntl.ioctl(s.fileno(), termios.FIONREAD, b"\\0\\0\\0\\0")
    out["fionread"] = int.from_bytes(n, sys.byteorder)
    out["peek"] = s.recv(100, socket.MSG_PEEK).decode()
    out["read"] = s.recv(100).decode()
    # Non-blocking: EAGAIN when nothing is there.
    s.setblocking(False)
    try:
        s.recv(10)
        out["eagain"] = "data"
    except BlockingIOError:
        out["eagain"] = "EAGAIN"
    s.setblocking(True)
    # A duplicate is the same connection; closing it leaves the original working.
    d = socket.socket(fileno=os.dup(s.fileno()))
    d.sendall(b"ECHO dup\\r\\n")
    out["dup"] = s.recv(100).decode()
    d.close()
    s.sendall(b"ECHO after\\r\\n")
    out["after_dup_close"] = s.recv(100).decode()
    # A forked child cannot use the parent's connection; the parent keeps it.
    # (Over TCP the child's read finds nothing: EAGAIN; on a channel it is refused: ECONNRESET.)
    pid = os.fork()
    if pid == 0:
        try:
            s.recv(10, socket.MSG_DONTWAIT)
            code = 1
        except ConnectionResetError:
            code = 0
        except BlockingIOError:
            code = 2
        s.close()
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    out["child_refused"] = os.WEXITSTATUS(status) == 0
    s.sendall(b"ECHO parent\\r\\n")
    out["parent_after_fork"] = s.recv(100).decode()
    # Half-close: the server answers what it has and then ends the stream.
    s.sendall(b"PING\\r\\n")
    s.shutdown(socket.SHUT_WR)
    data = b""
    while True:
        chunk = s.recv(100)
        if not chunk:
            break
        data += chunk
    out["after_shutdown"] = data.decode()
    s.close()
    print(json.dumps(out))
"""


def test_python_socket_calls_behave_as_on_tcp(server):
    with_preload, log = python(server, SOCKET_CALLS)
    assert redirected(log) == 1, log
    without, _ = python(server, SOCKET_CALLS, preload=False)
    expected_differences = {"child_refused"}  # a TCP socket is shared with the child; a channel is not
    for key in with_preload:
        if key not in expected_differences:
            assert with_preload[key] == without[key], key
    assert with_preload["child_refused"] is True and without["child_refused"] is False
    assert with_preload["so_error"] == 0 and with_preload["peer"] == [HOST, server.port]
    assert with_preload["poll_idle"] == [select_const("POLLOUT")]
    assert with_preload["read"] == "+PONG\r\n" and with_preload["peek"] == "+PONG\r\n"
    assert with_preload["fionread"] == len("+PONG\r\n") and with_preload["eagain"] == "EAGAIN"
    assert with_preload["after_shutdown"] == "+PONG\r\n"


def select_const(name: str) -> int:
    import select
    return getattr(select, name)


# ------------------------------------------------------------------------------------------ server death

WAIT_ON_DEAD_SERVER = {
    # A blocking recv.
    "recv": "",
    # epoll_wait reports the hang-up; a second wait (the program keeps the descriptor) still sleeps.
    "epoll": """
        ep = select.epoll()
        ep.register(c.fileno(), select.EPOLLIN)
        events = ep.poll(10)
        assert events and events[0][1] & select.EPOLLIN, events
        ep.unregister(c.fileno())
        started = time.monotonic()
        assert ep.poll(0.3) == []
        assert time.monotonic() - started >= 0.25
    """,
    # poll with a timeout.
    "poll": """
        p = select.poll()
        p.register(c, select.POLLIN)
        assert p.poll(10000), "poll timed out"
    """,
}


@pytest.mark.parametrize("how", sorted(WAIT_ON_DEAD_SERVER))
def test_a_reader_waiting_on_a_dead_server_sees_the_end_of_the_stream(how):
    s = ChannelServer().start()
    try:
        script = textwrap.dedent(f"""
            import select, socket, sys, time
            c = socket.create_connection(({HOST!r}, {s.port}))
            c.sendall(b"PING\\r\\n")
            assert c.recv(100) == b"+PONG\\r\\n"
            print("ready", flush=True)
        """) + textwrap.dedent(WAIT_ON_DEAD_SERVER[how]) + textwrap.dedent("""
            try:
                print("eof" if c.recv(100) == b"" else "data", flush=True)
            except ConnectionError:
                print("reset", flush=True)
        """)
        child = subprocess.Popen([sys.executable, "-c", script], env=s.env(), stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE)
        assert child.stdout.readline() == b"ready\n"
        s.stop(sig=9)
        out, err = child.communicate(timeout=20)
        assert out in (b"eof\n", b"reset\n"), (out, err)
        assert redirected(err) == 1
    finally:
        s.cleanup()


# ------------------------------------------------------------------------------------------ C calls

def test_c_calls_python_does_not_make(server, tmp_path):
    """writev/readv, sendmsg, MSG_WAITALL, ppoll, pselect, epoll_pwait(2), F_DUPFD_CLOEXEC, dup2, EAGAIN
    (preload/socket_calls.c), compiled here and run with and without the preload."""
    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler")
    program = tmp_path / "socket_calls"
    source = Path(__file__).parent / "preload" / "socket_calls.c"
    subprocess.run([cc, "-O2", "-Wall", "-Werror", "-o", str(program), str(source)], check=True,
                   timeout=60)
    with_preload = run([str(program), str(server.port)], server.env())
    without = run([str(program), str(server.port)], server.env(preload=False))
    assert redirected(with_preload.stderr) == 1, with_preload.stderr
    assert with_preload.stdout == without.stdout
    lines = with_preload.stdout.decode().splitlines()
    assert lines[-1] == "done" and "ppoll_ready 1 1" in lines and "epoll_ready 1 1234" in lines


FORK_WHILE_THREADS_TALK = """
    import redis
    stop = threading.Event()
    counts = [0, 0, 0]
    def worker(i):
        r = redis.Redis(host=HOST, port=PORT)
        while not stop.is_set():
            r.set(f"w{i}", counts[i])
            counts[i] += 1
    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(3)]
    for t in threads:
        t.start()
    children_ok = 0
    for _ in range(30):
        pid = os.fork()
        if pid == 0:
            # A plain socket: a Python-level lock another thread held at the fork (redis-py's, say)
            # would hang the child whatever the transport.
            c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            c.settimeout(5)
            c.connect((HOST, PORT))
            c.sendall(b"INCR forks\\r\\n")
            os._exit(0 if c.recv(100).startswith(b":") else 1)
        _, status = os.waitpid(pid, 0)
        children_ok += os.WEXITSTATUS(status) == 0
    stop.set()
    for t in threads:
        t.join(5)
    print(json.dumps({"children_ok": children_ok, "threads_done": not any(t.is_alive() for t in threads),
                      "ops": sum(counts)}))
"""


def test_forks_while_other_threads_use_channels(server):
    """fork() while three threads run commands on channels: each child connects anew and works (the
    shim's locks are taken across fork), the threads go on."""
    out, log = python(server, FORK_WHILE_THREADS_TALK, timeout=120)
    assert out["children_ok"] == 30 and out["threads_done"] and out["ops"] > 0, out
    assert redirected(log) >= 3 + 30, log


CLIENT_KILL_WHILE_BLOCKED = """
    c = socket.create_connection((HOST, PORT))
    c.sendall(b"CLIENT ID\\r\\n")
    my_id = int(c.recv(100)[1:].strip())
    def kill_later():
        time.sleep(0.3)
        k = socket.create_connection((HOST, PORT))
        k.sendall(b"CLIENT KILL ID %d\\r\\n" % my_id)
        k.recv(100)
        k.close()
    threading.Thread(target=kill_later).start()
    started = time.monotonic()
    c.sendall(b"BLPOP nothing-here 10\\r\\n")
    try:
        ended = "eof" if c.recv(100) == b"" else "data"
    except ConnectionError:
        ended = "reset"
    print(json.dumps({"ended": ended, "prompt": time.monotonic() - started < 5}))
"""


def test_a_client_killed_while_blocked_sees_the_end_at_once(server):
    """The server ends a channel (CLIENT KILL) while the client sleeps in recv: its doorbell wakes it."""
    with_preload, log = python(server, CLIENT_KILL_WHILE_BLOCKED)
    assert redirected(log) >= 1, log
    without, _ = python(server, CLIENT_KILL_WHILE_BLOCKED, preload=False)
    assert with_preload == without == {"ended": "eof", "prompt": True}
