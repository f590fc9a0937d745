import io.spanwatch.PerfMap;
import io.spanwatch.Span;
import io.spanwatch.Spanwatch;

/**
 * The per-span cost of the Java SDK, for sdk/java's benchmark:
 *
 * <pre>java -cp spanwatch.jar:. Bench N</pre>
 *
 * times N iterations of an empty static call, of a try-with-resources span,
 * and of Spanwatch.run around a lambda (and of the lambda alone), after a
 * warm-up that lets the JIT compile each, and prints nanoseconds per
 * iteration: "empty", "span", "run", "plain", the time of one perf map
 * dump ("perfmap_dump", ns) and per entry written, then "listening 0|1". With
 * SPANWATCH_BENCH_WAIT=1 it first waits (up to 30 s) for an agent.
 */
public class Bench {
    static int sink;

    static void empty(int i) {
        sink += i;
    }

    static void span(int i) {
        try (Span s = Spanwatch.span("bench.java")) {
            sink += i;
        }
    }

    static void run(int i) {
        Spanwatch.run("bench.java.run", () -> sink++);
    }

    static void plain(int i) {
        Runnable r = () -> sink++;
        r.run();
    }

    interface Body {
        void call(int i);
    }

    static double timed(Body b, int n) {
        for (int i = 0; i < Math.min(n, 20000); i++) {
            b.call(i);
        }
        long t0 = System.nanoTime();
        for (int i = 0; i < n; i++) {
            b.call(i);
        }
        return (System.nanoTime() - t0) / (double) n;
    }

    public static void main(String[] args) throws Exception {
        int n = Integer.parseInt(args[0]);
        if ("1".equals(System.getenv("SPANWATCH_BENCH_WAIT"))) {
            long deadline = System.nanoTime() + 30_000_000_000L;
            while (!Spanwatch.listening() && System.nanoTime() < deadline) {
                Thread.sleep(10);
            }
        }
        System.out.printf("empty %.2f%n", timed(Bench::empty, n));
        System.out.printf("span %.2f%n", timed(Bench::span, n));
        System.out.printf("run %.2f%n", timed(Bench::run, n));
        System.out.printf("plain %.2f%n", timed(Bench::plain, n));
        // What the SDK's perf map upkeep costs the JVM: one dump of every
        // compiled method (what jcmd Compiler.perfmap does).
        PerfMap.dump();
        long t0 = System.nanoTime();
        for (int i = 0; i < 5; i++) {
            PerfMap.dump();
        }
        double dump = (System.nanoTime() - t0) / 5.0;
        long entries = java.nio.file.Files.lines(java.nio.file.Path.of("/tmp/perf-" + ProcessHandle.current().pid() + ".map")).count();
        System.out.printf("perfmap_dump %.0f%nperfmap_dump_per_entry %.1f%n", dump, dump / entries);
        System.out.println("listening " + (Spanwatch.listening() ? 1 : 0));
    }
}
