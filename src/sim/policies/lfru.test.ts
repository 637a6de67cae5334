import { runPolicyConformance } from './policy.case.test.ts';
import { lfruPolicy } from './lfru.ts';

runPolicyConformance('lfru', lfruPolicy({ insertsPerStep: 8, halfLifeSteps: 500 }), { moves: true });
runPolicyConformance('lfu', lfruPolicy({ insertsPerStep: 8, halfLifeSteps: Infinity }, 'lfu'), { moves: true });
