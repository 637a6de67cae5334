import { runPolicyConformance } from './policy.case.test.ts';
import { oraclePolicy } from './oracle.ts';

runPolicyConformance('oracle', oraclePolicy(64), { startsAtBoot: false, moves: true });
