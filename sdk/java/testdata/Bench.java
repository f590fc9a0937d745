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
 * iteration: "empty", "span", "run", "plain", then "listening 0|1". With
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
        System.out.println("listening " + (Spanwatch.listening() ? 1 : 0));
    }
}
