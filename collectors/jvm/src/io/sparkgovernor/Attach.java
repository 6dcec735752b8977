package io.sparkgovernor;

import org.apache.spark.SparkConf;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The listeners' one way in: checks {@code spark.governor.enabled} and the Spark/Scala version the
 * jar was built for (once per JVM, {@link VersionCheck}) before the reporter's classes are loaded,
 * and never lets an error escape into the SparkContext's construction.
 */
final class Attach {
    private static final Logger LOG = LoggerFactory.getLogger("spark_governor.jar");
    private static boolean checked;
    private static boolean refused;

    private Attach() {
    }

    static synchronized Agent agent(SparkConf conf) {
        try {
            if (conf == null) {
                conf = new SparkConf();
            }
            if (!conf.getBoolean("spark.governor.enabled", true)) {
                return null;
            }
            if (!checked) {
                checked = true;
                if (conf.getBoolean("spark.governor.versionCheck", true)) {
                    String problem;
                    try {
                        problem = VersionCheck.check();
                    } catch (Throwable t) {
                        problem = "spark-governor: cannot determine the running Spark/Scala version (" + t
                                + "); spark-governor reporting is DISABLED for this application.";
                    }
                    if (problem != null) {
                        refused = true;
                        LOG.error(problem);
                    }
                }
            }
            return refused ? null : Agent.get(conf);
        } catch (Throwable t) {
            LOG.error("spark-governor: the listener failed to start and is disabled for this application: {}", t.toString());
            refused = true;
            return null;
        }
    }
}
