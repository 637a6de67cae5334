// A CPU worker thread: waits for a job in its control block, applies any new array registrations,
// runs its share of the rows, and marks the job done. It spins briefly after each job (the next op of
// the step usually follows within microseconds) and then sleeps on Atomics.wait.
import { parentPort, receiveMessageOnPort, workerData } from 'node:worker_threads';
import { ARGS, BLOCK, DONE, ERR, GEN, OP, OP_STOP, SEQ, type Registration, type WorkerInit } from './layout.ts';
import { runJob, type JobScratch, type Table } from './jobs.ts';

/** Polls of the job flag before sleeping (~tens of microseconds). */
const SPIN = 20000;
/** A sleeping worker re-checks its flag this often (a missed wake-up costs at most this long). */
const SLEEP_MS = 500;

function main(init: WorkerInit): void {
  const ctl = init.control;
  const base = init.index * BLOCK;
  const table: Table = [];
  const scratch: JobScratch = { act: new Float32Array(0) };
  let gen = 0;
  let last = Atomics.load(ctl, base + DONE);
  for (;;) {
    let seq = Atomics.load(ctl, base + SEQ);
    for (let i = 0; seq === last && i < SPIN; i++) seq = Atomics.load(ctl, base + SEQ);
    if (seq === last) {
      Atomics.wait(ctl, base + SEQ, last, SLEEP_MS);
      continue;
    }
    last = seq;
    const op = ctl[base + OP]!;
    if (op === OP_STOP) return;
    try {
      const want = ctl[base + GEN]!;
      while (gen < want) {
        const m = receiveMessageOnPort(init.tablePort);
        if (m === undefined) throw new Error(`array table generation ${want} announced, only ${gen} received`);
        const r = m.message as Registration;
        table[r.id] = r.array;
        gen = r.gen;
      }
      runJob(op, ctl, base + ARGS, table, init.banks, scratch);
    } catch (e) {
      init.errorPort.postMessage(e instanceof Error ? (e.stack ?? e.message) : String(e));
      Atomics.store(ctl, base + ERR, 1);
    }
    Atomics.store(ctl, base + DONE, seq);
    Atomics.notify(ctl, base + DONE);
  }
}

if (parentPort !== null && workerData !== null && typeof workerData === 'object') main(workerData as WorkerInit);
