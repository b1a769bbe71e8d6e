/**
 * Privileged: BoringSSL as a shared library. Debian's android-libboringssl ships BoringSSL's own libssl.so.0 (with its
 * SSL_read/SSL_write symbols, and no SSL_read_ex/SSL_write_ex). The server is built by the test against it
 * (test/fixtures/boringssl-https-server.c); the client is bssl-tool (android-boringssl), on the same libssl.so.0.
 * Both ends of each are checked by libraryCase (./library-case.ts): exact spans and RED counts, url.scheme https.
 */
import { expect } from "bun:test";
import { existsSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { libraryCase } from "./library-case";

const BSSL = "bssl-tool";
const BORINGSSL_LIB = "/usr/lib/x86_64-linux-gnu/android";
const BORINGSSL_INCLUDE = "/usr/include/android";
const SERVER_SOURCE = resolve(import.meta.dir, "../../../fixtures/boringssl-https-server.c");

/** Builds the BoringSSL HTTPS server fixture into a temporary folder; returns its path. */
function buildServer(): string {
  const out = join(mkdtempSync(join(tmpdir(), "svc-boringssl-")), "boringssl-https-server");
  const cc = Bun.spawnSync(["gcc", "-O1", `-I${BORINGSSL_INCLUDE}`, "-o", out, SERVER_SOURCE, `-L${BORINGSSL_LIB}`, "-lssl", "-lcrypto", `-Wl,-rpath,${BORINGSSL_LIB}`], { stderr: "pipe" });
  if (cc.exitCode !== 0) throw new Error(`gcc failed: ${cc.stderr.toString()}`);
  return out;
}

libraryCase({
  name: "BoringSSL (shared libssl.so.0)",
  missing: [...(Bun.which(BSSL) ? [] : ["bssl-tool (android-boringssl)"]), ...(existsSync(`${BORINGSSL_LIB}/libssl.so`) ? [] : ["android-libboringssl-dev"]), ...(Bun.which("gcc") ? [] : ["gcc"])],
  target: (path) => path === `${BORINGSSL_LIB}/libssl.so.0`,
  server: (cert) => ({ proc: Bun.spawn([buildServer(), cert.certPath, `${cert.dir}/key.pem`], { stdin: "ignore", stdout: "pipe", stderr: "inherit" }) }),
  clientPath: "/from-bssl",
  async client(port, probed) {
    /* bssl-tool sends what it reads on stdin: the request, once its libssl is probed. */
    const proc = Bun.spawn([BSSL, "client", "-connect", `127.0.0.1:${port}`], { stdin: "pipe", stdout: "pipe", stderr: "ignore" });
    await probed(proc.pid);
    proc.stdin.write("GET /from-bssl HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    await proc.stdin.flush();
    const done = (async () => {
      const reader = proc.stdout.getReader();
      let out = "";
      while (!out.includes("hello /from-bssl")) {
        const { value, done } = await reader.read();
        if (done) break;
        out += new TextDecoder().decode(value);
      }
      reader.releaseLock();
      expect(out).toContain("HTTP/1.1 200 OK");
    })();
    return { proc, done };
  },
  checkTarget(target) {
    expect(target).toMatchObject({ kind: "shared", path: `${BORINGSSL_LIB}/libssl.so.0`, functions: ["SSL_write", "SSL_read"] });
  },
});
