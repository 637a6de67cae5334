// The package's name and version from its package.json, one folder up from here in every layout
// (src/version.ts, lib/*.mjs, dist/*.mjs).
import { createRequire } from 'node:module';

const pkg = createRequire(import.meta.url)('../package.json') as { name: string; version: string };

export const VERSION: string = pkg.version;
export const PACKAGE_NAME: string = pkg.name;
