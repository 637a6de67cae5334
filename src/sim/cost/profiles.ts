// The registry of hardware cost profiles (explicit; one file per profile).
import { ResidencyError } from '../../errors.ts';
import type { CostProfile } from './cost-model.ts';
import { gb300C2c } from './gb300-c2c.ts';
import { h200Pcie } from './h200-pcie.ts';
import { sidecar } from './sidecar.ts';

export const profiles: readonly CostProfile[] = [h200Pcie, gb300C2c, sidecar];

export function profileByName(name: string): CostProfile {
  const p = profiles.find((x) => x.name === name);
  if (!p) throw new ResidencyError('BAD_ARGUMENT', `--profile: unknown '${name}' (have: ${profiles.map((x) => x.name).join(', ')})`);
  return p;
}
