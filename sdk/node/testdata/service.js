'use strict';
// A Node.js service instrumented with OpenTelemetry JS, watched by
// registering spanwatch's SpanwatchSpanProcessor, for sdk/node's tests:
//
//   node service.js N NAME
//
// waits (up to 30 s) for an agent, warms up, then serves N requests
// through an OpenTelemetry span named NAME.otel (handleCheckout, which
// blocks the thread as a synchronous call would) and N through the SDK's
// own span() around an async function (NAME.async). Every 10th fails,
// every 5th takes 25 ms, the others 1 ms. Prints "mode=M" first and
// "done" at the end. SPANWATCH_NODE_SDK names the SDK's directory;
// @opentelemetry/* come from NODE_PATH.

const path = require('path');
const { BasicTracerProvider } = require('@opentelemetry/sdk-trace-base');
const sdk = process.env.SPANWATCH_NODE_SDK;
const spanwatch = require(sdk);
const { SpanwatchSpanProcessor } = require(path.join(sdk, 'otel.js'));

const provider = new BasicTracerProvider({ spanProcessors: [new SpanwatchSpanProcessor()] });
const tracer = provider.getTracer('service');

const cell = new Int32Array(new SharedArrayBuffer(4));

function handleCheckout(name, ms, fail) {
  const span = tracer.startSpan(name);
  Atomics.wait(cell, 0, 0, ms); // chargeCard: blocks the thread, as a synchronous call would
  if (fail) span.setStatus({ code: 2, message: 'card declined' });
  span.end();
}

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

async function payAsync(i) {
  await sleep(i % 5 === 0 ? 25 : 1);
  if (i % 10 === 0) throw new Error('card declined');
}

async function main() {
  const n = Number(process.argv[2]);
  const name = process.argv[3];
  console.log(`mode=${spanwatch.mode()}`);
  const deadline = Date.now() + 30000;
  while (!spanwatch.listening() && Date.now() < deadline) await sleep(10);
  // V8 compiles what runs often, tier after tier, each new code written
  // to the perf map; the agent reads the map again after a miss at most
  // once a second. Warm up (the same paths, without the waits) so that
  // the code stays put, then let a second pass.
  for (let i = 1; i <= 20000; i++) handleCheckout(`${name}.warm`, 0, i % 10 === 0);
  await sleep(1100);
  for (let i = 0; i < n; i++) handleCheckout(`${name}.otel`, i % 5 === 0 ? 25 : 1, i % 10 === 0);
  for (let i = 0; i < n; i++) {
    try {
      await spanwatch.span(`${name}.async`, () => payAsync(i));
    } catch (e) {
      // a failed span
    }
  }
  console.log('done');
}

main();
