'use strict';
// BenchmarkAddonVsKoffi's program: a span handed to the agent through the
// N-API addon (what the SDK uses) and through koffi over libspanwatch.so
// (the other way measured), alternately, in one process.
//
//   node compare.js N LIBSPANWATCH ADDON
//
// waits for an agent to listen to both, then prints "addon NS" and "koffi
// NS" (nanoseconds per span, the better of two rounds each),
// "koffi-call NS" (a koffi call of a function that only loads the probe
// word), "empty NS" and "span NS" (= addon, for sdktest.Costs) and
// "listening 1".

const koffi = require('koffi');

const [n, libPath, addonPath] = [Number(process.argv[2]), process.argv[3], process.argv[4]];
const lib = koffi.load(libPath);
const record = lib.func('int spanwatch_lib_record(const char *name, size_t len, uint64_t dur, uint64_t start, int error, const uint8_t *trace, const uint8_t *span)');
const word = lib.func('const void *spanwatch_lib_word(void)');
const listeningCall = lib.func('int spanwatch_lib_listening(void)');
const addon = require(addonPath);
const aw = new Uint32Array(addon.word);
const kw = new Uint32Array(koffi.view(word(), 8));

function viaAddon() {
  if ((aw[0] | aw[1]) !== 0) addon.record('compare.addon', 1000n, 0n, false);
}
function viaKoffi() {
  if ((kw[0] | kw[1]) !== 0) {
    const b = Buffer.from('compare.koffi');
    record(b, b.length, 1000n, 0n, 0, null, null);
  }
}
function empty(x) {
  return x;
}

function timed(f) {
  for (let i = 0; i < 1000; i++) f(i);
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < n; i++) f(i);
  return Number(process.hrtime.bigint() - t0) / n;
}

async function main() {
  const deadline = Date.now() + 30000;
  while (!((aw[0] | aw[1]) && (kw[0] | kw[1])) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
  const a = Math.min(timed(viaAddon), timed(viaAddon));
  const k = Math.min(timed(viaKoffi), timed(viaKoffi));
  console.log(`addon ${a.toFixed(1)}\nkoffi ${k.toFixed(1)}`);
  console.log(`koffi-call ${timed(() => listeningCall()).toFixed(1)}`);
  console.log(`empty ${timed(empty).toFixed(2)}\nspan ${a.toFixed(1)}`);
  console.log(`listening ${(aw[0] | aw[1]) !== 0 && (kw[0] | kw[1]) !== 0 ? 1 : 0}`);
}

main();
