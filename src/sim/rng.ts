// The simulator's seeded PRNG: the product's one mulberry32 (traffic must be reproducible from a seed).
export { mulberry32, shuffled } from '../util/rng.ts';
