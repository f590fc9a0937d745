'use strict';
// A Node.js service instrumented with OpenTelemetry JS, watched by
// registering spanwatch's SpanwatchSpanProcessor, for sdk/node's tests:
//
//   node service.js N NAME
//
// waits (up to 30 s) for an agent, then serves N requests through an
// OpenTelemetry span named NAME.otel (handleCheckout: synchronous) and N
// through the SDK's own span() around an async function (NAME.async).
// Every 10th fails, every 5th spends 25 ms in chargeCard, the others 1 ms.
// Prints "mode=M" first and "done" at the end. SPANWATCH_NODE_SDK names
// the SDK's directory; @opentelemetry/* come from the working directory's
// node_modules.

const path = require('path');
const { BasicTracerProvider } = require('@opentelemetry/sdk-trace-base');
const sdk = process.env.SPANWATCH_NODE_SDK;
const spanwatch = require(sdk);
const { SpanwatchSpanProcessor } = require(path.join(sdk, 'otel.js'));

const provider = new BasicTracerProvider({ spanProcessors: [new SpanwatchSpanProcessor()] });
const tracer = provider.getTracer('service');

const cell = new Int32Array(new SharedArrayBuffer(4));

// chargeCard blocks the thread, as a synchronous call would.
function chargeCard(slow) {
  Atomics.wait(cell, 0, 0, slow ? 25 : 1);
}

function handleCheckout(name, i) {
  const span = tracer.startSpan(name);
  chargeCard(i % 5 === 0);
  if (i % 10 === 0) span.setStatus({ code: 2, message: 'card declined' });
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
  for (let i = 0; i < n; i++) handleCheckout(`${name}.otel`, i);
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
