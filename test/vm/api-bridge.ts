// How a program inside the VM reaches the host's kube-apiserver without the VM
// having any network: run-in-vm.sh gives the guest a virtio-serial port whose
// host end is a Unix socket this bridge listens on (CLBVM_PORTS); in the guest,
// test/vm/api-bridge-guest.mjs listens on 127.0.0.1:PORT and carries each TCP
// connection over that port in frames (type, connection id, length, payload;
// 1 open, 2 data, 3 close). Here every "open" becomes one TCP connection to
// 127.0.0.1:targetPort on the host and nothing else: the guest can reach that
// one loopback port, never another address (NETWORK SAFETY: the VM runs with
// -nic none, so there is no interface a packet could leave by).
import { mkdtempSync, rmSync } from 'node:fs';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const OPEN = 1;
const DATA = 2;
const CLOSE = 3;
/** Frames bigger than this are a protocol error (the guest half sends at most one 64 KiB read). */
const MAX_FRAME = 1 << 20;

export interface ApiBridge {
  /** The Unix socket qemu connects to: pass as CLBVM_PORTS="name=<path>" (GuestOptions.ports). */
  readonly socketPath: string;
  /** Connections the guest opened so far. */
  readonly opened: number;
  close(): void;
}

export function startApiBridge(targetPort: number): Promise<ApiBridge> {
  const dir = mkdtempSync(join(tmpdir(), 'cbkv-bridge-'));
  const socketPath = join(dir, 'api.sock');
  const upstream = new Map<number, Socket>();
  let opened = 0;
  let qemu: Socket | undefined;

  const send = (type: number, id: number, payload: Buffer = Buffer.alloc(0)): void => {
    const head = Buffer.alloc(9);
    head.writeUInt8(type, 0);
    head.writeUInt32BE(id, 1);
    head.writeUInt32BE(payload.length, 5);
    qemu?.write(Buffer.concat([head, payload]));
  };

  const onFrame = (type: number, id: number, payload: Buffer): void => {
    if (type === OPEN) {
      opened++;
      const u = connect({ host: '127.0.0.1', port: targetPort });
      upstream.set(id, u);
      u.on('data', (b: Buffer) => send(DATA, id, b));
      const closed = (): void => {
        if (upstream.delete(id)) send(CLOSE, id);
      };
      u.on('close', closed);
      u.on('error', closed);
    } else if (type === DATA) upstream.get(id)?.write(payload);
    else if (type === CLOSE) {
      const u = upstream.get(id);
      upstream.delete(id);
      u?.destroy();
    }
  };

  const server: Server = createServer((s) => {
    // One VM, one qemu connection; a second one is not ours.
    if (qemu) return void s.destroy();
    qemu = s;
    let pending: Buffer = Buffer.alloc(0);
    s.on('data', (chunk: Buffer) => {
      pending = pending.length ? Buffer.concat([pending, chunk]) : chunk;
      while (pending.length >= 9) {
        const len = pending.readUInt32BE(5);
        if (len > MAX_FRAME) {
          s.destroy(new Error(`api bridge: frame of ${len} bytes`));
          return;
        }
        if (pending.length < 9 + len) break;
        onFrame(pending.readUInt8(0), pending.readUInt32BE(1), Buffer.from(pending.subarray(9, 9 + len)));
        pending = pending.subarray(9 + len);
      }
    });
    s.on('error', () => undefined);
    s.on('close', () => {
      for (const u of upstream.values()) u.destroy();
      upstream.clear();
    });
  });

  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(socketPath, () =>
      resolve({
        socketPath,
        get opened() {
          return opened;
        },
        close() {
          for (const u of upstream.values()) u.destroy();
          qemu?.destroy();
          server.close();
          rmSync(dir, { recursive: true, force: true });
        },
      }),
    );
  });
}
