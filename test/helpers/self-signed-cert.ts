/** Makes a throw-away self-signed certificate for 127.0.0.1 with openssl (TLS peers in tests: fake API servers). */
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

export interface SelfSignedCert {
  cert: string;
  key: string;
  /** Path of the certificate file (a CA bundle for clients). */
  certPath: string;
  dir: string;
}

export function makeSelfSignedCert(): SelfSignedCert {
  const dir = mkdtempSync(join(tmpdir(), "svc-cert-"));
  const certPath = join(dir, "cert.pem");
  const keyPath = join(dir, "key.pem");
  const r = Bun.spawnSync(
    ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", keyPath, "-out", certPath, "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
    { stdout: "pipe", stderr: "pipe" },
  );
  if (r.exitCode !== 0) throw new Error(`openssl failed: ${r.stderr.toString()}`);
  return { cert: readFileSync(certPath, "utf8"), key: readFileSync(keyPath, "utf8"), certPath, dir };
}
