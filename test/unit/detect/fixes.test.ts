// The fix commands: shell quoting that survives any cluster-controlled string, and the AWS
// target-group attributes merged rather than replaced (a merge patch replaces the whole value).
import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { interpretAnnotations } from '../../../src/cluster/annotations.js';
import type { ServiceView } from '../../../src/cluster/types.js';
import { awsPreserveClientIpOff, fixCommand, shellQuote } from '../../../src/detect/fixes.js';

const svc = (annotations: Record<string, string>): ServiceView =>
  ({
    namespace: 'shop',
    name: 'web',
    annotations: interpretAnnotations(annotations),
    lbHostnames: [],
  }) as unknown as ServiceView;

describe('fix commands', () => {
  it('quotes so that sh hands kubectl exactly the arguments', () => {
    for (const s of [`it's`, `{"a":"b c"}`, `$(touch /tmp/x)`, 'plain', "'", '']) {
      const r = spawnSync('sh', ['-c', `printf '%s' ${shellQuote(s)}`], { encoding: 'utf8' });
      expect(r.stdout).toBe(s);
    }
  });

  it('keeps the other target-group attributes and replaces preserve_client_ip', () => {
    const key = 'service.beta.kubernetes.io/aws-load-balancer-target-group-attributes';
    const [fix] = awsPreserveClientIpOff(
      svc({ [key]: 'deregistration_delay.timeout_seconds=120, preserve_client_ip.enabled=true' }),
    );
    expect(fix?.patch.body).toEqual({
      metadata: { annotations: { [key]: 'deregistration_delay.timeout_seconds=120,preserve_client_ip.enabled=false' } },
    });
    expect(fixCommand(fix!)).toBe(
      `kubectl -n shop patch service web --type merge -p '{"metadata":{"annotations":{"${key}":"deregistration_delay.timeout_seconds=120,preserve_client_ip.enabled=false"}}}'`,
    );
    expect(awsPreserveClientIpOff(svc({ [key]: 'preserve_client_ip.enabled=false' }))).toEqual([]);
  });
});
