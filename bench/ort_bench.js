#!/usr/bin/env node
// Times ONNX Runtime (CPU execution provider, via onnxruntime-node) on one model, as the reference point for
// `tessera bench`.
//
// Usage: node bench/ort_bench.js MODEL [--threads N] [--runs R] [--warmup W] [--shape NAME=D0,D1,..]... [--no-spin]
//
// Inputs are random tensors of the model's declared shapes (symbolic or unknown dims become 1 unless --shape gives
// them); float inputs are uniform in [-1, 1) from a fixed seed, integer inputs are filled with 0/1 so that token ids,
// segment ids and attention masks are all valid, bool inputs with false/true. The session uses intra-op threads N,
// inter-op threads 1, graph optimisation level 'all' and sequential execution. After W warm-up runs, R runs are timed
// one by one (wall clock around each awaited session.run) and one JSON line is printed:
//   {"median_ms": .., "min_ms": .., "runs": R, "threads": N, "session_create_ms": ..}
// --no-spin sets session.intra_op.allow_spinning=0: ORT's pool threads then sleep instead of spin-waiting between
// parallel sections, which is slower on an idle machine but far less erratic on an oversubscribed one.
// Needs onnxruntime-node on the module path (e.g. `npm install --ignore-scripts onnxruntime-node`, or NODE_PATH).
'use strict';

function usage(msg) {
  if (msg) process.stderr.write(`ort_bench: ${msg}\n`);
  process.stderr.write(
      'usage: node ort_bench.js MODEL [--threads N] [--runs R] [--warmup W] [--shape NAME=D0,D1,..]... [--no-spin]\n');
  process.exit(2);
}

function parseArgs(argv) {
  const a = {model: null, threads: 1, runs: 20, warmup: 3, shapes: {}, spin: true};
  const intOpt = (name, v, min) => {
    if (v === undefined || !/^\d+$/.test(v) || Number(v) < min) usage(`${name} expects an integer >= ${min}`);
    return Number(v);
  };
  for (let i = 0; i < argv.length; ++i) {
    const s = argv[i];
    if (s === '--threads') a.threads = intOpt(s, argv[++i], 1);
    else if (s === '--runs') a.runs = intOpt(s, argv[++i], 1);
    else if (s === '--warmup') a.warmup = intOpt(s, argv[++i], 0);
    else if (s === '--no-spin') a.spin = false;
    else if (s === '--shape') {
      const v = argv[++i];
      const m = v === undefined ? null : /^([^=]+)=(\d+(,\d+)*)?$/.exec(v);
      if (!m) usage('--shape expects NAME=D0,D1,..');
      a.shapes[m[1]] = m[2] === undefined ? [] : m[2].split(',').map(Number);
    } else if (s === '-h' || s === '--help') usage();
    else if (s.startsWith('--')) usage(`unknown option '${s}'`);
    else if (a.model === null) a.model = s;
    else usage('expected exactly one MODEL argument');
  }
  if (a.model === null) usage('expected exactly one MODEL argument');
  return a;
}

// Small deterministic generator (mulberry32) so that runs are reproducible.
function rng(seed) {
  let t = seed >>> 0;
  return () => {
    t = (t + 0x6D2B79F5) >>> 0;
    let r = Math.imul(t ^ (t >>> 15), 1 | t);
    r = (r + Math.imul(r ^ (r >>> 7), 61 | r)) ^ r;
    return ((r ^ (r >>> 14)) >>> 0) / 4294967296;
  };
}

function makeInput(ort, meta, shapeOverride, next) {
  if (meta.isTensor === false) throw new Error(`input '${meta.name}' is not a tensor`);
  const dims = shapeOverride ? shapeOverride.slice()
                             : (meta.shape || []).map((d) => (typeof d === 'number' && d >= 0 ? d : 1));
  const n = dims.reduce((p, d) => p * d, 1);
  let data;
  switch (meta.type) {
    case 'float32': data = Float32Array.from({length: n}, () => next() * 2 - 1); break;
    case 'float64': data = Float64Array.from({length: n}, () => next() * 2 - 1); break;
    case 'int64': data = BigInt64Array.from({length: n}, () => BigInt(next() < 0.5 ? 0 : 1)); break;
    case 'uint64': data = BigUint64Array.from({length: n}, () => BigInt(next() < 0.5 ? 0 : 1)); break;
    case 'int32': data = Int32Array.from({length: n}, () => (next() < 0.5 ? 0 : 1)); break;
    case 'uint32': data = Uint32Array.from({length: n}, () => (next() < 0.5 ? 0 : 1)); break;
    case 'int16': data = Int16Array.from({length: n}, () => (next() < 0.5 ? 0 : 1)); break;
    case 'uint16': data = Uint16Array.from({length: n}, () => (next() < 0.5 ? 0 : 1)); break;
    case 'int8': data = Int8Array.from({length: n}, () => (next() < 0.5 ? 0 : 1)); break;
    case 'uint8': data = Uint8Array.from({length: n}, () => (next() < 0.5 ? 0 : 1)); break;
    case 'bool': data = Uint8Array.from({length: n}, () => (next() < 0.5 ? 0 : 1)); break;
    default: throw new Error(`input '${meta.name}' has unsupported element type '${meta.type}'`);
  }
  return new ort.Tensor(meta.type, data, dims);
}

async function main() {
  const a = parseArgs(process.argv.slice(2));
  let ort;
  try {
    ort = require('onnxruntime-node');
  } catch (e) {
    process.stderr.write('ort_bench: cannot load onnxruntime-node (npm install --ignore-scripts onnxruntime-node, ' +
                         `or set NODE_PATH): ${e.message}\n`);
    process.exit(1);
  }
  const options = {
    executionProviders: ['cpu'],
    intraOpNumThreads: a.threads,
    interOpNumThreads: 1,
    graphOptimizationLevel: 'all',
    executionMode: 'sequential',
  };
  if (!a.spin) options.extra = {session: {intra_op: {allow_spinning: '0'}}};
  const t0 = process.hrtime.bigint();
  const session = await ort.InferenceSession.create(a.model, options);
  const createMs = Number(process.hrtime.bigint() - t0) / 1e6;

  for (const name of Object.keys(a.shapes)) {
    if (!session.inputNames.includes(name)) throw new Error(`--shape: the model has no input '${name}'`);
  }
  const next = rng(42);
  const feeds = {};
  session.inputNames.forEach((name, i) => {
    const meta = session.inputMetadata ? session.inputMetadata[i] : undefined;
    if (!meta) throw new Error('this onnxruntime-node has no inputMetadata (needs 1.22 or newer)');
    feeds[name] = makeInput(ort, meta, a.shapes[name], next);
  });

  for (let i = 0; i < a.warmup; ++i) await session.run(feeds);
  const ms = [];
  for (let i = 0; i < a.runs; ++i) {
    const s = process.hrtime.bigint();
    await session.run(feeds);
    ms.push(Number(process.hrtime.bigint() - s) / 1e6);
  }
  ms.sort((x, y) => x - y);
  const h = ms.length >> 1;
  const median = ms.length % 2 ? ms[h] : 0.5 * (ms[h - 1] + ms[h]);
  const r4 = (v) => Math.round(v * 1e4) / 1e4;
  process.stdout.write(JSON.stringify({
    median_ms: r4(median),
    min_ms: r4(ms[0]),
    runs: a.runs,
    threads: a.threads,
    session_create_ms: r4(createMs),
  }) + '\n');
  if (session.release) await session.release();
}

main().catch((e) => {
  process.stderr.write(`ort_bench: ${e && e.message ? e.message : e}\n`);
  process.exit(1);
});
