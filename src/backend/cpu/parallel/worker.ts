// A CPU worker thread: waits for a job, enters it (unless the main thread already closed it), applies
// any new array registrations, claims chunks until none are left, and leaves. Between jobs it polls (while the main
// thread runs a step, ACTIVE, up to ACTIVE_POLL_MS; between steps up to IDLE_POLL_MS; not while the cores are shared
// with other work, POLL), then sleeps on Atomics.wait.
import { parentPort, receiveMessageOnPort, workerData } from 'node:worker_threads';
import { ACTIVE, ACTIVE_POLL_MS, IDLE_POLL_MS, POLL, ERR, GEN, RAN, SEQ, STATE, STOP, WORKERS, WORKER_SPIN, BLOCK, fromSharedView, type Registration, type WorkerInit } from './layout.ts';
import { claimChunks, jobScratch, type Table } from './jobs.ts';
import { simdKernel } from '../wasm/kernel.ts';
import { quantRowViews } from '../expert-rows.ts';

/** A sleeping worker re-checks this often (a missed wake-up costs at most this long). */
const SLEEP_MS = 200;

function main(init: WorkerInit): void {
  const ctl = init.control;
  const state = WORKERS + init.index * BLOCK + STATE;
  const table: Table = [];
  const scratch = jobScratch();
  if (init.wasmMemory) scratch.simd = simdKernel(init.wasmMemory);
  scratch.simdExperts = init.wasmExperts ?? null;
  scratch.simdScores = init.wasmScores ?? null;
  scratch.simdAcc = init.wasmAcc ?? null;
  const banks = init.banks.map((v) => fromSharedView(v) as Float32Array);
  const q = init.quant;
  if (q) scratch.quant = { rows: quantRowViews(banks, q.layout, q.inter, q.hidden), rowSize: q.layout.words };
  let gen = 0;
  let last = 0;
  /** When this worker's polling since its last job began (0: not polling). */
  let idleSince = 0;
  parentPort!.postMessage('ready');
  for (;;) {
    let seq = Atomics.load(ctl, SEQ);
    const spin = ctl[WORKER_SPIN]!;
    for (let i = 0; seq === last && i < spin; i++) seq = Atomics.load(ctl, SEQ);
    if (Atomics.load(ctl, STOP) !== 0) return;
    if (seq === last) {
      const now = performance.now();
      if (idleSince === 0) idleSince = now;
      if (Atomics.load(ctl, POLL) === 1 && now - idleSince < (Atomics.load(ctl, ACTIVE) === 1 ? ACTIVE_POLL_MS : IDLE_POLL_MS)) continue;
      idleSince = 0;
      Atomics.wait(ctl, SEQ, last, SLEEP_MS);
      continue;
    }
    idleSince = 0;
    last = seq;
    // Enter job `seq`, unless the main thread finished it without us.
    if (Atomics.compareExchange(ctl, state, seq - 1, -seq) !== seq - 1) continue;
    try {
      const want = ctl[GEN]!;
      while (gen < want) {
        const m = receiveMessageOnPort(init.tablePort);
        if (m === undefined) throw new Error(`array table generation ${want} announced, only ${gen} received`);
        const r = m.message as Registration;
        table[r.id] = r.array && fromSharedView(r.array);
        gen = r.gen;
      }
      ctl[state - STATE + RAN] += claimChunks(ctl, table, banks, scratch);
    } catch (e) {
      init.errorPort.postMessage(e instanceof Error ? (e.stack ?? e.message) : String(e));
      Atomics.store(ctl, state + ERR - STATE, 1);
    }
    Atomics.store(ctl, state, seq);
    Atomics.notify(ctl, state);
  }
}

if (parentPort !== null && workerData !== null && typeof workerData === 'object') main(workerData as WorkerInit);
