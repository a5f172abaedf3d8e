from __future__ import annotations

import re
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from lakehouse import PROJECT_ROOT
from lakehouse.core.errors import SettingsError
from lakehouse.core.settings import KafkaSecurity, load_settings
from lakehouse.runtime.spark import SECRET, secret
from lakehouse.services.kafka import client_options, java_options


@pytest.fixture
def conf(tmp_path: Path) -> Path:
    """A copy of the project's conf/ that a test may edit."""
    folder = tmp_path / "conf"
    shutil.copytree(PROJECT_ROOT / "conf", folder)
    return folder


def env(conf: Path, **variables: str) -> dict[str, str]:
    return {"LAKEHOUSE_CONF_DIR": str(conf), **variables}


def test_local_target_is_the_embedded_default() -> None:
    settings = load_settings(environ={})
    assert settings.target == "local"
    assert settings.kafka.bootstrap_servers == "embedded"
    assert settings.storage.root == (PROJECT_ROOT / ".state" / "lake").as_uri()
    assert settings.storage.table_uri("bronze.sensor_records").endswith(
        "/.state/lake/bronze/sensor_records"
    )


def test_environment_variable_overrides_one_key_with_its_type() -> None:
    settings = load_settings(environ={"LAKEHOUSE__BRONZE__MAX_OFFSETS_PER_TRIGGER": "1234"})
    assert settings.bronze.max_offsets_per_trigger == 1234
    assert settings.bronze.trigger_interval == "5 seconds"


def test_unknown_key_names_the_key_and_the_file(conf: Path) -> None:
    (conf / "local.yaml").write_text("bronze:\n  max_offset_per_trigger: 10\n")
    with pytest.raises(SettingsError, match=r"'bronze.max_offset_per_trigger' in .*local\.yaml"):
        load_settings("local", environ=env(conf))


def test_wrong_type_names_the_key_the_file_and_the_value(conf: Path) -> None:
    (conf / "local.yaml").write_text("kafka:\n  partitions: three\n")
    with pytest.raises(SettingsError, match=r"'kafka.partitions' in .*local\.yaml: expected int"):
        load_settings("local", environ=env(conf))


def test_boolean_is_not_accepted_as_a_number(conf: Path) -> None:
    (conf / "local.yaml").write_text("spark:\n  shuffle_partitions: true\n")
    with pytest.raises(SettingsError, match=r"spark\.shuffle_partitions"):
        load_settings("local", environ=env(conf))


def test_wrong_type_from_environment_names_the_variable() -> None:
    with pytest.raises(SettingsError, match=r"\$LAKEHOUSE__KAFKA__PARTITIONS: expected int"):
        load_settings(environ={"LAKEHOUSE__KAFKA__PARTITIONS": "many"})


def test_unknown_target_lists_the_known_ones() -> None:
    with pytest.raises(SettingsError, match=r"unknown target 'prod'.*'cluster', 'local'"):
        load_settings("prod", environ={})


def test_invalid_yaml_names_file_and_line(conf: Path) -> None:
    (conf / "local.yaml").write_text("spark:\n  master: [unclosed\n")
    with pytest.raises(SettingsError, match=r"local\.yaml:\d+: not valid YAML"):
        load_settings("local", environ=env(conf))


def test_cluster_target_takes_secrets_from_environment() -> None:
    variables = {
        "SPARK_MASTER_URL": "spark://master:7077",
        "S3_ENDPOINT": "http://s3.internal:8333",
        "AWS_ACCESS_KEY_ID": "key",
        "AWS_SECRET_ACCESS_KEY": "secret",
        "LAKE_BUCKET": "lake",
        "KAFKA_BOOTSTRAP_SERVERS": "kafka-1:9093,kafka-2:9093",
        "KAFKA_USERNAME": "ingest",
        "KAFKA_PASSWORD": "p4ss",
        "KAFKA_CA_FILE": "/etc/kafka/ca.pem",
        "HIVE_METASTORE_URI": "thrift://hive-metastore:9083",
    }
    settings = load_settings("cluster", environ=variables)
    assert settings.spark.master == "spark://master:7077"
    assert settings.storage.root == "s3a://lake/lakehouse"
    assert settings.storage.checkpoint_uri("bronze.sensor_records") == (
        "s3a://lake/lakehouse/_checkpoints/bronze/sensor_records"
    )
    assert java_options(settings.kafka) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="ingest" password="p4ss";',
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": "/etc/kafka/ca.pem",
    }
    assert settings.catalog.metastore == "thrift://hive-metastore:9083"


def test_unset_secret_names_the_variable_and_the_key() -> None:
    with pytest.raises(
        SettingsError, match=r"'spark.master' in .*cluster\.yaml needs .*SPARK_MASTER_URL"
    ):
        load_settings("cluster", environ={})


def test_topic_pattern_is_anchored() -> None:
    kafka = load_settings(environ={}).kafka
    pattern = re.compile(kafka.topic_pattern)
    assert pattern.search("sensors.sensor-001")
    assert not pattern.search("other.sensors.sensor-001")
    assert not pattern.search("sensorsXsensor-001")


def test_a_thrift_metastore_reaches_spark_as_the_hive_metastore_uri() -> None:
    from lakehouse.runtime.spark import catalog_conf

    settings = load_settings(environ={"LAKEHOUSE__CATALOG__METASTORE": "thrift://hms:9083"})
    conf = catalog_conf(settings, settings.catalog.metastore)
    assert conf["spark.hadoop.hive.metastore.uris"] == "thrift://hms:9083"
    assert conf["spark.sql.catalogImplementation"] == "hive"


def test_an_unknown_metastore_kind_is_an_error_naming_the_choices() -> None:
    from lakehouse.core.errors import LakehouseError
    from lakehouse.runtime.spark import catalog_conf

    settings = load_settings(environ={"LAKEHOUSE__CATALOG__METASTORE": "mysql://x"})
    with pytest.raises(LakehouseError, match="none of embedded, none, thrift://"):
        catalog_conf(settings, settings.catalog.metastore)


@pytest.mark.parametrize(
    ("variable", "value", "line"),
    [
        ("STORAGE__LEASE_SECONDS", "0", r"'storage.lease_seconds' in \$\S+: 0.0 must be greater"),
        ("SPARK__SHUFFLE_PARTITIONS", "0", r"'spark.shuffle_partitions' .*: 0 must be greater"),
        ("SUPERVISION__WINDOW_SECONDS", "-60", r"'supervision.window_seconds' .*: -60.0 must"),
        ("SILVER__BOUNDS__ROWS_PER_SESSION", "-1", r"'silver.bounds.rows_per_session' .*: -1"),
        ("BRONZE__TRIGGER_INTERVAL", "5s", r"'bronze.trigger_interval' .*'5s' must be an interval"),
        ("SILVER__TRIGGER_INTERVAL", "1 month", r"'silver.trigger_interval' .*'1 month' must be"),
        ("METRICS__PORT", "70000", r"'metrics.port' .*: 70000 must be a port"),
        (
            "SILVER__INTEGRITY",
            '[{topics: "sensors.(a", mode: strict, policy: fail, window: 1}]',
            r"'silver.integrity\[0\].topics' .*'sensors.\(a' must be a regular expression",
        ),
        (
            "SILVER__INTEGRITY",
            '[{topics: ".*", mode: window, policy: fail, window: -5}]',
            r"'silver.integrity\[0\].window' .*: -5 must be greater than 0",
        ),
    ],
)
def test_a_value_that_can_only_be_wrong_is_refused_naming_its_key(
    variable: str, value: str, line: str
) -> None:
    with pytest.raises(SettingsError, match=line):
        load_settings(environ={f"LAKEHOUSE__{variable}": value})


def test_an_environment_value_yaml_cannot_read_names_the_variable_not_the_value() -> None:
    with pytest.raises(SettingsError) as refused:
        load_settings(environ={"LAKEHOUSE__S3__SECRET_KEY": "'s3cr3t"})
    assert str(refused.value).startswith("$LAKEHOUSE__S3__SECRET_KEY: not a YAML value")
    assert "s3cr3t" not in str(refused.value)


def test_intervals_spark_reads_and_a_zero_that_means_something_are_accepted() -> None:
    settings = load_settings(environ={"LAKEHOUSE__SILVER__TRIGGER_INTERVAL": "1.5 seconds"})
    assert settings.bronze.trigger_interval == "5 seconds"
    assert settings.silver.trigger_interval == "1.5 seconds"
    assert load_settings(environ={"LAKEHOUSE__COMPACT__MIN_RETENTION_HOURS": "0"})


def test_bad_settings_exit_2_with_one_line_before_anything_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from lakehouse.cli import main

    root = tmp_path / "lake"
    monkeypatch.setenv("LAKEHOUSE__STORAGE__ROOT", str(root))
    monkeypatch.setenv("LAKEHOUSE__STORAGE__LOCAL_STATE", str(tmp_path / "state"))
    monkeypatch.setenv("LAKEHOUSE__STORAGE__LEASE_SECONDS", "-1")
    assert main(["run", "bronze"]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "lakehouse: settings error: 'storage.lease_seconds' in $LAKEHOUSE__STORAGE__LEASE_SECONDS:"
        " -1.0 must be greater than 0"
    ]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("key", "secret"),
    [
        ("spark.hadoop.fs.s3a.secret.key", True),
        ("spark.hadoop.fs.s3a.access.key", True),
        ("spark.hadoop.fs.s3a.session.token", True),
        ("spark.hadoop.javax.jdo.option.ConnectionPassword", True),
        ("spark.hadoop.fs.s3a.aws.credentials.provider", False),
        ("spark.hadoop.fs.s3a.endpoint", False),
        ("spark.app.name", False),
    ],
)
def test_spark_properties_that_hold_a_secret_stay_off_the_jvms_command_line(
    key: str, secret: bool
) -> None:
    assert bool(SECRET.search(key)) is secret


def test_a_property_whose_value_holds_a_password_stays_off_the_command_line_too() -> None:
    url = "jdbc:postgresql://db/metastore?user=hive&password=x"
    assert secret("spark.hadoop.javax.jdo.option.ConnectionURL", url)
    assert not secret("spark.jars", "/jars/spark-token-provider-kafka-0-10_2.13-4.1.3.jar")


def test_a_kafka_password_with_quotes_reaches_both_clients_whole() -> None:
    security = KafkaSecurity("SASL_SSL", "PLAIN", "ingest", "p\"4\\s's", "")
    kafka = replace(load_settings("local", environ={}).kafka, security=security)
    # JAAS reads a quoted value with `\` escapes; librdkafka takes the password as it is.
    jaas = java_options(kafka)["sasl.jaas.config"]
    assert jaas.endswith(' password="p\\"4\\\\s\'s";')
    assert client_options(kafka)["sasl.password"] == "p\"4\\s's"
