'use strict';
// spanwatch: spans for the spanwatch agent, from Node.js.
//
//   const spanwatch = require('spanwatch');
//   const s = spanwatch.startSpan('checkout');   // a shared no-op while nobody listens
//   ...; s.end(err);                             // err truthy: a failed span
//   await spanwatch.span('charge', async () => { ... });   // a sync or async function
//   const charge = spanwatch.traced('charge', chargeCard);  // every call a span
//
// While no agent listens, startSpan returns a shared no-op span and a
// traced function calls the function it wraps: one read of a typed array
// over the addon's probe word and a branch. The SDK's own functions are
// named spanwatch* so that reports leave them out of stacks.

const path = require('path');

function load() {
  const tried = [];
  for (const p of [process.env.SPANWATCH_NODE_ADDON,
    path.join(__dirname, 'build', 'Release', 'spanwatch.node')]) {
    if (!p) continue;
    try {
      return require(p);
    } catch (e) {
      tried.push(`${p}: ${e.message}`);
    }
  }
  throw new Error(`spanwatch: the native addon is not built (npm install builds it with node-gyp; see README.md): ${tried.join('; ')}`);
}

const addon = load();
// The probe word (8 bytes of the addon's data): non-zero while an agent
// listens.
const word = new Uint32Array(addon.word);

function listening() {
  return (word[0] | word[1]) !== 0;
}

const ZERO = 0n;

function hrNs() {
  return process.hrtime.bigint();
}

// An id given as a hex string (OpenTelemetry's form) or bytes.
function idBytes(id, n) {
  if (id === undefined || id === null) return undefined;
  if (typeof id === 'string') {
    const b = Buffer.from(id, 'hex');
    return b.length === n ? b : undefined;
  }
  return id;
}

class Span {
  constructor(name, opts) {
    this.name = name;
    this.mono = hrNs();
    this.startNs = addon.realtimeNs();
    this.traceId = idBytes(opts && opts.traceId, 16);
    this.spanId = idBytes(opts && opts.spanId, 8);
    this.error = false;
    if (opts && opts.start) addon.start(name, this.startNs, this.traceId, this.spanId);
  }

  // setError marks the span failed.
  setError(error = true) {
    this.error = !!error;
  }
}
Span.prototype.end = function spanwatchEnd(err) {
  if (this.mono === ZERO) return;
  const d = hrNs() - this.mono;
  this.mono = ZERO;
  if (listening()) addon.record(this.name, d, this.startNs, !!err || this.error, this.traceId, this.spanId);
};

const NOOP = Object.freeze({ end() {}, setError() {} });

// startSpan starts a span: end(err) ends it. opts: traceId, spanId (hex
// strings or bytes), start (true: tell the agent the span began on this
// thread, so it samples the thread while the span runs past its budget:
// only for spans that run synchronously, not across awaits).
function startSpan(name, opts) {
  if (!listening()) return NOOP;
  if (typeof name !== 'string') throw new TypeError('spanwatch: a span name must be a string');
  return new Span(name, opts);
}

// span runs fn as a span and returns what it returns; a throw, or a
// rejection of the promise it returns, marks the span failed.
function span(name, fn, opts) {
  if (!listening()) return fn();
  return spanwatchRun(name, fn, opts, undefined, []);
}

function spanwatchRun(name, fn, opts, self, args) {
  const s = startSpan(name, opts);
  let r;
  try {
    r = fn.apply(self, args);
  } catch (e) {
    s.end(true);
    throw e;
  }
  if (r && typeof r.then === 'function') {
    return r.then((v) => { s.end(false); return v; }, (e) => { s.end(true); throw e; });
  }
  s.end(false);
  return r;
}

// traced returns fn wrapped so that each call is a span named name.
function traced(name, fn, opts) {
  if (typeof fn !== 'function') throw new TypeError('spanwatch: traced(name, fn): fn must be a function');
  const wrapped = function spanwatchTraced(...args) {
    if (!listening()) return fn.apply(this, args);
    return spanwatchRun(name, fn, opts, this, args);
  };
  Object.defineProperty(wrapped, 'name', { value: fn.name });
  return wrapped;
}

// record sends a span timed elsewhere: durationNs and startNs (ns since
// the epoch, 0 if unknown) as numbers or BigInts.
function record(name, durationNs, opts = {}) {
  if (!listening()) return;
  addon.record(name, BigInt(Math.round(Number(durationNs))), BigInt(opts.startNs || 0), !!opts.error,
    idBytes(opts.traceId, 16), idBytes(opts.spanId, 8));
}

module.exports = {
  listening,
  mode: addon.mode,
  startSpan,
  span,
  traced,
  record,
  // For the OpenTelemetry processor (otel.js).
  _addon: addon,
};
