"""The embedded metastore: a Hive metastore database in a Derby network server on 127.0.0.1.

Spark's default metastore is Derby *embedded* in the application, which locks its
database for that one application: the streams, `lakehouse sql` and the SQL server could
not share it. Here the database is served by Derby's network server, and every Spark
application runs Hive's metastore client against it over JDBC, so any number of them see
the same names at once. The database starts as a copy of a template whose schema
`lakehouse setup` created, because letting each application create or validate the
schema over the network takes a minute and races when two start together.

A real deployment points `catalog.metastore` at its own Hive metastore instead.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pyspark

from lakehouse.core.console import echo
from lakehouse.core.errors import LakehouseError, explain
from lakehouse.services import jars, process

DATABASE = "metastore"
TEMPLATE_DIR = jars.JARS_DIR.parent / "metastore-template"
CLIENT_DRIVER = "org.apache.derby.jdbc.ClientDriver"


@dataclass(frozen=True)
class EmbeddedMetastore:
    """The metastore whose database, log and pid live in `home`; any process can stop it."""

    title: ClassVar[str] = "metastore"
    home: Path

    @classmethod
    def under(cls, local_state_dir: Path) -> EmbeddedMetastore:
        return cls(local_state_dir / "catalog")

    @property
    def log_file(self) -> Path:
        return self.home / "server.log"

    def address(self) -> str | None:
        """The JDBC URL of the metastore database while the server runs, else None."""
        address = self.home / "address"
        if process.running_pid(self.home / "derby.pid") is None or not address.exists():
            return None
        return f"jdbc:derby://{address.read_text().strip()}/{DATABASE}"

    def start(self, timeout_s: float = 60.0) -> str:
        """Start the server unless it runs; return the metastore's JDBC URL once it serves."""
        running = self.address()
        if running:
            return running
        self.home.mkdir(parents=True, exist_ok=True)
        if not (self.home / DATABASE).exists():
            shutil.copytree(_template(), self.home / DATABASE)
        (port,) = process.kept_ports(self.home / "ports", 1)
        classpath = os.pathsep.join(str(j) for j in jars.jars("catalog"))
        command = [
            "java",
            "-Xms64m",
            "-Xmx256m",
            f"-Dderby.system.home={self.home}",
            "-cp",
            classpath,
            "org.apache.derby.drda.NetworkServerControl",
            "start",
            "-h",
            "127.0.0.1",
            "-p",
            str(port),
            "-noSecurityManager",
        ]
        process.launch(
            "metastore (Derby network server)",
            command,
            self.home / "derby.pid",
            self.log_file,
            lambda: _serves(port),
            timeout_s,
        )
        (self.home / "address").write_text(f"127.0.0.1:{port}")
        return f"jdbc:derby://127.0.0.1:{port}/{DATABASE}"

    def stop(self, timeout_s: float = 30.0) -> bool:
        """Stop the server; False if it was not running."""
        (self.home / "address").unlink(missing_ok=True)
        return process.stop(self.home / "derby.pid", timeout_s)


def client_classpath() -> str:
    """The Derby client driver, for the driver JVM's own classpath: Hive's metastore client
    loads JDBC drivers through the system class loader, which never sees `spark.jars`."""
    return os.pathsep.join(
        str(j) for j in jars.jars("catalog") if jars.artifact_id(j) == "derbyclient"
    )


def create_template(force: bool = False) -> Path:
    """Create an empty metastore database with Hive's schema, once per pyspark version."""
    stamp = TEMPLATE_DIR / ".pyspark-version"
    if not force and stamp.exists() and stamp.read_text() == pyspark.__version__:
        return TEMPLATE_DIR
    echo(f"creating the metastore schema in {TEMPLATE_DIR} ...")
    shutil.rmtree(TEMPLATE_DIR, ignore_errors=True)
    TEMPLATE_DIR.mkdir(parents=True)
    # A Spark application of its own, with Derby embedded, creates Hive's schema the one
    # way Spark's Hive client knows; the network server then serves this database.
    script = textwrap.dedent(f"""
        from pyspark.sql import SparkSession
        spark = (SparkSession.builder.master("local[1]").appName("metastore-schema")
            .config("spark.sql.catalogImplementation", "hive")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.warehouse.dir", {str(TEMPLATE_DIR / "warehouse")!r})
            .config("spark.hadoop.javax.jdo.option.ConnectionURL",
                    "jdbc:derby:;databaseName={TEMPLATE_DIR / DATABASE};create=true")
            .config("spark.hadoop.datanucleus.schema.autoCreateAll", "true")
            .config("spark.hadoop.hive.metastore.schema.verification", "false")
            .getOrCreate())
        spark.sql("SHOW DATABASES").collect()
        spark.stop()
    """)
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=TEMPLATE_DIR, capture_output=True, text=True
    )
    if result.returncode != 0 or not (TEMPLATE_DIR / DATABASE).exists():
        raise LakehouseError(f"could not create the metastore schema: {explain(result.stderr)}")
    shutil.rmtree(TEMPLATE_DIR / "warehouse", ignore_errors=True)
    stamp.write_text(pyspark.__version__)
    return TEMPLATE_DIR


def _template() -> Path:
    stamp = TEMPLATE_DIR / ".pyspark-version"
    if not stamp.exists() or stamp.read_text() != pyspark.__version__:
        raise LakehouseError(
            f"the metastore template is missing in {TEMPLATE_DIR}; run `make setup`"
        )
    return TEMPLATE_DIR / DATABASE


def _serves(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
    except OSError:
        return False
    return True
