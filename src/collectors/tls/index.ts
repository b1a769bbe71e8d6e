/**
 * TLS plaintext: the `tls` eBPF program set (uprobes on SSL_read/SSL_write of OpenSSL 1.1/3 and BoringSSL) and
 * the component `ebpf/tls` that attaches it to the TLS libraries processes load, lists them in /status/ebpf and
 * hands the plaintext to the HTTP exchange tracker of `ebpf/network` (spans with url.scheme https).
 */
export { TlsCollector, tlsEnabled, type TlsSink } from "./component";
export { decodeTlsEvent, type TlsEvent } from "./decoder";
export { TlsTargetRegistry, type TlsTargetView } from "./registry";
export { tlsSetSpec } from "./spec";
