"""Real applications, unmodified, against the server: rq 3.0 (jobs and their results, which rq records with
XADD), Celery 5.7 with the Redis broker and result backend (kombu's Lua scripts), and redis-py's Lock
(Lua). Each passes against redis-server 7.0.15 too (E2E_TARGET=redis)."""
import os
import subprocess
import sys
import textwrap
import time

import pytest

pytestmark = pytest.mark.resp

rq = pytest.importorskip("rq")
celery = pytest.importorskip("celery")

JOBS_MODULE = "def add(x, y):\n    return x + y\n"


def test_an_rq_worker_runs_jobs_and_their_results_are_read_back(server, r, tmp_path, monkeypatch):
    (tmp_path / "fallow_rq_jobs.py").write_text(JOBS_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    import fallow_rq_jobs
    from rq import Queue
    from rq.worker import SimpleWorker

    connection = r.__class__(host=r.connection_pool.connection_kwargs["host"], port=server.port)
    queue = Queue("fallow", connection=connection)
    jobs = [queue.enqueue(fallow_rq_jobs.add, n, n) for n in range(20)]
    SimpleWorker([queue], connection=connection).work(burst=True)
    assert [job.get_status() for job in jobs] == ["finished"] * 20
    assert [job.return_value() for job in jobs] == [2 * n for n in range(20)]
    assert len(jobs[3].results()) == 1, "rq keeps each result in a stream (XADD)"


def test_a_celery_worker_runs_tasks_with_the_redis_broker_and_backend(server, tmp_path):
    url = f"redis://127.0.0.1:{server.port}"
    (tmp_path / "fallow_celery_app.py").write_text(textwrap.dedent(f"""
        from celery import Celery
        app = Celery('fallow', broker='{url}/0', backend='{url}/1')
        @app.task
        def add(x, y):
            return x + y
    """))
    log_path = tmp_path / "worker.log"
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    with open(log_path, "w") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "fallow_celery_app", "worker", "--pool=solo",
             "--concurrency=1", "--loglevel=WARNING", "--without-gossip", "--without-mingle"],
            cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        client = subprocess.run(
            [sys.executable, "-c", textwrap.dedent("""
                from fallow_celery_app import add
                results = [add.delay(n, n) for n in range(10)]
                print(sum(result.get(timeout=20) == 2 * n for n, result in enumerate(results)))
            """)],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=45)
        assert client.stdout.strip().splitlines()[-1:] == ["10"], client.stderr[-2000:]
    finally:
        worker.terminate()
        try:
            worker.wait(10)
        except subprocess.TimeoutExpired:
            worker.kill()
    log = log_path.read_text()
    assert "ResponseError" not in log and "unknown command" not in log, log[-2000:]


def test_redis_py_locks_exclude_each_other_and_expire(r):
    first = r.lock("fallow-lock", timeout=0.5)
    assert first.acquire(blocking=False)
    second = r.lock("fallow-lock", timeout=5)
    assert not second.acquire(blocking=False), "held"
    assert first.owned()
    time.sleep(0.7)
    assert second.acquire(blocking=False), "the first lock expired"
    assert not first.owned()
    second.release()
