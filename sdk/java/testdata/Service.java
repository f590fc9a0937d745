import io.spanwatch.PerfMap;
import io.spanwatch.Span;
import io.spanwatch.Spanwatch;

/**
 * A Java service timed with spanwatch, for sdk/java's tests:
 *
 * <pre>java -XX:+PreserveFramePointer -cp spanwatch.jar:. Service N NAME</pre>
 *
 * waits (up to 30 s) for an agent, warms up (handleCheckout compiled by
 * the JIT, and the perf map written after), then serves N requests through
 * handleCheckout (a try-with-resources span named NAME.span) and N through
 * Spanwatch.run (NAME.run): every 10th fails, one in ten spends 150 ms in
 * chargeCard, the others return at once (Thread.sleep(0)). Prints "mode=M"
 * first, then "slow SERIES K" for each series, K the requests it measured
 * itself (around the span) at 100 ms or more, and "done".
 */
public class Service {
    static void chargeCard(int ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    static void handleCheckout(String name, int ms, boolean fail) {
        try (Span s = Spanwatch.span(name)) {
            chargeCard(ms);
            if (fail) {
                s.setError();
            }
        }
    }

    static void processPayment(String name, int i) {
        try {
            Spanwatch.run(name, () -> {
                chargeCard(i % 10 == 5 ? 150 : 0);
                if (i % 10 == 0) {
                    throw new IllegalStateException("card declined");
                }
            });
        } catch (IllegalStateException e) {
            // a failed span
        }
    }

    public static void main(String[] args) throws Exception {
        int n = Integer.parseInt(args[0]);
        String name = args[1];
        System.out.println("mode=" + Spanwatch.mode());
        long deadline = System.nanoTime() + 30_000_000_000L;
        while (!Spanwatch.listening() && System.nanoTime() < deadline) {
            Thread.sleep(10);
        }
        // The JIT compiles handleCheckout as it runs while listening (the
        // same paths as below, without the sleeps); the perf map the SDK
        // has the JVM write next names it.
        for (int i = 1; i <= 20000; i++) {
            handleCheckout(name + ".warm", 0, i % 10 == 0);
        }
        Thread.sleep(500);
        long dumps = PerfMap.dumps();
        long wait = System.nanoTime() + 5_000_000_000L;
        while (PerfMap.dumps() == dumps && System.nanoTime() < wait) {
            Thread.sleep(10);
        }
        int slowSpan = 0, slowRun = 0;
        for (int i = 0; i < n; i++) {
            long t0 = System.nanoTime();
            handleCheckout(name + ".span", i % 10 == 5 ? 150 : 0, i % 10 == 0);
            if (System.nanoTime() - t0 >= 100_000_000L) {
                slowSpan++;
            }
        }
        for (int i = 0; i < n; i++) {
            long t0 = System.nanoTime();
            processPayment(name + ".run", i);
            if (System.nanoTime() - t0 >= 100_000_000L) {
                slowRun++;
            }
        }
        System.out.println("slow " + name + ".span " + slowSpan);
        System.out.println("slow " + name + ".run " + slowRun);
        System.out.println("done");
    }
}
