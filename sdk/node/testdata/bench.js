'use strict';
// The per-span cost of the Node.js SDK, for sdk/node's benchmark:
//
//   node bench.js N
//
// times N iterations of an empty function call, of startSpan().end(), of
// a call of a traced function (and of the same function undecorated), and
// of an OpenTelemetry span through BasicTracerProvider with and without
// the SpanwatchSpanProcessor, and prints nanoseconds per iteration:
// "empty", "span", "traced", "plain", "otel", "otel-bare", then
// "listening 0|1". With SPANWATCH_BENCH_WAIT=1 it first waits (up to
// 30 s) for an agent.

const path = require('path');
const { BasicTracerProvider } = require('@opentelemetry/sdk-trace-base');
const sdk = process.env.SPANWATCH_NODE_SDK;
const spanwatch = require(sdk);
const { SpanwatchSpanProcessor } = require(path.join(sdk, 'otel.js'));

function empty(x) {
  return x;
}
const plain = (x) => x + 1;
const traced = spanwatch.traced('bench.js.traced', plain);
const withProcessor = new BasicTracerProvider({ spanProcessors: [new SpanwatchSpanProcessor()] }).getTracer('b');
const bare = new BasicTracerProvider().getTracer('b');

function timed(fn, n) {
  fn(Math.min(n, 10000)); // warm up: let the JIT compile it
  const t0 = process.hrtime.bigint();
  fn(n);
  return Number(process.hrtime.bigint() - t0) / n;
}

const loops = {
  empty(n) { let s = 0; for (let i = 0; i < n; i++) s += empty(i); return s; },
  span(n) { for (let i = 0; i < n; i++) spanwatch.startSpan('bench.js').end(); },
  traced(n) { let s = 0; for (let i = 0; i < n; i++) s += traced(i); return s; },
  plain(n) { let s = 0; for (let i = 0; i < n; i++) s += plain(i); return s; },
  otel(n) { for (let i = 0; i < n; i++) withProcessor.startSpan('bench.js.otel').end(); },
  'otel-bare'(n) { for (let i = 0; i < n; i++) bare.startSpan('bench.js.otel').end(); },
};

async function main() {
  const n = Number(process.argv[2]);
  if (process.env.SPANWATCH_BENCH_WAIT === '1') {
    const deadline = Date.now() + 30000;
    while (!spanwatch.listening() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
  }
  for (const [name, fn] of Object.entries(loops)) {
    console.log(`${name} ${timed(fn, name.startsWith('otel') ? Math.min(n, Math.max(20000, Math.floor(n / 10))) : n).toFixed(2)}`);
  }
  console.log(`listening ${spanwatch.listening() ? 1 : 0}`);
}

main();
