import { runPolicyConformance } from './policy.case.test.ts';
import { lruPolicy } from './lru.ts';

runPolicyConformance('lru', lruPolicy({ insertsPerStep: 8 }), { moves: true });
runPolicyConformance('lru (1 insert per step)', lruPolicy({ insertsPerStep: 1 }), { moves: true });
