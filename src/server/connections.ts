// Which connections the server keeps: at most maxConnections in all and maxConnectionsPerClient from one
// address. Past a cap, the connection idle longest (no request in progress: keep-alive between requests, one
// that sent nothing or half a header) is closed to make room, so idle sockets cannot lock new clients out;
// a connection with a request in progress is never closed for this, and when every one is busy the newcomer
// is closed at once. Node's own maxConnections would drop the newcomer instead, whatever the others do. And a
// connection that sends no request header within the header deadline is closed.
import type { Server } from 'node:http';
import type { Socket } from 'node:net';

interface Held {
  readonly address: string;
  /** Requests in progress on it (HTTP/1.1: one at a time), and seen on it at all. */
  busy: number;
  requests: number;
  /** When it last became idle (or connected). */
  idleSince: number;
}

export class ConnectionCaps {
  private readonly held = new Map<Socket, Held>();
  private readonly byAddress = new Map<string, Set<Socket>>();
  /** Idle connections closed to make room, and newcomers refused because every connection was busy. */
  evicted = 0;
  refused = 0;

  /**
   * `headerDeadlineMs`: a connection that has not sent a whole request header by then is closed. Node times a
   * request's headers only from its first byte, so a socket that sends nothing was held for ever.
   */
  constructor(private readonly max: number, private readonly perClient: number, private readonly headerDeadlineMs: number) {}

  /** Watches `server`: every connection and request from now on. */
  attach(server: Server): void {
    server.on('connection', (socket: Socket) => this.admit(socket));
    server.on('request', (req, res) => {
      const h = this.held.get(req.socket);
      if (!h) return;
      h.busy++;
      h.requests++;
      res.once('close', () => {
        h.busy--;
        h.idleSince = performance.now();
      });
    });
  }

  get size(): number {
    return this.held.size;
  }

  private admit(socket: Socket): void {
    const address = socket.remoteAddress ?? '';
    const mine = this.byAddress.get(address);
    if ((mine?.size ?? 0) >= this.perClient && !this.evictIdle(mine!)) return this.refuse(socket);
    if (this.held.size >= this.max && !this.evictIdle(this.held.keys())) return this.refuse(socket);
    const h: Held = { address, busy: 0, requests: 0, idleSince: performance.now() };
    this.held.set(socket, h);
    const deadline = setTimeout(() => { if (h.requests === 0) socket.destroy(); }, this.headerDeadlineMs);
    deadline.unref();
    let set = this.byAddress.get(address);
    if (!set) this.byAddress.set(address, (set = new Set()));
    set.add(socket);
    socket.once('close', () => {
      clearTimeout(deadline);
      this.held.delete(socket);
      set.delete(socket);
      if (set.size === 0 && this.byAddress.get(address) === set) this.byAddress.delete(address);
    });
  }

  /** Closes the connection among `among` idle longest; false when every one has a request in progress. */
  private evictIdle(among: Iterable<Socket>): boolean {
    let oldest: Socket | undefined;
    let since = Infinity;
    for (const s of among) {
      const h = this.held.get(s);
      if (h && h.busy === 0 && h.idleSince < since) {
        since = h.idleSince;
        oldest = s;
      }
    }
    if (!oldest) return false;
    // Forgotten now, not at its 'close' (which comes later): the newcomer takes its place at once.
    const h = this.held.get(oldest)!;
    this.held.delete(oldest);
    this.byAddress.get(h.address)?.delete(oldest);
    oldest.destroy();
    this.evicted++;
    return true;
  }

  private refuse(socket: Socket): void {
    this.refused++;
    socket.destroy();
  }
}
