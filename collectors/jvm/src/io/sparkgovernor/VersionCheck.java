package io.sparkgovernor;

import java.io.InputStream;
import java.net.URL;
import java.security.CodeSource;
import java.util.Enumeration;
import java.util.jar.Attributes;
import java.util.jar.JarInputStream;
import java.util.jar.Manifest;

/**
 * The jar records the Spark and Scala versions it was compiled against in its manifest
 * ({@code Spark-Version}, {@code Scala-Version}); at listener construction they are compared with
 * the running Spark ({@code org.apache.spark.SPARK_VERSION}) and Scala. Spark major.minor and the
 * Scala binary version (major.minor) must match: otherwise the listener logs one clear error and
 * disables itself instead of failing later in the listener bus. Only classes that exist in every
 * Spark 3.x/4.x are touched here.
 */
final class VersionCheck {
    static final String TITLE = "spark-governor-listener";

    private VersionCheck() {
    }

    /** The jar's own manifest (the one with Implementation-Title: spark-governor-listener), or null. */
    static Manifest ownManifest() {
        try {
            CodeSource cs = VersionCheck.class.getProtectionDomain().getCodeSource();
            if (cs != null && cs.getLocation() != null && cs.getLocation().getPath().endsWith(".jar")) {
                try (InputStream in = cs.getLocation().openStream(); JarInputStream jar = new JarInputStream(in)) {
                    Manifest m = jar.getManifest();
                    if (isOurs(m)) {
                        return m;
                    }
                }
            }
        } catch (Exception ignored) {
            // fall through to the class loader's manifests
        }
        try {
            ClassLoader cl = VersionCheck.class.getClassLoader();
            Enumeration<URL> all = cl.getResources("META-INF/MANIFEST.MF");
            while (all.hasMoreElements()) {
                try (InputStream in = all.nextElement().openStream()) {
                    Manifest m = new Manifest(in);
                    if (isOurs(m)) {
                        return m;
                    }
                } catch (Exception ignored) {
                    // another jar's unreadable manifest
                }
            }
        } catch (Exception ignored) {
            // no manifest at all
        }
        return null;
    }

    private static boolean isOurs(Manifest m) {
        return m != null && TITLE.equals(m.getMainAttributes().getValue(Attributes.Name.IMPLEMENTATION_TITLE));
    }

    static String attribute(String name, String fallback) {
        Manifest m = ownManifest();
        String v = m == null ? null : m.getMainAttributes().getValue(name);
        return v == null || v.isEmpty() ? fallback : v;
    }

    static String runtimeSpark() {
        return org.apache.spark.package$.MODULE$.SPARK_VERSION();
    }

    static String runtimeScala() {
        return scala.util.Properties.versionNumberString();
    }

    /** "4.3" of "4.3.0" (or of "4.3.0-SNAPSHOT"); the string itself if it has no minor part. */
    static String majorMinor(String version) {
        if (version == null) {
            return "";
        }
        String[] parts = version.split("[.-]");
        return parts.length >= 2 ? parts[0] + "." + parts[1] : version;
    }

    /**
     * Null when the jar may run here, else the one error message to log. A jar without our manifest
     * (classes on a plain class path) is not checked.
     */
    static String problem(String builtSpark, String builtScala, String spark, String scala) {
        if (builtSpark == null || builtScala == null) {
            return null;
        }
        if (majorMinor(builtSpark).equals(majorMinor(spark)) && majorMinor(builtScala).equals(majorMinor(scala))) {
            return null;
        }
        return "spark-governor: the listener jar was built for Spark " + builtSpark + " (Scala "
                + majorMinor(builtScala) + ") but this application runs Spark " + spark + " (Scala "
                + majorMinor(scala) + "); spark-governor reporting is DISABLED for this application. Use a jar "
                + "built against this Spark: `spark-governor jar --build` in an environment whose pyspark is "
                + majorMinor(spark) + ".x builds one (or set spark.governor.versionCheck=false to try anyway).";
    }

    static String check() {
        Manifest m = ownManifest();
        if (m == null) {
            return null;
        }
        Attributes a = m.getMainAttributes();
        return problem(a.getValue("Spark-Version"), a.getValue("Scala-Version"), runtimeSpark(), runtimeScala());
    }
}
