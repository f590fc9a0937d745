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
// one in ten takes 150 ms, the others return at once. Prints "mode=M" first and
// "slow SERIES K" for each series at the end, K the requests it measured
// itself (around the span) at 100 ms or more, then "done".
// SPANWATCH_NODE_SDK names the SDK's directory;
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
  if (i % 10 === 5) await sleep(150);
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
  const slow = { [`${name}.otel`]: 0, [`${name}.async`]: 0 };
  const took = (t0) => process.hrtime.bigint() - t0 >= 100000000n;
  for (let i = 0; i < n; i++) {
    const t0 = process.hrtime.bigint();
    handleCheckout(`${name}.otel`, i % 10 === 5 ? 150 : 0, i % 10 === 0);
    if (took(t0)) slow[`${name}.otel`]++;
  }
  for (let i = 0; i < n; i++) {
    const t0 = process.hrtime.bigint();
    try {
      await spanwatch.span(`${name}.async`, () => payAsync(i));
    } catch (e) {
      // a failed span
    }
    if (took(t0)) slow[`${name}.async`]++;
  }
  for (const [series, k] of Object.entries(slow)) console.log(`slow ${series} ${k}`);
  console.log('done');
}

main();
