// CUresult -> a named ResidencyError that says which call failed and on what size. Pure: CI tests it
// without a GPU.
import { ResidencyError } from '../../../errors.ts';

/** The CUresult names this backend is likely to meet (cuda.h); others fall back to the driver's name. */
const NAMES: Readonly<Record<number, string>> = {
  0: 'CUDA_SUCCESS',
  1: 'CUDA_ERROR_INVALID_VALUE',
  2: 'CUDA_ERROR_OUT_OF_MEMORY',
  3: 'CUDA_ERROR_NOT_INITIALIZED',
  4: 'CUDA_ERROR_DEINITIALIZED',
  34: 'CUDA_ERROR_STUB_LIBRARY',
  35: 'CUDA_ERROR_INSUFFICIENT_DRIVER',
  100: 'CUDA_ERROR_NO_DEVICE',
  101: 'CUDA_ERROR_INVALID_DEVICE',
  200: 'CUDA_ERROR_INVALID_IMAGE',
  201: 'CUDA_ERROR_INVALID_CONTEXT',
  209: 'CUDA_ERROR_NO_BINARY_FOR_GPU',
  218: 'CUDA_ERROR_INVALID_PTX',
  222: 'CUDA_ERROR_UNSUPPORTED_PTX_VERSION',
  400: 'CUDA_ERROR_INVALID_HANDLE',
  500: 'CUDA_ERROR_NOT_FOUND',
  600: 'CUDA_ERROR_NOT_READY',
  700: 'CUDA_ERROR_ILLEGAL_ADDRESS',
  701: 'CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES',
  702: 'CUDA_ERROR_LAUNCH_TIMEOUT',
  716: 'CUDA_ERROR_MISALIGNED_ADDRESS',
  719: 'CUDA_ERROR_LAUNCH_FAILED',
  801: 'CUDA_ERROR_NOT_SUPPORTED',
  900: 'CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED',
  901: 'CUDA_ERROR_STREAM_CAPTURE_INVALIDATED',
  999: 'CUDA_ERROR_UNKNOWN',
};

/** The CUresult's name, from the table or the driver's own lookup (when given), else CUDA_ERROR_<code>. */
export function cudaErrorName(rc: number, driverName?: (rc: number) => string | null): string {
  return NAMES[rc] ?? driverName?.(rc) ?? `CUDA_ERROR_${rc}`;
}

/** Human size for messages: 1.2 GiB, 36.0 KiB, 12 B. */
export function formatBytes(n: number | bigint): string {
  const v = Number(n);
  if (v >= 2 ** 30) return `${(v / 2 ** 30).toFixed(1)} GiB`;
  if (v >= 2 ** 20) return `${(v / 2 ** 20).toFixed(1)} MiB`;
  if (v >= 2 ** 10) return `${(v / 2 ** 10).toFixed(1)} KiB`;
  return `${v} B`;
}

/**
 * Throws ResidencyError('CUDA_ERROR', 'CUDA_ERROR_OUT_OF_MEMORY in cuMemAlloc(1.2 GiB)') unless rc is 0.
 * `detail` is what the call was asked to do (a size, a kernel name).
 */
export function checkResult(rc: number, call: string, detail = '', driverName?: (rc: number) => string | null): void {
  if (rc === 0) return;
  const name = cudaErrorName(rc, driverName);
  throw new ResidencyError('CUDA_ERROR', `${name} in ${call}(${detail})`);
}
