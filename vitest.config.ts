import { defineConfig } from 'vitest/config';

// Unit tests are pure; lab tests (test/lab) create their own network
// namespaces and need root; vm tests (test/vm) boot a kernel with IPVS under
// qemu. Forks, not threads: lab tests enter namespaces per thread.
export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    pool: 'forks',
    testTimeout: 60_000,
    hookTimeout: 120_000,
    reporters: ['default'],
  },
});
