# An L7 (Ingress) LB for the namespace labs: accepts TCP on VIP:PORT and, for each client
# connection, opens a NEW connection to a backend node's NodePort and relays both ways. With --keep-client-ip it opens that connection from the client's own address
# (IP_TRANSPARENT, as HAProxy's "usesrc clientip" or an LB with client-address preservation
# does); without it, from its own address (SNAT, the usual L7 LB). Node.js cannot set
# IP_TRANSPARENT, hence Python (Debian's python3, installed by scripts/setup.sh).
# A backend connect that gets no answer in --backend-timeout closes the client's connection with
# nothing sent back (an LB's 504, without the body).
# Usage: ingress-lb.py VIP PORT BACKEND_IP BACKEND_PORT [--keep-client-ip] [--backend-timeout S]
import socket
import sys
import threading

IP_TRANSPARENT = 19


def pipe(src, dst):
    try:
        while True:
            b = src.recv(65536)
            if not b:
                break
            dst.sendall(b)
    except OSError:
        pass
    for s in (src, dst):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def handle(client, peer, backend, keep, timeout):
    b = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        if keep:
            b.setsockopt(socket.SOL_IP, IP_TRANSPARENT, 1)
            b.bind((peer[0], 0))
        b.settimeout(timeout)
        b.connect(backend)
        b.settimeout(None)
    except OSError:
        client.close()
        b.close()
        return
    threading.Thread(target=pipe, args=(client, b), daemon=True).start()
    pipe(b, client)


def main():
    args = sys.argv[1:]
    keep = '--keep-client-ip' in args
    timeout = 3.0
    if '--backend-timeout' in args:
        timeout = float(args[args.index('--backend-timeout') + 1])
    vip, port, bip, bport = args[0], int(args[1]), args[2], int(args[3])
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((vip, port))
    srv.listen(64)
    print('up', flush=True)
    while True:
        c, peer = srv.accept()
        threading.Thread(target=handle, args=(c, peer, (bip, bport), keep, timeout), daemon=True).start()


main()
