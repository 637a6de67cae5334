// Static: the boot map, never moved. What a fixed profile (or no residency system at all) gives.
import { NO_MOVES, hotMaskOf, type PolicyFactory } from './policy.ts';

export const staticPolicy: PolicyFactory = (ctx) => ({
  name: 'static',
  geometry: ctx.geometry,
  hot: hotMaskOf(ctx.bootMap),
  movesPerStep: 0,
  afterStep: () => NO_MOVES,
});
