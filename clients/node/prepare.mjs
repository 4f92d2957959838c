// Builds the library into dist/src (npm runs this as `prepare`: on `npm install` here, on
// `npm pack`, and when another project installs this directory by its path). In that last case
// npm links the directory without installing its devDependencies, so the compiler is installed
// here first when it is missing.
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const here = fileURLToPath(new URL('.', import.meta.url));
const tsc = fileURLToPath(new URL('./node_modules/typescript/bin/tsc', import.meta.url));
if (!existsSync(tsc)) {
  console.error('pg-jobs: installing the TypeScript compiler to build the library');
  const npm = process.env.npm_execpath;
  const [command, prefix] = npm ? [process.execPath, [npm]] : ['npm', []];
  execFileSync(
    command,
    [...prefix, 'install', '--include=dev', '--ignore-scripts', '--no-package-lock', '--no-audit', '--no-fund', '--loglevel=error'],
    { cwd: here, stdio: 'inherit' },
  );
}
execFileSync(process.execPath, [tsc, '-p', 'tsconfig.build.json'], { cwd: here, stdio: 'inherit' });
