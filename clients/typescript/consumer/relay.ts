// A TCP relay in front of the server that can drop every connection it
// carries, the way a restart, a load balancer's idle timeout or a network
// change ends a stream: the client sees its connection closed by the other
// side and must resume on its own. While held, new connections wait
// unanswered, so items committed meanwhile can only arrive by the replay.
import { createServer, connect, type Server, type Socket } from "node:net";

export class Relay {
  readonly #target: URL;
  readonly #server: Server;
  readonly #sockets = new Set<Socket>();
  #held: (() => void)[] | undefined;
  #port = 0;

  constructor(target: string) {
    this.#target = new URL(target);
    this.#server = createServer((client) => this.#relay(client));
  }

  async listen(): Promise<string> {
    await new Promise<void>((resolve) => this.#server.listen(0, "127.0.0.1", resolve));
    const address = this.#server.address();
    if (address === null || typeof address === "string") throw new Error("no TCP address");
    this.#port = address.port;
    return `http://127.0.0.1:${this.#port}`;
  }

  /** Connections made so far (each stream connection is one). */
  connections = 0;

  #relay(client: Socket): void {
    this.connections++;
    const start = () => {
      const upstream = connect(Number(this.#target.port), this.#target.hostname);
      for (const socket of [client, upstream]) {
        this.#sockets.add(socket);
        socket.on("close", () => this.#sockets.delete(socket));
        socket.on("error", () => socket.destroy());
      }
      client.pipe(upstream);
      upstream.pipe(client);
      client.on("close", () => upstream.destroy());
      upstream.on("close", () => client.destroy());
    };
    if (this.#held) this.#held.push(start);
    else start();
  }

  /** Ends every connection (FIN, as a server closing it would) and holds new ones. */
  cutAndHold(): void {
    this.#held = [];
    for (const socket of this.#sockets) socket.end();
  }

  /** Lets the held connections (and later ones) through. */
  release(): void {
    const held = this.#held ?? [];
    this.#held = undefined;
    for (const start of held) start();
  }

  close(): Promise<void> {
    for (const socket of this.#sockets) socket.destroy();
    return new Promise((resolve) => this.#server.close(() => resolve()));
  }
}
