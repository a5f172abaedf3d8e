"""An embedded Spark standalone cluster on 127.0.0.1: one master and N workers.

pip's pyspark has no start scripts, so each daemon runs as `spark-class <Master|Worker>`,
with its pid, log and (for a worker) work dir under `<local_state>/cluster/`, and every
port chosen once and kept. Each worker offers a bounded number of cores and memory; each
application bounds what it takes with `spark.cores.max`, so that two streams can run side
by side.

Executors run the Python in `python` beside the pids: this project's interpreter and
libraries without the project itself (`-S` skips the editable install's path hook), so
the project's code reaches them only as a real cluster's would: as a zip the driver ships
(`spark.submit.pyFiles`).
"""

from __future__ import annotations

import json
import os
import site
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from lakehouse.core.errors import LakehouseError
from lakehouse.services import process


@dataclass(frozen=True)
class EmbeddedCluster:
    """The cluster whose files live in `home`; stateless itself, so any process can stop it."""

    title: ClassVar[str] = "Spark cluster"

    home: Path
    workers: int
    cores_per_worker: int
    memory_per_worker: str

    @classmethod
    def under(
        cls, local_state_dir: Path, workers: int = 2, cores: int = 1, memory: str = "1g"
    ) -> EmbeddedCluster:
        return cls(local_state_dir / "cluster", workers, cores, memory)

    @property
    def log_file(self) -> Path:
        return self.home / "master.log"

    @property
    def executor_python(self) -> Path:
        return self.home / "python"

    def address(self) -> str | None:
        """`spark://127.0.0.1:port` while the master runs, else None."""
        url = self.home / "master-url"
        if process.running_pid(self.home / "master.pid") is None or not url.exists():
            return None
        return url.read_text().strip()

    def start(self, timeout_s: float = 90.0) -> str:
        """Start the master and its workers unless they run; the master's URL once every
        worker has registered."""
        self.home.mkdir(parents=True, exist_ok=True)
        self._write_executor_python()
        if self.address() is None:
            ports = process.kept_ports(self.home / "ports", 2 + 2 * self.workers)
        else:  # the master holds its ports: a worker that died comes back on its own
            ports = [int(p) for p in (self.home / "ports").read_text().split()]
        port, ui_port, *worker_ports = ports
        url = f"spark://127.0.0.1:{port}"
        if self.address() is None:
            process.launch(
                "Spark master",
                _spark_class(
                    "org.apache.spark.deploy.master.Master",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--webui-port",
                    str(ui_port),
                ),
                self.home / "master.pid",
                self.log_file,
                lambda: self._alive_workers(ui_port) is not None,
                timeout_s,
                _env(),
            )
            (self.home / "master-url").write_text(url)
            (self.home / "master-ui").write_text(str(ui_port))
        for n in range(1, self.workers + 1):
            worker_port, worker_ui = worker_ports[2 * (n - 1) : 2 * n]
            self._start_worker(n, url, worker_port, worker_ui, timeout_s)
        process.wait_until(
            lambda: (self._alive_workers(ui_port) or 0) >= self.workers,
            timeout_s,
            f"Spark cluster: {self.workers} workers did not register; see {self.home}/*.log",
        )
        return url

    def _start_worker(
        self, n: int, url: str, worker_port: int, worker_ui: int, timeout_s: float
    ) -> None:
        """Start worker `n` of the master at `url` unless it runs."""
        pid_file = self.home / f"worker-{n}.pid"
        if process.running_pid(pid_file) is not None:
            return
        work_dir = self.home / f"worker-{n}"
        work_dir.mkdir(exist_ok=True)
        process.launch(
            f"Spark worker {n}",
            _spark_class(
                "org.apache.spark.deploy.worker.Worker",
                "--host",
                "127.0.0.1",
                "--port",
                str(worker_port),
                "--webui-port",
                str(worker_ui),
                "--cores",
                str(self.cores_per_worker),
                "--memory",
                self.memory_per_worker,
                "--work-dir",
                str(work_dir),
                url,
            ),
            pid_file,
            self.home / f"worker-{n}.log",
            lambda: True,
            timeout_s,
            _env(),
        )

    def stop(self, timeout_s: float = 30.0) -> bool:
        """Stop the workers and the master; False if the master was not running."""
        for pid_file in sorted(self.home.glob("worker-*.pid")):
            process.stop(pid_file, timeout_s)
        (self.home / "master-url").unlink(missing_ok=True)
        return process.stop(self.home / "master.pid", timeout_s)

    def busy_worker(self) -> int | None:
        """The pid of a worker that runs an executor now, if any."""
        ports = [int(p) for p in (self.home / "ports").read_text().split()][2::2]
        for worker in self._state().get("workers", []):
            if worker.get("coresused", 0) > 0 and worker.get("port") in ports:
                n = ports.index(worker["port"]) + 1
                return process.running_pid(self.home / f"worker-{n}.pid")
        return None

    def applications(self) -> list[dict[str, object]]:
        """The master's running and completed applications (name, cores, state)."""
        state = self._state()
        return [*state.get("activeapps", []), *state.get("completedapps", [])]

    def _state(self) -> dict[str, Any]:
        ui_port = int((self.home / "master-ui").read_text())
        with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=5) as reply:
            return dict(json.load(reply))

    def _alive_workers(self, ui_port: int) -> int | None:
        """Workers the master counts as alive, or None while the master does not answer."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=2) as reply:
                state = json.load(reply)
        except (OSError, ValueError):
            return None
        return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")

    def _write_executor_python(self) -> None:
        libraries = os.pathsep.join(site.getsitepackages())
        self.executor_python.write_text(
            "#!/bin/sh\n"
            "# Executors' Python: this interpreter and its libraries, not the project itself.\n"
            f'PYTHONPATH="${{PYTHONPATH:+$PYTHONPATH:}}{libraries}" exec {sys.executable} -S "$@"\n'
        )
        self.executor_python.chmod(0o755)


def _spark_class(main_class: str, *args: str) -> list[str]:
    spark_class = Path(sys.executable).parent / "spark-class"
    if not spark_class.exists():
        raise LakehouseError(f"no {spark_class}: install pyspark (make setup)")
    return [str(spark_class), main_class, *args]


def _env() -> dict[str, str]:
    import pyspark

    return {
        # Not the driver's PYTHONPATH: a real cluster's daemons never see its source tree.
        **{key: value for key, value in os.environ.items() if key != "PYTHONPATH"},
        # spark-class looks for Spark with whichever python3 is on PATH; name it.
        "SPARK_HOME": str(Path(pyspark.__file__).parent),
        # Loopback only; and daemons small enough for a 2-core machine beside the jobs.
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_DAEMON_MEMORY": "256m",
        # A worker that stops answering is given up after 30 s, not a minute, so that its
        # applications' executors move to the others sooner; less than 30 s drops busy but
        # healthy workers of a loaded 2-core machine.
        "SPARK_MASTER_OPTS": "-Dspark.worker.timeout=30",
    }
