// deploy/ rendered offline (render.ts) and every object validated against the
// Kubernetes API schemas (kubernetes-models) and prometheus-operator's CRD
// schemas (@kubernetes-models/prometheus-operator); then the properties the
// agent's security and operation depend on.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { PodMonitor } from '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PodMonitor';
import { PrometheusRule } from '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PrometheusRule';
import { DaemonSet } from 'kubernetes-models/apps/v1/DaemonSet';
import { Deployment } from 'kubernetes-models/apps/v1/Deployment';
import { ClusterRole } from 'kubernetes-models/rbac.authorization.k8s.io/v1/ClusterRole';
import { ClusterRoleBinding } from 'kubernetes-models/rbac.authorization.k8s.io/v1/ClusterRoleBinding';
import { Role } from 'kubernetes-models/rbac.authorization.k8s.io/v1/Role';
import { RoleBinding } from 'kubernetes-models/rbac.authorization.k8s.io/v1/RoleBinding';
import { ConfigMap } from 'kubernetes-models/v1/ConfigMap';
import { Namespace } from 'kubernetes-models/v1/Namespace';
import { Service } from 'kubernetes-models/v1/Service';
import { ServiceAccount } from 'kubernetes-models/v1/ServiceAccount';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { type K8sObject, renderKustomization } from './render.js';

const DEPLOY = join(import.meta.dirname, '../../../deploy');

/** The schema-checked model of each kind deploy/ may contain. */
const MODELS: Record<string, new (o: never) => { validate(): void }> = {
  'v1/Namespace': Namespace,
  'v1/ServiceAccount': ServiceAccount,
  'v1/ConfigMap': ConfigMap,
  'apps/v1/DaemonSet': DaemonSet,
  'apps/v1/Deployment': Deployment,
  'v1/Service': Service,
  'rbac.authorization.k8s.io/v1/Role': Role,
  'rbac.authorization.k8s.io/v1/RoleBinding': RoleBinding,
  'rbac.authorization.k8s.io/v1/ClusterRole': ClusterRole,
  'rbac.authorization.k8s.io/v1/ClusterRoleBinding': ClusterRoleBinding,
  'monitoring.coreos.com/v1/PodMonitor': PodMonitor,
  'monitoring.coreos.com/v1/PrometheusRule': PrometheusRule,
};

function validate(o: K8sObject): void {
  const Model = MODELS[`${o.apiVersion}/${o.kind}`];
  if (!Model) throw new Error(`no schema for ${o.apiVersion} ${o.kind}`);
  new Model(o as never).validate();
}

const objects = renderKustomization(DEPLOY);
const one = (kind: string): K8sObject => {
  const found = objects.filter((o) => o.kind === kind);
  expect(found, kind).toHaveLength(1);
  return found[0]!;
};

describe('deploy/ kustomization', () => {
  it('renders exactly the objects the agent needs, in the clbprobe namespace with the common labels', () => {
    expect(objects.map((o) => `${o.kind}/${o.metadata.name}`).sort()).toEqual([
      'ClusterRole/clbprobe',
      'ClusterRole/clbprobe-evidence-relay',
      'ClusterRole/clbprobe-metrics-reader',
      'ClusterRoleBinding/clbprobe',
      'ClusterRoleBinding/clbprobe-evidence-relay',
      'ConfigMap/clbprobe-dashboard',
      'DaemonSet/clbprobe',
      'Deployment/clbprobe-evidence-relay',
      'Namespace/clbprobe',
      'PodMonitor/clbprobe',
      'PrometheusRule/clbprobe',
      'Role/clbprobe-evidence-relay',
      'RoleBinding/clbprobe-evidence-relay',
      'Service/clbprobe-evidence',
      'ServiceAccount/clbprobe',
      'ServiceAccount/clbprobe-evidence-relay',
    ]);
    for (const o of objects) {
      expect(o.metadata.labels?.['app.kubernetes.io/name'], o.kind).toBe('clbprobe');
      if (!['Namespace', 'ClusterRole', 'ClusterRoleBinding'].includes(o.kind))
        expect(o.metadata.namespace, o.kind).toBe('clbprobe');
    }
  });

  it.each(objects.map((o) => [`${o.kind}/${o.metadata.name}`, o] as const))('%s passes its API schema', (_, o) => {
    expect(() => validate(o)).not.toThrow();
  });

  it('the schemas do reject a wrong manifest (the check is not vacuous)', () => {
    const ds = structuredClone(one('DaemonSet')) as unknown as {
      spec: { template: { spec: { containers: { ports: { containerPort: unknown }[] }[] } } };
    };
    ds.spec.template.spec.containers[0]!.ports[0]!.containerPort = 'metrics';
    expect(() => validate(ds as unknown as K8sObject)).toThrow(/containerPort must be integer/);
    const pm = structuredClone(one('PodMonitor')) as unknown as { spec: { podMetricsEndpoints: unknown } };
    pm.spec.podMetricsEndpoints = 'metrics';
    expect(() => validate(pm as unknown as K8sObject)).toThrow(/podMetricsEndpoints must be array/);
    const rule = structuredClone(one('PrometheusRule')) as unknown as {
      spec: { groups: { rules: { expr?: unknown }[] }[] };
    };
    rule.spec.groups[0]!.rules[0]!.expr = { not: 'a string' };
    expect(() => validate(rule as unknown as K8sObject)).toThrow();
  });

  it('RBAC: get/list/watch on services, nodes, endpointslices, ingresses and the Gateway API kinds, the two reviews of --metrics-auth, nothing else', () => {
    type Rules = {
      rules: { apiGroups?: string[]; resources?: string[]; nonResourceURLs?: string[]; verbs: string[] }[];
    };
    const roles = objects.filter((o) => o.kind === 'ClusterRole') as unknown as (K8sObject & Rules)[];
    const granted = (name: string) =>
      roles
        .find((r) => r.metadata.name === name)!
        .rules.flatMap((r) => [
          ...(r.apiGroups ?? []).flatMap((g) =>
            (r.resources ?? []).map((res) => `${g}/${res}:${[...r.verbs].sort().join(',')}`),
          ),
          ...(r.nonResourceURLs ?? []).map((u) => `${u}:${[...r.verbs].sort().join(',')}`),
        ]);
    expect(granted('clbprobe').sort()).toEqual([
      '/nodes:get,list,watch',
      '/services:get,list,watch',
      'authentication.k8s.io/tokenreviews:create',
      'authorization.k8s.io/subjectaccessreviews:create',
      'discovery.k8s.io/endpointslices:get,list,watch',
      ...[
        'gatewayclasses',
        'gateways',
        'grpcroutes',
        'httproutes',
        'referencegrants',
        'tcproutes',
        'tlsroutes',
        'udproutes',
      ].map((kind) => `gateway.networking.k8s.io/${kind}:get,list,watch`),
      'networking.k8s.io/ingresses:get,list,watch',
    ]);
    // What Prometheus' service account needs (bound by the site; kube-prometheus grants it already).
    expect(granted('clbprobe-metrics-reader')).toEqual(['/metrics:get']);
    const ds = one('DaemonSet') as unknown as { spec: { template: { spec: { containers: { args: string[] }[] } } } };
    const args = ds.spec.template.spec.containers[0]!.args;
    expect(args[args.indexOf('--metrics-auth') + 1]).toBe('kubernetes');
    expect((one('PodMonitor') as unknown as { spec: { scrapeClass: string } }).spec.scrapeClass).toBe(
      'serviceaccount-token',
    );
    const binding = objects.find(
      (o) => o.kind === 'ClusterRoleBinding' && o.metadata.name === 'clbprobe',
    ) as unknown as { roleRef: { name: string }; subjects: { kind: string; name: string; namespace: string }[] };
    expect(binding.roleRef.name).toBe('clbprobe');
    expect(binding.subjects).toEqual([{ kind: 'ServiceAccount', name: 'clbprobe', namespace: 'clbprobe' }]);
  });

  it('DaemonSet: host network, every node, least privilege, probes, only the evidence socket from the host', () => {
    const ds = one('DaemonSet') as unknown as {
      spec: {
        selector: { matchLabels: Record<string, string> };
        template: { metadata: { labels: Record<string, string>; annotations: Record<string, string> }; spec: any };
      };
    };
    const pod = ds.spec.template.spec;
    expect(ds.spec.template.metadata.labels).toMatchObject(ds.spec.selector.matchLabels);
    expect(pod.hostNetwork).toBe(true);
    expect(pod.hostPID).toBe(false);
    expect(pod.serviceAccountName).toBe('clbprobe');
    expect(pod.tolerations).toEqual([{ operator: 'Exists' }]);
    // amd64 nodes only (the image and the native addon are amd64 builds), and none labelled for the
    // pre-5.8 component's DaemonSet.
    expect(pod.affinity).toEqual({
      nodeAffinity: {
        requiredDuringSchedulingIgnoredDuringExecution: {
          nodeSelectorTerms: [
            {
              matchExpressions: [
                { key: 'kubernetes.io/arch', operator: 'In', values: ['amd64'] },
                { key: 'clbprobe.io/kernel-before-5.8', operator: 'DoesNotExist' },
              ],
            },
          ],
        },
      },
    });
    const [c, ...others] = pod.containers;
    expect(others).toEqual([]);
    expect(c.env).toContainEqual({ name: 'NODE_NAME', valueFrom: { fieldRef: { fieldPath: 'spec.nodeName' } } });
    expect(c.securityContext).toMatchObject({
      privileged: false,
      allowPrivilegeEscalation: false,
      readOnlyRootFilesystem: true,
      capabilities: { drop: ['ALL'], add: ['NET_ADMIN', 'NET_RAW', 'BPF', 'PERFMON'] },
    });
    expect(c.ports).toEqual([{ name: 'metrics', containerPort: 9811, protocol: 'TCP' }]);
    expect(c.livenessProbe.httpGet).toEqual({ path: '/healthz', port: 'metrics' });
    expect(c.readinessProbe.httpGet).toEqual({ path: '/readyz', port: 'metrics' });
    // From bench/agent (deploy/daemonset.yaml's resources comment has the figures and the commit).
    expect(c.resources).toEqual({
      requests: { cpu: '50m', memory: '128Mi' },
      limits: { cpu: '500m', memory: '256Mi' },
    });
    const hostPaths = pod.volumes
      .filter((v: { hostPath?: unknown }) => v.hostPath)
      .map((v: { hostPath: { path: string } }) => v.hostPath.path);
    // The init container may write only clbprobe's own subdirectory of the kubelet's seccomp
    // directory, never the directory itself, where other workloads' profiles are.
    const kubeletSeccompDir = '/var/lib/kubelet/seccomp';
    expect(hostPaths).toEqual(['/run/clbprobe', `${kubeletSeccompDir}/clbprobe`]);
    const seccompVolume = pod.volumes.find((v: { name: string }) => v.name === 'seccomp');
    expect(seccompVolume.hostPath).toEqual({ path: `${kubeletSeccompDir}/clbprobe`, type: 'DirectoryOrCreate' });
    // The agent's Localhost seccomp profile is the file the init container installs (the kubelet
    // resolves localhostProfile under its seccomp directory).
    expect(c.securityContext.seccompProfile).toEqual({ type: 'Localhost', localhostProfile: 'clbprobe/clbprobe.json' });
    const [init] = pod.initContainers;
    const seccompMount = init.volumeMounts.find((m: { name: string }) => m.name === 'seccomp').mountPath;
    const installedAt = /mv \S+ (\S+)$/.exec(init.command.join(' '))?.[1] ?? '';
    expect(installedAt.startsWith(`${seccompMount}/`)).toBe(true);
    const onHost = `${seccompVolume.hostPath.path}${installedAt.slice(seccompMount.length)}`;
    expect(onHost).toBe(`${kubeletSeccompDir}/${c.securityContext.seccompProfile.localhostProfile}`);
    expect(init.securityContext).toMatchObject({
      allowPrivilegeEscalation: false,
      readOnlyRootFilesystem: true,
      capabilities: { drop: ['ALL'] },
    });
    expect(ds.spec.template.metadata.annotations).toEqual({
      'prometheus.io/scrape': 'true',
      'prometheus.io/port': '9811',
      'prometheus.io/path': '/metrics',
    });
  });

  it('evidence relay: no capabilities, no host network, nobody, read-only root; its pods are not selected as agents; it may list pods, create reviews and mint its own tokens only', () => {
    const d = objects.find((o) => o.kind === 'Deployment') as unknown as {
      spec: {
        selector: { matchLabels: Record<string, string> };
        template: { metadata: { labels: Record<string, string> }; spec: any };
      };
    };
    const pod = d.spec.template.spec;
    expect(pod.hostNetwork).toBeUndefined();
    expect(pod.serviceAccountName).toBe('clbprobe-evidence-relay');
    const [c] = pod.containers;
    expect(c.securityContext).toMatchObject({
      runAsNonRoot: true,
      allowPrivilegeEscalation: false,
      readOnlyRootFilesystem: true,
      capabilities: { drop: ['ALL'] },
    });
    expect(c.securityContext.capabilities.add).toBeUndefined();
    expect(c.args[0]).toBe('evidence-relay');
    expect(d.spec.template.metadata.labels['app.kubernetes.io/name']).toBeUndefined();
    const svc = objects.find((o) => o.kind === 'Service') as unknown as {
      metadata: { name: string };
      spec: { selector: Record<string, string>; ports: { name?: string }[] };
    };
    expect(d.spec.template.metadata.labels).toMatchObject(svc.spec.selector);
    expect(svc.spec.ports).toHaveLength(1);
    expect(svc.spec.ports[0]!.name).toBeUndefined();
    type Rules = { metadata: { name: string }; rules: { apiGroups: string[]; resources: string[]; verbs: string[] }[] };
    const grants = (kind: string) =>
      (
        objects.filter((o) => o.kind === kind && o.metadata.name === 'clbprobe-evidence-relay') as unknown as Rules[]
      ).flatMap((r) =>
        r.rules.flatMap((x) =>
          x.apiGroups.flatMap((g) => x.resources.map((res) => `${g}/${res}:${x.verbs.join(',')}`)),
        ),
      );
    // Its own per-node tokens (TokenRequest), on its own service account only.
    expect(grants('Role')).toEqual(['/pods:list', '/serviceaccounts/token:create']);
    const role = objects.find((o) => o.kind === 'Role' && o.metadata.name === 'clbprobe-evidence-relay') as unknown as
      | { rules: { resources: string[]; resourceNames?: string[] }[] }
      | undefined;
    expect(role?.rules.find((r) => r.resources.includes('serviceaccounts/token'))?.resourceNames).toEqual([
      'clbprobe-evidence-relay',
    ]);
    // Events on Services: create, and nothing else on them.
    expect(grants('ClusterRole').sort()).toEqual([
      '/events:create',
      'authentication.k8s.io/tokenreviews:create',
      'authorization.k8s.io/subjectaccessreviews:create',
    ]);
    expect(c.args.slice(-2)).toEqual(['--record-events', 'on']);
  });

  it('DaemonSet preStop and cleanup-daemonset.yaml run `clbprobe cleanup` (valid DaemonSet, not in the kustomization)', () => {
    const ds = one('DaemonSet') as unknown as {
      spec: { template: { spec: { containers: { lifecycle: { preStop: { exec: { command: string[] } } } }[] } } };
    };
    expect(ds.spec.template.spec.containers[0]!.lifecycle.preStop.exec.command.slice(-2)).toEqual([
      '/app/dist/bundle/main.js',
      'cleanup',
    ]);
    const docs = readFileSync(join(DEPLOY, 'cleanup-daemonset.yaml'), 'utf8')
      .split(/^---$/m)
      .map((d) => parse(d) as K8sObject);
    expect(docs.map((d) => d.kind)).toEqual(['Namespace', 'DaemonSet']);
    for (const d of docs) expect(() => validate(d)).not.toThrow();
    const init = (
      docs[1] as unknown as {
        spec: {
          template: {
            spec: { initContainers: { args: string[]; securityContext: { capabilities: { add: string[] } } }[] };
          };
        };
      }
    ).spec.template.spec.initContainers[0]!;
    expect(init.args).toEqual(['cleanup']);
    expect(init.securityContext.capabilities.add).toEqual(['NET_ADMIN', 'BPF', 'PERFMON']);
    expect(objects.some((o) => o.metadata.name === 'clbprobe-cleanup')).toBe(false);
  });

  it('PodMonitor scrapes the DaemonSet pods on their metrics port and keeps the Service labels', () => {
    const pm = one('PodMonitor') as unknown as {
      spec: {
        selector: { matchLabels: Record<string, string> };
        podMetricsEndpoints: { port: string; honorLabels: boolean }[];
      };
    };
    const ds = one('DaemonSet') as unknown as { spec: { template: { metadata: { labels: Record<string, string> } } } };
    expect(ds.spec.template.metadata.labels).toMatchObject(pm.spec.selector.matchLabels);
    expect(pm.spec.podMetricsEndpoints).toMatchObject([{ port: 'metrics', honorLabels: true }]);
  });

  it('the dashboard ConfigMap holds the dashboard JSON for the Grafana sidecar', () => {
    const cm = one('ConfigMap') as unknown as {
      metadata: { labels: Record<string, string> };
      data: Record<string, string>;
    };
    expect(cm.metadata.labels.grafana_dashboard).toBe('1');
    expect(JSON.parse(cm.data['clbprobe.json']!)).toMatchObject({ uid: 'clbprobe' });
    expect(cm.data['clbprobe.json']).toBe(readFileSync(join(DEPLOY, 'grafana-dashboard.json'), 'utf8'));
  });

  it('the pre-5.8 component: the same agent with CAP_SYS_ADMIN instead of BPF and PERFMON, only on the labelled nodes, which the main DaemonSet leaves', () => {
    // As deploy/kustomization.yaml renders with `components: [components/pre-5.8]` added.
    const rendered = renderKustomization(DEPLOY, ['components/pre-5.8']);
    rendered.forEach(validate);
    expect(rendered.length).toBe(objects.length + 1);
    const dss = rendered.filter((o) => o.kind === 'DaemonSet') as any[]; // eslint-disable-line @typescript-eslint/no-explicit-any
    const main = dss.find((d) => d.metadata.name === 'clbprobe');
    const pre = dss.find((d) => d.metadata.name === 'clbprobe-pre-5-8');
    expect(main).toEqual(one('DaemonSet'));
    expect(pre.metadata.namespace).toBe('clbprobe');
    const variant = { 'clbprobe.io/variant': 'pre-5.8' };
    expect(pre.spec.selector.matchLabels).toEqual({ ...main.spec.selector.matchLabels, ...variant });
    expect(pre.spec.template.metadata.labels).toEqual({ ...main.spec.template.metadata.labels, ...variant });
    const terms = (d: any) =>
      d.spec.template.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms; // eslint-disable-line @typescript-eslint/no-explicit-any
    expect(terms(pre)).toEqual([
      {
        matchExpressions: [
          { key: 'kubernetes.io/arch', operator: 'In', values: ['amd64'] },
          { key: 'clbprobe.io/kernel-before-5.8', operator: 'In', values: ['true'] },
        ],
      },
    ]);
    // No node can run both: the main DaemonSet requires the label to be absent, in its only term.
    expect(terms(main)).toHaveLength(1);
    expect(terms(main)[0].matchExpressions).toContainEqual({
      key: 'clbprobe.io/kernel-before-5.8',
      operator: 'DoesNotExist',
    });
    const [agent] = pre.spec.template.spec.containers;
    expect(agent.securityContext.capabilities).toEqual({ drop: ['ALL'], add: ['NET_ADMIN', 'NET_RAW', 'SYS_ADMIN'] });
    // Everything else is the main DaemonSet's: a change there must reach the copy.
    const comparable = (d: any) => {
      // eslint-disable-line @typescript-eslint/no-explicit-any
      const c = structuredClone(d);
      delete c.metadata.name;
      delete c.spec.selector;
      delete c.spec.template.metadata.labels;
      delete c.spec.template.spec.affinity;
      delete c.spec.template.spec.containers[0].securityContext.capabilities;
      return c;
    };
    expect(comparable(pre)).toEqual(comparable(main));
  });

  it('the renderer refuses kustomize features it does not implement', async () => {
    const { mkdtempSync, writeFileSync, rmSync } = await import('node:fs');
    const { tmpdir } = await import('node:os');
    const dir = mkdtempSync(join(tmpdir(), 'cbs-kust-'));
    try {
      writeFileSync(join(dir, 'kustomization.yaml'), 'resources: []\npatches:\n  - path: x.yaml\n');
      expect(() => renderKustomization(dir)).toThrow(/key patches is not supported/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
