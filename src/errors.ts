// One error type for the whole product: a code saying what kind of failure, and a message saying what
// was wrong and what to do.

export type ErrorCode =
  | 'BAD_CHECKPOINT'
  | 'BAD_CONFIG'
  | 'UNSUPPORTED_MODEL'
  | 'BAD_MAP'
  | 'BAD_COUNTS'
  | 'BAD_CONTROL'
  | 'BAD_TRACE'
  | 'BAD_REQUEST'
  | 'BAD_ARGUMENT'
  | 'CUDA_ERROR'
  | 'NOT_AVAILABLE'
  | 'INTERNAL';

export class ResidencyError extends Error {
  readonly code: ErrorCode;
  constructor(code: ErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'ResidencyError';
    this.code = code;
  }
}
