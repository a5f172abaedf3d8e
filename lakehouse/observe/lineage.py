"""OpenLineage run events: what each node of a walk read and wrote, in the terms lineage
collectors (Marquez, the catalogs, `dbt-ol`'s readers) understand.

A walk (`run`, `build`, `check`) is one run of the job `<namespace>/<command>`; each node it
runs is a job of its own (`<namespace>/<node>`) whose run names the walk as its parent. A node
sends START as it begins and COMPLETE or FAIL as it ends; a node skipped for a failure upstream
never ran and sends nothing. Its datasets are named as OpenLineage's naming spec names storage:
a table by its place (`file` + absolute path, `s3://bucket` + key), Kafka by broker and topic
(the subscription's pattern: bronze reads every topic that matches it). Facets:

- every table: its schema, the columns the manifest lists;
- a gold model's output: column lineage, read off the analyzed plan of the model's build
  (`ColumnLineage` in `jvm/src`), the direct inputs of each column;
- a check's table: the assertions of its suite, each with its outcome;
- FAIL: the error's message.

Events go where `lineage.transport` says, through OpenLineage's own client. A collector that
does not answer costs one warning and the walk's remaining events, never the walk: lineage
describes the pipeline, it is not part of its answer.
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from importlib.metadata import version
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from openlineage.client import OpenLineageClient
from openlineage.client.event_v2 import (
    InputDataset,
    Job,
    OutputDataset,
    Run,
    RunEvent,
    RunState,
)
from openlineage.client.facet_v2 import (
    column_lineage_dataset,
    data_quality_assertions_dataset,
    error_message_run,
    job_type_job,
    parent_run,
    schema_dataset,
)
from openlineage.client.naming.dataset import S3, Kafka, LocalFileSystem
from openlineage.client.transport.file import FileConfig, FileTransport
from openlineage.client.transport.http import HttpConfig, HttpTransport
from openlineage.client.transport.http_common import DEFAULT_RETRY_CONFIG
from openlineage.client.uuid import generate_new_uuid

from lakehouse.core.console import echo
from lakehouse.core.errors import LakehouseError, explain
from lakehouse.core.settings import LineageSettings

PRODUCER = f"urn:lakehouse:{version('lakehouse')}"
"""Who made the events (OpenLineage's `producer`, a URI): this project, at its version."""
EVENTS_FILE = Path("lineage") / "events.jsonl"
"""The file transport's events, one JSON document a line, under the local state."""
KAFKA = "kafka"
"""What a stream that reads Kafka names as its input in the manifest."""

_SENDING = threading.Lock()
"""One event at a time in this process: the streams of `run all` and gold's walks send from
threads of their own, each walk with a lineage of its own, and a file's lines must not
interleave."""

ColumnSources = Mapping[str, Sequence[tuple[str, str]]]
"""Per output column, the (table, column) pairs its values are computed from."""


@dataclass(frozen=True)
class Assertion:
    """One expectation a check evaluated: OpenLineage's data quality assertion."""

    name: str
    type: str
    """The expectation's type, e.g. `expect_column_values_to_not_be_null`."""
    success: bool
    severity: str
    column: str | None = None
    found: str = ""
    """What it saw, e.g. `unexpected 3`."""


def dataset(location: str) -> tuple[str, str]:
    """A table's (namespace, name) from its URI, as OpenLineage's naming spec names storage."""
    parsed = urlparse(location)
    if parsed.scheme in ("s3", "s3a", "s3n"):
        naming: Any = S3(parsed.netloc, parsed.path.lstrip("/"))
    elif parsed.scheme in ("", "file"):
        naming = LocalFileSystem(parsed.path)
    else:
        return f"{parsed.scheme}://{parsed.netloc}", parsed.path.lstrip("/")
    return naming.get_namespace(), naming.get_name()


def kafka_dataset(bootstrap: str, topic_pattern: str) -> tuple[str, str]:
    """Kafka's (namespace, name): the first bootstrap server and the topics' pattern."""
    host, _, port = bootstrap.split(",")[0].strip().rpartition(":")
    naming = Kafka(host, port, topic_pattern)
    return naming.get_namespace(), naming.get_name()


def node_event(
    state: RunState,
    *,
    namespace: str,
    node: str,
    run_id: str,
    parent: tuple[str, str],
    manifest: Mapping[str, Any],
    kafka: tuple[str, str] | None = None,
    column_sources: ColumnSources | None = None,
    assertions: Sequence[Assertion] = (),
    error: str | None = None,
    stack: str | None = None,
    at: datetime | None = None,
) -> RunEvent:
    """The event of `state` for one run of `node`, its datasets as the manifest declares
    them; `parent` is the walk's (job name, run id)."""
    entry = manifest["nodes"][node]
    tables = manifest["tables"]
    names = {t: dataset(tables[t]["location"]) for t in (*entry["reads"], *entry["writes"])
             if t in tables}  # fmt: skip
    if kafka:
        names[KAFKA] = kafka
    facets = partial(_schema, tables)
    inputs = [
        InputDataset(*names[t], facets=facets(t), inputFacets=_checked(assertions, t, entry))
        for t in entry["reads"]
        if t in names
    ]
    outputs = []
    for table in entry["writes"]:
        output_facets = facets(table)
        if column_sources and table == node:
            output_facets["columnLineage"] = _column_lineage(column_sources, names)
        outputs.append(OutputDataset(*names[table], facets=output_facets))
    run_facets = _run_facets(namespace, parent, error, stack)
    job_type = job_type_job.JobTypeJobFacet(
        processingType="STREAMING" if entry["kind"] == "stream" else "BATCH",
        integration="LAKEHOUSE",
        jobType=entry["kind"].upper(),
    )
    return RunEvent(
        eventType=state,
        eventTime=(at or datetime.now(UTC)).isoformat(),
        run=Run(runId=run_id, facets=run_facets),
        job=Job(namespace=namespace, name=node, facets={"jobType": job_type}),
        inputs=inputs,
        outputs=outputs,
        producer=PRODUCER,
    )


def _schema(tables: Mapping[str, Any], table: str) -> dict[str, Any]:
    """A table's schema facet, from the manifest's columns; none for what is not a table."""
    if table not in tables:
        return {}
    fields = [
        schema_dataset.SchemaDatasetFacetFields(c["name"], c["type"], c["description"] or None)
        for c in tables[table]["columns"]
    ]
    return {"schema": schema_dataset.SchemaDatasetFacet(fields=fields)}


def _run_facets(
    namespace: str, parent: tuple[str, str], error: str | None, stack: str | None
) -> dict[str, Any]:
    """The run's parent (the walk) and, on failure, its error."""
    facets: dict[str, Any] = {
        "parent": parent_run.ParentRunFacet(
            run=parent_run.Run(runId=parent[1]), job=parent_run.Job(namespace, parent[0])
        )
    }
    if error is not None:
        facets["errorMessage"] = error_message_run.ErrorMessageRunFacet(
            message=error, programmingLanguage="python", stackTrace=stack
        )
    return facets


def _checked(assertions: Sequence[Assertion], table: str, entry: Mapping[str, Any]) -> Any:
    """A check's assertions, on the table it checked (its first read; the others are
    inputs its suite reconciles with)."""
    if not assertions or entry["kind"] != "check" or table != entry["reads"][0]:
        return {}
    return {
        "dataQualityAssertions": data_quality_assertions_dataset.DataQualityAssertionsDatasetFacet(
            assertions=[
                data_quality_assertions_dataset.Assertion(
                    assertion=a.type,
                    success=a.success,
                    column=a.column,
                    severity=a.severity,
                    name=a.name,
                    actual=a.found or None,
                )
                for a in assertions
            ]
        )
    }


def _column_lineage(sources: ColumnSources, names: Mapping[str, tuple[str, str]]) -> Any:
    return column_lineage_dataset.ColumnLineageDatasetFacet(
        fields={
            column: column_lineage_dataset.Fields(
                inputFields=[
                    column_lineage_dataset.InputField(*names[table], field=field)
                    for table, field in inputs
                    if table in names
                ]
            )
            for column, inputs in sources.items()
        }
    )


def column_sources(frame: Any) -> dict[str, list[tuple[str, str]]]:
    """Per output column of `frame`, the (table, column) it is computed from: `frame` is a
    build over empty inputs, each aliased by its table's name (`ColumnLineage`)."""
    jvm = frame.sparkSession.sparkContext._jvm
    found: dict[str, list[tuple[str, str]]] = {}
    for line in jvm.lakehouse.lineage.ColumnLineage.of(frame._jdf).splitlines():
        column, table, field = line.split("\t")
        found.setdefault(column, []).append((table, field))
    return found


class LineageEvents:
    """Sends a walk's events: one client, the walk's run as every node's parent. Made by
    `of`, which gives None when `lineage.transport` is off."""

    def __init__(
        self,
        settings: LineageSettings,
        state_dir: Path,
        manifest: Mapping[str, Any],
        command: str,
        kafka: Callable[[], tuple[str, str]] | None = None,
        column_sources: Callable[[str], ColumnSources | None] | None = None,
    ) -> None:
        self.settings, self.manifest = settings, manifest
        self.parent = (command, str(generate_new_uuid()))
        self.client = OpenLineageClient(transport=_transport(settings, state_dir))
        self._kafka, self._column_sources = kafka, column_sources
        self._gone = False

    def start(self, node: str) -> str:
        """Send START for a run of `node`; its run id."""
        run_id = str(generate_new_uuid())
        self._send(RunState.START, node, run_id)
        return run_id

    def end(
        self,
        node: str,
        run_id: str,
        failed: BaseException | str | None = None,
        assertions: Sequence[Assertion] = (),
        wrote: bool = True,
    ) -> None:
        """Send COMPLETE, or FAIL with `failed` (the exception, or what went wrong). Column
        lineage goes with a run that `wrote` rows: one that found nothing to do (a model
        over unchanged inputs) changed no column, and skips the plan's analysis."""
        if failed is None:
            self._send(RunState.COMPLETE, node, run_id, assertions=assertions, wrote=wrote)
            return
        stack = None
        if isinstance(failed, BaseException):
            stack = "".join(traceback.format_exception(failed))
            failed = explain(failed)
        self._send(RunState.FAIL, node, run_id, assertions=assertions, error=failed, stack=stack)

    def _send(self, state: RunState, node: str, run_id: str, **facts: Any) -> None:
        with _SENDING:
            if not self._gone:
                self._emit(state, node, run_id, **facts)

    def _emit(
        self, state: RunState, node: str, run_id: str, wrote: bool = False, **facts: Any
    ) -> None:
        try:
            if wrote and self._column_sources:  # a plan that will not analyse is lineage's
                facts["column_sources"] = self._column_sources(node)
            reads_kafka = KAFKA in self.manifest["nodes"][node]["reads"]
            event = node_event(
                state,
                namespace=self.settings.namespace,
                node=node,
                run_id=run_id,
                parent=self.parent,
                manifest=self.manifest,
                kafka=self._kafka() if reads_kafka and self._kafka else None,
                **facts,
            )
            self.client.emit(event)
        except Exception as failure:  # a collector that does not answer is not the walk's
            # Each event would wait out the client's retries again: one try per walk.
            echo(f"warning: lineage events not sent, none more this walk ({explain(failure)})")
            self._gone = True

    @classmethod
    def of(cls, settings: LineageSettings, *args: Any, **kwargs: Any) -> LineageEvents | None:
        """A walk's lineage, or None when `lineage.transport` is off."""
        return None if settings.transport == "off" else cls(settings, *args, **kwargs)


def _transport(settings: LineageSettings, state_dir: Path) -> Any:
    """The client's transport that `lineage.transport` names (`file` or `http`)."""
    if settings.transport == "http":
        if not settings.url:
            raise LakehouseError("lineage.transport is http but lineage.url is empty")
        # Two tries, not the client's five with backoff: a walk waits for its events.
        retry = {**DEFAULT_RETRY_CONFIG, "total": 2, "backoff_factor": 0.2}
        return HttpTransport(HttpConfig(url=settings.url, timeout=5.0, retry=retry))
    path = state_dir / EVENTS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    return FileTransport(FileConfig(log_file_path=str(path), append=True))
