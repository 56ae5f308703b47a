import java.io.File;
import java.io.FileOutputStream;
import java.io.OutputStream;
import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.StandardCopyOption;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.server.MiniYARNCluster;

/**
 * A real YARN on 127.0.0.1 in one JVM: Hadoop's MiniYARNCluster, one ResourceManager and one NodeManager, set up so
 * that Spark's containers run on a small shared machine (demo/yarn_cluster.py starts it; make yarn; the tests).
 *
 * Arguments: the folder to write the client configuration to (yarn-site.xml, core-site.xml), the NodeManager's memory
 * in MiB, its vcores, the ResourceManager's maximum application attempts. Once the cluster serves, the folder holds
 * the configuration with the addresses it bound (random free ports) and a file named "ready"; the JVM then runs until
 * it is stopped (SIGTERM), and stops the cluster on the way out.
 */
public class SqlRunnerMiniYarn {
    public static void main(String[] args) throws Exception {
        File confDir = new File(args[0]);
        int memoryMb = Integer.parseInt(args[1]);
        int vcores = Integer.parseInt(args[2]);
        int maxAttempts = Integer.parseInt(args[3]);

        YarnConfiguration conf = new YarnConfiguration();
        conf.set(YarnConfiguration.RM_HOSTNAME, "127.0.0.1");
        conf.set("yarn.nodemanager.hostname", "127.0.0.1");
        conf.setBoolean(YarnConfiguration.YARN_MINICLUSTER_FIXED_PORTS, false);
        // The NodeManager's resources: the mini cluster replaces the usual key with its own, capped otherwise.
        conf.setInt(YarnConfiguration.YARN_MINICLUSTER_NM_PMEM_MB, memoryMb);
        conf.setInt(YarnConfiguration.NM_PMEM_MB, memoryMb);
        conf.setInt(YarnConfiguration.NM_VCORES, vcores);
        conf.setInt(YarnConfiguration.RM_SCHEDULER_MINIMUM_ALLOCATION_MB, 128);
        conf.setInt(YarnConfiguration.RM_SCHEDULER_MAXIMUM_ALLOCATION_MB, memoryMb);
        conf.setInt(YarnConfiguration.RM_SCHEDULER_MAXIMUM_ALLOCATION_VCORES, vcores);
        // A JVM's virtual memory is far above its heap, and its resident size above the request while it starts:
        // the NodeManager's checks would kill Spark's containers for either.
        conf.setBoolean(YarnConfiguration.NM_PMEM_CHECK_ENABLED, false);
        conf.setBoolean(YarnConfiguration.NM_VMEM_CHECK_ENABLED, false);
        conf.setBoolean(YarnConfiguration.YARN_MINICLUSTER_CONTROL_RESOURCE_MONITORING, false);
        // A disk over 90 % full would mark the node unhealthy and leave every application waiting.
        conf.setFloat(YarnConfiguration.NM_MAX_PER_DISK_UTILIZATION_PERCENTAGE, 100.0f);
        conf.setLong(YarnConfiguration.NM_MIN_PER_DISK_FREE_SPACE_MB, 0);
        // The capacity scheduler's queues are configured in code: one queue, "default", with the whole cluster.
        conf.set("yarn.scheduler.capacity.root.queues", "default");
        conf.set("yarn.scheduler.capacity.root.default.capacity", "100");
        conf.set("yarn.scheduler.capacity.root.default.maximum-capacity", "100");
        conf.set("yarn.scheduler.capacity.maximum-am-resource-percent", "1.0");
        conf.setInt(YarnConfiguration.RM_AM_MAX_ATTEMPTS, maxAttempts);
        // Finished containers' folders go at once; their logs stay under the NodeManager's log folder.
        conf.setInt(YarnConfiguration.DEBUG_NM_DELETE_DELAY_SEC, 0);
        conf.setBoolean(YarnConfiguration.LOG_AGGREGATION_ENABLED, false);
        conf.setInt(YarnConfiguration.RM_NM_HEARTBEAT_INTERVAL_MS, 200);

        MiniYARNCluster cluster = new MiniYARNCluster("sql-runner", 1, 1, 1);
        cluster.init(conf);
        cluster.start();
        Runtime.getRuntime().addShutdownHook(new Thread(cluster::stop, "mini-yarn-stop"));
        waitForNode(cluster, 60_000);
        serveTheResourceManagersRestApi(cluster);

        Configuration served = cluster.getConfig();
        confDir.mkdirs();
        write(served, new File(confDir, "yarn-site.xml"));
        write(served, new File(confDir, "core-site.xml"));
        String nmLogs = served.get(YarnConfiguration.NM_LOG_DIRS, "");
        String ready = "{\"rm\": \"" + served.get(YarnConfiguration.RM_ADDRESS) + "\", \"web\": \""
            + served.get(YarnConfiguration.RM_WEBAPP_ADDRESS) + "\", \"nm-logs\": \"" + nmLogs
            + "\", \"memory-mb\": " + memoryMb + ", \"vcores\": " + vcores + "}\n";
        File temp = new File(confDir, "ready.tmp");
        Files.write(temp.toPath(), ready.getBytes(StandardCharsets.UTF_8));
        Files.move(temp.toPath(), new File(confDir, "ready").toPath(), StandardCopyOption.ATOMIC_MOVE);
        Thread.currentThread().join();
    }

    private static void waitForNode(MiniYARNCluster cluster, long timeoutMs) throws Exception {
        long deadline = System.currentTimeMillis() + timeoutMs;
        while (cluster.getResourceManager().getRMContext().getRMNodes().isEmpty()) {
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException("the NodeManager did not register with the ResourceManager");
            }
            Thread.sleep(100);
        }
    }

    /**
     * The ResourceManager's and the NodeManager's web servers share Guice's servlet filter, whose routes are held in a
     * static field that the web application started last (the NodeManager's) overwrites: the ResourceManager's port
     * would answer the NodeManager's REST API. The ResourceManager's routes are put back, so its REST API answers on
     * its own port (the NodeManager's web pages are then not served; its container logs are read on disk).
     */
    private static void serveTheResourceManagersRestApi(MiniYARNCluster cluster) throws Exception {
        Object webApp = call(cluster.getResourceManager(), "getWebapp");
        Object filter = field(webApp.getClass(), "guiceFilter").get(webApp);
        Object pipeline = field(filter.getClass(), "injectedPipeline").get(filter);
        field(filter.getClass(), "pipeline").set(null, pipeline);
    }

    private static Object call(Object target, String name) throws Exception {
        for (Class<?> c = target.getClass(); c != null; c = c.getSuperclass()) {
            try {
                Method method = c.getDeclaredMethod(name);
                method.setAccessible(true);
                return method.invoke(target);
            } catch (NoSuchMethodException next) {
                // declared by a superclass
            }
        }
        throw new NoSuchMethodException(name);
    }

    private static Field field(Class<?> type, String name) throws Exception {
        for (Class<?> c = type; c != null; c = c.getSuperclass()) {
            try {
                Field field = c.getDeclaredField(name);
                field.setAccessible(true);
                return field;
            } catch (NoSuchFieldException next) {
                // declared by a superclass
            }
        }
        throw new NoSuchFieldException(name);
    }

    private static void write(Configuration conf, File file) throws Exception {
        try (OutputStream out = new FileOutputStream(file)) {
            conf.writeXml(out);
        }
    }
}
