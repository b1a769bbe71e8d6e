/** Parsing of `host:port` listen addresses (":19090" means every IPv4 address). */
export interface ListenAddress {
  hostname: string;
  port: number;
}

export function parseListen(listen: string): ListenAddress {
  const i = listen.lastIndexOf(":");
  let host = listen.slice(0, i);
  const port = Number(listen.slice(i + 1));
  if (host.startsWith("[") && host.endsWith("]")) host = host.slice(1, -1);
  return { hostname: host === "" ? "0.0.0.0" : host, port };
}

export function formatAddress(hostname: string, port: number): string {
  return hostname.includes(":") ? `[${hostname}]:${port}` : `${hostname}:${port}`;
}
