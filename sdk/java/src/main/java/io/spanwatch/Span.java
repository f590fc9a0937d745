package io.spanwatch;

/**
 * A span being timed: closing it hands it to the spanwatch agent. Get one
 * from {@link Spanwatch#span(String)}, in a try-with-resources block:
 *
 * <pre>{@code
 * try (Span s = Spanwatch.span("checkout")) {
 *     ...
 *     if (failed) s.setError();
 * }
 * }</pre>
 *
 * While no agent listens, {@code span} returns a shared span whose methods
 * do nothing. A span must be closed on the thread that opened it.
 */
public class Span implements AutoCloseable {
    static final Span NOOP = new Span();

    final String name;
    final long startMono; // System.nanoTime(); 0 for NOOP
    final long startNs; // CLOCK_REALTIME ns, the start the agent pairs the end with
    byte[] traceId, spanId;
    boolean error;

    private Span() {
        name = null;
        startMono = 0;
        startNs = 0;
    }

    Span(String name, byte[] traceId, byte[] spanId, boolean start) {
        this.name = name;
        this.traceId = traceId;
        this.spanId = spanId;
        this.startNs = Spanwatch.realtimeNs();
        this.startMono = System.nanoTime() | 1; // never 0
        if (start) {
            Spanwatch.nativeStart(name, startNs, traceId, spanId);
        }
    }

    /** Marks the span failed. */
    public void setError() {
        if (this != NOOP) {
            error = true;
        }
    }

    /**
     * Sets the span's trace and span ids (16 and 8 bytes; null leaves one
     * unset).
     */
    public void setIds(byte[] traceId, byte[] spanId) {
        if (this == NOOP) {
            return;
        }
        if (traceId != null) {
            this.traceId = Spanwatch.checkId(traceId, 16, "trace id");
        }
        if (spanId != null) {
            this.spanId = Spanwatch.checkId(spanId, 8, "span id");
        }
    }

    /** Ends the span and hands it to the agent. */
    @Override
    public void close() {
        if (startMono == 0 || !Spanwatch.listening()) {
            return;
        }
        Spanwatch.nativeRecord(name, System.nanoTime() - startMono, startNs, error, traceId, spanId);
    }
}
