"""A real Prometheus (Debian's ``/usr/bin/prometheus``) scrapes a ``cheeto daemon up``
stack (issue 30): the API's ``/metrics`` and the hub worker's, the site worker's and
beat's ports from ``stack.json``, every second. The test triggers a Slurm sync (a dry run
against the session's slurmdbd, through the stack's broker with ``daemon enqueue
--wait``) and asks Prometheus's HTTP API until the run's samples arrive: the sync run
by target, site, mode and outcome, its duration, the task run, and beat's queue depth.

Both Prometheus and the stack are stopped by their PIDs (the stack with Ctrl-C's SIGINT,
which stops its whole tree), and every wait polls with a generous deadline.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
from ruamel.yaml import YAML

from tests.daemon.test_stack import CHEETO, stack_config
from tests.services._proc import alive, free_port, log_tails
from tests.services.slurm import SlurmAccounting

PROMETHEUS = Path("/usr/bin/prometheus")
INSTALL_HINT = ("this machine needs Debian's prometheus (scripts/install-system-deps.sh: "
                "apt-get install -y --no-install-recommends prometheus)")


def wait_for(predicate: Any, seconds: float, what: str, logs: list[Path]) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out after {seconds} s waiting for {what}\n"
                         f"{log_tails(logs, 40)}")


def get(url: str, **kwargs: Any) -> httpx.Response | None:
    try:
        return httpx.get(url, timeout=10, **kwargs)
    except httpx.HTTPError:
        return None


def scrape_config(urls: dict[str, str]) -> dict[str, Any]:
    """One job, one static target per process of the stack (its name as a label)."""
    statics = []
    paths = {re.sub("/+", "/", urlsplit(url).path) for url in urls.values()}
    assert paths == {"/metrics"}, urls  # one job's metrics_path fits them all
    for name, url in sorted(urls.items()):
        statics.append({"targets": [urlsplit(url).netloc], "labels": {"process": name}})
    return {"global": {"scrape_interval": "1s", "scrape_timeout": "1s",
                       "evaluation_interval": "1s"},
            "scrape_configs": [{"job_name": "cheeto", "metrics_path": "/metrics",
                                "static_configs": statics}]}


class Prometheus:
    def __init__(self, base: Path, urls: dict[str, str]) -> None:
        self.config = base / "prometheus.yml"
        with self.config.open("w") as out:
            YAML(typ="safe").dump(scrape_config(urls), out)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = base / "prometheus.log"
        with self.log.open("wb") as sink:
            self.proc = subprocess.Popen(
                [str(PROMETHEUS), f"--config.file={self.config}",
                 f"--storage.tsdb.path={base / 'tsdb'}",
                 f"--web.listen-address=127.0.0.1:{self.port}"],
                stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT,
                start_new_session=True)

    def query(self, promql: str) -> list[dict[str, Any]]:
        r = get(f"{self.url}/api/v1/query", params={"query": promql})
        if r is None or r.status_code != 200:
            return []
        body = r.json()
        assert body["status"] == "success", body
        return list(body["data"]["result"])

    def targets_up(self) -> dict[str, str]:
        r = get(f"{self.url}/api/v1/targets")
        if r is None or r.status_code != 200:
            return {}
        return {t["labels"]["process"]: t["health"]
                for t in r.json()["data"]["activeTargets"]}

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def stop_stack(proc: subprocess.Popen[bytes], logs: list[Path]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)  # Ctrl-C: the stack stops every service it runs
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:  # leave nothing behind
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise AssertionError(f"daemon up ignored Ctrl-C\n{log_tails(logs, 40)}") from None


def test_prometheus_scrapes_the_stack_and_finds_the_sync_it_triggered(
        tmp_path: Path, slurm_accounting: SlurmAccounting):
    assert PROMETHEUS.is_file(), INSTALL_HINT
    slurm_accounting.add_cluster("farm")  # the demo site's cluster, in this slurmdbd
    env = {**os.environ, **slurm_accounting.env}
    run = tmp_path / "run"
    config = stack_config(tmp_path, free_port(), tasks={"slurm_sync": {"apply": False}})
    out = tmp_path / "up.out"
    logs = [out]
    with out.open("wb") as sink:
        stack = subprocess.Popen(
            [CHEETO, "daemon", "up", "--config", str(config), "--run-dir", str(run),
             "--seed-demo", "--api-port", str(free_port()), "--flower-port", str(free_port())],
            stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT, env=env,
            start_new_session=True)
    prometheus: Prometheus | None = None
    try:
        state = wait_for(lambda: (run / "stack.json").exists()
                         and json.loads((run / "stack.json").read_text()), 180,
                         "stack.json", logs)
        urls = state["metrics"]
        assert set(urls) == {"api", "hub", "site-farm", "beat"}
        prometheus = Prometheus(tmp_path, urls)
        logs.append(prometheus.log)
        wait_for(lambda: set(prometheus.targets_up().values()) == {"up"}
                 and len(prometheus.targets_up()) == 4, 180, "every target up", logs)

        enqueue = subprocess.run(
            [CHEETO, "daemon", "enqueue", "slurm_sync", "--site", "farm", "--wait",
             "--timeout", "180", "--json", "--config", str(config)],
            stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env, timeout=240)
        assert enqueue.returncode == 0, (enqueue.stdout, enqueue.stderr,
                                         log_tails(logs, 40))

        runs = wait_for(lambda: prometheus.query(
            'cheeto_sync_runs_total{target="slurm",site="farm"}'), 120,
            "the sync run's sample in Prometheus", logs)
        [sample] = runs
        labels, value = sample["metric"], float(sample["value"][1])
        assert value >= 1
        assert (labels["mode"], labels["outcome"], labels["process"], labels["job"]) == \
            ("dry_run", "ok", "site-farm", "cheeto")
        durations = wait_for(lambda: prometheus.query(
            'cheeto_sync_duration_seconds_count{target="slurm",site="farm"}'), 60,
            "the sync's duration count", logs)
        assert float(durations[0]["value"][1]) >= 1
        tasks = wait_for(lambda: prometheus.query(
            'cheeto_task_runs_total{task="slurm_sync",site="farm",outcome="ok"}'), 60,
            "the task run", logs)
        assert float(tasks[0]["value"][1]) >= 1
        queues = wait_for(lambda: prometheus.query("cheeto_queue_messages"), 60,
                          "beat's queue depth", logs)
        assert {q["metric"]["queue"] for q in queues} >= {"cheeto", "slurm.farm"}
        assert {q["metric"]["process"] for q in queues} == {"beat"}
        roles = {r["metric"]["role"] for r in prometheus.query("cheeto_build_info")}
        assert roles == {"api", "hub_worker", "site_worker", "beat"}
    finally:
        if prometheus is not None:
            prometheus.stop()
        stop_stack(stack, logs)
    assert prometheus is not None and not alive(prometheus.proc.pid)
