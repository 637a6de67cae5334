import { runPolicyConformance } from './policy.case.test.ts';
import { seedPolicy } from './seed.ts';
import type { PolicyFactory } from './policy.ts';

// The seed map here is the boot map itself (fitted on English); what matters is that it stays frozen.
const seedOfBoot: PolicyFactory = (ctx) => seedPolicy(ctx.bootMap)(ctx);
runPolicyConformance('seed', seedOfBoot, { moves: false });
