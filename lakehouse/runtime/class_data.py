"""Class-data sharing for the driver JVM of every `lakehouse` command: the classes a run
loads (Spark, Delta, Kafka's client, the state store) mapped from an archive rather than
read out of their jars, inflated and verified again at each start. A restarted pipeline
spends its first minute on a cold JVM, on two cores beside the streams it restarts; this
is the part of that cost a JVM can keep between runs (docs/operations.md).

The first command of a class path writes the archive as its JVM exits
(`-XX:ArchiveClassesAtExit`, JDK 17's dynamic archive) under a name of its own, and renames
it into place once the JVM is gone: concurrent first commands each write their own, and a
JVM killed before it ends writes none. The archive is named by what decides whether a JVM
can use it (its `java`, Spark's version, the jars and the class path), so a JVM never
meets an archive of another class path; one that could not map it would say so in its log
and load its classes as usual. Writing it costs the first command about 15 s at its end."""

from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Mapping
from contextlib import suppress
from pathlib import Path

from lakehouse import PROJECT_ROOT
from lakehouse.core.console import echo

USE = "-XX:SharedArchiveFile="
WRITE = "-XX:ArchiveClassesAtExit="
CLASS_PATH_KEYS = ("spark.jars", "spark.driver.extraClassPath")
"""The session settings that put classes on the driver's class path."""
PROC = Path("/proc")
JVM_OPTION_VARIABLES = ("SPARK_SUBMIT_OPTS", "JDK_JAVA_OPTIONS", "JAVA_TOOL_OPTIONS")
WRITE_WAIT_S = 60.0
"""How long a command waits at its end for its JVM to write the archive (about 15 s)."""
LEFT_AFTER_S = 3600.0
"""An unfinished archive this old was left by a JVM killed as it wrote it."""


def archive_of(setting: str, conf: Mapping[str, str], options_key: str) -> Path | None:
    """The archive of a driver JVM started with `conf`, under the folder `setting`
    (`spark.class_data_dir`); None if it says `none`, or the JVM is given one already."""
    if setting == "none" or chosen_elsewhere(conf.get(options_key, "")):
        return None
    return archive_for(PROJECT_ROOT / setting, conf)


def archive_for(folder: Path, conf: Mapping[str, str]) -> Path:
    """The archive of JVMs started with `conf`: the same path for every JVM that can use it."""
    import pyspark

    real = Path(_java()).resolve()
    seen = [str(real), str(real.stat().st_mtime_ns) if real.exists() else "", pyspark.__version__]
    seen += [f"{key}={conf.get(key, '')}" for key in CLASS_PATH_KEYS]
    return folder / f"{hashlib.sha256(chr(0).join(seen).encode()).hexdigest()[:16]}.jsa"


def java_option(archive: Path) -> tuple[str, Path | None]:
    """The JVM option for `archive`, and where the JVM writes it if it does not exist yet
    (only where `/proc` shows the JVM's class path, which the archive is checked with)."""
    if archive.is_file():
        return USE + str(archive), None
    if not PROC.is_dir():
        return "", None
    archive.parent.mkdir(parents=True, exist_ok=True)
    for left in archive.parent.glob(f"{archive.stem}.*.partial"):  # by JVMs killed writing
        with suppress(OSError):
            if time.time() - left.stat().st_mtime > LEFT_AFTER_S:
                left.unlink()
    written = archive.with_name(f"{archive.stem}.{uuid.uuid4().hex[:8]}.partial")
    return WRITE + str(written), written


def keep_when_written(jvm: subprocess.Popen[bytes], written: Path, archive: Path) -> None:
    """At this process's end, `keep` what its JVM wrote."""
    command = command_of(jvm.pid)
    if command:
        atexit.register(keep, jvm, written, archive, command)


def command_of(pid: int) -> list[str]:
    """The command line of process `pid`; empty if it ended (or has yet to begin)."""
    try:
        return [a for a in (PROC / str(pid) / "cmdline").read_bytes().decode().split("\0") if a]
    except OSError:
        return []


def keep(jvm: subprocess.Popen[bytes], written: Path, archive: Path, command: list[str]) -> bool:
    """End `jvm` as PySpark does (its stdin closed), wait for it to write `written`, and
    rename that into `archive` if a JVM of its `command` (java, class path) maps it."""
    echo("lakehouse: the JVM writes its class-data archive for later starts (once) ...", err=True)
    if jvm.stdin is not None:
        jvm.stdin.close()
    try:
        jvm.wait(WRITE_WAIT_S)
    except subprocess.TimeoutExpired:
        return False
    kept = jvm.returncode == 0 and written.is_file() and usable(written, command)
    if kept:
        os.replace(written, archive)
    written.unlink(missing_ok=True)
    return kept


def usable(archive: Path, command: list[str]) -> bool:
    """Whether the JVM of `command` (its `java` and class path) maps `archive` whole: one cut
    short (a JVM killed as it wrote it) crashes every JVM given it."""
    java, class_path = command[0], command[command.index("-cp") + 1] if "-cp" in command else ""
    check = [java, "-cp", class_path, USE + str(archive), "-Xshare:on", "-XX:ErrorFile=/dev/null"]
    return subprocess.run([*check, "-version"], capture_output=True, check=False).returncode == 0


def chosen_elsewhere(*options: str) -> bool:
    """Whether the JVM is given an archive already (a target's options, SPARK_SUBMIT_OPTS):
    a second one would stop it from starting."""
    given = " ".join((*options, *(os.environ.get(v, "") for v in JVM_OPTION_VARIABLES)))
    return any(flag in given for flag in (USE, WRITE, "-Xshare"))


def _java() -> str:
    return shutil.which("java", path=_java_path()) or "java"


def _java_path() -> str | None:
    """Where spark-submit finds `java`: under JAVA_HOME if set, else on PATH."""
    home = os.environ.get("JAVA_HOME")
    return str(Path(home) / "bin") if home else None
