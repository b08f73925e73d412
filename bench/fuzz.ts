// `npm run fuzz [-- --cases N] [--target SUBSTRING] [--seed S] [--progress]`: every parser of
// outside input (bench/fuzz-targets.ts) on N cases (default 100,000) mutated from the real
// fixtures. Prints per parser the cases, how many the parser refused with its own error, the
// crashes (with the first inputs) and the time; exits 1 on any crash or slow case. --progress
// prints to stderr every 10,000 cases, and each slow case as it is found (its input saved to
// /tmp/fuzz-slow-TARGET-CASE.txt to replay).
import { writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { fuzzOne, fuzzTargets, SLOW_MS } from './fuzz-targets.js';

const arg = (name: string): string | undefined => {
  const i = process.argv.indexOf(name);
  return i >= 0 ? process.argv[i + 1] : undefined;
};
const cases = Number(arg('--cases') ?? 100_000);
const seed = Number(arg('--seed') ?? 1);
const only = arg('--target');
const showProgress = process.argv.includes('--progress');

const t0 = performance.now();
let bad = 0;
let total = 0;
console.log(
  `fuzz: ${cases} cases per parser, seed ${seed}, slow = over ${SLOW_MS} ms, node ${process.version}, load ${loadavg()
    .map((l) => l.toFixed(2))
    .join(' ')}`,
);
console.log(
  `${'parser'.padEnd(36)} ${'cases'.padStart(8)} ${'refused'.padStart(8)} ${'crashes'.padStart(8)} ${'slow'.padStart(5)} ${'time'.padStart(8)} ${'cases/s'.padStart(8)}`,
);
for (const t of fuzzTargets()) {
  if (only && !t.name.includes(only)) continue;
  const started = performance.now();
  const r = fuzzOne(
    t,
    cases,
    seed,
    showProgress
      ? {
          case: (i) => {
            if ((i + 1) % 10_000 === 0)
              process.stderr.write(
                `  ${t.name}: ${i + 1} cases, ${((performance.now() - started) / 1000).toFixed(1)} s, load ${loadavg()[0]!.toFixed(2)}\n`,
              );
          },
          slow: (i, ms, input) => {
            const file = `/tmp/fuzz-slow-${t.name.replace(/[^a-z0-9]+/gi, '_')}-${i}.txt`;
            writeFileSync(file, input);
            process.stderr.write(`  ${t.name}: slow case ${i}: ${Math.round(ms)} ms (input in ${file})\n`);
          },
        }
      : {},
  );
  total += r.cases;
  bad += r.crashCount + r.slow.length;
  console.log(
    `${r.name.padEnd(36)} ${String(r.cases).padStart(8)} ${String(r.refused).padStart(8)} ${String(r.crashCount).padStart(8)} ${String(r.slow.length).padStart(5)} ${`${(r.ms / 1000).toFixed(1)}s`.padStart(8)} ${String(Math.round(r.cases / (r.ms / 1000))).padStart(8)}`,
  );
  for (const c of r.crashes.slice(0, 3))
    console.log(`  crash at case ${c.case}: ${c.error}\n  input: ${JSON.stringify(c.input)}`);
  for (const s of r.slow.slice(0, 3)) console.log(`  slow: case ${s.case} took ${s.ms} ms`);
}
console.log(`fuzz: ${total} cases, ${bad} crashes or slow cases, ${((performance.now() - t0) / 1000).toFixed(1)} s`);
process.exit(bad ? 1 : 0);
