// npm run bench:sim: every simulator benchmark in turn; results under out/bench-sim/ (markdown + JSON + SVG).
await import('./shift.ts');
await import('./seed.ts');
await import('./queue-rate.ts');
await import('./convergence.ts');
export {};
