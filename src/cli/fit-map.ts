// `residency fit-map`: a seed map from a counts dump (top-H experts per layer, rows kept where they can be).
import { dirname } from 'node:path';
import { parseArgs } from 'node:util';
import { ResidencyError } from '../errors.ts';
import { loadCountsDump, loadRowMap, saveRowMap } from '../residency/files.ts';
import { fitMap } from '../residency/fit.ts';
import { diffRowMaps, identityRowMap } from '../residency/rowmap.ts';
import type { CliCommand } from './command.ts';
import { checkFolderPath, makeFolder } from '../util/folders.ts';

const HELP = `usage: residency fit-map --counts DUMP.json --hot H [--base MAP.json] [--use cumulative|decayed] --out MAP.json

  --counts DUMP.json   a counts dump (written by the controller on {"dump_counts": PATH})
  --hot H              hot experts per layer (default: the base map's hot_per_layer)
  --base MAP.json      start from this map: its hot experts win ties and every staying expert keeps its row
                       (default: experts 0..H-1 hot, in id order)
  --use TABLE          rank by the dump's cumulative (default) or decayed counts
  --out MAP.json       where to write the fitted map`;

export const fitMapCommand: CliCommand = {
  name: 'fit-map',
  async run(argv) {
    const { values } = parseArgs({
      args: argv,
      options: {
        counts: { type: 'string' },
        hot: { type: 'string' },
        base: { type: 'string' },
        use: { type: 'string', default: 'cumulative' },
        out: { type: 'string' },
        help: { type: 'boolean', short: 'h', default: false },
      },
      strict: true,
    });
    if (values.help) { console.log(HELP); return 0; }
    if (!values.counts) throw new ResidencyError('BAD_ARGUMENT', `--counts is required\n\n${HELP}`);
    if (!values.out) throw new ResidencyError('BAD_ARGUMENT', `--out is required\n\n${HELP}`);
    checkFolderPath(values.out, '--out'); // a kernel-filesystem path fails before any input is read
    if (values.use !== 'cumulative' && values.use !== 'decayed') {
      throw new ResidencyError('BAD_ARGUMENT', `--use must be cumulative or decayed, got '${values.use}'`);
    }
    const hot = values.hot === undefined ? undefined : Number(values.hot);
    if (hot !== undefined && !Number.isInteger(hot)) throw new ResidencyError('BAD_ARGUMENT', `--hot must be an integer, got '${values.hot}'`);
    const dump = loadCountsDump(values.counts);
    const base = values.base ? loadRowMap(values.base) : undefined;
    const map = fitMap(dump, { hot, base, use: values.use });
    makeFolder(dirname(values.out), '--out'); // saveRowMap's recursive mkdir would hang under /proc
    saveRowMap(values.out, map);

    const from = base ?? identityRowMap(map.model, map.layers, map.experts, map.hot_per_layer);
    const changed = new Map(diffRowMaps(from, map).map((d) => [d.layer, d]));
    console.log(`fit-map: ${map.layers} layers x ${map.experts} experts, ${map.hot_per_layer} hot, ranked by ${values.use} counts`);
    console.log(`experts changed per layer (vs ${values.base ?? 'the identity layout'}):`);
    let total = 0;
    for (let l = 0; l < map.layers; l++) {
      const d = changed.get(l);
      const n = d?.promoted.length ?? 0;
      total += n;
      console.log(`  layer ${String(l).padStart(3)}: ${String(n).padStart(3)}${d && n > 0 ? `  in ${d.promoted.join(',')}  out ${d.demoted.join(',')}` : ''}`);
    }
    console.log(`total ${total} experts changed; wrote ${values.out}`);
    return 0;
  },
};
