// The /evidence query (outside input: from the relay, or anyone reaching the agent's port).
import { describe, expect, it } from 'vitest';
import { parseEvidenceQuery } from '../../../src/agent/evidence-http.js';

const q = (s: string) => parseEvidenceQuery(new URLSearchParams(s));

describe('/evidence query', () => {
  it('service, port and watch', () => {
    expect(q('service=lab/web')).toEqual({ namespace: 'lab', name: 'web', watchS: 0 });
    expect(q('service=lab/web&port=443&watch=30')).toEqual({ namespace: 'lab', name: 'web', port: 443, watchS: 30 });
  });

  it('anything else is a clear error, never a throw', () => {
    for (const bad of [
      '',
      'service=web',
      'service=lab/web/x',
      'service=Lab/web',
      'service=lab/',
      `service=lab/${'a'.repeat(400)}`,
      'service=lab/web&port=0',
      'service=lab/web&port=70000',
      'service=lab/web&port=80.5',
      'service=lab/web&port=',
      'service=lab/web&watch=3601',
      'service=lab/web&watch=-1',
      'service=%00/web',
    ]) {
      expect(q(bad), bad).toHaveProperty('error');
    }
  });
});
