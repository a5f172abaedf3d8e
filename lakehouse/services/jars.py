"""JVM artifacts: resolved once from the pinned list in `jvm/pom.xml` into a local folder.

Resolution uses Maven rather than Spark's `spark.jars.packages`, because Spark's Ivy resolver
ignores Maven's settings and would go to the network at every session start. After
`lakehouse setup`, no job needs the network.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
from pathlib import Path

from lakehouse import PROJECT_ROOT
from lakehouse.core.console import echo
from lakehouse.core.errors import LakehouseError, explain

POM = PROJECT_ROOT / "jvm" / "pom.xml"
JARS_DIR = PROJECT_ROOT / ".state" / "jars"
CLASSPATHS = ("spark", "kafka", "catalog")

_VERSION_SUFFIX = re.compile(r"-\d[^/]*\.jar$")


def jar_dir(classpath: str) -> Path:
    return JARS_DIR / classpath


def jars(classpath: str) -> list[Path]:
    """The resolved jars of one classpath; an error if set-up has not run."""
    folder = jar_dir(classpath)
    found = sorted(folder.glob("*.jar"))
    if not found or not (folder / ".pom-sha256").exists():
        raise LakehouseError(
            f"JVM jars for {classpath!r} are missing in {folder}; run `make setup`"
        )
    return found


def artifact_id(jar: Path) -> str:
    """`kafka-clients-3.9.1.jar` -> `kafka-clients`."""
    return _VERSION_SUFFIX.sub("", jar.name)


def resolve(force: bool = False) -> None:
    """Copy each profile's runtime jars into its folder, unless the pom is unchanged."""
    digest = hashlib.sha256(POM.read_bytes()).hexdigest()
    for classpath in CLASSPATHS:
        folder = jar_dir(classpath)
        stamp = folder / ".pom-sha256"
        if not force and stamp.exists() and stamp.read_text() == digest:
            continue
        echo(f"resolving JVM artifacts for {classpath} into {folder} ...")
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        command = [
            "mvn",
            "-q",
            "-B",
            "-f",
            str(POM),
            "-P",
            classpath,
            "dependency:copy-dependencies",
            f"-DoutputDirectory={folder}",
            "-DincludeScope=runtime",
        ]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            errors = [line for line in result.stdout.splitlines() if "ERROR" in line]
            raise LakehouseError(f"Maven could not resolve {POM} profile {classpath}: {errors[:1]}")
        if classpath == "spark":
            _drop_jars_pyspark_ships(folder)
        stamp.write_text(digest)


SQL_EXTENSION_SOURCES = PROJECT_ROOT / "jvm" / "src"
SQL_EXTENSION_JAR = JARS_DIR / "sql" / "lakehouse-sql.jar"
SQL_EXTENSION_CLASS = "lakehouse.sql.ReadOnlyExtension"


def sql_extension() -> Path:
    """The jar of the project's own JVM classes (`jvm/src`): the read-only guard of `lakehouse
    sql` and the SQL server, silver's `JsonKeys`, gold's `ColumnLineage` for the lineage events,
    and a probe of `benchmarks/silver.py`."""
    if not SQL_EXTENSION_JAR.exists():
        raise LakehouseError(f"{SQL_EXTENSION_JAR} is missing; run `make setup`")
    return SQL_EXTENSION_JAR


def build_sql_extension(force: bool = False) -> Path:
    """Compile `jvm/src` (the read-only SQL guard, silver's `JsonKeys`, `ColumnLineage`)
    against the Spark that pyspark ships: no download, no Maven build. Every Spark session
    puts the jar on its classpath."""
    import pyspark

    sources = sorted(SQL_EXTENSION_SOURCES.rglob("*.java"))
    digest = hashlib.sha256(
        b"".join(p.read_bytes() for p in sources) + pyspark.__version__.encode()
    ).hexdigest()
    stamp = SQL_EXTENSION_JAR.with_suffix(".sha256")
    if not force and SQL_EXTENSION_JAR.exists() and stamp.exists() and stamp.read_text() == digest:
        return SQL_EXTENSION_JAR
    echo(f"compiling jvm/src (the SQL guard, JSON keys, column lineage) into {SQL_EXTENSION_JAR}")
    classes = SQL_EXTENSION_JAR.parent / "classes"
    shutil.rmtree(classes, ignore_errors=True)
    classpath = str(Path(pyspark.__file__).parent / "jars" / "*")
    for command in (
        ["javac", "--release", "17", "-cp", classpath, "-d", str(classes), *map(str, sources)],
        ["jar", "cf", str(SQL_EXTENSION_JAR), "-C", str(classes), "."],
    ):
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            raise LakehouseError(f"{command[0]} failed: {explain(result.stderr)}")
    shutil.rmtree(classes)
    stamp.write_text(digest)
    return SQL_EXTENSION_JAR


def _drop_jars_pyspark_ships(folder: Path) -> None:
    # pyspark bundles Spark, Scala, Hadoop, Parquet, Jackson and logging; a second copy at
    # another version on spark.jars makes class loading depend on jar order.
    import pyspark

    bundled = {artifact_id(j) for j in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    for jar in folder.glob("*.jar"):
        if artifact_id(jar) in bundled:
            jar.unlink()
