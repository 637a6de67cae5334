import { runPolicyConformance } from './policy.case.test.ts';
import { staticPolicy } from './static.ts';

runPolicyConformance('static', staticPolicy, { moves: false });
