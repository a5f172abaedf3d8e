from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from lakehouse import PROJECT_ROOT
from lakehouse.errors import SettingsError
from lakehouse.settings import load_settings


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
        "HIVE_METASTORE_URI": "thrift://hive-metastore:9083",
    }
    settings = load_settings("cluster", environ=variables)
    assert settings.spark.master == "spark://master:7077"
    assert settings.storage.root == "s3a://lake/lakehouse"
    assert settings.storage.checkpoint_uri("bronze.sensor_records") == (
        "s3a://lake/lakehouse/_checkpoints/bronze/sensor_records"
    )
    assert 'password="p4ss"' in settings.kafka.options["sasl.jaas.config"]
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
    from lakehouse.spark import catalog_conf

    settings = load_settings(environ={"LAKEHOUSE__CATALOG__METASTORE": "thrift://hms:9083"})
    conf = catalog_conf(settings)
    assert conf["spark.hadoop.hive.metastore.uris"] == "thrift://hms:9083"
    assert conf["spark.sql.catalogImplementation"] == "hive"


def test_an_unknown_metastore_kind_is_an_error_naming_the_choices() -> None:
    from lakehouse.errors import LakehouseError
    from lakehouse.spark import catalog_conf

    settings = load_settings(environ={"LAKEHOUSE__CATALOG__METASTORE": "mysql://x"})
    with pytest.raises(LakehouseError, match="none of embedded, none, thrift://"):
        catalog_conf(settings)
