// deploy/oncall-rbac.yaml is applied on its own (not in the kustomization: the
// group to bind is the site's), so it is validated here: the Role against the
// Kubernetes API schema, the commented RoleBinding example once uncommented,
// and the grants against what `clbprobe evidence --all-nodes` does.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Role } from 'kubernetes-models/rbac.authorization.k8s.io/v1/Role';
import { RoleBinding } from 'kubernetes-models/rbac.authorization.k8s.io/v1/RoleBinding';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { AGENT_DEFAULTS, DEFAULT_RELAY } from '../../../src/cli/options.js';
import { renderKustomization } from './render.js';

const DEPLOY = join(import.meta.dirname, '../../../deploy');
const text = readFileSync(join(DEPLOY, 'oncall-rbac.yaml'), 'utf8');

type Rule = { apiGroups: string[]; resources: string[]; resourceNames?: string[]; verbs: string[] };
const docs = (t: string) =>
  parseAllDocuments(t)
    .map((d) => {
      if (d.errors.length) throw new Error(d.errors[0]!.message);
      return d.toJS() as {
        kind: string;
        metadata: { name: string; namespace?: string };
        rules?: Rule[];
        roleRef?: unknown;
        subjects?: unknown;
      };
    })
    .filter(Boolean);

describe('deploy/oncall-rbac.yaml', () => {
  const [role, ...rest] = docs(text);

  it('is one Role that passes its API schema, in the agent namespace', () => {
    expect(rest).toEqual([]);
    expect(role!.kind).toBe('Role');
    expect(() => new Role(role as never).validate()).not.toThrow();
    expect(role!.metadata).toMatchObject({ name: 'clbprobe-oncall', namespace: AGENT_DEFAULTS.namespace });
  });

  it('grants exactly what --all-nodes uses through the relay: get on services/proxy of the relay Service, nothing on pods or exec', () => {
    const granted = role!.rules!.flatMap((r) =>
      r.apiGroups.flatMap((g) =>
        r.resources.map((res) => `${g}/${res}[${(r.resourceNames ?? []).join(',')}]:${[...r.verbs].sort().join(',')}`),
      ),
    );
    expect(granted).toEqual([`/services/proxy[${DEFAULT_RELAY.split('/')[1]}]:get`]);
    expect(role!.metadata.namespace).toBe(DEFAULT_RELAY.split('/')[0]);
    // The relay Service the Role names is the one deploy/ installs.
    expect(
      renderKustomization(DEPLOY).some((o) => o.kind === 'Service' && o.metadata.name === DEFAULT_RELAY.split('/')[1]),
    ).toBe(true);
  });

  it('the commented RoleBinding example, uncommented, is valid and binds this Role to a group', () => {
    const example = text.slice(text.indexOf('# ---')).replace(/^# ?/gm, '');
    const [binding, ...more] = docs(example);
    expect(more).toEqual([]);
    expect(() => new RoleBinding(binding as never).validate()).not.toThrow();
    expect(binding).toMatchObject({
      kind: 'RoleBinding',
      metadata: { namespace: AGENT_DEFAULTS.namespace },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: 'clbprobe-oncall' },
      subjects: [{ kind: 'Group', apiGroup: 'rbac.authorization.k8s.io' }],
    });
  });

  it('is not part of `kubectl apply -k deploy/` (bound per site, on purpose)', () => {
    expect(renderKustomization(DEPLOY).some((o) => o.kind === 'Role' && o.metadata.name === 'clbprobe-oncall')).toBe(
      false,
    );
  });
});
