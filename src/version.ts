// The package's version, from package.json (inlined by the bundler, so it is right in lib/ and dist/ too).
import pkg from '../package.json' with { type: 'json' };

export const VERSION: string = pkg.version;
export const PACKAGE_NAME: string = pkg.name;
