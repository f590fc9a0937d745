package io.spanwatch;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.concurrent.Callable;

/**
 * Spans for the spanwatch agent, from Java.
 *
 * <pre>{@code
 * try (Span s = Spanwatch.span("checkout")) { ... }
 * Spanwatch.run("payment.charge", () -> charge(card));       // a throw fails the span
 * Order o = Spanwatch.call("order.load", () -> load(id));
 * Spanwatch.record("import", durationNanos, startEpochNanos, false, null, null);
 * }</pre>
 *
 * <p>While no agent listens, {@link #span} returns a shared no-op span and
 * {@link #run} and {@link #call} call what they wrap: one read of the probe
 * word (a direct buffer over the native library's data) and a branch. The
 * native part, libspanwatch_jni.so, is built from include/spanwatch.h; it is
 * loaded from the system property {@code spanwatch.library} (a path), else
 * from {@code java.library.path}. Spans reach the agent through Linux
 * user_events where the kernel has them, else through a marker function
 * the agent uprobes ({@link #mode}).
 *
 * <p>Stacks: the agent names compiled Java frames from the JVM's perf map,
 * which this class keeps current while an agent listens (see
 * {@link PerfMap}); run the JVM with {@code -XX:+PreserveFramePointer} so
 * that the agent's stack walk passes through compiled Java frames.
 */
public final class Spanwatch {
    private Spanwatch() {}

    private static final ByteBuffer WORD;
    private static final VarHandle LONG =
            MethodHandles.byteBufferViewVarHandle(long[].class, ByteOrder.nativeOrder());

    static {
        String path = System.getProperty("spanwatch.library");
        if (path != null) {
            System.load(path);
        } else {
            System.loadLibrary("spanwatch_jni");
        }
        WORD = nativeWord();
        PerfMap.start();
    }

    /**
     * Reports whether an agent listens now: one read of the probe word.
     * (An opaque read: the kernel writes the word, and a plain read could be
     * hoisted out of a loop.)
     */
    public static boolean listening() {
        return (long) LONG.getOpaque(WORD, 0) != 0;
    }

    /** How spans leave this process: "user_events", "marker" or "off". */
    public static String mode() {
        switch (nativeMode()) {
            case 1:
                return "marker";
            case 2:
                return "user_events";
            default:
                return "off";
        }
    }

    /** Starts a span named name. */
    public static Span span(String name) {
        if (!listening()) {
            return Span.NOOP;
        }
        return new Span(checkName(name), null, null, true);
    }

    /**
     * Starts a span with its trace and span ids (16 and 8 bytes, or null);
     * start false sends no start event (for spans that do not stay on this
     * thread until they end).
     */
    public static Span span(String name, byte[] traceId, byte[] spanId, boolean start) {
        if (!listening()) {
            return Span.NOOP;
        }
        return new Span(checkName(name), checkId(traceId, 16, "trace id"), checkId(spanId, 8, "span id"), start);
    }

    /** Runs work as a span; an exception it throws fails the span. */
    public static void run(String name, Runnable work) {
        if (!listening()) {
            work.run();
            return;
        }
        Span s = new Span(checkName(name), null, null, true);
        try {
            work.run();
        } catch (RuntimeException | Error e) {
            s.error = true;
            throw e;
        } finally {
            s.close();
        }
    }

    /** Calls work as a span and returns its result; an exception fails the span. */
    public static <T> T call(String name, Callable<T> work) throws Exception {
        if (!listening()) {
            return work.call();
        }
        Span s = new Span(checkName(name), null, null, true);
        try {
            return work.call();
        } catch (Exception | Error e) {
            s.error = true;
            throw e;
        } finally {
            s.close();
        }
    }

    /**
     * Records a span timed elsewhere: its duration, its start in nanoseconds
     * since the epoch (0 if unknown), whether it failed, and its ids (or
     * null).
     */
    public static void record(String name, long durationNanos, long startEpochNanos, boolean error,
            byte[] traceId, byte[] spanId) {
        if (!listening()) {
            return;
        }
        nativeRecord(checkName(name), durationNanos, startEpochNanos, error, checkId(traceId, 16, "trace id"),
                checkId(spanId, 8, "span id"));
    }

    static String checkName(String name) {
        if (name == null) {
            throw new NullPointerException("span name");
        }
        return name;
    }

    static byte[] checkId(byte[] id, int n, String what) {
        if (id != null && id.length != n) {
            throw new IllegalArgumentException(what + " must be " + n + " bytes, not " + id.length);
        }
        return id;
    }

    static long realtimeNs() {
        return nativeRealtimeNs();
    }

    private static native ByteBuffer nativeWord();

    private static native int nativeMode();

    private static native long nativeRealtimeNs();

    static native void nativeStart(String name, long startNs, byte[] traceId, byte[] spanId);

    static native void nativeRecord(String name, long durationNs, long startNs, boolean error, byte[] traceId,
            byte[] spanId);
}
