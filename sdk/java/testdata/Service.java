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
 * Spanwatch.run (NAME.run): every 10th fails, every 5th spends 25 ms in
 * chargeCard, the others 1 ms. Prints "mode=M" first and "done" at the end.
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
                chargeCard(i % 5 == 0 ? 25 : 1);
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
        for (int i = 0; i < n; i++) {
            handleCheckout(name + ".span", i % 5 == 0 ? 25 : 1, i % 10 == 0);
        }
        for (int i = 0; i < n; i++) {
            processPayment(name + ".run", i);
        }
        System.out.println("done");
    }
}
