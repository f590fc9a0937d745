package io.spanwatch;

import java.lang.management.ManagementFactory;
import java.lang.management.MemoryPoolMXBean;
import java.util.List;
import javax.management.MBeanServer;
import javax.management.ObjectName;

/**
 * Keeps the JVM's perf map (/tmp/perf-PID.map) current while an agent
 * listens, so that the agent names the compiled Java frames of slow spans'
 * stacks without anyone running {@code jcmd PID Compiler.perfmap} by hand.
 *
 * <p>A daemon thread ("spanwatch-perfmap") checks the probe word every
 * second; while an agent listens, it asks the JVM for its perf map (the
 * DiagnosticCommand MBean's compilerPerfmap operation, what {@code jcmd
 * Compiler.perfmap} runs: OpenJDK 17+, Linux) at once, and again every
 * interval when the JIT has compiled since (the code cache's use moved),
 * and at least once a minute. A dump writes every compiled method, about
 * 1 ms per thousand. The interval is the system property
 * {@code spanwatch.perfmap.interval} in milliseconds (default 5000); 0
 * turns this off. Nothing runs, and the management classes are not
 * loaded, while nobody listens.
 */
public final class PerfMap {
    private PerfMap() {}

    private static volatile long dumps;

    /** How many times the perf map was written. */
    public static long dumps() {
        return dumps;
    }

    static void start() {
        long interval = Long.getLong("spanwatch.perfmap.interval", 5000L);
        if (interval <= 0 || !System.getProperty("os.name", "").startsWith("Linux")) {
            return;
        }
        Thread t = new Thread(() -> loop(interval), "spanwatch-perfmap");
        t.setDaemon(true);
        t.start();
    }

    /** Writes the perf map now; false when the JVM cannot (before 17). */
    public static boolean dump() {
        try {
            MBeanServer server = ManagementFactory.getPlatformMBeanServer();
            server.invoke(new ObjectName("com.sun.management:type=DiagnosticCommand"), "compilerPerfmap",
                    new Object[] {new String[0]}, new String[] {String[].class.getName()});
            dumps++;
            return true;
        } catch (Exception e) {
            return false;
        }
    }

    /** codeCacheUsed sums the code cache's pools (CodeHeap '...', or CodeCache). */
    private static long codeCacheUsed(List<MemoryPoolMXBean> pools) {
        long used = 0;
        for (MemoryPoolMXBean p : pools) {
            if (p.getName().startsWith("CodeHeap") || p.getName().equals("CodeCache")) {
                used += p.getUsage().getUsed();
            }
        }
        return used;
    }

    private static void loop(long interval) {
        long last = -1; // the code cache's use at the last dump
        long due = 0, lastDump = 0;
        List<MemoryPoolMXBean> pools = null;
        try {
            while (true) {
                Thread.sleep(Math.min(1000, interval));
                if (!Spanwatch.listening()) {
                    last = -1;
                    continue;
                }
                long now = System.nanoTime();
                if (last >= 0 && now - due < 0) {
                    continue;
                }
                if (pools == null) {
                    pools = ManagementFactory.getMemoryPoolMXBeans();
                }
                long used = codeCacheUsed(pools);
                if (used != last || now - lastDump > 60_000_000_000L) {
                    if (!dump()) {
                        return;
                    }
                    last = used;
                    lastDump = now;
                }
                due = now + interval * 1_000_000L;
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
