'use strict';
// An OpenTelemetry JS SpanProcessor that hands every ended span to the
// spanwatch agent:
//
//   const { BasicTracerProvider } = require('@opentelemetry/sdk-trace-base');
//   const { SpanwatchSpanProcessor } = require('spanwatch/otel');
//   const provider = new BasicTracerProvider({ spanProcessors: [new SpanwatchSpanProcessor()] });
//
// Spans keep their names, durations, start times, trace and span ids; a
// span whose status is ERROR is a failed span. While no agent listens,
// onEnd is one typed-array read and a branch. It implements the
// SpanProcessor interface of @opentelemetry/sdk-trace-base 1.x and 2.x and
// needs nothing from it at run time.
//
// Start events are off by default: a Node.js thread runs many spans at
// once (each await hands it to another), so the agent cannot sample the
// thread for one span. { starts: true } sends them, for services whose
// spans run synchronously.

const spanwatch = require('./index.js');

const addon = spanwatch._addon;
const listening = spanwatch.listening;
const STATUS_ERROR = 2; // SpanStatusCode.ERROR

function hrTimeNs(t) {
  return BigInt(t[0]) * 1000000000n + BigInt(t[1]);
}

function ids(span) {
  const c = span.spanContext();
  return [Buffer.from(c.traceId, 'hex'), Buffer.from(c.spanId, 'hex')];
}

class SpanwatchSpanProcessor {
  constructor(options = {}) {
    this._starts = !!options.starts;
  }

  forceFlush() {
    return Promise.resolve();
  }

  shutdown() {
    return Promise.resolve();
  }
}

SpanwatchSpanProcessor.prototype.onStart = function spanwatchOnStart(span) {
  if (!this._starts || !listening()) return;
  const [traceId, spanId] = ids(span);
  addon.start(span.name, hrTimeNs(span.startTime), traceId, spanId);
};

SpanwatchSpanProcessor.prototype.onEnd = function spanwatchOnEnd(span) {
  if (!listening()) return;
  const [traceId, spanId] = ids(span);
  addon.record(span.name, hrTimeNs(span.duration), hrTimeNs(span.startTime),
    span.status && span.status.code === STATUS_ERROR, traceId, spanId);
};

module.exports = { SpanwatchSpanProcessor };
