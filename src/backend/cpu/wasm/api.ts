// The slice of the WebAssembly API the SIMD kernel uses, typed here: the project's TypeScript lib (ES,
// no DOM) does not declare the WebAssembly global, though Node has it.

/** A shared WebAssembly.Memory (its buffer is a SharedArrayBuffer that grows, never detaches). */
export interface WasmMemory {
  readonly buffer: SharedArrayBuffer;
  grow(pages: number): number;
}

interface WasmApi {
  Memory: new (d: { initial: number; maximum: number; shared: boolean }) => WasmMemory;
  Module: new (bytes: Uint8Array) => object;
  Instance: new (module: object, imports: object) => { readonly exports: Record<string, unknown> };
  validate(bytes: Uint8Array): boolean;
}

/** The WebAssembly global, or undefined on a runtime without it. */
export const wasmApi: WasmApi | undefined = (globalThis as unknown as { WebAssembly?: WasmApi }).WebAssembly;
