import { mkdtempSync, readFileSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ClusterFileError, loadClusterFile, readClusterFile, reloadClusterFile } from '../../../src/cluster/file.js';
import { JsonSyntaxError, parseJsonDocuments } from '../../../src/cluster/json-docs.js';

const FIX = new URL('../../fixtures/cluster/', import.meta.url).pathname;
const tmp = mkdtempSync(join(tmpdir(), 'clbprobe-cluster-file-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

function errorOf(fn: () => unknown): Error {
  try {
    fn();
  } catch (e) {
    return e as Error;
  }
  throw new Error('expected a throw');
}

describe('readClusterFile', () => {
  it('EndpointSlices saved from a 1.17-1.20 cluster (discovery.k8s.io/v1beta1): read, locality from topology', () => {
    const slice = (name: string, ip: string, host: string) => ({
      apiVersion: 'discovery.k8s.io/v1beta1',
      kind: 'EndpointSlice',
      metadata: { name, namespace: 'lab', labels: { 'kubernetes.io/service-name': 'web' } },
      addressType: 'IPv4',
      endpoints: [{ addresses: [ip], conditions: { ready: true }, topology: { 'kubernetes.io/hostname': host } }],
      ports: [{ name: 'http', port: 8080, protocol: 'TCP' }],
    });
    const list = {
      apiVersion: 'v1',
      kind: 'List',
      items: [
        {
          apiVersion: 'v1',
          kind: 'Service',
          metadata: { name: 'web', namespace: 'lab' },
          spec: {
            type: 'ClusterIP',
            clusterIP: '10.96.0.80',
            ports: [{ name: 'http', port: 80, protocol: 'TCP', targetPort: 8080 }],
          },
        },
        slice('web-a', '10.244.1.20', 'node1'),
        slice('web-b', '10.244.2.20', 'node2'),
        { apiVersion: 'v1', kind: 'Node', metadata: { name: 'node1' }, spec: { podCIDR: '10.244.1.0/24' } },
      ],
    };
    const file = join(tmp, 'v1beta1.json');
    writeFileSync(file, JSON.stringify(list));
    const view = loadClusterFile(file, { nodeName: 'node1' });
    expect(view.warnings).toEqual([]);
    expect(view.services[0]?.endpoints).toEqual([
      expect.objectContaining({ address: '10.244.1.20', nodeName: 'node1', local: true }),
      expect.objectContaining({ address: '10.244.2.20', nodeName: 'node2', local: false }),
    ]);
  });

  it('concatenated documents: a v1 List, a typed EndpointSliceList (items without kind) and a single Node', () => {
    const view = loadClusterFile(`${FIX}multi-doc.json`, { nodeName: 'kind-worker' });
    expect(view.warnings).toEqual([]);
    expect(view.services).toHaveLength(1);
    expect(view.services[0]).toMatchObject({
      name: 'echo',
      lbIngress: [{ ip: '172.31.0.50', ipMode: 'VIP' }],
      internalLb: true,
    });
    expect(view.services[0]?.endpoints).toEqual([expect.objectContaining({ address: '10.244.0.7', local: true })]);
    expect(view.services[0]?.endpointPorts).toBe(5000);
    expect(view.node?.podCIDRs).toEqual(['10.244.0.0/24']);
  });

  it('names objects by document when there are several', () => {
    const f = join(tmp, 'two.json');
    writeFileSync(
      f,
      '{"kind":"Service","apiVersion":"v1","metadata":{"name":"a"},"spec":{"ports":[{"port":0}]}}\n{"kind":"ConfigMap"}\n',
    );
    const view = loadClusterFile(f);
    expect(view.warnings).toEqual([
      'ignored objects of kinds the cluster view does not use: 1 ConfigMap',
      'document 1 (Service default/a): spec.ports[0].port is out of range (0)',
    ]);
  });

  it('truncated output: file, line and column of the unterminated string', () => {
    const e = errorOf(() => readClusterFile(`${FIX}truncated.json`));
    expect(e).toBeInstanceOf(ClusterFileError);
    expect(e.message).toBe(
      `${FIX}truncated.json:173:73: not valid JSON: unterminated string (want kubectl get ... -o json output)`,
    );
  });

  it('missing comma: points at the token after the gap', () => {
    const e = errorOf(() => readClusterFile(`${FIX}missing-comma.json`));
    expect(e.message).toBe(
      `${FIX}missing-comma.json:6:7: not valid JSON: unexpected "\\"", expected ',' or '}' (want kubectl get ... -o json output)`,
    );
  });

  it('unreadable and empty files', () => {
    expect(errorOf(() => readClusterFile(join(tmp, 'nope.json'))).message).toMatch(
      /^cannot read cluster file .*nope\.json: ENOENT/,
    );
    const empty = join(tmp, 'empty.json');
    writeFileSync(empty, '\n');
    expect(errorOf(() => readClusterFile(empty)).message).toBe(
      `${empty}:1:1: not valid JSON: no JSON document (the input is empty) (want kubectl get ... -o json output)`,
    );
  });

  it('YAML is refused with a position, not misread', () => {
    const f = join(tmp, 'svc.yaml');
    writeFileSync(f, 'apiVersion: v1\nkind: List\n');
    expect(errorOf(() => readClusterFile(f)).message).toBe(
      `${f}:1:1: not valid JSON: unexpected "a", expected a value (want kubectl get ... -o json output)`,
    );
  });
});

describe('parseJsonDocuments', () => {
  it('splits documents with any whitespace between, and a BOM', () => {
    expect(parseJsonDocuments('\ufeff{"a":[1,{"b":"}\\""}]} \n\t[] "x"-1.5e3 true null')).toEqual([
      { a: [1, { b: '}"' }] },
      [],
      'x',
      -1500,
      true,
      null,
    ]);
  });

  it.each([
    ['{"a":1,}', 1, 8, 'unexpected "}", expected a double-quoted property name'],
    ['[1,\n 2 3]', 2, 4, "unexpected \"3\", expected ',' or ']'"],
    ['{"a" 1}', 1, 6, 'unexpected "1", expected \':\''],
    ['{"a":tru}', 1, 6, 'unexpected "t", expected a value'],
    ['{"a":"\\q"}', 1, 7, 'bad escape "q"'],
    ['{"a":"x\ny"}', 1, 8, 'control character inside a string (unterminated string?)'],
    ['{"a":01}', 1, 7, "unexpected \"1\", expected ',' or '}'"],
    ['{"a":[', 1, 7, 'unexpected end of input, expected a value'],
  ])('%j → line %i column %i', (text, line, column, reason) => {
    const e = errorOf(() => parseJsonDocuments(text));
    expect(e).toBeInstanceOf(JsonSyntaxError);
    expect(e).toMatchObject({ line, column, reason });
  });

  it('deep nesting does not overflow the stack', () => {
    const deep = '['.repeat(50_000) + ']'.repeat(50_000);
    expect(parseJsonDocuments(`${deep} ${deep}`).length).toBe(2);
  });
});

describe('reloadClusterFile', () => {
  it('builds the view when the file changed, not when its digest is the same; read errors stay ClusterFileErrors', () => {
    const path = join(tmp, 'reload.json');
    writeFileSync(path, readFileSync(`${FIX}multi-doc.json`));
    const first = reloadClusterFile(path, undefined, { nodeName: 'kind-worker' });
    expect(first.view).toEqual(loadClusterFile(path, { nodeName: 'kind-worker' }));
    expect(reloadClusterFile(path, first.digest, { nodeName: 'kind-worker' })).toEqual({ digest: first.digest });
    writeFileSync(path, `${readFileSync(path, 'utf8')}\n`);
    const changed = reloadClusterFile(path, first.digest, { nodeName: 'kind-worker' });
    expect(changed.digest).not.toBe(first.digest);
    expect(changed.view).toBeDefined();
    expect(() => reloadClusterFile(join(tmp, 'missing.json'), first.digest)).toThrow(ClusterFileError);
  });
});

describe('cluster file size bound', () => {
  it('refuses a file over 64 MiB with a clear error, before reading it', () => {
    const big = join(tmp, 'big.json');
    writeFileSync(big, '');
    truncateSync(big, (64 << 20) + 1);
    const e = errorOf(() => readClusterFile(big));
    expect(e).toBeInstanceOf(ClusterFileError);
    expect(e.message).toBe(
      `cluster file ${big} is 67108865 bytes, more than the 64 MiB clbprobe reads (a saved cluster the API server could answer in one list)`,
    );
  });

  it('a file stat calls empty that never ends (/dev/zero) is read only to the bound', () => {
    const e = errorOf(() => readClusterFile('/dev/zero'));
    expect(e).toBeInstanceOf(ClusterFileError);
    expect(e.message).toBe('cluster file /dev/zero is larger than 64 MiB, the most clbprobe reads of it');
  });
});
