#!/usr/bin/env node
// Reference outputs from ONNX Runtime for one model and one test data set.
//
//   node ort_reference.js MODEL.onnx DATA_DIR [--out DIR] [--opt disabled|basic|extended|all] [--threads N]
//                         [--allow-constant]
//
// Reads DATA_DIR/input_<i>.pb (ONNX TensorProto, graph input order), runs the model with onnxruntime-node and writes
// output_<i>.pb (graph output order, tensor named after the graph output) into --out (default DATA_DIR). Prints per
// output statistics and fails (exit 1) when an output holds a non-finite value or is constant (more than one element
// all equal), so a badly scaled generated model cannot become a reference silently.
//
// onnxruntime-node is resolved the usual way (a node_modules above this file, or NODE_PATH), e.g.
//   mkdir -p /tmp/ort && (cd /tmp/ort && npm install --ignore-scripts onnxruntime-node)
//   NODE_PATH=/tmp/ort/node_modules node tests/e2e/ort_reference.js ...
// Graph optimizations default to "disabled" so the reference is the plain node-by-node computation.
//
// TensorProto is encoded and decoded by hand (no protobuf library): the fields read are dims (1), data_type (2),
// float_data (4), int32_data (5), int64_data (7), name (8), raw_data (9), double_data (10), uint64_data (11); others
// are skipped. Written tensors hold dims, data_type, name and raw_data (little-endian), like ONNX's own test data.
'use strict';

const fs = require('fs');
const path = require('path');

// ONNX TensorProto.DataType <-> onnxruntime tensor type and typed array.
const DTYPES = {
  1: {ort: 'float32', array: Float32Array},
  2: {ort: 'uint8', array: Uint8Array},
  3: {ort: 'int8', array: Int8Array},
  4: {ort: 'uint16', array: Uint16Array},
  5: {ort: 'int16', array: Int16Array},
  6: {ort: 'int32', array: Int32Array},
  7: {ort: 'int64', array: BigInt64Array},
  9: {ort: 'bool', array: Uint8Array},
  10: {ort: 'float16', array: Uint16Array},
  11: {ort: 'float64', array: Float64Array},
  12: {ort: 'uint32', array: Uint32Array},
  13: {ort: 'uint64', array: BigUint64Array},
};
const ORT_TO_ONNX = Object.fromEntries(Object.entries(DTYPES).map(([k, v]) => [v.ort, Number(k)]));

// ---- protobuf reading ----------------------------------------------------------------------------------------------
class Reader {
  constructor(buf) { this.buf = buf; this.pos = 0; }
  done() { return this.pos >= this.buf.length; }
  varint() {  // as BigInt (int64 fields may be negative: two's complement over 64 bits)
    let result = 0n, shift = 0n;
    for (;;) {
      if (this.pos >= this.buf.length) throw new Error('truncated varint');
      const b = this.buf[this.pos++];
      result |= BigInt(b & 0x7f) << shift;
      if (!(b & 0x80)) break;
      shift += 7n;
      if (shift > 63n) throw new Error('varint too long');
    }
    return BigInt.asIntN(64, result);
  }
  bytes() {
    const n = Number(this.varint());
    if (n < 0 || this.pos + n > this.buf.length) throw new Error('truncated length-delimited field');
    const out = this.buf.subarray(this.pos, this.pos + n);
    this.pos += n;
    return out;
  }
  skip(wire) {
    if (wire === 0) this.varint();
    else if (wire === 1) this.pos += 8;
    else if (wire === 2) this.bytes();
    else if (wire === 5) this.pos += 4;
    else throw new Error('unsupported wire type ' + wire);
    if (this.pos > this.buf.length) throw new Error('truncated field');
  }
}

// Repeated scalar field, packed (wire 2) or not: returns a list of values via `one(reader)`.
function readRepeated(r, wire, one, fixedSize) {
  if (wire !== 2) return [one(r)];
  const sub = new Reader(r.bytes());
  const out = [];
  while (!sub.done()) out.push(one(sub));
  if (fixedSize && sub.pos !== sub.buf.length) throw new Error('bad packed field');
  return out;
}

function fixed(r, n, read) {
  if (r.pos + n > r.buf.length) throw new Error('truncated fixed field');
  const v = read(Buffer.from(r.buf.buffer, r.buf.byteOffset + r.pos, n));
  r.pos += n;
  return v;
}

function decodeTensor(buf) {
  const r = new Reader(buf);
  const t = {dims: [], dataType: 0, name: '', raw: null, typed: []};
  while (!r.done()) {
    const key = Number(r.varint());
    const field = key >>> 3, wire = key & 7;
    switch (field) {
      case 1: t.dims.push(...readRepeated(r, wire, (x) => Number(x.varint()))); break;
      case 2: t.dataType = Number(r.varint()); break;
      case 4: t.typed.push(...readRepeated(r, wire, (x) => fixed(x, 4, (b) => b.readFloatLE(0)), true)); break;
      case 5: t.typed.push(...readRepeated(r, wire, (x) => Number(x.varint()))); break;
      case 7: t.typed.push(...readRepeated(r, wire, (x) => x.varint())); break;
      case 8: t.name = Buffer.from(r.bytes()).toString('utf8'); break;
      case 9: t.raw = r.bytes(); break;
      case 10: t.typed.push(...readRepeated(r, wire, (x) => fixed(x, 8, (b) => b.readDoubleLE(0)), true)); break;
      case 11: t.typed.push(...readRepeated(r, wire, (x) => BigInt.asUintN(64, x.varint()))); break;
      default: r.skip(wire);
    }
  }
  const dt = DTYPES[t.dataType];
  if (!dt) throw new Error(`unsupported data_type ${t.dataType}`);
  const numel = t.dims.reduce((a, b) => a * b, 1);
  let data;
  if (t.raw) {
    const bytes = numel * dt.array.BYTES_PER_ELEMENT;
    if (t.raw.length !== bytes) throw new Error(`raw_data has ${t.raw.length} bytes, expected ${bytes}`);
    data = new dt.array(numel);
    new Uint8Array(data.buffer).set(t.raw);  // little-endian host assumed (x86-64, aarch64)
  } else {
    if (t.typed.length !== numel) throw new Error(`typed data has ${t.typed.length} values, expected ${numel}`);
    if (t.dataType === 10) throw new Error('float16 must use raw_data');
    data = dt.array.from(t.typed);
  }
  return {name: t.name, dataType: t.dataType, dims: t.dims, data};
}

// ---- protobuf writing ----------------------------------------------------------------------------------------------
function varintBytes(v) {
  let x = BigInt.asUintN(64, BigInt(v));
  const out = [];
  do {
    let b = Number(x & 0x7fn);
    x >>= 7n;
    if (x) b |= 0x80;
    out.push(b);
  } while (x);
  return Buffer.from(out);
}

function encodeTensor(name, dataType, dims, typedArray) {
  const parts = [];
  for (const d of dims) parts.push(varintBytes((1 << 3) | 0), varintBytes(d));
  parts.push(varintBytes((2 << 3) | 0), varintBytes(dataType));
  const nameBytes = Buffer.from(name, 'utf8');
  parts.push(varintBytes((8 << 3) | 2), varintBytes(nameBytes.length), nameBytes);
  const raw = Buffer.from(typedArray.buffer, typedArray.byteOffset, typedArray.byteLength);
  parts.push(varintBytes((9 << 3) | 2), varintBytes(raw.length), raw);
  return Buffer.concat(parts);
}

// ---- main ----------------------------------------------------------------------------------------------------------
function usage(msg) {
  if (msg) console.error('ort_reference: ' + msg);
  console.error(
      'usage: node ort_reference.js MODEL.onnx DATA_DIR [--out DIR] [--opt LEVEL] [--threads N] [--allow-constant]');
  process.exit(2);
}

function stats(data) {
  let min = Infinity, max = -Infinity, sum = 0, sq = 0, finite = true;
  const n = data.length;
  for (let i = 0; i < n; i++) {
    const v = Number(data[i]);
    if (!Number.isFinite(v)) { finite = false; continue; }
    if (v < min) min = v;
    if (v > max) max = v;
    sum += v;
    sq += v * v;
  }
  const mean = sum / n;
  // A one-element output (a probability, a score) cannot vary; any larger one that is constant is badly scaled.
  return {min, max, mean, std: Math.sqrt(Math.max(0, sq / n - mean * mean)), finite, constant: n > 1 && min === max};
}

async function main() {
  const args = process.argv.slice(2);
  const pos = [];
  const opts = {opt: 'disabled', threads: 1, out: null, allowConstant: false};
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    if (a === '--out' || a === '--opt' || a === '--threads') {
      if (i + 1 >= args.length) usage(`${a} needs a value`);
      opts[a.slice(2)] = args[++i];
    } else if (a === '--allow-constant') {  // probes expose intermediates, some constant by design
      opts.allowConstant = true;
    } else if (a.startsWith('--')) {
      usage(`unknown flag ${a}`);
    } else {
      pos.push(a);
    }
  }
  if (pos.length !== 2) usage();
  const [modelPath, dataDir] = pos;
  const outDir = opts.out || dataDir;

  let ort;
  try {
    ort = require('onnxruntime-node');
  } catch (e) {
    console.error('ort_reference: cannot load onnxruntime-node (install it and set NODE_PATH): ' + e.message);
    process.exit(2);
  }

  const t0 = process.hrtime.bigint();
  const session = await ort.InferenceSession.create(modelPath, {
    graphOptimizationLevel: opts.opt,
    intraOpNumThreads: Number(opts.threads),
    interOpNumThreads: 1,
    executionMode: 'sequential',
  });
  const t1 = process.hrtime.bigint();

  const feeds = {};
  session.inputNames.forEach((inputName, i) => {
    const file = path.join(dataDir, `input_${i}.pb`);
    const t = decodeTensor(fs.readFileSync(file));
    if (t.name && t.name !== inputName) {
      console.error(`ort_reference: warning: ${file} is named '${t.name}', graph input ${i} is '${inputName}'`);
    }
    feeds[inputName] = new ort.Tensor(DTYPES[t.dataType].ort, t.data, t.dims);
  });
  const results = await session.run(feeds);
  const t2 = process.hrtime.bigint();

  fs.mkdirSync(outDir, {recursive: true});
  let bad = false;
  session.outputNames.forEach((outputName, i) => {
    const t = results[outputName];
    const dataType = ORT_TO_ONNX[t.type];
    if (!dataType) throw new Error(`output ${outputName} has unsupported type ${t.type}`);
    fs.writeFileSync(path.join(outDir, `output_${i}.pb`), encodeTensor(outputName, dataType, t.dims, t.data));
    const s = stats(t.data);
    const fmt = (v) => Number(v).toPrecision(5);
    console.log(`${path.basename(modelPath)} output_${i} ${outputName} [${t.dims.join(',')}] ${t.type} ` +
                `min=${fmt(s.min)} max=${fmt(s.max)} mean=${fmt(s.mean)} std=${fmt(s.std)}`);
    if (!s.finite || (s.constant && !opts.allowConstant)) {
      console.error(`ort_reference: output ${outputName} is ${!s.finite ? 'not finite' : 'constant'}`);
      bad = true;
    }
  });
  const ms = (a, b) => (Number(b - a) / 1e6).toFixed(1);
  console.log(`${path.basename(modelPath)} session ${ms(t0, t1)} ms, run ${ms(t1, t2)} ms (opt=${opts.opt}, ` +
              `threads=${opts.threads})`);
  process.exit(bad ? 1 : 0);
}

main().catch((e) => {
  console.error('ort_reference: ' + (e && e.message ? e.message : e));
  process.exit(1);
});
