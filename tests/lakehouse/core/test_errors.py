"""`explain`: the one line a person reads, judged by a failure's cause chain (classes, as
the JVM hands them over) and, where Spark gives only text, by the traces that text prints."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from lakehouse.core.errors import Thrown, cause_chain, describe, explain, transient

SDK = "software.amazon.awssdk.core.exception.SdkClientException"
REFUSED = "Unable to execute HTTP request: Connect to 127.0.0.1:41457 [/127.0.0.1] failed: Connection refused"  # noqa: E501
STREAM_FAILED = Thrown(
    "org.apache.spark.sql.streaming.StreamingQueryException",
    "[STREAM_FAILED] Query [id = 6eb1, runId = a86a] terminated with exception: ...",
    "STREAM_FAILED",
)


def s3a_outage(translated: str) -> list[Thrown]:
    """A stream failed by S3A's translation of a refused connection, as the JVM chains it."""
    return [
        STREAM_FAILED,
        Thrown("java.net.ConnectException", f"{translated}: {SDK}: {REFUSED}"),
        Thrown(SDK, REFUSED),
        Thrown("org.apache.http.conn.HttpHostConnectException", REFUSED.split(": ", 1)[1]),
        Thrown("java.net.ConnectException", "Connection refused"),
    ]


@pytest.mark.parametrize(
    ("translated", "said"),
    [
        ("Writing Object on lake/t/part-0.parquet", "Writing Object on lake/t/part-0.parquet"),
        ("listObjects() on s3a://lake/t/_delta_log", "listObjects() on s3a://lake/t/_delta_log"),
        ("copyFile(lake/c/.2.tmp, lake/c/2) on lake/c/.2.tmp", "copyFile() on lake/c/.2.tmp"),
        ("getFileStatus on s3a://lake/c/offsets", "getFileStatus on s3a://lake/c/offsets"),
    ],
)
def test_a_refused_connection_under_s3a_is_object_storage_whatever_the_call(
    translated: str, said: str
) -> None:
    assert describe(s3a_outage(translated)) == (
        f"object storage at 127.0.0.1:41457 did not answer {said} (Connection refused): "
        "is the S3 server up?"
    )


def test_a_server_gone_mid_request_is_object_storage_too() -> None:
    chain = [
        STREAM_FAILED,
        Thrown("org.apache.hadoop.fs.s3a.AWSClientIOException", f"PUT 0.json on lake/x: {SDK}"),
        Thrown(SDK, "Unable to execute HTTP request: 127.0.0.1:41457 failed to respond"),
        Thrown("org.apache.http.NoHttpResponseException", "127.0.0.1:41457 failed to respond"),
    ]
    assert describe(chain) == (
        "object storage did not answer PUT 0.json on lake/x (127.0.0.1:41457 failed to "
        "respond): is the S3 server up?"
    )


def test_the_lease_clients_refused_connection_is_object_storage_too() -> None:
    refused = EndpointConnectionError(endpoint_url="http://127.0.0.1:41457/lake/_leases/t")

    assert explain(refused) == (
        "object storage at 127.0.0.1:41457 did not answer (Could not connect to the endpoint "
        'URL: "http://127.0.0.1:41457/lake/_leases/t"): is the S3 server up?'
    )


def test_a_server_error_answered_to_the_lease_client_is_retried_and_a_refusal_is_not() -> None:
    def answered(status: int, code: str) -> ClientError:
        body = {"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}
        return ClientError(body, "GetObject")

    assert transient(answered(500, "InternalError"))
    assert transient(answered(503, "SlowDown"))
    assert not transient(answered(403, "InvalidAccessKeyId"))


def test_a_refused_connection_under_the_kafka_client_is_the_broker_not_storage() -> None:
    # The stream's checkpoint is on S3, and its wrapper says so: the caller is Kafka's.
    on_s3 = Thrown(STREAM_FAILED.name, "checkpoint s3a://lake/_checkpoints/b", "STREAM_FAILED")
    chain = [
        on_s3,
        Thrown("org.apache.kafka.common.KafkaException", "Failed to construct kafka consumer"),
        Thrown("java.net.ConnectException", "Connection refused"),
    ]
    assert describe(chain) == "the Kafka broker did not answer (is it up?): Connection refused"


def test_a_kafka_timeout_is_named_by_its_class_and_an_sdk_class_called_timeout_is_not() -> None:
    kafka = [
        STREAM_FAILED,
        Thrown("org.apache.kafka.common.errors.TimeoutException", "Timed out waiting for a node"),
    ]
    sdk = [STREAM_FAILED, Thrown(SDK + "Timeout", "TimeoutExceptionHandlingStage: slow")]

    assert describe(kafka) == (
        "Kafka did not answer in time (is the broker up?): Timed out waiting for a node"
    )
    assert "Kafka" not in explain_chain(sdk)


def explain_chain(chain: list[Thrown]) -> str:
    return describe(chain) or ""


def test_the_innermost_spark_condition_wins_over_the_wrappers() -> None:
    chain = [
        STREAM_FAILED,
        Thrown("org.apache.spark.SparkException", "[TASK_WRITE_FAILED] ...", "TASK_WRITE_FAILED"),
        Thrown(
            "org.apache.spark.SparkNumberFormatException",
            "[CAST_INVALID_INPUT] The value 'yesterday' of the type \"STRING\" cannot be cast "
            'to "BIGINT". SQLSTATE: 22018',
            "CAST_INVALID_INPUT",
        ),
    ]
    assert describe(chain) == (
        "[CAST_INVALID_INPUT] The value 'yesterday' of the type \"STRING\" cannot be cast to "
        '"BIGINT".'
    )


def test_the_projects_own_error_in_a_batchs_traceback_keeps_its_words() -> None:
    # foreachBatch's failure reaches the JVM as the text of its Python traceback.
    traceback = (
        "An exception was raised by the Python Proxy. Return Message: Traceback (most recent "
        'call last):\n  File "/work/main/lakehouse/storage/lease.py", line 9, in check\n'
        "lakehouse.storage.lease.LeaseRefused: lost the lease of bronze.sensor_records\n"
    )
    chain = [STREAM_FAILED, Thrown("py4j.Py4JException", traceback)]

    assert describe(chain + cause_chain(traceback)) == (
        "LeaseRefused: lost the lease of bronze.sensor_records"
    )


def test_a_failure_explained_inside_a_batch_is_reported_in_those_words_alone() -> None:
    traceback = (
        "py4j.protocol.Py4JJavaError: An error occurred while calling o809.save.\n"
        ": java.net.ConnectException: Connection refused\n"
        "\nThe above exception was the direct cause of the following exception:\n\n"
        "lakehouse.core.errors.Explained: object storage at 127.0.0.1:1 did not answer\n"
    )
    assert explain(traceback) == "object storage at 127.0.0.1:1 did not answer"


def test_a_printed_java_trace_is_read_into_the_same_chain() -> None:
    printed = (
        "py4j.protocol.Py4JJavaError: An error occurred while calling o809.save.\n"
        ": java.net.ConnectException: listObjects() on s3a://lake/r/_delta_log: "
        f"{SDK}: {REFUSED}:    sof\n"
        "\tat software.amazon.awssdk.core.internal.http.pipeline.stages."
        "TimeoutExceptionHandlingStage.execute(TimeoutExceptionHandlingStage.java:79)\n"
        f"Caused by: {SDK}: {REFUSED}\n"
        "\tSuppressed: software.amazon.awssdk.core.exception.SdkClientException: Request "
        "attempt 1 failure\n"
        "Caused by: java.net.ConnectException: Connection refused\n"
    )
    assert [t.name for t in cause_chain(printed)] == [
        "py4j.protocol.Py4JJavaError",
        "java.net.ConnectException",
        SDK,
        SDK,
        "java.net.ConnectException",
    ]
    assert explain(printed) == (
        "object storage at 127.0.0.1:41457 did not answer listObjects() on "
        "s3a://lake/r/_delta_log (Connection refused): is the S3 server up?"
    )


def test_offsets_the_kafka_source_can_no_longer_find_are_reported_as_data_loss() -> None:
    chain = [
        STREAM_FAILED,
        Thrown(
            "java.lang.IllegalStateException",
            "Some data may have been lost because they are not available in Kafka any more",
        ),
    ]
    assert explain_chain(chain).startswith("Kafka no longer has offsets this stream has not read")


@pytest.mark.parametrize(
    ("reason", "missing"),
    [
        (
            "Could not read records in offset [120, 240) for topic partition "
            "sensors.sensor-001-0 with consumer group spark-kafka-source-1.",
            "offsets 120..239 of sensors.sensor-001 partition 0,",
        ),
        (
            "Starting offset for sensors.a-b-12 was 5000 but consumer reset to 7500.",
            "offsets 5,000..7,499 of sensors.a-b partition 12,",
        ),
        (
            "Cannot fetch offset 42 (GroupId: spark-kafka-source-7, TopicPartition: "
            "sensors.sensor-002-1). Some data may have been lost",
            "offsets from 42 of sensors.sensor-002 partition 1,",
        ),
    ],
)
def test_a_loss_names_its_topic_partition_and_offsets(reason: str, missing: str) -> None:
    said = (
        "[KAFKA_DATA_LOSS.COULD_NOT_READ_OFFSET_RANGE] Some data may have been lost because "
        "they are not available in Kafka any more; either the data was aged out by Kafka or "
        f"the topic may have been deleted before all the data in the topic was processed. "
        f"Reason: {reason} SQLSTATE: 22000"
    )
    chain = [STREAM_FAILED, Thrown("org.apache.spark.SparkIllegalStateException", said)]
    line = explain_chain(chain)
    assert line.startswith(f"Kafka no longer holds {missing} which this stream has not read")
    assert "nothing was skipped" in line


@pytest.mark.parametrize(
    ("condition", "reason", "line"),
    [
        (
            "PARTITIONS_DELETED",
            "Partitions Set(sensors.sensor-002-0, sensors.sensor-002-1) have been deleted.",
            "Kafka topic sensors.sensor-002 is gone (deleted) with records this stream may "
            "not have read; nothing was skipped. If its sensor is decommissioned: `lakehouse "
            "bronze retire-topic sensors.sensor-002`",
        ),
        (
            "PARTITION_OFFSET_CHANGED",
            "Partition sensors.sensor-001-1 offset was changed from 1200 to 40. This could be "
            "either 1) a user error ... or 2) the kafka topic-partition is deleted and re-created.",
            "Kafka topic sensors.sensor-001 partition 1 now ends at offset 40, below offset "
            "1,200 this stream reads next: the topic was deleted and made again? Nothing of it "
            "was read; to ingest it as a new incarnation: `lakehouse bronze accept-recreated "
            "sensors.sensor-001`",
        ),
        (
            "ADDED_PARTITION_DOES_NOT_START_FROM_OFFSET_ZERO",
            "Added partition sensors.sensor-003-0 starts from 17 instead of 0.",
            "Kafka no longer holds offsets 0..16 of sensors.sensor-003 partition 0, which this "
            "stream has not read",
        ),
    ],
)
def test_a_topic_gone_or_made_again_is_named_with_the_command_that_goes_on(
    condition: str, reason: str, line: str
) -> None:
    said = f"[KAFKA_DATA_LOSS.{condition}] Some data may have been lost ... Reason: {reason}"
    chain = [STREAM_FAILED, Thrown("org.apache.spark.SparkIllegalStateException", said)]
    assert explain_chain(chain).startswith(line)


def test_an_incompatible_state_schema_says_how_to_rebuild() -> None:
    chain = [
        STREAM_FAILED,
        Thrown(
            "org.apache.spark.sql.execution.streaming.state.StateStoreValueSchemaNotCompatible",
            "[STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE] Provided value schema does not match",
            "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE",
        ),
    ]
    line = explain_chain(chain)
    assert line.startswith("the state in its checkpoint was written with another state schema")
    assert line.endswith("Provided value schema does not match")


def test_the_sql_guards_refusal_is_its_own_words() -> None:
    chain = [
        Thrown(
            "java.lang.UnsupportedOperationException",
            "read-only: DELETE (DeleteCommand) changes data or the catalog",
        )
    ]
    assert describe(chain) == "read-only: DELETE (DeleteCommand) changes data or the catalog"


def test_a_plain_python_error_is_named_by_its_class() -> None:
    assert explain(KeyError("sensor")) == "KeyError: 'sensor'"


class _JavaThrowable:
    """What `_walk` reads of a py4j proxy of a `java.lang.Throwable`, for chains the JVM
    rarely makes on demand: a suppressed exception, and a cause that loops back."""

    def __init__(self, name: str, message: str) -> None:
        self.name, self.message = name, message
        self.cause: _JavaThrowable | None = None
        self.suppressed: list[_JavaThrowable] = []

    def hashCode(self) -> int:
        return id(self)

    def getMessage(self) -> str:
        return self.message

    def getCondition(self) -> str | None:
        from py4j.protocol import Py4JError

        raise Py4JError("not a SparkThrowable")

    def getClass(self) -> _JavaThrowable:
        return self

    def getName(self) -> str:
        return self.name

    def getCause(self) -> _JavaThrowable | None:
        return self.cause

    def getSuppressed(self) -> list[_JavaThrowable]:
        return self.suppressed


def test_the_chain_takes_causes_and_suppressed_exceptions_once_each() -> None:
    outer = _JavaThrowable("org.apache.spark.SparkException", "[TASK_WRITE_FAILED] writing")
    refused = _JavaThrowable("java.net.ConnectException", "Connection refused")
    closing = _JavaThrowable(SDK, "Unable to close: Connect to 127.0.0.1:41457 failed")
    outer.cause, outer.suppressed, refused.cause = refused, [closing], outer  # a loop back

    class Failed(Exception):
        java_exception = outer

    assert [(t.name, t.condition) for t in cause_chain(Failed())] == [
        ("org.apache.spark.SparkException", "TASK_WRITE_FAILED"),
        ("java.net.ConnectException", None),
        (SDK, None),
    ]
    assert explain(Failed()).startswith("object storage at 127.0.0.1:41457 did not answer")


def test_credentials_kafka_refuses_are_named_and_not_retried() -> None:
    chain = [
        STREAM_FAILED,
        Thrown(
            "org.apache.kafka.common.errors.SaslAuthenticationException",
            "Authentication failed: Invalid username or password",
        ),
    ]
    assert explain_chain(chain) == (
        "Kafka refused the credentials of kafka.security (user and password, mechanism, "
        "protocol): Authentication failed: Invalid username or password"
    )
    assert not transient(
        "py4j.protocol.Py4JJavaError: An error occurred\n"
        ": org.apache.kafka.common.errors.SaslAuthenticationException: Authentication failed\n"
    )
