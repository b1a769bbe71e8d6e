/** The refusal probe that stands in for connectivity checks while the backend refuses connections. */
import { afterEach, describe, expect, test } from "bun:test";
import { connectionRefused, directConnection, endpointAddress } from "../../../src/export/refusal-probe";
import { closedLoopbackPort } from "../../helpers/ports";

const listeners: Array<{ stop(): void }> = [];
afterEach(() => {
  for (const l of listeners.splice(0)) l.stop();
});


describe("endpointAddress", () => {
  test("host:port and [v6]:port", () => {
    expect(endpointAddress("127.0.0.1:4317")).toEqual({ host: "127.0.0.1", port: 4317 });
    expect(endpointAddress("otlp.example:443")).toEqual({ host: "otlp.example", port: 443 });
    expect(endpointAddress("[::1]:4317")).toEqual({ host: "::1", port: 4317 });
  });
  test("no usable port: undefined", () => {
    expect(endpointAddress("localhost")).toBeUndefined();
    expect(endpointAddress(":4317")).toBeUndefined();
    expect(endpointAddress("h:0")).toBeUndefined();
    expect(endpointAddress("h:70000")).toBeUndefined();
  });
});

describe("directConnection", () => {
  test("false when grpc-js would use a proxy", () => {
    expect(directConnection({})).toBe(true);
    expect(directConnection({ grpc_proxy: "http://p:3128" })).toBe(false);
    expect(directConnection({ HTTPS_PROXY: "http://p:3128" })).toBe(false);
    expect(directConnection({ http_proxy: "" })).toBe(true);
  });
});

describe("connectionRefused", () => {
  test("true for a closed loopback port", async () => {
    expect(await connectionRefused(`127.0.0.1:${closedLoopbackPort()}`, 2000)).toBe(true);
  });

  test("false when something listens (the caller then makes the real call)", async () => {
    let accepted = 0;
    const l = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { open() { accepted++; }, data() {} } });
    listeners.push(l);
    expect(await connectionRefused(`127.0.0.1:${l.port}`, 2000)).toBe(false);
    expect(accepted).toBe(1);
  });

  test("false for an endpoint it cannot parse", async () => {
    expect(await connectionRefused("no-port", 2000)).toBe(false);
  });
});
