"""The listener jar's sources agree with the Python side (no JVM needed): wire schema version and knobs, the confs
it reads, the manifest format, the spark-submit arguments, and the jar being a build product (gitignored)."""
import re
import typing
from pathlib import Path

from spark_governor.collectors.jvm import build
from spark_governor.policies import wire

ROOT = Path(__file__).resolve().parents[2]
JAVA = {p.name: p.read_text() for p in build.java_sources()}


def test_java_reporter_speaks_a_schema_version_the_control_plane_accepts():
    accepted = getattr(wire, "ACCEPTED_SCHEMA_VERSIONS", (wire.SCHEMA_VERSION,))
    assert build.jar_schema_version() in accepted
    assert typing.get_args(wire.Report.model_fields["schema_version"].annotation).count(build.jar_schema_version()) == 1


def test_java_knobs_are_the_wire_knobs():
    java = re.search(r'KNOBS = Arrays.asList\(([^)]*)\)', JAVA["Agent.java"]).group(1)
    assert sorted(re.findall(r'"(\w+)"', java)) == sorted(typing.get_args(wire.Knob))
    unsupported = set(re.findall(r'UNSUPPORTED.put\("(\w+)"', JAVA["Agent.java"]))
    assert unsupported == set(typing.get_args(wire.Knob)) - {"executors"}


def test_every_conf_the_listener_reads_is_documented():
    read = set()
    for text in JAVA.values():
        read |= set(re.findall(r'"(spark\.governor\.\w+)"', text))
    assert read == set(build.CONFS)


def test_manifest_lines_are_wrapped_and_read_back(tmp_path):
    import zipfile

    attrs = {"Manifest-Version": "1.0", "Spark-Version": "4.3.0", "Long-Value": "x" * 200}
    jar = tmp_path / "a.jar"
    with zipfile.ZipFile(jar, "w") as z:
        z.writestr("META-INF/MANIFEST.MF", build._manifest(attrs))
    raw = zipfile.ZipFile(jar).read("META-INF/MANIFEST.MF")
    assert all(len(line) <= 72 for line in raw.split(b"\r\n"))
    assert build.read_manifest(jar) == attrs


def test_submit_args_are_jars_and_confs_only(tmp_path):
    jar = tmp_path / build.JAR_NAME
    args = build.submit_args("http://cp:8787", "clicks", token="s", interval="2s", jar=jar)
    assert args[:2] == ["--jars", str(jar)]
    confs = dict(a.split("=", 1) for a in args[3::2])
    assert args[2::2] == ["--conf"] * len(confs)
    assert confs == {"spark.extraListeners": build.LISTENER_CLASS,
                     "spark.sql.streaming.streamingQueryListeners": build.QUERY_LISTENER_CLASS,
                     "spark.governor.endpoint": "http://cp:8787", "spark.governor.job": "clicks",
                     "spark.governor.token": "s", "spark.governor.interval": "2s",
                     "spark.plugins": build.LAUNCH_HOLD_CLASS}
    assert "spark.plugins" not in " ".join(build.submit_args("http://cp:8787", jar=jar, launch_hold=False))
    assert f"class {build.LAUNCH_HOLD_CLASS.rsplit('.', 1)[1]} implements SparkPlugin" in JAVA["LaunchHold.java"]
    assert f"class {build.LISTENER_CLASS.rsplit('.', 1)[1]} extends SparkListener" in JAVA["SparkGovernorListener.java"]


def test_the_jar_is_a_build_product_shipped_as_package_data():
    ignored = (ROOT / ".gitignore").read_text().splitlines()
    assert "collectors/jvm/*.jar" in ignored
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert '"spark_governor.collectors.jvm" = ["*.jar", "src/io/sparkgovernor/*.java"]' in pyproject
