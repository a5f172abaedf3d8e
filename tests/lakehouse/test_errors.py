"""`explain`: the one line a person reads, from the failure texts Spark really produces."""

from __future__ import annotations

from lakehouse.errors import explain

STREAM_FAILED = (
    "[STREAM_FAILED] Query [id = 6eb1, runId = a86a] terminated with exception: "
    "[FOREACH_BATCH_USER_FUNCTION_ERROR] An error occurred in the user provided function in "
    "foreach batch sink. Reason: An exception was raised by the Python Proxy. Return Message: "
    "Traceback (most recent call last):\n"
    '  File "/work/main/lakehouse/delta.py", line 94, in append\n'
)

S3_DOWN = STREAM_FAILED + (
    "py4j.protocol.Py4JJavaError: An error occurred while calling o809.save.\n"
    ": java.net.ConnectException: listObjects() on s3a://lake/lake/quality/results/_delta_log: "
    "software.amazon.awssdk.core.exception.SdkClientException: Unable to execute HTTP request: "
    "Connect to 127.0.0.1:41457 [/127.0.0.1] failed: Connection refused:    sof\n"
    "\tat software.amazon.awssdk.core.internal.http.pipeline.stages."
    "TimeoutExceptionHandlingStage.execute(TimeoutExceptionHandlingStage.java:79)\n"
    "Caused by: org.apache.http.conn.HttpHostConnectException: Connect to 127.0.0.1:41457 "
    "[/127.0.0.1] failed: Connection refused\n"
    "Caused by: java.net.ConnectException: Connection refused\n"
)


def test_an_object_store_that_does_not_answer_is_named_with_the_call_and_path() -> None:
    assert explain(S3_DOWN) == (
        "object storage at 127.0.0.1:41457 did not answer listObjects() on "
        "s3a://lake/lake/quality/results/_delta_log (Connection refused): is the S3 server up?"
    )


def test_a_store_gone_while_a_checkpoint_is_copied_is_named_as_well() -> None:
    # S3A names a copy by its keys, without the scheme, and the SDK's words come later.
    copy = STREAM_FAILED + (
        "java.net.ConnectException: copyFile(lake/_checkpoints/bronze/offsets/.2.tmp, "
        "lake/_checkpoints/bronze/offsets/2) on lake/_checkpoints/bronze/offsets/.2.tmp: s\n"
        "\tat org.apache.hadoop.fs.s3a.S3AUtils.translateException(S3AUtils.java:211)\n"
        "Caused by: software.amazon.awssdk.core.exception.SdkClientException: Unable to execute "
        "HTTP request: Connect to 127.0.0.1:38741 [/127.0.0.1] failed: Connection refused\n"
        "Caused by: java.net.ConnectException: Connection refused\n"
    )
    assert explain(copy) == (
        "object storage at 127.0.0.1:38741 did not answer copyFile() on "
        "lake/_checkpoints/bronze/offsets/.2.tmp (Connection refused): is the S3 server up?"
    )


def test_a_store_gone_under_a_streams_own_checkpoint_is_named_as_well() -> None:
    # A failure of the stream itself (not of a batch) quotes S3A's words without the class.
    offsets = (
        "[STREAM_FAILED] Query [id = c410, runId = 7f3c] terminated with exception: "
        "getFileStatus on s3a://lake/_checkpoints/bronze/sensor_records/offsets: software.amazon."
        "awssdk.core.exception.SdkClientException: Unable to execute HTTP request: Connect to "
        "127.0.0.1:38213 [/127.0.0.1] failed: Connection refused:    software.amazon.awssdk\n"
    )
    assert explain(offsets) == (
        "object storage at 127.0.0.1:38213 did not answer getFileStatus() on "
        "s3a://lake/_checkpoints/bronze/sensor_records/offsets: is the S3 server up?"
    )


def test_a_kafka_timeout_names_the_broker_and_an_sdk_stage_called_timeout_does_not() -> None:
    kafka = STREAM_FAILED + (
        "org.apache.kafka.common.errors.TimeoutException: Timed out waiting for a node "
        "assignment. Call: describeTopics\n"
    )
    assert explain(kafka).startswith("Kafka did not answer in time (is the broker up?): ")
    assert "Kafka" not in explain(S3_DOWN)


def test_the_innermost_spark_error_class_wins_over_the_wrappers() -> None:
    cast = STREAM_FAILED + (
        "pyspark.errors.exceptions.captured.NumberFormatException: [CAST_INVALID_INPUT] The "
        'value \'yesterday\' of the type "STRING" cannot be cast to "BIGINT". SQLSTATE: 22018\n'
    )
    assert explain(cast) == (
        "[CAST_INVALID_INPUT] The value 'yesterday' of the type \"STRING\" cannot be cast to "
        '"BIGINT".'
    )


def test_the_projects_own_error_raised_in_a_batch_is_reported_as_it_was_worded() -> None:
    own = STREAM_FAILED + "lakehouse.lease.LeaseRefused: lost the lease of bronze.sensor_records\n"
    assert explain(own) == "LeaseRefused: lost the lease of bronze.sensor_records"


def test_offsets_the_kafka_source_can_no_longer_find_are_reported_as_data_loss() -> None:
    lost = (
        "[STREAM_FAILED] Query [id = 5e7c] terminated with exception: Some data may have been "
        "lost because they are not available in Kafka any more; either the data was aged out "
        "by Kafka or the topic may have been deleted before all the data in the topic was "
        "processed.\n"
    )
    assert explain(lost).startswith("Kafka no longer has offsets this stream has not read yet")
