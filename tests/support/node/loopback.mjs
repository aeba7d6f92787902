// Loaded with `node --import` before a server from npm: a server that listens on a port alone
// (every interface, as the reference server does) listens on 127.0.0.1 instead, so a test's
// server is never reachable from another machine.
import net from "node:net";

const listen = net.Server.prototype.listen;

net.Server.prototype.listen = function (...args) {
  const [port] = args;
  const portOnly =
    typeof port === "number" || (typeof port === "string" && /^\d+$/.test(port));
  if (portOnly && typeof args[1] !== "string") {
    return listen.call(this, Number(port), "127.0.0.1", ...args.slice(1));
  }
  return listen.apply(this, args);
};
