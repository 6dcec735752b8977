"""Build, find and describe the JVM listener jar (``spark-governor-listener.jar``).

The jar is compiled from ``src/`` beside this file with ``javac --release 17`` against the jars of the installed
pyspark (spark-core, spark-sql, scala-library, Jackson, slf4j: nothing else is needed) and written beside this file,
so it ships inside the package (``pyproject.toml`` package-data). Its manifest records the Spark and Scala versions it
was compiled against (``Spark-Version``, ``Scala-Version``: the listener compares them with the running Spark and
disables itself on a mismatch) and a digest of the sources (a jar whose digest or Spark version differs from the
checkout's is rebuilt).

``python -m spark_governor.collectors.jvm.build`` builds it (``make install`` runs this with ``--if-possible``);
``spark-governor jar`` prints its path and builds it first if it is missing or stale and a JDK is available.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Optional

from spark_governor.collectors.launch_hold import PLUGIN_CLASS

JAR_NAME = "spark-governor-listener.jar"
LISTENER_CLASS = "io.sparkgovernor.SparkGovernorListener"
QUERY_LISTENER_CLASS = "io.sparkgovernor.SparkGovernorQueryListener"
LAUNCH_HOLD_CLASS = PLUGIN_CLASS  # the jar's Spark plugin (collectors.launch_hold)
TITLE = "spark-governor-listener"
HERE = Path(__file__).resolve().parent
SOURCES = HERE / "src"
PACKAGED = HERE / JAR_NAME
#: the Spark confs the listener reads (name -> meaning); the docs list the same
CONFS = {
    "spark.governor.endpoint": "control plane URL (default http://127.0.0.1:8787)",
    "spark.governor.job": "job name (default: spark.app.name with other characters replaced by '-')",
    "spark.governor.token": "reporter token (scope report), sent as 'Authorization: Bearer <token>' with every report",
    "spark.governor.tokenFile": "read the token from this file instead (e.g. a mounted Secret); else $SPARK_GOVERNOR_TOKEN",
    "spark.governor.interval": "reporting interval (default 1s)",
    "spark.governor.heartbeat": "report at least this often, to fetch directives (default 5s)",
    "spark.governor.taskDetail": "task rows sent besides the statistics folded in the driver: none, failed (default: "
                                 "failed tasks and a uniform sample of one task in 16) or all",
    "spark.governor.windowMs": "the statistics window the tasks are folded into, ms; must be the control plane's "
                               "(default: learnt from its first answer)",
    "spark.governor.stateInterval": "while a streaming query is known, report its state (running batch, backlog, "
                                    "liveness) at least this often (default 1s)",
    "spark.governor.postTimeout": "total deadline of one POST (default 5s)",
    "spark.governor.connectTimeout": "TCP connect timeout (default 1s)",
    "spark.governor.maxRetries": "retries of one failed report before it is dropped and counted (default 3)",
    "spark.governor.maxQueue": "bounded queue of events and records; the oldest are dropped and counted (default 20000)",
    "spark.governor.maxBatch": "records per report at most (default 5000)",
    "spark.governor.stopTimeout": "last flush at application end, at most (default 3s)",
    "spark.governor.applyExecutors": "apply executor directives (default true)",
    "spark.governor.enabled": "false turns the listeners into no-ops (default true)",
    "spark.governor.versionCheck": "false skips the Spark/Scala version check (default true)",
    "spark.governor.launchHoldMax": "with spark.plugins=io.sparkgovernor.LaunchHold: an added executor waits at most "
                                    "this long for the running stages' waiting tasks to launch (default 10s)",
    "spark.governor.launchHoldPoll": "with the launch hold: how often it asks the driver (default 200ms)",
    "spark.governor.launchHoldWaves": "with the launch hold: an added executor waits only while the waiting tasks "
                                      "are at most this many times the running ones (default 1)",
    "spark.governor.slotHoldFactor": "with the launch hold: a warmed executor keeps its slot while the old "
                                     "executors launch the waiting tasks within (this - 1) x a task's time "
                                     "(default 1.6)",
}


class JarUnavailable(RuntimeError):
    """No jar was found and none could be built; the message says how to get one."""


def spark_jars_dir() -> Optional[Path]:
    """The ``jars/`` folder of the installed pyspark (or of ``$SPARK_HOME``)."""
    try:
        import pyspark

        d = Path(pyspark.__file__).resolve().parent / "jars"
        if d.is_dir():
            return d
    except ImportError:
        pass
    home = os.environ.get("SPARK_HOME")
    if home and (Path(home) / "jars").is_dir():
        return Path(home) / "jars"
    return None


def spark_versions(jars: Path) -> tuple[str, str]:
    """(Spark version, Scala version) of a Spark ``jars/`` folder, from its jar file names."""
    spark = scala = None
    for p in jars.iterdir():
        m = re.fullmatch(r"spark-core_(\d+\.\d+)-(.+)\.jar", p.name)
        if m:
            spark = m.group(2)
        m = re.fullmatch(r"scala-library-(\d+\.\d+\.\d+)\.jar", p.name)
        if m:
            scala = m.group(1)
    if spark is None or scala is None:
        raise JarUnavailable(f"{jars}: no spark-core_*.jar / scala-library-*.jar (not a Spark jars folder)")
    return spark, scala


def java_sources() -> list[Path]:
    return sorted(SOURCES.rglob("*.java"))


def jar_schema_version() -> int:
    """The report schema version the Java reporter sends (``Agent.SCHEMA_VERSION``)."""
    m = re.search(r"static final int SCHEMA_VERSION = (\d+);", (SOURCES / "io" / "sparkgovernor" / "Agent.java").read_text())
    return int(m.group(1))


def source_digest() -> str:
    h = hashlib.sha256()
    for p in java_sources():
        h.update(p.relative_to(SOURCES).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:32]


def read_manifest(jar: Path) -> dict[str, str]:
    """Main attributes of a jar's manifest (continuation lines joined)."""
    with zipfile.ZipFile(jar) as z:
        text = z.read("META-INF/MANIFEST.MF").decode("utf-8")
    attrs, last = {}, None
    for line in text.replace("\r\n", "\n").split("\n"):
        if line.startswith(" ") and last:
            attrs[last] += line[1:]
        elif ":" in line:
            last, value = line.split(":", 1)
            attrs[last] = value.strip()
        elif not line:
            if attrs:
                break
    return attrs


def is_current(jar: Path) -> bool:
    """Whether ``jar`` was built from these sources against the installed Spark (if any is installed)."""
    if not jar.is_file():
        return False
    try:
        attrs = read_manifest(jar)
    except (OSError, KeyError, zipfile.BadZipFile):
        return False
    if SOURCES.is_dir() and java_sources() and attrs.get("Source-Digest") != source_digest():
        return False
    jars = spark_jars_dir()
    if jars is not None:
        try:
            if attrs.get("Spark-Version") != spark_versions(jars)[0]:
                return False
        except JarUnavailable:
            pass
    return True


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "spark-governor"


def javac() -> Optional[str]:
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", "javac"), os.X_OK):
        return os.path.join(home, "bin", "javac")
    return shutil.which("javac")


def how_to_get() -> str:
    return ("no spark-governor listener jar is built and no JDK 17 compiler (javac) was found: install one "
            "(Debian/Ubuntu: apt-get install openjdk-17-jdk-headless) and run `spark-governor jar --build` "
            "(or `python -m spark_governor.collectors.jvm.build`) with the pyspark the jobs use installed")


def _manifest(attrs: dict[str, str]) -> bytes:
    lines = []
    for k, v in attrs.items():
        line = f"{k}: {v}".encode()
        # manifest lines are at most 72 bytes; longer ones continue with a leading space
        chunks = [line[:72]] + [b" " + line[i:i + 71] for i in range(72, len(line), 71)]
        lines.extend(chunks)
    return b"\r\n".join(lines) + b"\r\n\r\n"


def build_jar(out: Optional[Path] = None, jars: Optional[Path] = None, extra_manifest: Optional[dict] = None,
              log=lambda m: print(m, file=sys.stderr)) -> Path:
    """Compile ``src/`` against ``jars`` (default: the installed pyspark's) into ``out`` (default: beside this
    module); returns the jar's path. Raises :class:`JarUnavailable` without javac or Spark jars."""
    from spark_governor import __version__

    compiler = javac()
    if compiler is None:
        raise JarUnavailable(how_to_get())
    jars = jars or spark_jars_dir()
    if jars is None:
        raise JarUnavailable("no Spark jars to compile against: install pyspark (pip install 'spark-governor[spark]') "
                             "or set SPARK_HOME")
    spark, scala = spark_versions(jars)
    sources = java_sources()
    if not sources:
        raise JarUnavailable(f"no Java sources under {SOURCES}")
    out = Path(out) if out else PACKAGED
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="sg-jar-") as tmp:
        classes = Path(tmp) / "classes"
        cmd = [compiler, "--release", "17", "-encoding", "UTF-8", "-nowarn", "-Xlint:none", "-cp", f"{jars}/*",
               "-d", str(classes), *map(str, sources)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise JarUnavailable(f"javac failed:\n{proc.stderr[-4000:]}")
        attrs = {"Manifest-Version": "1.0", "Implementation-Title": TITLE, "Implementation-Version": __version__,
                 "Spark-Version": spark, "Scala-Version": scala, "Java-Release": "17",
                 "Wire-Schema-Version": str(jar_schema_version()), "Source-Digest": source_digest(),
                 "Spark-Governor-Listener": LISTENER_CLASS,
                 "Spark-Governor-Query-Listener": QUERY_LISTENER_CLASS, **(extra_manifest or {})}
        partial = out.with_name(out.name + f".{os.getpid()}.tmp")
        stamp = (1980, 1, 1, 0, 0, 0)  # reproducible: the same sources give the same bytes
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr(zipfile.ZipInfo("META-INF/", stamp), b"")
            z.writestr(zipfile.ZipInfo("META-INF/MANIFEST.MF", stamp), _manifest(attrs), zipfile.ZIP_DEFLATED)
            for f in sorted(classes.rglob("*")):
                rel = f.relative_to(classes).as_posix()
                if f.is_dir():
                    z.writestr(zipfile.ZipInfo(rel + "/", stamp), b"")
                else:
                    z.writestr(zipfile.ZipInfo(rel, stamp), f.read_bytes(), zipfile.ZIP_DEFLATED)
        partial.replace(out)
    log(f"built {out} (Spark {spark}, Scala {scala}, {len(sources)} sources)")
    return out


def find_jar(build: bool = True, log=lambda m: print(m, file=sys.stderr)) -> Path:
    """The listener jar: the one shipped in the package, else one built into the user's cache; built first
    (when ``build`` and a JDK is available) if it is missing or stale. Raises :class:`JarUnavailable`."""
    cached = cache_dir() / JAR_NAME
    for jar in (PACKAGED, cached):
        if is_current(jar):
            return jar
    if build and javac() is not None and spark_jars_dir() is not None:
        out = PACKAGED if os.access(PACKAGED.parent, os.W_OK) else cached
        return build_jar(out, log=log)
    for jar in (PACKAGED, cached):  # stale but usable: the listener itself refuses a Spark version mismatch
        if jar.is_file():
            log(f"warning: {jar} was built from other sources or for another Spark; {how_to_get()}")
            return jar
    raise JarUnavailable(how_to_get())


def submit_confs(endpoint: str, job: Optional[str] = None, token: Optional[str] = None,
                 interval: Optional[str] = None, launch_hold: bool = True) -> dict[str, str]:
    """The Spark confs that attach the jar (name -> value), for ``spark-submit --conf`` or a session builder;
    with ``launch_hold`` also its Spark plugin (``spark.plugins``: an added executor takes no waiting task cold,
    ``collectors.launch_hold``)."""
    confs = {"spark.extraListeners": LISTENER_CLASS,
             "spark.sql.streaming.streamingQueryListeners": QUERY_LISTENER_CLASS,
             "spark.governor.endpoint": endpoint}
    if launch_hold:
        confs["spark.plugins"] = LAUNCH_HOLD_CLASS
    for key, value in (("job", job), ("token", token), ("interval", interval)):
        if value:
            confs[f"spark.governor.{key}"] = value
    return confs


def submit_args(endpoint: str, job: Optional[str] = None, token: Optional[str] = None,
                interval: Optional[str] = None, jar: Optional[Path] = None, launch_hold: bool = True) -> list[str]:
    """``spark-submit`` arguments that attach the jar: ``--jars`` plus a ``--conf`` per :func:`submit_confs`
    (``--jars`` puts the jar on the executors' class path before plugins load)."""
    args = ["--jars", str(jar or find_jar())]
    for key, value in submit_confs(endpoint, job, token, interval, launch_hold).items():
        args += ["--conf", f"{key}={value}"]
    return args


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m spark_governor.collectors.jvm.build", description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=None, help=f"where to write the jar (default: {PACKAGED})")
    ap.add_argument("--force", action="store_true", help="rebuild even if the jar is current")
    ap.add_argument("--if-possible", action="store_true",
                    help="without a JDK or pyspark, print why and exit 0 (for `make install`)")
    a = ap.parse_args(argv)
    out = a.out or PACKAGED
    if not a.force and is_current(out):
        print(f"{out} is up to date", file=sys.stderr)
        return 0
    try:
        build_jar(out)
    except JarUnavailable as exc:
        print(f"spark-governor jar: {exc}", file=sys.stderr)
        return 0 if a.if_possible else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
